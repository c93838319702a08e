"""GPU placement on a real node (tests/cluster.py): the flashboot DaemonSet goes only to
nodes of the endpoint's GPU types, and workers require one of `gpuTypeIds` at a time,
moving to the next when pods stay Unschedulable and back to the first when it is free.

The node has no GPU: it advertises a fake extended resource (`example.com/gpu`, patched
into its status capacity, the documented way to advertise one) that the release's
`operator.scheduling.gpuResource` names, and the tests set its `nvidia.com/gpu.product`
label (the default `nvidia-gfd` preset) to one type or the other. The tests run in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from cluster import NODE_NAME
from node_release import USER_NAMESPACE, Jobs, Release, endpoint_status, wait_until

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(2400)]  # may wait for the node

GPU_RESOURCE = "example.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
FIRST, SECOND = "NVIDIA A100 80GB PCIe", "NVIDIA L4"  # as GFD labels them: dashes for spaces
ENDPOINT = "gpu-fallback"
FALLBACK_S, RETRY_FIRST_S = 6, 40
TIMINGS: dict[str, float] = {}

TEMPLATE = {
    "apiVersion": "lockgate.dev/v1alpha1",
    "kind": "Template",
    "metadata": {"name": ENDPOINT, "namespace": USER_NAMESPACE},
    "spec": {
        "image": "registry.example.com/lockgate-echo:0.1.0",  # the echo example's image
        "command": ["python", "-u", "/app/handler.py"],
        "containerDiskInGb": 1,
    },
}
ENDPOINT_OBJ = {
    "apiVersion": "lockgate.dev/v1alpha1",
    "kind": "Endpoint",
    "metadata": {"name": ENDPOINT, "namespace": USER_NAMESPACE},
    "spec": {
        "templateId": ENDPOINT,
        "computeType": "GPU",
        "gpuTypeIds": [FIRST, SECOND],
        "gpuCount": 1,
        "vcpuCount": 1,
        "workersMin": 0,
        "workersMax": 1,
        "idleTimeout": 5,
        "flashboot": True,
    },
}


def core(release: Release) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=release.node.kubeconfig))


def label_node(release: Release, gpu_type: str | None) -> None:
    """Set (or remove) the node's GPU type label, as GPU feature discovery would."""
    value = gpu_type.replace(" ", "-") if gpu_type else None
    core(release).patch_node(NODE_NAME, {"metadata": {"labels": {PRODUCT: value}}})


def endpoint(release: Release) -> dict[str, Any]:
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "endpoints.lockgate.dev", ENDPOINT, "-o", "json"
    )
    return json.loads(out)


def gpu_type(release: Release) -> tuple[str, str]:
    """The type the operator requires now, and why (the Endpoint's annotations)."""
    ann = endpoint(release)["metadata"].get("annotations") or {}
    return ann.get("lockgate.dev/gpu-type", ""), ann.get("lockgate.dev/gpu-type-reason", "")


def condition(release: Release) -> dict[str, Any]:
    conditions = endpoint_status(release, ENDPOINT).get("conditions") or []
    return next((c for c in conditions if c["type"] == "GPUTypeSelected"), {})


def events(release: Release, reason: str) -> list[str]:
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "events", "-o", "json",
        "--field-selector", f"involvedObject.name={ENDPOINT},reason={reason}",
    )  # fmt: skip
    return [e["message"] for e in json.loads(out)["items"]]


def failed_scheduling(release: Release) -> list[str]:
    """The scheduler's reasons for not placing pods in the namespace (failure messages)."""
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "events", "-o", "json",
        "--field-selector", "reason=FailedScheduling",
    )  # fmt: skip
    return [f"{e['involvedObject']['name']}: {e['message']}" for e in json.loads(out)["items"]]


def pods_of(release: Release, component: str, *, terminating: bool = False) -> list[dict[str, Any]]:
    """The endpoint's live worker (or flashboot) pods; with `terminating`, those going too."""
    selector = f"lockgate.dev/endpoint={ENDPOINT},app.kubernetes.io/component={component}"
    pods = release.pods(selector, USER_NAMESPACE)
    return [p for p in pods if terminating or not p["metadata"].get("deletionTimestamp")]


def placed_workers(release: Release) -> list[str]:
    """The GPU type of each worker pod the scheduler placed on the node."""
    return [
        p["metadata"]["annotations"]["lockgate.dev/gpu-type"]
        for p in pods_of(release, "worker")
        if p["spec"].get("nodeName") == NODE_NAME
    ]


def flashboot(release: Release) -> dict[str, Any]:
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "daemonset", f"{ENDPOINT}-flashboot", "-o", "json"
    )
    return json.loads(out)


def flashboot_scheduled(release: Release) -> int | None:
    """The DaemonSet's desiredNumberScheduled once its controller has seen the spec."""
    ds = flashboot(release)
    status = ds.get("status") or {}
    if status.get("observedGeneration", 0) < ds["metadata"]["generation"]:
        return None
    return int(status.get("desiredNumberScheduled", 0))


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    rel = Release(node)
    # The node advertises 4 fake GPUs; the kubelet keeps extended resources it does not own.
    node_api = core(rel)
    capacity = {"status": {"capacity": {GPU_RESOURCE: "4"}}}
    node_api.patch_node_status(NODE_NAME, capacity)
    rel.install(
        "--set", f"operator.scheduling.gpuResource={GPU_RESOURCE}",
        "--set", f"operator.scheduling.gpuFallbackSeconds={FALLBACK_S}",
        "--set", f"operator.scheduling.gpuRetryFirstSeconds={RETRY_FIRST_S}",
        "--set", "operator.env.LOCKGATE_RESYNC_S=2",  # decide every 2 s (default 10 s)
    )  # fmt: skip
    yield rel
    print("\nplacement timings (s):", json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))
    label_node(rel, None)
    rel.node.kubectl("-n", USER_NAMESPACE, "delete", "endpoints.lockgate.dev", ENDPOINT,
                     "--ignore-not-found", "--timeout=60s", check=False)  # fmt: skip
    rel.uninstall()


@pytest.fixture(scope="module")
def jobs(release: Release) -> Jobs:
    """The GPU Endpoint, applied while the node carries no GPU type label."""
    label_node(release, None)
    release.apply(TEMPLATE)
    release.apply(ENDPOINT_OBJ)
    wait_until(lambda: gpu_type(release)[0] == FIRST, "the first GPU type to be chosen", 60)
    return Jobs(release, ENDPOINT)


# -- flashboot: only nodes of the endpoint's GPU types -------------------------------------


def test_flashboot_has_no_pod_on_a_node_without_the_endpoints_gpu_types(
    release: Release, jobs: Jobs
) -> None:
    scheduled = wait_until(
        lambda: flashboot_scheduled(release) is not None and [flashboot_scheduled(release)],
        "the flashboot DaemonSet's status",
        60,
    )
    assert scheduled == [0], flashboot(release)["status"]
    assert pods_of(release, "flashboot") == []


def test_flashboot_gets_a_pod_once_the_node_has_one_of_the_types(
    release: Release, jobs: Jobs
) -> None:
    label_node(release, SECOND)  # the second type only: the DaemonSet takes every listed type
    wait_until(lambda: flashboot_scheduled(release) == 1, "a flashboot pod on the node", 60)
    wait_until(
        lambda: [p["spec"].get("nodeName") for p in pods_of(release, "flashboot")] == [NODE_NAME],
        "the flashboot pod to be placed on the node",
        60,
    )


# -- workers: one type at a time, with a fallback --------------------------------------------


def test_a_job_runs_on_the_second_type_when_the_first_stays_unschedulable(
    release: Release, jobs: Jobs
) -> None:
    t0 = time.monotonic()
    job_id = jobs.run({"input": {"on": "second"}})
    pending = wait_until(
        lambda: [p for p in pods_of(release, "worker") if not p["spec"].get("nodeName")],
        "a worker pod waiting for a node of the first type",
        60,
    )
    assert pending[0]["metadata"]["annotations"]["lockgate.dev/gpu-type"] == FIRST
    wait_until(lambda: gpu_type(release)[0] == SECOND, "the fallback to the second type", 120)
    assert gpu_type(release) == (SECOND, "Unschedulable")
    # Seen while it lives: once the job is done the idle worker may go at any moment.
    wait_until(
        lambda: placed_workers(release) == [SECOND], "a worker placed on the second type", 120
    )
    assert jobs.final(job_id, timeout=180)["status"] == "COMPLETED"
    TIMINGS["job submitted -> COMPLETED on the fallback type"] = time.monotonic() - t0
    cond = wait_until(lambda: condition(release).get("reason") == "Unschedulable" and condition(
        release), "the GPUTypeSelected condition", 30)  # fmt: skip
    assert SECOND in cond["message"] and "gpuTypeIds[1]" in cond["message"], cond
    assert any(SECOND in m for m in events(release, "Unschedulable")), "an Event names the type"


def test_the_workers_move_back_to_the_first_type_when_it_is_free_again(
    release: Release, jobs: Jobs
) -> None:
    label_node(release, FIRST)
    # Gone, not only terminating: a worker requests a whole core of the node's two, so a new
    # one would stay Unschedulable (Insufficient cpu) beside it, and the operator would
    # rightly fall back to the second type again.
    wait_until(
        lambda: not pods_of(release, "worker", terminating=True), "the idle worker to stop", 120
    )
    t0 = time.monotonic()
    wait_until(
        lambda: gpu_type(release) == (FIRST, "RetryingFirst"),
        "the operator to retry the first type",
        RETRY_FIRST_S + 120,
    )
    TIMINGS["idle -> first type retried"] = time.monotonic() - t0
    job_id = jobs.run({"input": {"on": "first"}})
    wait_until(lambda: placed_workers(release) == [FIRST], "a worker placed on the first type", 120)
    assert jobs.final(job_id, timeout=180)["status"] == "COMPLETED"
    assert gpu_type(release) == (FIRST, "RetryingFirst"), failed_scheduling(release)
    cond = wait_until(lambda: condition(release).get("reason") == "RetryingFirst" and condition(
        release), "the GPUTypeSelected condition", 30)  # fmt: skip
    assert FIRST in cond["message"] and "gpuTypeIds[0]" in cond["message"], cond
    assert any(FIRST in m for m in events(release, "RetryingFirst"))
