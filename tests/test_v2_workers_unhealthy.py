"""A worker marked unhealthy (a failed fitness check) in the v2 workers list and `/health`'s
counts: UNHEALTHY with its reason while its pod is there (a gone one is not listed, as
RunPod lists only current workers), and counted once although its pod crash-loops."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import aiohttp
import pytest
from kubernetes import client as k8s
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.manage.workerstates import worker_status
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobStore, Registry
from tests.conftest import eventually
from tests.test_v2_workers import _get, _pod, _set_status

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]


@pytest.mark.parametrize(
    ("lifecycle", "jobs"),
    [("ready", {}), ("ready", {"w": 1}), ("throttled", {}), ("starting", None), ("ready", None)],
)
def test_a_marked_worker_is_unhealthy_whatever_else_is_known(lifecycle, jobs) -> None:
    assert worker_status(lifecycle, jobs, "w", marked=True) == "UNHEALTHY"


OPERATORS = {"app.kubernetes.io/managed-by": "lockgate-operator"}  # the scaler's pods
CRASHING = {
    "containerStatuses": [{
        "name": "worker", "image": "example.test/echo:2", "imageID": "", "ready": False,
        "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }]
}  # fmt: skip


@pytest.mark.envtest
async def test_envtest_a_marked_pod_is_unhealthy_with_its_reason_and_counted_once(
    operator: RunningOperator,
    resources: Resources,
    kube: k8s.ApiClient,
    redis_server: EmbeddedRedis,
    http: aiohttp.ClientSession,
) -> None:
    # Not the `redis` fixture: its FLUSHALL would drop the session operator's leadership.
    redis = Redis.from_url(redis_server.url)
    core, ns = k8s.CoreV1Api(kube), resources.namespace
    endpoint_id = f"un-{secrets.token_hex(3)}"
    resources.template(f"{endpoint_id}-tpl", image="example.test/echo:2")
    resources.endpoint(endpoint_id, templateId=f"{endpoint_id}-tpl", workersMin=0)
    resources.wait_until(lambda: resources.deployment(f"{endpoint_id}-workers"), "its Deployment")
    names = {key: f"{endpoint_id}-{key}" for key in ("sick", "well", "start")}
    for name in names.values():
        core.create_namespaced_pod(ns, _pod(name, endpoint_id, labels=OPERATORS))
    _set_status(core, ns, names["sick"], CRASHING)  # the SDK exited 1; its container restarts
    _set_status(core, ns, names["well"], {"conditions": [{"type": "Ready", "status": "True"}]})
    store = JobStore(redis)
    await store.heartbeat(endpoint_id, names["well"])
    for worker in (names["sick"], f"{endpoint_id}-gone"):
        why = UnhealthyWorker(
            worker=worker, kind="fitness", check="check_gpu", reason="RuntimeError: no GPU",
            at=store.clock(),
        )  # fmt: skip
        await store.mark_unhealthy(endpoint_id, why)
    await store.release_worker(endpoint_id, f"{endpoint_id}-gone")  # its pod went
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    url = f"{operator.manage_url}/v2/serverless/{endpoint_id}/workers"
    try:
        status, body = await _get(http, url, {"authorization": f"Bearer {key}"})
        assert status == 200, body
        got = {w["id"]: (w["status"], w["unhealthyReason"]) for w in body["workers"]}
        assert got == {
            names["sick"]: ("UNHEALTHY", "fitness check check_gpu failed: RuntimeError: no GPU"),
            names["well"]: ("IDLE", None),
            names["start"]: ("INITIALIZING", None),
        }
        assert body["summary"]["unhealthy"] == 1 and body["summary"]["total"] == 3

        # /health's counts: once the operator reported this endpoint's pods (the starting
        # one), the crash-looping marked pod counts once, from the store's mark
        async def reported() -> bool:
            return (await store.snapshot(endpoint_id)).workers_initializing == 1

        await eventually(reported, "the operator's report of the pods", timeout=30)

        # a report begun before the marks were written counts the sick pod as unhealthy
        # itself; the next one leaves it to the store's mark
        async def counted_once() -> bool:
            snap = await store.snapshot(endpoint_id)
            return (snap.workers_unhealthy, snap.workers_idle) == (1, 1)

        await eventually(counted_once, "the marked pod counted once", timeout=30)
    finally:
        for name in names.values():
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        await redis.aclose()
