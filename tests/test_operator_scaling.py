"""The operator's scaling loop against a real kube-apiserver (envtest) and a real gateway.

The gateway serves `/metrics` from the same Redis the operator registers endpoints in;
jobs are put in the store directly, and a "worker" holding a job is simply a worker id
equal to a pod's name (envtest has no kubelet: the ReplicaSet's pods stay Pending).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import pytest
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.kube.deployment_pool import BUSY_COST, DELETION_COST, SAFE_TO_EVICT
from lockgate.kube.manifests.names import SERVING_CONDITION
from lockgate.store import JobStore, NewJob, Registry, keys
from tests.conftest import eventually, make_settings, start_gateway

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]


class MetricsGateway:
    """A real gateway on the port the operator scrapes; can be stopped mid-test."""

    def __init__(self, redis_url: str, port: int) -> None:
        self.settings = make_settings(redis_url, port)
        self.runner = None

    async def start(self) -> None:
        self.runner = await start_gateway(self.settings)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@pytest.fixture
async def metrics_gateway(
    operator: RunningOperator, redis_server: EmbeddedRedis
) -> AsyncIterator[MetricsGateway]:
    gateway = MetricsGateway(redis_server.url, operator.metrics_port)
    yield gateway
    await gateway.stop()


async def until(check: Callable[[], object], what: str, timeout: float = 30.0):
    """Poll a blocking check in a thread, so the gateway on this event loop keeps serving."""
    from kube_fixtures import eventually

    return await eventually(lambda: asyncio.to_thread(check), what, timeout)


def metrics_condition(resources: Resources, name: str) -> dict:
    return resources.condition(resources.status(name), "MetricsAvailable")


def replicas(resources: Resources, name: str) -> int | None:
    deployment = resources.deployment(f"{name}-workers")
    return None if deployment is None else deployment.spec.replicas


def events(resources: Resources, name: str, reason: str) -> list:
    items = resources.core.list_namespaced_event(
        resources.namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return [e for e in items if e.reason == reason and e.involved_object.kind == "Endpoint"]


def worker_pods(resources: Resources, name: str) -> list:
    pods = resources.core.list_namespaced_pod(
        resources.namespace, label_selector=f"lockgate.dev/endpoint={name}"
    ).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def serving_of(resources: Resources, pod_name: str) -> str | None:
    pod = resources.core.read_namespaced_pod(pod_name, resources.namespace)
    conditions = pod.status.conditions or []
    return next((c.status for c in conditions if c.type == SERVING_CONDITION), None)


GONE = "<pod gone>"


def cost_of(resources: Resources, pod_name: str) -> str | None:
    try:
        pod = resources.core.read_namespaced_pod(pod_name, resources.namespace)
    except ApiException as err:
        if err.status == 404:
            return GONE
        raise
    return (pod.metadata.annotations or {}).get(DELETION_COST)


def evictable(resources: Resources, pod_name: str) -> str | None:
    pod = resources.core.read_namespaced_pod(pod_name, resources.namespace)
    return (pod.metadata.annotations or {}).get(SAFE_TO_EVICT)


async def queue_jobs(redis: Redis, endpoint: str, count: int) -> None:
    store = JobStore(redis)
    for n in range(count):
        await store.submit(endpoint, NewJob(id=f"job-{n}", input=b"{}", ttl_ms=600_000))


async def test_the_loop_scales_the_deployment_annotates_busy_pods_and_reports_it(
    resources: Resources, redis: Redis, metrics_gateway: MetricsGateway
) -> None:
    name = "ep-autoscale"
    resources.template("as-tpl")
    resources.endpoint(
        name, templateId="as-tpl", workersMin=0, workersMax=3, idleTimeout=1,
        scalerType="REQUEST_COUNT", scalerValue=1,
    )  # fmt: skip
    await resources.eventually(lambda: Registry(redis).get_endpoint(name), "registered")
    await until(lambda: replicas(resources, name) == 0, "the Deployment at 0")
    await metrics_gateway.start()
    metrics = await until(
        lambda: resources.condition(resources.status(name), "MetricsAvailable"),
        "MetricsAvailable",
    )
    await until(
        lambda: resources.condition(resources.status(name), "MetricsAvailable")["status"] == "True",
        f"MetricsAvailable True (was {metrics})",
    )

    await queue_jobs(redis, name, 2)

    await until(lambda: replicas(resources, name) == 2, "scaled to 2")
    # the jobs are queued one by one: a tick between them scales 0 -> 1, then 1 -> 2
    ups = await until(
        lambda: [e for e in events(resources, name, "ScaledUp") if "-> 2" in e.message],
        "a ScaledUp event to 2",
    )
    assert re.search(r"\b[01] -> 2\b", ups[0].message) and "REQUEST_COUNT" in ups[0].message
    await until(
        lambda: resources.status(name).get("workers", {}).get("desired") == 2, "status desired 2"
    )

    pods = await until(
        lambda: len(pods := worker_pods(resources, name)) == 2 and pods, "the ReplicaSet's pods"
    )
    busy, idle = (p.metadata.name for p in pods)
    # The readiness gate the scaler holds: a pod is put in service (what makes it Ready)
    # once its worker has polled the gateway, not before.
    await asyncio.sleep(1.0)  # several ticks (every 0.2 s)
    assert serving_of(resources, busy) is None and serving_of(resources, idle) is None
    store = JobStore(redis)
    for pod in (busy, idle):
        await store.heartbeat(name, pod)
        await until(lambda pod=pod: serving_of(resources, pod) == "True", f"{pod} in service")
    taken, _ = await store.take(name, busy, 1, 600_000)
    await store.heartbeat(name, busy)
    await until(lambda: cost_of(resources, busy) == BUSY_COST, "the busy pod marked")
    assert evictable(resources, busy) == "false", "the autoscaler may not evict a busy pod"
    assert cost_of(resources, idle) in (None, "0")
    await until(lambda: evictable(resources, idle) == "true", "the idle pod evictable")
    assert replicas(resources, name) == 2  # one running, one queued: still two wanted

    await store.purge(name)
    assert await store.finish(name, busy, taken[0].id, output=b"1", error=None)

    # Unmarked at the next tick; with idleTimeout 1 the pod may be gone a second later
    # (on a loaded machine before this poll sees it): either shows the mark was dropped.
    await until(lambda: cost_of(resources, busy) in ("0", GONE), "the idle pod unmarked")
    # Each worker goes once idle for idleTimeout (1 s, which also bounds the stabilisation
    # window): the one that never held a job may go first.
    await until(lambda: replicas(resources, name) == 0, "back to 0", timeout=40)
    downs = await until(lambda: events(resources, name, "ScaledDown"), "ScaledDown")
    assert any(d.message.endswith("-> 0") for d in downs), [d.message for d in downs]


async def test_the_loop_holds_the_count_when_metrics_cannot_be_read(
    resources: Resources, redis: Redis, metrics_gateway: MetricsGateway
) -> None:
    name = "ep-blind"
    resources.template("blind-tpl")
    resources.endpoint(name, templateId="blind-tpl", workersMin=0, workersMax=4, idleTimeout=0)
    await resources.eventually(lambda: Registry(redis).get_endpoint(name), "registered")
    await until(lambda: replicas(resources, name) == 0, "the Deployment at 0")
    resources.apps.patch_namespaced_deployment_scale(
        f"{name}-workers", resources.namespace, {"spec": {"replicas": 2}}
    )
    await queue_jobs(redis, name, 3)

    unavailable = await until(
        lambda: (
            (c := resources.condition(resources.status(name), "MetricsAvailable"))
            and c["status"] == "False"
            and c
        ),
        "MetricsAvailable False",
    )
    assert unavailable["reason"] == "GatewayUnreachable"
    assert "held" in unavailable["message"]
    await until(lambda: events(resources, name, "MetricsUnavailable"), "a Warning event")
    await asyncio.sleep(
        1.5
    )  # several ticks (every 0.2 s): neither up for the queue nor down to zero
    assert replicas(resources, name) == 2

    # The same situation with metrics: nobody works, idleTimeout is 0, so it scales at once.
    await JobStore(redis).purge(name)
    await metrics_gateway.start()
    await until(lambda: replicas(resources, name) == 0, "scaled to 0 with metrics")
    await until(
        lambda: resources.condition(resources.status(name), "MetricsAvailable")["status"] == "True",
        "MetricsAvailable True",
    )


async def test_an_endpoint_annotated_scaler_external_is_left_to_its_own_scaler(
    resources: Resources, redis: Redis, metrics_gateway: MetricsGateway
) -> None:
    name = "ep-keda"
    resources.template("keda-tpl")
    resources.endpoint(
        name, annotations={"lockgate.dev/scaler": "external"}, templateId="keda-tpl",
        workersMin=0, workersMax=4, idleTimeout=0, scalerType="REQUEST_COUNT", scalerValue=1,
    )  # fmt: skip
    entry = await resources.eventually(lambda: Registry(redis).get_endpoint(name), "registered")
    assert entry.scaler == "external"
    await until(lambda: replicas(resources, name) == 0, "the Deployment at 0")
    await metrics_gateway.start()
    # Another scaler (KEDA, through an HPA) sets 2 workers; 3 jobs wait.
    resources.apps.patch_namespaced_deployment_scale(
        f"{name}-workers", resources.namespace, {"spec": {"replicas": 2}}
    )
    await queue_jobs(redis, name, 3)
    await until(
        lambda: metrics_condition(resources, name).get("status") == "True",
        "MetricsAvailable True: the status is still reported",
    )
    pods = await until(
        lambda: len(pods := worker_pods(resources, name)) == 2 and pods, "the ReplicaSet's pods"
    )
    busy = pods[0].metadata.name
    store = JobStore(redis)
    taken, _ = await store.take(name, busy, 1, 600_000)
    await store.heartbeat(name, busy)
    await until(lambda: cost_of(resources, busy) == BUSY_COST, "the busy pod still marked")
    await asyncio.sleep(1.5)  # several ticks: REQUEST_COUNT would want 3 workers
    assert replicas(resources, name) == 2

    await store.purge(name)
    assert await store.finish(name, busy, taken[0].id, output=b"1", error=None)
    await asyncio.sleep(1.5)  # idleTimeout 0 and nothing to do: it would scale to 0
    assert replicas(resources, name) == 2
    assert not events(resources, name, "ScaledUp") and not events(resources, name, "ScaledDown")

    # Without the annotation the built-in scaler takes the count back: kopf sees the change
    # as an update of the Endpoint (its last handled configuration follows it).
    assert handled_annotations(resources, name) == {"lockgate.dev/scaler": "external"}
    resources.patch("endpoints", name, {"metadata": {"annotations": {"lockgate.dev/scaler": None}}})
    await until(lambda: handled_annotations(resources, name) == {}, "kopf handled the update")
    await until(lambda: replicas(resources, name) == 0, "scaled to 0 by the built-in scaler")
    assert "scaler" not in (await Registry(redis).get_endpoint(name)).stored()


def handled_annotations(resources: Resources, name: str) -> dict:
    """The annotations in the configuration kopf last handled for an Endpoint."""
    annotations = resources.get("endpoints", name)["metadata"]["annotations"]
    handled = json.loads(annotations["operator.lockgate.dev/last-handled-configuration"])
    return handled.get("metadata", {}).get("annotations", {})


async def test_a_pod_being_deleted_gets_no_new_job_from_the_next_tick(
    resources: Resources, redis: Redis, metrics_gateway: MetricsGateway
) -> None:
    """What a preStop hook would do, without one (worker images are arbitrary): the scaler
    sees the pod's deletionTimestamp (a drain, an eviction, `kubectl delete`) and the
    gateway hands its worker no new job, while its job in hand may finish."""
    name = "ep-going"
    resources.template("going-tpl")
    resources.endpoint(name, templateId="going-tpl", workersMin=1, workersMax=1, idleTimeout=60)
    await resources.eventually(lambda: Registry(redis).get_endpoint(name), "registered")
    await metrics_gateway.start()
    [pod] = await until(lambda: worker_pods(resources, name), "the worker pod")
    pod_name = pod.metadata.name
    store = JobStore(redis)
    await store.heartbeat(name, pod_name)
    await until(lambda: serving_of(resources, pod_name) == "True", "the pod in service")
    hold = {"metadata": {"finalizers": ["lockgate.dev/test-hold"]}}  # keeps it Terminating
    resources.core.patch_namespaced_pod(pod_name, resources.namespace, hold)
    try:
        resources.core.delete_namespaced_pod(pod_name, resources.namespace)
        stopping = keys.prefix(name) + "stopping"
        await eventually(lambda: redis.zscore(stopping, pod_name), "the pod marked stopping")
        await queue_jobs(redis, name, 1)
        jobs, waiting = await store.take(name, pod_name, 1, 600_000)
        assert (jobs, waiting) == ([], -1), "STOPPING: the gateway holds the pod's poll empty"
        assert (await store.snapshot(name)).in_queue == 1, "the job waits for another worker"
    finally:
        release = {"metadata": {"finalizers": None}}
        resources.core.patch_namespaced_pod(pod_name, resources.namespace, release)
