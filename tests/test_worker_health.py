"""Pure decisions about workers that must go (issue 47, items 1 and 2): which worker pods to
delete because their worker is marked unhealthy, which are past their startup deadline
(`startupTimeout`, from the worker container's start), the reason a deadline gives with the
worker's last log line, and the `WorkersHealthy` condition a recent record shows."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.kube.manifests.names import SERVING_CONDITION
from lockgate.kube.status import Check
from lockgate.kube.worker_health import (
    fingerprint,
    marked_check,
    past_deadline,
    to_replace,
    waiting_for_ready,
    worker_started_ms,
    worst,
)
from lockgate.models.unhealthy import REASON_CHARS, UnhealthyWorker
from lockgate.scaling.worker_health import SHOWN_MS, last_line, overdue, startup_record

T0 = "2026-12-06T12:00:00Z"
T0_MS = 1_796_558_400_000  # T0 in epoch ms


def pod(
    name: str,
    *,
    started: str | None = T0,
    restarts: int = 0,
    serving: str | None = None,
    deleting: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    """A worker pod as the kubelet writes it: its worker container running since
    `started` (None: not running yet, e.g. pulling or fetching models)."""
    state = {"running": {"startedAt": started}} if started else {"waiting": {"reason": "X"}}
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "worker", "restartCount": restarts, "state": state}],
    }
    if serving:
        status["conditions"] = [{"type": SERVING_CONDITION, "status": serving}]
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = T0
    return {"metadata": meta, "status": status}


def record(worker: str, kind: str = "fitness", at: int = T0_MS, **extra: Any) -> UnhealthyWorker:
    reasons = {"fitness": "RuntimeError: no GPU", "startup": "did not become ready within 600 s"}
    return UnhealthyWorker(worker=worker, kind=kind, reason=reasons.get(kind, "KeyError: 'x'"),
                           at=at, **extra)  # fmt: skip


def test_the_deadline_runs_from_the_worker_containers_start() -> None:
    assert worker_started_ms(pod("a")) == T0_MS
    assert worker_started_ms(pod("a", started=None)) is None  # pulling, fetching models


@pytest.mark.parametrize(
    ("started", "ready", "timeout_s", "now_ms", "expected"),
    [
        ({"a": 0, "b": 0}, set(), 600, 600_000, ["a", "b"]),  # the deadline itself
        ({"a": 0}, set(), 600, 599_999, []),  # a millisecond early
        ({"a": 0, "b": 0}, {"b"}, 600, 10**9, ["a"]),  # b polled in time
        ({"a": 0}, set(), 0, 10**9, []),  # 0: no deadline
        ({"a": 5_000, "b": 0}, set(), 10, 12_000, ["b"]),  # each from its own start
    ],
)
def test_overdue_workers(started, ready, timeout_s, now_ms, expected) -> None:
    assert overdue(started, ready, timeout_s, now_ms) == expected


@pytest.mark.parametrize(
    ("pods", "ready", "lb", "expected"),
    [
        ([pod("a"), pod("b", started=None)], set(), False, ["a"]),  # b's clock not started
        ([pod("a", serving="True")], set(), False, []),  # polled: put in service
        ([pod("a", serving="False")], set(), False, []),  # polled, taken out since
        ([pod("a", serving="True")], set(), True, ["a"]),  # LB: Serving says nothing
        ([pod("a", serving="True")], {"a"}, True, []),  # LB: a health poll saw 200
        ([pod("a", deleting=True), pod("b", phase="Failed")], set(), False, []),
    ],
)
def test_pods_past_their_startup_deadline(pods, ready, lb, expected) -> None:
    now = T0_MS + 600_000
    assert past_deadline(pods, 600, now, ready, lb=lb) == expected


def test_an_lb_endpoints_health_is_read_only_while_a_running_pod_is_not_known_ready() -> None:
    pods = [pod("a"), pod("b", started=None), pod("c", deleting=True)]
    assert waiting_for_ready(pods, set()) == ["a"]
    assert waiting_for_ready(pods, {"a"}) == []


@pytest.mark.parametrize(
    ("pods", "marked", "expected"),
    [
        ([pod("a"), pod("b")], {"b"}, ["b"]),
        ([pod("a", deleting=True)], {"a"}, []),  # being deleted already
        ([pod("a", phase="Succeeded")], {"a"}, []),
        ([pod("a")], {"gone-long-ago"}, []),
        ([pod("a", started=None, restarts=3)], {"a"}, ["a"]),  # restarted by the kubelet
    ],
)
def test_pods_of_marked_workers_are_deleted(pods, marked, expected) -> None:
    assert to_replace(pods, marked) == expected


def test_the_records_are_read_again_when_a_pod_comes_goes_or_restarts() -> None:
    before = fingerprint([pod("a"), pod("b")])
    assert fingerprint([pod("b"), pod("a")]) == before
    assert fingerprint([pod("a"), pod("b", serving="True")]) == before  # no read for that
    assert fingerprint([pod("a"), pod("b", restarts=1)]) != before  # a fitness exit
    assert fingerprint([pod("a")]) != before
    assert fingerprint([pod("a"), pod("b"), pod("c")]) != before
    assert fingerprint([pod("a"), pod("b", deleting=True)]) != before


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ("loading weights\nstill loading\n\n", "last log line: still loading"),
        ("", "it wrote no log line"),
        ("x" * 1000, "last log line: " + "x" * 300),
    ],
)
def test_a_startup_record_quotes_the_last_line(output: str, reason: str) -> None:
    why = startup_record("w1", 600, output, at_ms=T0_MS)
    assert (why.worker, why.kind, why.at) == ("w1", "startup", T0_MS)
    assert why.reason == f"did not become ready within 600 s; {reason}"
    assert len(why.reason) <= REASON_CHARS
    assert last_line("a\n  b  \n") == "b"


@pytest.mark.parametrize(
    ("records", "now", "reason", "says"),
    [
        ({}, T0_MS, None, None),
        ({"a": record("a", check="check_gpu")}, T0_MS, "FitnessCheckFailed",
         "Worker a was replaced: fitness check check_gpu failed: RuntimeError: no GPU."),
        ({"a": record("a", "startup")}, T0_MS, "StartupTimeout",
         "startup failed: did not become ready within 600 s. Find what it waits for"),
        ({"a": record("a", "warmup")}, T0_MS, "WarmupFailed", "warm-up failed: KeyError"),
        ({"a": record("a"), "b": record("b", "startup", at=T0_MS + 1)}, T0_MS + 1,
         "StartupTimeout", "Worker b"),  # the newest
        ({"a": record("a")}, T0_MS + SHOWN_MS, "FitnessCheckFailed", "Worker a"),
        ({"a": record("a")}, T0_MS + SHOWN_MS + 1, None, None),  # no longer recent
    ],
)  # fmt: skip
def test_a_recent_record_makes_workers_healthy_false(records, now, reason, says) -> None:
    check = marked_check(records, now)
    if reason is None:
        assert check is None
        return
    assert (check.type, check.ok, check.reason) == ("WorkersHealthy", False, reason)
    assert says in check.message


def test_a_problem_of_the_pods_now_is_shown_before_a_replaced_worker() -> None:
    marked = Check("WorkersHealthy", False, "StartupTimeout", "Worker a was replaced")
    pulling = Check("WorkersHealthy", False, "ImagePullError", "cannot be pulled")
    starting = Check("WorkersHealthy", True, "WorkersStart", "worker pods schedule and start")
    assert worst(pulling, marked) is pulling
    assert worst(starting, marked) is marked
    assert worst(starting, None) is starting
    assert worst(None, None) is None
