"""No endpoint's reaction waits on another's API round trips (issue 32): the scaler decides
each endpoint in a task of its own, so a job at an endpoint at zero gets its Deployment
scaled even while another endpoint's status refresh hangs.

A real kube-apiserver (envtest), Redis and gateway (`/metrics`); the `Cluster` is the real
one, except that reading one Endpoint never returns (an API call that hangs, or a first
sighting's refresh of many round trips on a loaded API server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from kubernetes import client as k8s
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube.cluster import Cluster, Obj
from lockgate.kube.manifests.names import Owner
from lockgate.kube.reconcile import Context
from lockgate.kube.registry_record import registry_entry
from lockgate.kube.scaler import ENDPOINT_LABEL, ScalingLoop
from lockgate.kube.settings import OperatorSettings
from lockgate.models.endpoint import EndpointSpec
from lockgate.store import JobStore, NewJob, Registry
from tests.conftest import eventually, make_settings, start_gateway

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]

NAMESPACE = "lockgate-test"  # kube_fixtures creates it
STALLED, WAITING = "ep-stalled", "ep-waiting"


class StalledCluster(Cluster):
    """The real cluster; reading the Endpoint `stalled` never returns."""

    def __init__(self, api: k8s.ApiClient, stalled: str) -> None:
        super().__init__(api)
        self.stalled = stalled
        self.stalls = 0

    async def get_endpoint(self, namespace: str, name: str) -> Obj | None:
        if name == self.stalled:
            self.stalls += 1
            await asyncio.Event().wait()  # until cancelled
        return await super().get_endpoint(namespace, name)


def worker_deployment(endpoint: str) -> dict:
    labels = {
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "lockgate-operator",
        ENDPOINT_LABEL: endpoint,
    }
    container = {"name": "worker", "image": "example.test/echo:1"}
    return {
        "metadata": {"name": f"{endpoint}-workers", "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {ENDPOINT_LABEL: endpoint}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


@pytest.fixture
async def scaling(
    kube: k8s.ApiClient, redis: Redis, redis_server: EmbeddedRedis
) -> AsyncIterator[tuple[ScalingLoop, StalledCluster]]:
    apps = k8s.AppsV1Api(kube)
    port = free_port()
    gateway = await start_gateway(make_settings(redis_server.url, port))
    registry = Registry(redis)
    for n, endpoint in enumerate((STALLED, WAITING)):  # the stalled one is listed first
        apps.create_namespaced_deployment(NAMESPACE, worker_deployment(endpoint))
        spec = EndpointSpec(workersMin=0, workersMax=2, scalerType="QUEUE_DELAY", scalerValue=1)
        owner = Owner(endpoint, NAMESPACE, f"uid-{n}")
        entry = registry_entry(
            owner, spec, key_digest=f"digest-{n}", job_api_url="http://jobs.example"
        )
        await registry.put_endpoint(endpoint, entry)
    settings = OperatorSettings(
        redis_url=redis_server.url, namespaces=[NAMESPACE], scale_interval_s=0.2,
        metrics_url=f"http://127.0.0.1:{port}/metrics",
    )  # fmt: skip
    cluster = StalledCluster(kube, STALLED)
    ctx = Context.open(settings, cluster)
    async with aiohttp.ClientSession() as session:
        loop = ScalingLoop(ctx, session)
        task = asyncio.create_task(loop.run())
        try:
            yield loop, cluster
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await ctx.close()
            await gateway.cleanup()
            for endpoint in (STALLED, WAITING):
                apps.delete_namespaced_deployment(f"{endpoint}-workers", NAMESPACE)
                await registry.delete_endpoint(endpoint)


async def test_a_job_scales_its_endpoint_while_another_endpoints_refresh_hangs(
    scaling: tuple[ScalingLoop, StalledCluster], redis: Redis, kube: k8s.ApiClient
) -> None:
    loop, cluster = scaling

    async def stalled() -> bool:
        return cluster.stalls > 0

    await eventually(stalled, "the stalled endpoint's refresh to hang")
    await JobStore(redis).submit(WAITING, NewJob(id="job-1", input=b"{}", ttl_ms=600_000))
    apps = k8s.AppsV1Api(kube)

    def replicas() -> int:
        return apps.read_namespaced_deployment(f"{WAITING}-workers", NAMESPACE).spec.replicas

    async def scaled() -> bool:
        return await asyncio.to_thread(replicas) >= 1

    await eventually(scaled, "the waiting endpoint scaled up", 30)
    assert await asyncio.to_thread(replicas) >= 1
    assert STALLED in loop.reporting, "the stalled endpoint's status refresh should still hang"
    assert not loop.reporting[STALLED].done()
    assert WAITING not in loop.busy or not loop.busy[WAITING].done()
