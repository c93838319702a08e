"""lockgate on a real node, as a user meets it: `helm install`, `kubectl apply -f
examples/echo/`, jobs through the gateway Service run in worker pods, scaling from zero and
back, faults, upgrade and uninstall (tests/cluster.py, tests/node_fixtures.py).

The tests of this module run in order on one release; each asserts on what a user sees
(pods, Endpoint status, job results, pod logs). Timings are printed, never asserted
(`make bench-cluster` reports them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from node_release import (
    REPO,
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    pod_log,
    running,
    wait_until,
    worker_pods,
    workers_stopped,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ECHO = REPO / "examples" / "echo"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    rel = Release(node)
    t0 = time.monotonic()
    rel.install()
    TIMINGS["helm install --wait"] = time.monotonic() - t0
    yield rel
    print("\nnode timings (s):", json.dumps({k: round(v, 2) for k, v in TIMINGS.items()}))
    rel.uninstall()


# -- install ------------------------------------------------------------------------------


def test_helm_install_brings_up_the_operator_gateway_and_redis(release: Release) -> None:
    for component in ("operator", "gateway", "redis"):
        pods = release.pods(f"app.kubernetes.io/component={component}")
        assert pods, f"no {component} pod"
        for pod in pods:
            ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", (component, pod["status"])
    assert requests.get(f"{release.gateway_url}/readyz", timeout=5).status_code == 200


def test_helm_test_passes(release: Release) -> None:
    out = release.helm("test", release.name, "-n", release.namespace)
    assert "Phase:          Succeeded" in out, out


# -- the echo example ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def echo(release: Release) -> Jobs:
    """`kubectl apply -f examples/echo/`, then the Endpoint's phase is Ready."""
    t0 = time.monotonic()
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(ECHO))
    wait_until(
        lambda: endpoint_status(release, "echo").get("phase") == "Ready",
        "the echo Endpoint to be Ready",
        timeout=60,
    )
    TIMINGS["echo applied -> phase Ready"] = time.monotonic() - t0
    return Jobs(release, "echo")


def test_the_echo_example_becomes_ready_with_its_job_api_url(release: Release, echo: Jobs) -> None:
    status = endpoint_status(release, "echo")
    assert status["phase"] == "Ready"
    assert status["jobApiUrl"].rstrip("/").endswith("/v2/echo")


def test_a_job_from_zero_starts_a_worker_pod_and_completes_in_it(
    release: Release, echo: Jobs
) -> None:
    assert worker_pods(release, "echo") == [], "workersMin is 0: no pod before a job"
    t0 = time.monotonic()
    job = echo.runsync({"input": {"hello": "world"}})
    TIMINGS["from zero: runsync -> COMPLETED"] = time.monotonic() - t0
    assert job["status"] == "COMPLETED", job
    assert job["output"] == {"echo": {"hello": "world"}}
    [pod] = worker_pods(release, "echo")
    wait_until(lambda: running(worker_pods(release, "echo")[0]), "its status to say Running")
    assert job["id"] in pod_log(release, pod), "the worker pod's log names the job"


def test_a_warm_job_completes_through_the_service(echo: Jobs) -> None:
    t0 = time.monotonic()
    job = echo.runsync({"input": {"n": 2}})
    TIMINGS["warm: runsync -> COMPLETED"] = time.monotonic() - t0
    assert job["status"] == "COMPLETED" and job["output"] == {"echo": {"n": 2}}


def test_after_the_idle_timeout_no_worker_pod_is_left(release: Release, echo: Jobs) -> None:
    echo.runsync({"input": {"last": True}})
    t0 = time.monotonic()
    wait_until(lambda: workers_stopped(release, "echo"), "no running echo worker", timeout=60)
    TIMINGS["last job -> no worker running (idleTimeout 5 s)"] = time.monotonic() - t0
    # The kubelet deletes a stopped pod's object at its next status sync (10 s at most).
    wait_until(lambda: not worker_pods(release, "echo", live=False), "no echo pod", timeout=60)
    TIMINGS["last job -> no worker pod object"] = time.monotonic() - t0
    idle = {"idle": 0, "running": 0, "initializing": 0, "throttled": 0, "unhealthy": 0}
    wait_until(lambda: echo.health()["workers"] == idle, "/health to count no worker", 10)


def test_a_burst_scales_to_workers_max_and_back_to_zero(release: Release, echo: Jobs) -> None:
    workers_max = 3
    t0 = time.monotonic()
    ids = [echo.run({"input": {"sleep": 3, "i": i}}) for i in range(12)]
    wait_until(
        lambda: len([p for p in worker_pods(release, "echo") if running(p)]) == workers_max,
        f"{workers_max} running echo pods",
        timeout=120,
    )
    TIMINGS["burst: 0 -> workersMax running pods"] = time.monotonic() - t0
    for job_id in ids:
        assert echo.final(job_id)["status"] == "COMPLETED"
    assert len(worker_pods(release, "echo")) <= workers_max
    t1 = time.monotonic()
    wait_until(lambda: not worker_pods(release, "echo", live=False), "no echo pod", timeout=120)
    TIMINGS["burst done -> zero pods"] = time.monotonic() - t1


# -- faults -------------------------------------------------------------------------------


def _busy_pod(release: Release, echo: Jobs, seconds: float) -> tuple[str, dict[str, Any]]:
    """Submit a job that runs `seconds`; return its id and the one pod running it."""
    job_id = echo.run({"input": {"sleep": seconds}})
    wait_until(lambda: echo.status(job_id)["status"] == "IN_PROGRESS", "the job to start", 90)
    [pod] = wait_until(
        lambda: [p for p in worker_pods(release, "echo") if running(p)], "its pod's status"
    )
    return job_id, pod


def test_a_worker_pod_deleted_mid_job_finishes_it_and_loses_nothing(
    release: Release, echo: Jobs
) -> None:
    job_id, pod = _busy_pod(release, echo, 4)
    release.node.kubectl(
        "-n", USER_NAMESPACE, "delete", "pod", pod["metadata"]["name"], "--wait=false"
    )
    final = echo.final(job_id)
    assert final["status"] == "COMPLETED", final
    assert final["output"] == {"echo": {"sleep": 4}}


def test_a_worker_sigkilled_mid_job_has_its_job_run_again(release: Release, echo: Jobs) -> None:
    retried = echo.health()["jobs"]["retried"]
    job_id, pod = _busy_pod(release, echo, 30)
    [container] = pod["status"]["containerStatuses"]
    release.node.kill_container(container["containerID"])
    final = echo.final(job_id, timeout=120)
    assert final["status"] == "COMPLETED", final
    assert echo.health()["jobs"]["retried"] == retried + 1
    assert echo.health()["jobs"]["inProgress"] == 0


# -- scale-down ---------------------------------------------------------------------------

KEEP = {
    "apiVersion": "lockgate.dev/v1alpha1",
    "kind": "Endpoint",
    "metadata": {"name": "keep", "namespace": USER_NAMESPACE},
    "spec": {
        "templateId": "echo",
        "computeType": "CPU",
        "vcpuCount": 1,
        "workersMin": 0,
        "workersMax": 2,
        "idleTimeout": 3,
        "scalerType": "REQUEST_COUNT",  # one worker per job: a second job, a second pod
        "scalerValue": 1,
        "executionTimeoutMs": 120000,
    },
}


def test_scale_down_removes_the_idle_pod_not_the_busy_one(release: Release, echo: Jobs) -> None:
    """Pod A (older) runs a short job, pod B (newer) a long one; when A has idled, the
    count goes to 1 and A is the pod removed, while B's job runs to the end."""
    release.apply(KEEP)
    wait_until(lambda: endpoint_status(release, "keep").get("phase") == "Ready", "keep Ready")
    keep = Jobs(release, "keep")
    short = keep.run({"input": {"sleep": 10}})
    wait_until(lambda: keep.status(short)["status"] == "IN_PROGRESS", "A to take the short job")
    [a] = worker_pods(release, "keep")
    # B must be Ready seconds after A (the API's times have 1 s resolution): a ReplicaSet
    # left to itself removes the pod Ready most recently, so B, the busy one.
    time.sleep(3)
    long = keep.run({"input": {"sleep": 40}})
    wait_until(lambda: keep.status(long)["status"] == "IN_PROGRESS", "B to take the long job", 90)
    names = {p["metadata"]["name"] for p in worker_pods(release, "keep")}
    [b] = names - {a["metadata"]["name"]}

    def annotations(name: str) -> dict[str, str]:
        pods = {p["metadata"]["name"]: p for p in worker_pods(release, "keep", live=False)}
        return pods[name]["metadata"].get("annotations") or {} if name in pods else {}

    # While its job runs, the cluster autoscaler may not evict B, and B is removed last.
    wait_until(
        lambda: annotations(b).get("cluster-autoscaler.kubernetes.io/safe-to-evict") == "false",
        "B marked not safe to evict",
    )
    assert annotations(b).get("controller.kubernetes.io/pod-deletion-cost") == "1000"
    assert keep.final(short)["status"] == "COMPLETED"
    wait_until(lambda: len(worker_pods(release, "keep", live=False)) == 1, "one pod left", 60)
    [left] = worker_pods(release, "keep", live=False)
    assert left["metadata"]["name"] == b, "the idle pod A is removed, the busy pod B stays"
    final = keep.final(long)
    assert final["status"] == "COMPLETED" and keep.health()["jobs"]["retried"] == 0
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "endpoints.lockgate.dev", "keep")


# -- streaming and the runpod SDK ---------------------------------------------------------


def test_the_streaming_example_streams_through_a_pod(release: Release) -> None:
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(REPO / "examples/streaming"))
    wait_until(lambda: endpoint_status(release, "streaming").get("phase") == "Ready", "Ready")
    streaming = Jobs(release, "streaming")
    job_id = streaming.run({"input": {"prompt": "once upon", "max_tokens": 5, "delay_ms": 200}})
    chunks: list[Any] = []
    while True:
        response = streaming.http.get(f"{streaming.url}/stream/{job_id}", timeout=30).json()
        chunks += response["stream"]
        if response["status"] in ("COMPLETED", "FAILED") and not response["stream"]:
            break
        time.sleep(0.1)
    assert response["status"] == "COMPLETED"
    assert len(chunks) == 5, chunks
    assert sum(len(c["output"]["text"]) for c in chunks) == 5
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "-f", str(REPO / "examples/streaming"))


RUNPOD_IMAGE = "localhost/lockgate-test/runpod-worker:dev"


def test_a_runpod_sdk_worker_image_runs_unchanged_in_a_pod(release: Release) -> None:
    import runpod

    template = {
        "apiVersion": "lockgate.dev/v1alpha1",
        "kind": "Template",
        "metadata": {"name": "runpod-echo", "namespace": USER_NAMESPACE},
        "spec": {"image": RUNPOD_IMAGE, "command": ["python", "-u", "/app/runpod_echo.py"]},
    }
    endpoint = {
        "apiVersion": "lockgate.dev/v1alpha1",
        "kind": "Endpoint",
        "metadata": {"name": "runpod-echo", "namespace": USER_NAMESPACE},
        "spec": {"templateId": "runpod-echo", "computeType": "CPU", "vcpuCount": 1,
                 "workersMin": 0, "workersMax": 1, "idleTimeout": 5},
    }  # fmt: skip
    release.apply(template)
    release.apply(endpoint)
    wait_until(lambda: endpoint_status(release, "runpod-echo").get("phase") == "Ready", "Ready")
    runpod.endpoint_url_base = f"{release.gateway_url}/v2"
    runpod.api_key = release.client_key()
    client = runpod.Endpoint("runpod-echo")
    assert client.run_sync({"input": {"x": 1}}, timeout=120) == {"echo": {"x": 1}}
    job = client.run({"fail": "no good"})
    wait_until(lambda: job.status() == "FAILED", "the failing job to fail", 60)
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "endpoints.lockgate.dev", "runpod-echo")


# -- upgrade and uninstall ----------------------------------------------------------------


def test_helm_upgrade_rolls_without_losing_a_queued_job(release: Release, echo: Jobs) -> None:
    """A metrics token, two gateways and a new image tag, while jobs wait in the queue."""
    release.node.kubectl(
        "-n",
        USER_NAMESPACE,
        "patch",
        "endpoints.lockgate.dev",
        "echo",
        "--type=merge",
        "-p",
        '{"spec": {"workersMax": 0}}',
    )  # fmt: skip  - jobs stay queued through the upgrade
    ids = [echo.run({"input": {"queued": i}}) for i in range(5)]
    image = "registry.example.com/lockgate/control-plane"
    release.node.tag_image(f"{image}:0.1.0", f"{image}:0.1.0-upgrade")
    t0 = time.monotonic()
    release.upgrade(
        "--set", "metrics.token.enabled=true",
        "--set", "gateway.replicaCount=2",
        "--set", "image.tag=0.1.0-upgrade",
    )  # fmt: skip
    TIMINGS["helm upgrade --wait"] = time.monotonic() - t0
    gateways = [p for p in release.pods("app.kubernetes.io/component=gateway") if running(p)]
    assert len(gateways) == 2, "old gateway pods may still be terminating, new ones run"
    assert all(p["spec"]["containers"][0]["image"].endswith(":0.1.0-upgrade") for p in gateways)
    release.node.kubectl(
        "-n", USER_NAMESPACE, "patch", "endpoints.lockgate.dev", "echo", "--type=merge",
        "-p", '{"spec": {"workersMax": 3}}',
    )  # fmt: skip
    for i, job_id in enumerate(ids):
        final = echo.final(job_id, timeout=180)
        assert final["status"] == "COMPLETED" and final["output"] == {"echo": {"queued": i}}
    metrics = requests.get(f"{release.gateway_url}/metrics", timeout=5)
    assert metrics.status_code == 401, "the metrics token is on"


def test_helm_uninstall_leaves_no_lockgate_object_pod_or_finalizer(release: Release) -> None:
    """The runbook (docs/install.md): delete the Endpoints while the operator runs, then
    `helm uninstall`."""
    release.node.kubectl("delete", "endpoints.lockgate.dev", "--all", "-A", "--wait")
    release.node.kubectl("delete", "templates.lockgate.dev", "--all", "-A", "--wait")
    workers = "app.kubernetes.io/component=worker"
    try:  # 60 s was once too short in CI (cause not found: the print below is for that)
        wait_until(lambda: not release.pods(workers, ""), "no worker pod", 150)
    except AssertionError:
        print(release.describe())  # which pod stayed, and the kubelet's events
        raise
    release.uninstall()
    wait_until(
        lambda: not release.pods("app.kubernetes.io/instance=" + release.name),
        "the release's pods to go",
        120,
    )
    leftovers = release.node.kubectl("get", "all,sa,secret,cm,role,rolebinding", "-A",
                                     "-l", f"app.kubernetes.io/instance={release.name}",
                                     "-o", "name")  # fmt: skip
    # settings.keep (default): the settings and client-key Secrets stay for a reinstall,
    # with the Redis data they belong to (docs/install.md, "Uninstall"); nothing else.
    kept = {f"secret/{release.name}-settings", f"secret/{release.name}-client-key"}
    assert set(leftovers.split()) == kept, leftovers
    release.node.kubectl("-n", release.namespace, "delete", *kept)
    for kind in ("endpoints.lockgate.dev", "templates.lockgate.dev"):
        items = json.loads(release.node.kubectl("get", kind, "-A", "-o", "json"))["items"]
        assert all(not i["metadata"].get("finalizers") for i in items), items
