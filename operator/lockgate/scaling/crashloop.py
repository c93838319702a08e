"""Pure: counting an endpoint's failed worker starts, and the crash loop they make.

A start *fails* when its worker container (or dev-mode process) exits, with any code or
OOMKilled, before it ever made its first worker-API call, or when its worker is marked
unhealthy at startup (`startupTimeout`) or by a fitness check (`JobStore.unhealthy_workers`).
A worker that made its first call started *well*: the count starts over. After
`crashLoopThreshold` failed starts in a row (0: never) the endpoint is in a crash loop: its
control plane starts no worker (`held`), its healthy workers may finish, and queued jobs
wait, until a new release or a restart clears it (`still_holds`).

The control planes (the operator's scaler, dev mode's `LocalWorkers`) turn what they see
into `Start`s and keep a `CrashCount` between looks; everything here is a function of those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from lockgate.models.crashloop import LINE_CHARS, CrashLoop
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.scaling.decision import Limits

SEEN_KEEP = 1024  # start keys remembered, so a start seen again is not counted twice
FAILED_KINDS = frozenset({"startup", "fitness"})  # unhealthy marks that are failed starts


@dataclass(frozen=True, slots=True)
class Start:
    """One start of one worker, and how it went."""

    key: str  # unique per start: a pod's name and restart number, a process's worker id
    at: int  # epoch ms (when it ended, or was first seen well); orders starts seen together
    ok: bool  # made its first worker-API call
    exit_code: int | None = None  # a failed start's; None: marked unhealthy
    last_line: str = ""  # its last log line, or why it was marked unhealthy


@dataclass(frozen=True, slots=True)
class CrashCount:
    """Failed starts in a row, the newest of them, and the starts already counted."""

    failed: int = 0
    last: Start | None = None
    seen: tuple[str, ...] = ()


def counted(count: CrashCount, starts: Iterable[Start]) -> CrashCount:
    """`count` after the starts not counted yet, in time order: a failed one adds one, a
    good one starts the count over."""
    seen, order = set(count.seen), list(count.seen)
    failed, last = count.failed, count.last
    for start in sorted(starts, key=lambda s: (s.at, s.key)):
        if start.key in seen:
            continue
        seen.add(start.key)
        order.append(start.key)
        if start.ok:
            failed, last = 0, None
        else:  # the newest failure, with the newest line one of them said
            failed += 1
            said = start.last_line or (last.last_line if last is not None else "")
            last = replace(start, last_line=said)
    return CrashCount(failed, last, tuple(order[-SEEN_KEEP:]))


def restarted(count: CrashCount) -> CrashCount:
    """The count after a release or a restart: none failed, the starts seen stay seen."""
    return CrashCount(seen=count.seen)


def crash_loop(
    count: CrashCount, threshold: int, *, now_ms: int, version: int | None = None
) -> CrashLoop | None:
    """The crash loop `count` makes with `crashLoopThreshold` `threshold`, or None."""
    if threshold <= 0 or count.failed < threshold or count.last is None:
        return None
    last = count.last
    return CrashLoop(
        failedStarts=count.failed,
        exitCode=last.exit_code,
        lastLine=last.last_line.strip()[:LINE_CHARS],
        since=now_ms,
        version=version,
    )


def unhealthy_starts(marked: Mapping[str, UnhealthyWorker]) -> list[Start]:
    """The failed starts among workers marked unhealthy: at startup or by a fitness check
    (a failed warm-up is a worker that started)."""
    return [
        Start(f"{worker}!unhealthy", why.at, False, None, why.text())
        for worker, why in marked.items()
        if why.kind in FAILED_KINDS
    ]


def held(limits: Limits, healthy: int) -> Limits:
    """The scaling limits during a crash loop: no worker is started, the `healthy` ones
    (which made their first call) may stay and finish their jobs."""
    keep = min(limits.workers_max, healthy)
    replicas = None if limits.replicas is None else min(limits.replicas, keep)
    return replace(limits, workers_min=0, workers_max=keep, replicas=replicas)


def still_holds(
    loop: CrashLoop | None, *, version: int | None, restart_at_ms: int | None
) -> CrashLoop | None:
    """The crash loop a writer keeps: none once a newer release runs (`version` above the
    loop's) or a restart was asked at or after it began (`restart_at_ms`)."""
    if loop is None:
        return None
    if version is not None and loop.version is not None and version > loop.version:
        return None
    if restart_at_ms is not None and restart_at_ms >= loop.since:
        return None
    return loop


CRASH_LOOP = "CrashLoop"  # the condition's type, on the Endpoint's status


@dataclass(frozen=True, slots=True)
class LoopCondition:
    """The `CrashLoop` condition: True (`looping`) while no worker starts."""

    looping: bool
    reason: str
    message: str


def loop_condition(loop: CrashLoop | None, threshold: int, endpoint_id: str) -> LoopCondition:
    """The `CrashLoop` condition of an endpoint (messages stay the same while the state
    does, so a status is not rewritten at every failed start)."""
    if loop is not None:
        message = (
            f"No worker starts: {loop.text()}, {loop.failedStarts} failed starts in a row. "
            "Queued jobs wait. Fix the handler or image (a new release), or restart the "
            f"workers (POST /v2/serverless/{endpoint_id}/workers/restart, or the console)."
        )
        return LoopCondition(True, "WorkersCrashAtStart", message)
    if threshold <= 0:
        return LoopCondition(False, "Disabled", "crashLoopThreshold is 0: workers always start")
    message = f"workers start; they stop being started after {threshold} failed starts in a row"
    return LoopCondition(False, "WorkersStart", message)
