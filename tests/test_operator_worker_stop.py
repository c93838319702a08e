"""One worker stopped or restarted on Kubernetes (issue 50, item 10): the management API's
`POST /v2/serverless/{id}/workers/{workerId}/restart` and `…/stop` ask it in the job store
(the worker gets no new job at once) and the operator's scaler deletes the named pod at
its next tick: a restart's pod is replaced by the ReplicaSet, a stop's goes with one
replica fewer (the scaler grows again only because workersMin wants it). A pod that is not
one of the endpoint's workers, another endpoint's included, is a 404 and nothing is
deleted. A real kube-apiserver (envtest: pods stay Pending, no kubelet), the real operator
and management API, a real gateway for the scaler's metrics."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.kube.manifests.names import selector
from lockgate.store import JobStore, NewJob, Registry
from tests.test_operator_scaling import (
    MetricsGateway,
    events,
    metrics_gateway,
    replicas,
    until,
    worker_pods,
)

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]
__all__ = ["metrics_gateway"]  # the fixture, shared with the scaling tests


async def _post(url: str, key: str) -> tuple[int, str, dict]:
    headers = {"authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as http, http.post(url, headers=headers) as resp:
        return resp.status, resp.content_type, await resp.json(content_type=None)


async def test_one_worker_pod_restarted_then_stopped_and_a_strangers_pod_is_404(
    operator: RunningOperator,
    resources: Resources,
    redis: Redis,
    metrics_gateway: MetricsGateway,
) -> None:
    name = "ep-wstop"
    resources.template("wstop-tpl")
    resources.endpoint(name, templateId="wstop-tpl", workersMin=2, workersMax=2)
    await resources.eventually(lambda: Registry(redis).get_endpoint(name), "registered")
    pods = await until(lambda: len(p := worker_pods(resources, name)) == 2 and p, "two pods")
    await metrics_gateway.start()
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    base = f"{operator.manage_url}/v2/serverless/{name}/workers"
    store = JobStore(redis)
    first, second = (p.metadata.name for p in pods)

    # another endpoint's pod (labelled as its worker) and a name no pod has: 404, kept
    stranger = f"other-{secrets.token_hex(3)}"
    resources.core.create_namespaced_pod(resources.namespace, {
        "metadata": {"name": stranger, "labels": selector("ep-other", "worker")},
        "spec": {"containers": [{"name": "worker", "image": "example.test/echo:1"}]},
    })  # fmt: skip
    for worker in (stranger, f"{name}-no-such-pod"):
        status, kind, body = await _post(f"{base}/{worker}/stop", key)
        assert (status, kind) == (404, "application/problem+json"), body
        assert worker in body["detail"]
    assert resources.core.read_namespaced_pod(stranger, resources.namespace).metadata.name

    # restart: the pod takes no new job at once, is deleted, and a fresh one takes its place
    status, _, body = await _post(f"{base}/{first}/restart", key)
    assert status == 202, body
    assert (body["id"], body["endpointId"], body["action"]) == (first, name, "restart")
    await store.submit(name, NewJob(id="job-1", input=b"{}", ttl_ms=600_000))
    taken, _ = await store.take(name, first, 1, 600_000)
    assert taken == []  # told to stop: the queued job waits for another worker

    def replaced() -> bool:
        names = {p.metadata.name for p in worker_pods(resources, name)}
        return len(names) == 2 and first not in names and second in names

    await until(replaced, "the restarted pod deleted and a fresh one in its place")
    assert not [e for e in events(resources, name, "ScaledUp") if "1 -> 2" in e.message]

    # stop: the pod is deleted with one replica fewer; workersMin 2 has the scaler grow
    # again (a ScaledUp 1 -> 2 event), where the restart above never went below 2
    status, _, body = await _post(f"{base}/{second}/stop", key)
    assert (status, body["action"]) == (202, "stop"), body
    await until(
        lambda: second not in {p.metadata.name for p in worker_pods(resources, name)},
        "the stopped pod deleted",
    )
    status, _, body = await _post(f"{base}/{second}/stop", key)
    assert status == 404, body  # stopping already, or gone: a second click does nothing
    await until(
        lambda: [e for e in events(resources, name, "ScaledUp") if "1 -> 2" in e.message],
        "the replica count lowered by the stop, then raised by workersMin",
    )
    await until(lambda: replicas(resources, name) == 2, "two workers again")
    assert resources.core.read_namespaced_pod(stranger, resources.namespace).metadata.name
