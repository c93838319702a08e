"""The crash-loop rule (scaling/crashloop.py): failed starts in a row, a good start resets,
the threshold, what a crash loop holds the scaler to, and what clears it."""

from __future__ import annotations

import pytest

from lockgate.kube.podstates import worker_starts
from lockgate.models.crashloop import CrashLoop
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.scaling.crashloop import (
    CrashCount,
    Start,
    counted,
    crash_loop,
    held,
    loop_condition,
    restarted,
    still_holds,
    unhealthy_starts,
)
from lockgate.scaling.decision import Limits


def bad(key: str, at: int, code: int | None = 1, line: str = "boom") -> Start:
    return Start(key, at, False, code, line)


def good(key: str, at: int) -> Start:
    return Start(key, at, True)


@pytest.mark.parametrize(
    ("starts", "failed", "last_key"),
    [
        ([], 0, None),
        ([bad("a", 1)], 1, "a"),
        ([bad("a", 1), bad("b", 2), bad("c", 3)], 3, "c"),
        ([bad("a", 1), good("b", 2), bad("c", 3)], 1, "c"),  # a good start resets
        ([bad("a", 1), bad("b", 2), good("c", 3)], 0, None),
        ([bad("c", 3), good("b", 2), bad("a", 1)], 1, "c"),  # counted in time order
        ([bad("a", 1), bad("a", 1), bad("a", 5)], 1, "a"),  # a start counts once
    ],
)
def test_counted_in_a_row(starts: list[Start], failed: int, last_key: str | None) -> None:
    count = counted(CrashCount(), starts)
    assert count.failed == failed
    assert (count.last.key if count.last else None) == last_key


def test_a_start_seen_again_later_is_not_counted_twice() -> None:
    count = counted(CrashCount(), [bad("p#0", 1)])
    count = counted(count, [bad("p#0", 1), bad("p#1", 2)])
    assert count.failed == 2
    assert counted(restarted(count), [bad("p#1", 2)]).failed == 0  # seen before the restart


@pytest.mark.parametrize(
    ("threshold", "failed", "loops"),
    [(5, 4, False), (5, 5, True), (5, 9, True), (2, 2, True), (1, 1, True), (0, 100, False)],
)
def test_threshold(threshold: int, failed: int, loops: bool) -> None:
    count = counted(CrashCount(), [bad(str(i), i, 3, "ImportError: x\n") for i in range(failed)])
    loop = crash_loop(count, threshold, now_ms=1000, version=4)
    assert (loop is not None) is loops
    if loop is not None:
        assert (loop.failedStarts, loop.exitCode, loop.lastLine) == (failed, 3, "ImportError: x")
        assert (loop.since, loop.version) == (1000, 4)
        assert loop.text() == "workers crash at start (exit code 3: ImportError: x)"


def test_unhealthy_marks_at_start_are_failed_starts() -> None:
    marks = {
        "w1": UnhealthyWorker(worker="w1", kind="startup", reason="not ready in 600 s", at=5),
        "w2": UnhealthyWorker(worker="w2", kind="fitness", reason="no GPU", check="gpu", at=6),
        "w3": UnhealthyWorker(worker="w3", kind="warmup", reason="warm-up failed", at=7),
    }
    starts = unhealthy_starts(marks)
    assert [s.key for s in starts] == ["w1!unhealthy", "w2!unhealthy"]
    count = counted(CrashCount(), starts)
    loop = crash_loop(count, 2, now_ms=9)
    assert loop is not None and loop.exitCode is None
    assert loop.text() == "workers crash at start (unhealthy: fitness check gpu failed: no GPU)"


@pytest.mark.parametrize(
    ("limits", "healthy", "want"),
    [
        (Limits(0, 3, 5.0), 0, (0, 0, None)),
        (Limits(2, 3, 5.0), 1, (0, 1, None)),
        (Limits(0, 3, 5.0), 7, (0, 3, None)),
        (Limits(1, 3, 5.0, replicas=3), 1, (0, 1, 1)),
    ],
)
def test_held_starts_no_worker(limits: Limits, healthy: int, want: tuple) -> None:
    got = held(limits, healthy)
    assert (got.workers_min, got.workers_max, got.replicas) == want
    assert got.idle_timeout_s == limits.idle_timeout_s


LOOP = CrashLoop(failedStarts=5, exitCode=1, lastLine="x", since=1000, version=3)


@pytest.mark.parametrize(
    ("version", "restart_at", "holds"),
    [
        (3, None, True),
        (None, None, True),
        (4, None, False),  # a new release
        (2, None, True),  # an older release's writer
        (3, 999, True),  # a restart asked before the loop began
        (3, 1000, False),
        (3, 5000, False),
    ],
)
def test_what_clears_it(version: int | None, restart_at: int | None, holds: bool) -> None:
    assert (still_holds(LOOP, version=version, restart_at_ms=restart_at) is LOOP) is holds
    assert still_holds(None, version=version, restart_at_ms=restart_at) is None


def test_job_message_names_the_cause_and_where_to_look() -> None:
    message = LOOP.job_message("ep1")
    assert message.startswith("IN_QUEUE: workers crash at start (exit code 1: x); ")
    assert "GET /v2/serverless/ep1/workers" in message
    assert "POST /v2/serverless/ep1/workers/restart" in message


@pytest.mark.parametrize(
    ("loop", "threshold", "looping", "reason", "says"),
    [
        (LOOP, 5, True, "WorkersCrashAtStart", "exit code 1: x), 5 failed starts in a row"),
        (None, 5, False, "WorkersStart", "after 5 failed starts in a row"),
        (None, 0, False, "Disabled", "crashLoopThreshold is 0"),
    ],
)
def test_the_condition(
    loop: CrashLoop | None, threshold: int, looping: bool, reason: str, says: str
) -> None:
    said = loop_condition(loop, threshold, "ep1")
    assert (said.looping, said.reason) == (looping, reason)
    assert says in said.message
    if looping:
        assert "POST /v2/serverless/ep1/workers/restart" in said.message


def pod(name: str, restarts: int = 0, state: dict | None = None, last: dict | None = None) -> dict:
    status = {"name": "worker", "restartCount": restarts, "state": state or {}}
    if last:
        status["lastState"] = {"terminated": last}
    return {"metadata": {"name": name}, "status": {"containerStatuses": [status]}}


ENDED = {"exitCode": 1, "finishedAt": "2026-12-06T10:00:10Z", "message": "a\ncannot load\n"}
OOM = {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-12-06T10:00:20Z"}
RUNNING = {"running": {"startedAt": "2026-12-06T10:00:30Z"}}


@pytest.mark.parametrize(
    ("pods", "live", "want"),
    [
        ([pod("p", 0, RUNNING)], set(), []),  # running, not yet heard from: nothing yet
        ([pod("p", 0, RUNNING)], {"p"}, [("p#0", True, None, "")]),
        ([pod("p", 2, {"waiting": {}}, ENDED)], set(),
         [("p#0", False, 1, "cannot load"), ("p#1", False, 1, "cannot load")]),
        ([pod("p", 0, {"terminated": OOM})], set(), [("p#0", False, 137, "OOMKilled")]),
        ([pod("p", 1, RUNNING, ENDED)], {"p"},
         [("p#0", False, 1, "cannot load"), ("p#1", True, None, "")]),
    ],
)  # fmt: skip
def test_pod_starts_from_container_statuses(pods: list, live: set, want: list) -> None:
    got = worker_starts(pods, live)
    assert sorted((s.key, s.ok, s.exit_code, s.last_line) for s in got) == sorted(want)


def test_a_start_seen_well_is_not_failed_when_its_container_ends_later() -> None:
    count = counted(CrashCount(), worker_starts([pod("p", 0, RUNNING)], {"p"}))
    count = counted(count, worker_starts([pod("p", 1, {"waiting": {}}, ENDED)], set()))
    assert count.failed == 0  # p#0 worked, then ended: not a failed start


def test_a_failure_without_output_keeps_the_line_an_earlier_one_said() -> None:
    count = counted(CrashCount(), [bad("a", 1, 1, "cannot load"), bad("b", 2, 1, "")])
    assert (count.last.key, count.last.last_line) == ("b", "cannot load")
    assert counted(count, [good("c", 3), bad("d", 4, 1, "")]).last.last_line == ""
