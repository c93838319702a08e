"""Pure: workers that must be replaced, for both control planes (`kube.worker_health`,
`dev.worker_health`): the startup deadline, and what a replaced worker's record shows.

The startup deadline is an endpoint's `startupTimeout`.
A worker must make its first worker-API call (a queue worker: its first job-take or ping;
a load-balancing worker: its first health check answered 200) within `startupTimeout`
seconds of its start (a pod: its worker container's start, so the `fetch-models` init
container's downloads do not count; a local process: its spawn). One that does not is
marked unhealthy (`JobStore.mark_unhealthy`, kind "startup") with the last line it wrote,
and its control plane replaces it. `startupTimeout` 0 turns the deadline off.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from lockgate.models.unhealthy import REASON_CHARS, UnhealthyKind, UnhealthyWorker

LAST_LINE_CHARS = 300  # of a worker's last log line, in the reason
SHOWN_MS = 10 * 60 * 1000  # how long a replaced worker keeps WorkersHealthy False (ms)
# The `WorkersHealthy` condition's reason (and the Event's) for each kind of mark.
REASONS: Mapping[UnhealthyKind, str] = {
    "fitness": "FitnessCheckFailed",
    "startup": "StartupTimeout",
    "warmup": "WarmupFailed",
}
ADVICE: Mapping[UnhealthyKind, str] = {
    "fitness": "Fix what the check found (the node, the image) or the check itself.",
    "startup": (
        "Find what it waits for in its logs, or raise the endpoint's startupTimeout "
        "(0 turns the deadline off)."
    ),
    "warmup": "Fix the endpoint's warm-up or the handler.",
}


def overdue(
    started_ms: Mapping[str, int], ready: Collection[str], timeout_s: int, now_ms: int
) -> list[str]:
    """The workers (by id, sorted) started `timeout_s` or more ago that are not `ready`;
    none when `timeout_s` is 0 (no deadline)."""
    if timeout_s <= 0:
        return []
    limit = now_ms - timeout_s * 1000
    return sorted(w for w, at in started_ms.items() if at <= limit and w not in ready)


def last_line(text: str) -> str:
    """The last non-blank line of a worker's output, trimmed to `LAST_LINE_CHARS`."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:LAST_LINE_CHARS] if lines else ""


def startup_reason(timeout_s: int, line: str) -> str:
    """Why a worker was replaced at its deadline, quoting what it wrote last."""
    said = f"last log line: {line}" if line else "it wrote no log line"
    return f"did not become ready within {timeout_s} s; {said}"[:REASON_CHARS]


def startup_record(worker: str, timeout_s: int, output: str, at_ms: int) -> UnhealthyWorker:
    """The record that marks `worker` unhealthy at its deadline; `output`: the tail of what
    it wrote (its last line is quoted)."""
    reason = startup_reason(timeout_s, last_line(output))
    return UnhealthyWorker(worker=worker, kind="startup", reason=reason, at=at_ms)


def shown(records: Mapping[str, UnhealthyWorker], now_ms: int) -> tuple[str, str] | None:
    """The `WorkersHealthy` reason and message of the newest worker marked within
    `SHOWN_MS` (None: none), with what to do."""
    recent = [r for r in records.values() if r.at >= now_ms - SHOWN_MS]
    if not recent:
        return None
    newest = max(recent, key=lambda r: (r.at, r.worker))
    message = f"Worker {newest.worker} was replaced: {newest.text()}. {ADVICE[newest.kind]}"
    return REASONS[newest.kind], message
