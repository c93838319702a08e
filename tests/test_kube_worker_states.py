"""Worker states from worker pods through the real kube-apiserver (envtest) and the real
operator: pods carrying the statuses the scheduler and kubelet write (Unschedulable,
CrashLoopBackOff, ImagePullBackOff) become `/health`'s throttled/unhealthy counts in Redis
and a `WorkersHealthy` condition naming the cause (issue 14, item 4)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest
import requests
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.store import JobStore, Snapshot, keys

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]

EP = "ep-states"
IMAGE = "registry.example.test/team/worker:missing"


def worker_pod(resources: Resources, name: str, endpoint: str = EP) -> None:
    labels = {
        "lockgate.dev/endpoint": endpoint,
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "lockgate-operator",
    }
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "worker", "image": IMAGE}]},
    }
    resources.core.create_namespaced_pod(resources.namespace, body)


def pod_status(resources: Resources, name: str, status: dict[str, Any]) -> None:
    """Write a pod's status as the scheduler or the kubelet would."""
    resources.core.patch_namespaced_pod_status(name, resources.namespace, {"status": status})


def waiting(reason: str, message: str = "", **extra: Any) -> dict[str, Any]:
    container = {
        "name": "worker", "image": IMAGE, "imageID": "", "ready": False,
        "state": {"waiting": {"reason": reason, "message": message}}, **extra,
    }  # fmt: skip
    return {"phase": "Pending", "containerStatuses": [container]}


SCHEDULER_SAYS = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
NOT_SCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
UNSCHEDULABLE = {"phase": "Pending", "conditions": [{**NOT_SCHEDULED, "message": SCHEDULER_SAYS}]}
PULL = waiting("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
UNAUTHORIZED = f'failed to pull and unpack image "{IMAGE}": 401 Unauthorized'

CRASH = waiting(
    "CrashLoopBackOff", "back-off 40s restarting failed container", restartCount=4,
    lastState={"terminated": {"exitCode": 3, "reason": "Error",
                              "message": "loading model\nKeyError: 'MODEL_PATH'\n"}},
)  # fmt: skip


def snapshot(redis_server: EmbeddedRedis) -> Snapshot:
    async def read() -> Snapshot:
        redis = Redis.from_url(redis_server.url)
        try:
            return await JobStore(redis).snapshot(EP)
        finally:
            await redis.aclose()

    return asyncio.run(read())


def test_pod_states_become_health_counts_and_a_condition_naming_the_cause(
    resources: Resources, redis_server: EmbeddedRedis
) -> None:
    resources.template("states-tpl", image=IMAGE)
    resources.endpoint(
        EP, templateId="states-tpl", gpuTypeIds=["NVIDIA A40"], gpuCount=2, workersMin=0
    )
    resources.wait_until(lambda: resources.deployment(f"{EP}-workers"), "the worker Deployment")
    for name in ("w-unschedulable", "w-crash", "w-pull", "w-starting"):
        worker_pod(resources, name)

    def failing() -> dict:
        cond = resources.condition(resources.status(EP), "WorkersHealthy")
        return cond if cond.get("status") == "False" else {}

    try:
        # the registry's answer shows only while the kubelet says ErrImagePull
        pod_status(resources, "w-pull", waiting("ErrImagePull", UNAUTHORIZED))
        resources.wait_until(lambda: "401" in failing().get("message", ""), "the 401 named")
        pod_status(resources, "w-unschedulable", UNSCHEDULABLE)
        pod_status(resources, "w-crash", CRASH)
        pod_status(resources, "w-pull", PULL)
        counts = resources.wait_until(
            lambda: (s := snapshot(redis_server)).workers_unhealthy == 2 and s, "unhealthy 2"
        )
        assert (counts.workers_throttled, counts.workers_initializing) == (1, 1)

        # The worst cause first, once the operator has seen all three pods' statuses (a
        # reconcile between the status writes may name the Unschedulable pod alone); while
        # pulls back off, the registry's last answer is still named.
        cond = resources.wait_until(
            lambda: "ImagePullBackOff" in (c := failing()).get("message", "") and c,
            "the back-off named",
        )
        assert cond["reason"] == "ImagePullError"
        assert IMAGE in cond["message"] and "Check the image name" in cond["message"]
        assert f"last pull error: {UNAUTHORIZED}" in cond["message"]

        resources.core.delete_namespaced_pod("w-pull", resources.namespace, grace_period_seconds=0)
        crash = resources.wait_until(
            lambda: (c := failing()).get("reason") == "CrashLoop" and c, "the crash loop named"
        )
        assert "exit code 3" in crash["message"] and "KeyError: 'MODEL_PATH'" in crash["message"]
        assert "Fix the handler or image" in crash["message"]

        resources.core.delete_namespaced_pod("w-crash", resources.namespace, grace_period_seconds=0)
        throttled = resources.wait_until(
            lambda: (c := failing()).get("reason") == "NoGpuCapacity" and c, "no GPU capacity"
        )
        assert "no node has GPU type NVIDIA A40 with 2 free GPUs" in throttled["message"]
        assert "Add such a node or allow more GPU types" in throttled["message"]
        assert snapshot(redis_server).workers_unhealthy == 0
    finally:
        for name in ("w-unschedulable", "w-crash", "w-pull", "w-starting"):
            with contextlib.suppress(ApiException):  # deleted above
                resources.core.delete_namespaced_pod(
                    name, resources.namespace, grace_period_seconds=0
                )


def test_a_worker_pods_cold_start_is_timed_from_the_pods_creation_to_its_first_call(
    resources: Resources, redis_server: EmbeddedRedis
) -> None:
    resources.template("cold-tpl", image=IMAGE)
    resources.endpoint("ep-cold", templateId="cold-tpl", workersMin=0)
    resources.wait_until(lambda: resources.deployment("ep-cold-workers"), "the worker Deployment")
    worker_pod(resources, "w-cold", "ep-cold")
    pod = resources.core.read_namespaced_pod("w-cold", resources.namespace)
    created_ms = int(pod.metadata.creation_timestamp.timestamp() * 1000)

    async def in_redis(call):
        redis = Redis.from_url(redis_server.url)
        try:
            return await call(redis, JobStore(redis))
        finally:
            await redis.aclose()

    async def noted(redis: Redis, _store: JobStore) -> bytes | None:
        return await redis.hget(keys.prefix("ep-cold") + "wst", "w-cold")

    try:
        # The operator saw the new pod and noted its creation as the worker's start.
        started = resources.wait_until(lambda: asyncio.run(in_redis(noted)), "the start noted")
        assert int(started) == created_ms

        async def first_call_and_history(redis: Redis, store: JobStore) -> list[dict]:
            await store.heartbeat("ep-cold", "w-cold")  # the worker's first call
            slot = store.clock() // 1000 // 10 * 10
            await store.record_history("ep-cold", [slot])
            return await store.history("ep-cold", slot)

        called = int(time.time() * 1000)
        [point] = asyncio.run(in_redis(first_call_and_history))
        assert point["coldStarts"] == 1 and point["coldStartP50"] is not None, point
        took = called - created_ms
        assert abs(point["coldStartP50"] - took) <= 0.05 * took + 100, (point, took)
        assert asyncio.run(in_redis(noted)) is None  # matched: the entry is gone
    finally:
        resources.core.delete_namespaced_pod("w-cold", resources.namespace, grace_period_seconds=0)


def test_the_management_api_on_a_cluster_serves_the_endpoints_history(
    resources: Resources, operator: RunningOperator
) -> None:
    resources.template("history-tpl")
    resources.endpoint("ep-history", templateId="history-tpl", workersMin=0)
    url = f"{operator.manage_url}/v1/endpoints/ep-history/metrics"
    headers = {"authorization": f"Bearer {operator.file_admin_key}"}

    def points() -> list:
        resp = requests.get(url, headers=headers, timeout=10)
        return resp.status_code == 200 and resp.json()["points"]

    # Sampled by the operator's own process once registered: a point within ~11 s.
    [first, *_] = resources.wait_until(points, "a history point", timeout=40)
    assert first["t"] % 10 == 0 and first["inQueue"] == 0 and first["completed"] == 0
    missing = requests.get(url.replace("ep-history", "ep-nothing"), headers=headers, timeout=10)
    assert missing.status_code == 404
