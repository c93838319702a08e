"""Workers that must go, through the real kube-apiserver (envtest) and the real operator
(issue 47, items 1 and 2): a worker pod whose worker was marked unhealthy (the store's
record, as the worker API writes it for a failed fitness check) is deleted, with a Warning
Event on the Endpoint naming the worker and why and `WorkersHealthy` False with the kind's
reason; a pod whose worker container has run longer than the endpoint's `startupTimeout`
without polling is marked `startup` and deleted, one that polled (its `Serving` condition)
is left alone. Pods are made by hand with the statuses a kubelet would write (no kubelet:
an unscheduled pod goes at once when deleted)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.kube.manifests.names import SERVING_CONDITION
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobStore

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]

IMAGE = "example.test/worker:1"


def worker_pod(resources: Resources, name: str, endpoint: str) -> None:
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


def running_since(started: datetime, *conditions: dict[str, Any]) -> dict[str, Any]:
    """A pod status whose worker container runs since `started`, as the kubelet writes it."""
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    container = {
        "name": "worker", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
        "state": {"running": {"startedAt": stamp}},
    }  # fmt: skip
    return {"phase": "Running", "containerStatuses": [container], "conditions": list(conditions)}


def pod_status(resources: Resources, name: str, status: dict[str, Any]) -> None:
    resources.core.patch_namespaced_pod_status(name, resources.namespace, {"status": status})


def pod_exists(resources: Resources, name: str) -> bool:
    try:
        resources.core.read_namespaced_pod(name, resources.namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def events(resources: Resources, endpoint: str, reason: str) -> list:
    items = resources.core.list_namespaced_event(
        resources.namespace, field_selector=f"involvedObject.name={endpoint}"
    ).items
    return [e for e in items if e.reason == reason and e.involved_object.kind == "Endpoint"]


def in_store(redis_server: EmbeddedRedis, call: Any) -> Any:
    async def run() -> Any:
        redis = Redis.from_url(redis_server.url)
        try:
            return await call(JobStore(redis))
        finally:
            await redis.aclose()

    return asyncio.run(run())


def remove(resources: Resources, *names: str) -> None:
    for name in names:
        with contextlib.suppress(ApiException):  # deleted by the operator already
            resources.core.delete_namespaced_pod(name, resources.namespace, grace_period_seconds=0)


def test_a_marked_workers_pod_is_deleted_with_an_event_and_a_condition(
    resources: Resources, redis_server: EmbeddedRedis
) -> None:
    ep = "ep-marked"
    resources.template("marked-tpl", image=IMAGE)
    resources.endpoint(ep, templateId="marked-tpl", computeType="CPU", workersMin=0)
    resources.wait_until(lambda: resources.deployment(f"{ep}-workers"), "the worker Deployment")
    worker_pod(resources, "w-unfit", ep)
    worker_pod(resources, "w-fit", ep)
    try:
        recent = datetime.now(UTC) - timedelta(seconds=5)  # well within any startupTimeout
        pod_status(resources, "w-unfit", running_since(recent))
        pod_status(resources, "w-fit", running_since(recent))
        why = UnhealthyWorker(
            worker="w-unfit", kind="fitness", check="check_trouble",
            reason="RuntimeError: no GPU here", at=0,
        )  # fmt: skip

        async def mark(store: JobStore) -> None:  # as the worker API marks it
            await store.mark_unhealthy(ep, why.model_copy(update={"at": store.clock()}))

        in_store(redis_server, mark)
        resources.wait_until(lambda: not pod_exists(resources, "w-unfit"), "the pod deleted", 90)
        assert pod_exists(resources, "w-fit")
        [event] = resources.wait_until(
            lambda: events(resources, ep, "FitnessCheckFailed"), "the Event"
        )
        assert event.type == "Warning"
        assert event.message == (
            "worker w-unfit replaced (its pod deleted): "
            "fitness check check_trouble failed: RuntimeError: no GPU here"
        )
        cond = resources.wait_until(
            lambda: (c := resources.condition(resources.status(ep), "WorkersHealthy")).get(
                "reason"
            ) == "FitnessCheckFailed" and c,
            "WorkersHealthy naming the fitness check",
        )  # fmt: skip
        assert cond["status"] == "False"
        assert cond["message"].startswith(
            "Worker w-unfit was replaced: fitness check check_trouble failed: "
            "RuntimeError: no GPU here. Fix what the check found"
        )
    finally:
        remove(resources, "w-unfit", "w-fit")


def test_a_worker_that_misses_its_startup_deadline_is_marked_and_replaced(
    resources: Resources, redis_server: EmbeddedRedis
) -> None:
    ep = "ep-startup"
    resources.template("startup-tpl", image=IMAGE)
    resources.endpoint(
        ep, templateId="startup-tpl", computeType="CPU", workersMin=0, startupTimeout=30
    )
    resources.wait_until(lambda: resources.deployment(f"{ep}-workers"), "the worker Deployment")
    for name in ("w-stuck", "w-polled", "w-new"):
        worker_pod(resources, name, ep)
    try:
        long_ago = datetime.now(UTC) - timedelta(minutes=5)
        polled = {"type": SERVING_CONDITION, "status": "True", "reason": "InService"}
        pod_status(resources, "w-polled", running_since(long_ago, polled))
        pod_status(resources, "w-new", running_since(datetime.now(UTC)))
        pod_status(resources, "w-stuck", running_since(long_ago))
        resources.wait_until(lambda: not pod_exists(resources, "w-stuck"), "the pod deleted")
        records = in_store(redis_server, lambda store: store.unhealthy_workers(ep))
        assert set(records) == {"w-stuck"}
        why = records["w-stuck"]
        assert why.kind == "startup"
        # no kubelet here, so no log to quote
        assert why.reason == "did not become ready within 30 s; it wrote no log line"
        [event] = resources.wait_until(lambda: events(resources, ep, "StartupTimeout"), "Event")
        assert "worker w-stuck replaced (its pod deleted): startup failed" in event.message
        cond = resources.wait_until(
            lambda: (c := resources.condition(resources.status(ep), "WorkersHealthy")).get(
                "reason"
            ) == "StartupTimeout" and c,
            "WorkersHealthy naming the deadline",
        )  # fmt: skip
        assert "raise the endpoint's startupTimeout" in cond["message"]
        assert pod_exists(resources, "w-polled") and pod_exists(resources, "w-new")
    finally:
        remove(resources, "w-stuck", "w-polled", "w-new")
