"""Pools at their edges: which pods get a deletion cost, which local processes stop; the
loop's pure helpers (condition, event, metrics parsing)."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

import pytest

from lockgate.kube.crds import API_VERSION
from lockgate.kube.deployment_pool import (
    BUSY,
    BUSY_COST,
    DELETION_COST,
    IDLE,
    SAFE_TO_EVICT,
    eviction_changes,
    live_pods,
    to_serve,
)
from lockgate.kube.events import endpoint_event
from lockgate.kube.manifests.names import SERVING_CONDITION, Owner
from lockgate.kube.scaler import ScrapeHealth, as_selected, at_rest, metrics_check
from lockgate.kube.watched import ENDPOINT_LABEL, WORKER_LABELS
from lockgate.models.registry_entry import RegistryEntry
from lockgate.scaling.backoff import CrashBackoff
from lockgate.scaling.decision import EndpointMetrics
from lockgate.scaling.local_pool import LocalProcessPool
from lockgate.scaling.readings import MetricsUnreadable, parse_metrics


def pod(name: str, cost: str | None = None, phase: str = "Pending", deleting: bool = False):
    meta: dict = {"name": name}
    if cost is not None:
        meta["annotations"] = {DELETION_COST: cost}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_only_pods_whose_eviction_annotations_must_change_are_patched() -> None:
    known_busy = pod("busy-known")
    known_busy["metadata"]["annotations"] = dict(BUSY)
    known_idle = pod("idle-known")
    known_idle["metadata"]["annotations"] = {SAFE_TO_EVICT: "true"}  # cost absent: idle
    pods = [pod("busy-new"), known_busy, pod("idle-new"), known_idle, pod("was-busy", "1000")]
    changes = eviction_changes(pods, busy={"busy-new", "busy-known"})
    assert changes == {"busy-new": BUSY, "idle-new": IDLE, "was-busy": IDLE}
    assert BUSY == {DELETION_COST: BUSY_COST, SAFE_TO_EVICT: "false"}
    assert IDLE[SAFE_TO_EVICT] == "true"


def gated_pod(name: str, serving: str | None = None, since: str = "") -> dict:
    body = pod(name)
    body["spec"] = {"readinessGates": [{"conditionType": SERVING_CONDITION}]}
    if serving is not None:
        condition = {"type": SERVING_CONDITION, "status": serving, "lastTransitionTime": since}
        body["status"]["conditions"] = [condition]
    return body


def test_new_pods_and_pods_long_out_of_service_are_put_in_service() -> None:
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    pods = [
        gated_pod("new"),
        gated_pod("serving", "True", "2026-01-01T11:00:00Z"),
        gated_pod("just-taken-out", "False", "2026-01-01T12:00:25Z"),  # the RS acts on it now
        gated_pod("left-behind", "False", "2026-01-01T12:00:00Z"),  # the RS removed another
        pod("ungated"),  # made before the scaler held a gate: nothing to open
    ]
    assert to_serve(pods, now, seen={"new"}) == ["new", "left-behind"]


def test_a_new_pod_is_put_in_service_only_once_its_worker_has_polled() -> None:
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    pods = [
        gated_pod("starting"),
        gated_pod("polled"),
        gated_pod("left", "False", "2026-01-01T12:00:00Z"),
    ]
    assert to_serve(pods, now, seen={"polled", "left"}) == ["polled", "left"]
    assert to_serve(pods, now, seen=None) == ["left"], "metrics unknown: no new pod is Ready"


def test_terminating_and_finished_pods_are_not_workers() -> None:
    pods = [pod("a"), pod("b", deleting=True), pod("c", phase="Failed"), pod("d", phase="Running")]
    assert [p["metadata"]["name"] for p in live_pods(pods)] == ["a", "d"]


def test_the_metrics_condition_names_what_is_missing() -> None:
    assert metrics_check("ep", {"ep": EndpointMetrics()}, None).ok is True
    assert metrics_check("ep", {}, None).reason == "EndpointNotReported"
    down = metrics_check("ep", {}, "http://gw/metrics: connection refused")
    assert (down.ok, down.reason) == (False, "GatewayUnreachable")
    assert "connection refused" in down.message


ZERO = {"spec": {"replicas": 0}, "status": {}}
IDLE_READING = EndpointMetrics()


@pytest.mark.parametrize(
    ("entry", "deployment", "pods", "metrics", "rests"),
    [
        ({}, ZERO, [], IDLE_READING, True),
        ({"workersMin": 0, "replicas": None}, ZERO, [], IDLE_READING, True),
        ({}, ZERO, [pod("p1")], IDLE_READING, False),  # a pod: starting, or to release
        ({}, None, [], IDLE_READING, False),  # no Deployment yet
        ({}, {"spec": {"replicas": 1}}, [], IDLE_READING, False),  # asked for a worker
        ({}, {"spec": {"replicas": 0}, "status": {"replicas": 1}}, [], IDLE_READING, False),
        ({}, ZERO, [], None, False),  # no reading: the condition says why
        ({}, ZERO, [], EndpointMetrics(queued=1), False),
        ({}, ZERO, [], EndpointMetrics(queued_low=1), False),
        ({}, ZERO, [], EndpointMetrics(in_progress=1), False),
        ({}, ZERO, [], EndpointMetrics(requests_held=1), False),  # a load-balanced request
        ({}, ZERO, [], EndpointMetrics(workers_idle=1), False),  # a worker outside the pods
        ({}, ZERO, [], EndpointMetrics(worker_jobs={"w": 0}), False),
        ({"workersMin": 1}, ZERO, [], IDLE_READING, False),
        ({"replicas": 2}, ZERO, [], IDLE_READING, False),  # a count set from outside
        ({"scaler": "external"}, ZERO, [], IDLE_READING, False),
    ],
)
def test_an_endpoint_at_rest_has_nothing_for_the_scaler_to_decide(
    entry: dict, deployment: dict | None, pods: list, metrics, rests: bool
) -> None:
    stored = RegistryEntry.model_validate({"id": "ep", **entry})
    assert at_rest(stored, deployment, pods, metrics) is rests


def test_a_scaling_event_is_about_the_endpoint() -> None:
    event = endpoint_event(Owner("ep", "ns", "u-1"), "ScaledUp", "0 -> 2", now="t")
    assert event["involvedObject"] == {
        "apiVersion": API_VERSION, "kind": "Endpoint", "name": "ep", "namespace": "ns",
        "uid": "u-1",
    }  # fmt: skip
    assert (event["type"], event["reason"], event["metadata"]["namespace"]) == (
        "Normal", "ScaledUp", "ns",
    )  # fmt: skip


def test_text_that_is_not_prometheus_is_unreadable() -> None:
    with pytest.raises(MetricsUnreadable):
        parse_metrics("<html>502 Bad Gateway</html>\n")
    assert parse_metrics("") == {}


SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


async def test_the_local_pool_grows_and_stops_only_the_idle_workers_it_is_given() -> None:
    pool = LocalProcessPool("ep", SLEEPER, {}, cwd=None)
    try:
        await pool.resize(3, idle_first=[])
        first, second, third = (await pool.state()).members
        await pool.resize(1, idle_first=[third])  # only one idle worker: only it stops
        assert (await pool.state()).members == (first, second)
        assert await asyncio.wait_for(pool.workers[third].process.wait(), 10) == -15  # SIGTERM
        assert pool.workers[first].process.returncode is None
        await pool.resize(0, idle_first=[second, first])
        assert (await pool.state()).size == 0
    finally:
        await pool.close(grace_s=5)


def test_a_scrape_failing_now_and_then_holds_the_counts_without_a_word() -> None:
    health = ScrapeHealth(grace_s=10)
    assert health.seen(None, now=0) == (True, None)
    assert health.seen("timed out", now=1) == (False, None)  # hold, no condition change
    assert health.seen("timed out", now=10.5) == (False, None)
    assert health.seen(None, now=11) == (True, None)  # back: decide again
    assert health.seen("refused", now=20) == (False, None)  # a new failure, a new grace
    assert health.seen("refused", now=30) == (True, "refused")  # lasting: reported
    assert health.seen("refused", now=31) == (True, "refused")
    assert ScrapeHealth(grace_s=0).seen("refused", now=0) == (True, "refused")


def test_crash_back_off_doubles_to_its_cap_and_forgives_a_long_run() -> None:
    backoff = CrashBackoff(first_s=10, max_s=300, reset_s=600)
    assert backoff.may_start(0)
    delays = [backoff.crashed(now=t, ran_s=1) for t in (0, 20, 60, 200, 600, 1000, 2000)]
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert not backoff.may_start(2299) and backoff.may_start(2300)
    assert backoff.crashed(now=5000, ran_s=700) == 10  # it ran ten minutes: count over


async def test_a_crashing_worker_is_restarted_after_a_back_off_not_at_once() -> None:
    crash = [sys.executable, "-c", "raise SystemExit(3)"]
    pool = LocalProcessPool("ep", crash, {}, cwd=None)
    pool.backoff = CrashBackoff(first_s=1.0, max_s=5.0)
    try:
        await pool.resize(1, idle_first=[])
        [first] = (await pool.state()).members
        await asyncio.wait_for(pool.workers[first].process.wait(), 10)
        assert [e.code for e in pool.reap()] == [3]
        await pool.resize(1, idle_first=[])  # backing off: nothing starts
        assert (await pool.state()).size == 0
        await asyncio.sleep(1.1)
        await pool.resize(1, idle_first=[])
        assert (await pool.state()).size == 1  # a new worker after the back-off
        [second] = (await pool.state()).members
        await asyncio.wait_for(pool.workers[second].process.wait(), 10)
        pool.reap()
        await pool.resize(1, idle_first=[])
        assert (await pool.state()).size == 0 and pool.backoff.until - pool.backoff.first_s > 0
        # A worker that exits 0 by itself (refresh_worker) is replaced at once.
        pool.backoff = CrashBackoff(first_s=60)
        pool.command = [sys.executable, "-c", "pass"]
        await pool.resize(1, idle_first=[])
        [third] = (await pool.state()).members
        await asyncio.wait_for(pool.workers[third].process.wait(), 10)
        pool.reap()
        await pool.resize(1, idle_first=[])
        assert (await pool.state()).size == 1
    finally:
        await pool.close(grace_s=5)


def test_a_deployment_read_by_name_counts_only_with_the_endpoints_worker_labels() -> None:
    """The scaler reads a few endpoints' Deployments by name (a list reads every one of
    the namespace); what it reads stands for the label-selected list of it."""
    labels = {**WORKER_LABELS, ENDPOINT_LABEL: "ep-a"}
    ours = {"metadata": {"name": "ep-a-workers", "labels": labels}}
    assert as_selected(ours, "ep-a") == [ours]
    assert as_selected(None, "ep-a") == []  # not there (404)
    assert as_selected(ours, "ep-b") == []  # another endpoint's labels
    foreign = {"metadata": {"name": "ep-a-workers", "labels": {ENDPOINT_LABEL: "ep-a"}}}
    assert as_selected(foreign, "ep-a") == []  # not a worker Deployment of ours
    assert as_selected({"metadata": {"name": "ep-a-workers"}}, "ep-a") == []
