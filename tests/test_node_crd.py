"""The Endpoint CRD on the real node (tests/cluster.py): with the chart installed by helm,
the echo example is Ready once the scaler reads the gateway's `/metrics` (the phase is
Degraded otherwise), and `kubectl scale lgep/echo` runs that many worker pods, which the
Endpoint's `/scale` selects, until `spec.replicas` is unset and the scaler takes over.

Then a batch (Batch Jobs, docs/batch-jobs.md) of the idle echo endpoint runs on its batch
pool, the hidden child Endpoint `batch-echo` and its own worker Deployment, at most
`batchWorkersMax` pods, while `/runsync` jobs complete on echo's own pods; the pool goes
back to zero pods once the batch is done.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from lockgate.kube.status import at_rest
from node_release import (
    REPO,
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    running,
    wait_until,
    worker_pods,
    workers_stopped,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]


def kubectl(release: Release, *args: str) -> str:
    return release.node.kubectl("-n", USER_NAMESPACE, *args)


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_the_echo_endpoint_is_ready_with_its_metrics_read(release: Release) -> None:
    kubectl(release, "apply", "-f", str(REPO / "examples" / "echo"))

    def ready_with_metrics() -> dict | None:
        status = endpoint_status(release, "echo")
        seen = condition(status, "MetricsAvailable").get("status") == "True"
        return status if seen and status.get("phase") == "Ready" else None

    status = wait_until(ready_with_metrics, "echo Ready, its metrics read", timeout=90)
    assert condition(status, "Ready")["status"] == "True", status


def test_kubectl_scale_runs_that_many_workers_which_the_scale_selects(release: Release) -> None:
    kubectl(release, "scale", "lgep/echo", "--replicas=2")
    wait_until(
        lambda: len([p for p in worker_pods(release, "echo") if running(p)]) == 2,
        "two worker pods running",
        timeout=120,
    )
    path = f"/apis/lockgate.dev/v1alpha1/namespaces/{USER_NAMESPACE}/endpoints/echo/scale"
    wait_until(
        lambda: (
            json.loads(release.node.kubectl("get", "--raw", path))["status"].get("replicas") == 2
        ),
        "status.replicas 2",
    )
    scale = json.loads(release.node.kubectl("get", "--raw", path))
    assert scale["spec"]["replicas"] == 2
    selected = json.loads(
        kubectl(release, "get", "pods", "-l", scale["status"]["selector"], "-o", "json")
    )["items"]
    assert sorted(p["metadata"]["name"] for p in selected if running(p)) == sorted(
        p["metadata"]["name"] for p in worker_pods(release, "echo") if running(p)
    )


def test_unsetting_replicas_lets_the_scaler_remove_the_idle_workers(release: Release) -> None:
    kubectl(release, "patch", "lgep", "echo", "--type", "merge", "-p", '{"spec":{"replicas":null}}')
    # No job waits and idleTimeout is 5 s: the scaler takes both workers away.
    wait_until(lambda: workers_stopped(release, "echo"), "the workers stopped", timeout=120)
    assert endpoint_status(release, "echo")["phase"] == "Ready"


BATCH_SIZE = 24  # requests of the batch, each sleeping BATCH_SLEEP_S on the pool's worker
BATCH_SLEEP_S = 0.5


def worker_ids(jobs: Jobs, url: str, job_id: str) -> list[str]:
    """The workers that took a job (`/status?details=1`'s attempt history)."""
    response = jobs.http.get(f"{url}/status/{job_id}?details=1", timeout=10)
    assert response.status_code == 200, response.text
    return [a["workerId"] for a in response.json()["attemptHistory"]]


def test_a_batch_runs_on_its_own_pool_while_runsync_jobs_run_on_the_endpoints_workers(
    release: Release,
) -> None:
    """The echo endpoint is at rest (the test above took its workers away) when a batch is
    finalized: its pool `batch-echo` gets a pod of its own, at most `batchWorkersMax` (1),
    which runs every request of the batch, while `/runsync` jobs sent meanwhile run on
    echo's own pods; once the batch is done, the pool's Deployment goes back to zero."""
    kubectl(release, "patch", "lgep", "echo", "--type", "merge", "-p",
            '{"spec":{"batchWorkersMax":1}}')  # fmt: skip
    # at rest (Ready, no worker, no job): its resync makes no call until the rest ends
    wait_until(lambda: at_rest(endpoint_status(release, "echo")), "echo at rest", timeout=90)
    echo = Jobs(release, "echo")
    inputs = [{"sleep": BATCH_SLEEP_S, "i": i} for i in range(BATCH_SIZE)]
    created = echo.http.post(f"{echo.url}/batch", json=[{"input": i} for i in inputs], timeout=30)
    assert created.status_code == 200, created.text
    batch_url = f"{echo.url}/batch/{created.json()['id']}"
    finalized = echo.http.post(f"{batch_url}/finalize", timeout=30)
    assert finalized.status_code == 200 and finalized.json()["status"] == "FINALIZED", (
        finalized.text
    )
    pool = "batch-echo"
    seen: dict[str, set[str]] = {"echo": set(), pool: set()}  # pod names, by endpoint
    most_pool_pods = 0

    def look() -> list[dict[str, Any]]:
        """Note the pods of both; the pool's pods not being deleted."""
        nonlocal most_pool_pods
        for endpoint in seen:
            seen[endpoint] |= {
                p["metadata"]["name"] for p in worker_pods(release, endpoint, live=False)
            }
        pods = worker_pods(release, pool)
        most_pool_pods = max(most_pool_pods, len(pods))
        return pods

    def summary() -> dict[str, Any]:
        response = echo.http.get(batch_url, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    # An idle endpoint's first batch: its pool is made and scaled from zero (no other job
    # makes the endpoint busy meanwhile).
    t0 = time.monotonic()
    try:
        wait_until(look, "a pod of the batch pool", timeout=90)
    except AssertionError:
        operator_log = release.kubectl("logs", "deploy/lockgate-operator", "--tail=40", check=False)
        print("batch:", summary(), "\n", release.describe(), "\noperator:\n", operator_log)
        raise
    print(f"\nfinalize -> first pool pod: {time.monotonic() - t0:.1f} s")
    owner = json.loads(kubectl(release, "get", "lgep", pool, "-o", "json"))["metadata"]
    assert owner["labels"] == {"lockgate.dev/batch-of": "echo"}, owner

    # /runsync jobs while the batch runs, on echo's own workers
    runsync: list[str] = []
    mid_batch = 0  # runsync jobs done while the batch had requests done and not done
    deadline = time.monotonic() + 240
    while (state := summary())["requestCompleted"] + state["requestFailed"] < BATCH_SIZE:
        assert time.monotonic() < deadline, f"the batch is not done: {state}, pods seen {seen}"
        job = echo.runsync({"input": {"n": len(runsync)}})
        assert job["status"] == "COMPLETED" and job["output"] == {"echo": {"n": len(runsync)}}, job
        runsync.append(job["id"])
        after = summary()
        mid_batch += 0 < after["requestCompleted"] < BATCH_SIZE
        look()
        time.sleep(0.5)
    print(f"finalize -> batch done: {time.monotonic() - t0:.1f} s; "
          f"{len(runsync)} runsync jobs, {mid_batch} mid-batch; pods seen {seen}")  # fmt: skip
    assert state["status"] == "FINALIZED" and state["doneAt"], state
    assert (state["requestCompleted"], state["requestFailed"]) == (BATCH_SIZE, 0), state
    assert mid_batch >= 1, "no /runsync job completed while the batch was part done"
    assert most_pool_pods <= 1, f"batchWorkersMax is 1: {most_pool_pods} pool pods at once"

    # every request ran on a pod of the pool, every /runsync job on one of echo's own
    page = echo.http.get(f"{batch_url}/requests?limit=500", timeout=10).json()
    assert page["poolEndpointId"] == pool and page["total"] == BATCH_SIZE, page
    pool_url = f"{release.gateway_url}/v2/{pool}"
    for request, given in zip(page["requests"], inputs, strict=True):
        assert request["status"] == "COMPLETED" and request["output"] == {"echo": given}, request
        ran_on = worker_ids(echo, pool_url, request["id"])
        assert ran_on and set(ran_on) <= seen[pool], (request["id"], ran_on, seen)
    for job_id in runsync:
        ran_on = worker_ids(echo, echo.url, job_id)
        assert ran_on and set(ran_on) <= seen["echo"], (job_id, ran_on, seen)

    # the pool back to zero: its Deployment asks for no pod and none is left
    def at_zero() -> bool:
        deployment = json.loads(
            kubectl(release, "get", "deployment", f"{pool}-workers", "-o", "json")
        )
        return deployment["spec"]["replicas"] == 0 and not worker_pods(release, pool, live=False)

    t1 = time.monotonic()
    try:
        wait_until(at_zero, "the batch pool at zero pods", timeout=120)
    except AssertionError:
        print(release.describe())
        raise
    print(f"batch done -> pool at zero: {time.monotonic() - t1:.1f} s")
