"""`refresh_worker` on Kubernetes (issue 13, item 5): a worker that posts its result with
`stopPod: true` (the runpod SDK's refresh_worker; lockgate's runtime sends it too) gets no
further job, and the operator's scaler deletes its pod so that the ReplicaSet starts a
fresh one. A real kube-apiserver (envtest: pods stay Pending, no kubelet), the real
operator and a real gateway; the worker's calls are made over HTTP as the SDK makes them."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.store import JobStore, NewJob, Registry
from tests.test_operator_scaling import MetricsGateway, metrics_gateway, until, worker_pods

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]
__all__ = ["metrics_gateway"]  # the fixture, shared with the scaling tests


async def test_a_pod_whose_worker_asks_for_refresh_is_replaced_by_a_fresh_one(
    resources: Resources, redis: Redis, metrics_gateway: MetricsGateway
) -> None:
    name = "ep-refresh"
    resources.template("refresh-tpl")
    resources.endpoint(name, templateId="refresh-tpl", workersMin=1, workersMax=1)
    await resources.eventually(lambda: Registry(redis).get_endpoint(name), "registered")
    [pod] = await until(lambda: worker_pods(resources, name), "the worker pod")
    await metrics_gateway.start()
    worker_key = f"lgw_{secrets.token_hex(8)}"
    await Registry(redis).put_key(
        worker_key, {"name": "w", "scopes": ["workers"], "endpoints": [name]}
    )
    store = JobStore(redis)
    await store.submit(name, NewJob(id="job-1", input=b"{}", ttl_ms=600_000))
    [job], _ = await store.take(name, pod.metadata.name, 1, 600_000)

    url = f"http://127.0.0.1:{metrics_gateway.settings.port}/v2/{name}"
    async with aiohttp.ClientSession(headers={"authorization": worker_key}) as http:
        done_url = f"{url}/job-done/{pod.metadata.name}/{job.id}"
        async with http.post(done_url, json={"output": 1, "stopPod": True}) as resp:
            assert (resp.status, await resp.json()) == (200, {"accepted": True})

    def replaced() -> bool:
        names = [p.metadata.name for p in worker_pods(resources, name)]
        return bool(names) and pod.metadata.name not in names

    await until(replaced, "the pod deleted and a fresh one in its place")
    assert (await store.get(name, "job-1")).status == "COMPLETED"
