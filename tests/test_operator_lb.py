"""A load-balancing Endpoint under the real operator and a real kube-apiserver (envtest):
the worker Deployment it builds, the NetworkPolicy beside it, and the scaler writing the
worker pods to Redis for the gateways. envtest runs no kubelet: the test gives a pod its
IP (as the kubelet would, through the status subresource) and deletes it (unscheduled, it
goes at once; on a node it would stay, terminating, and be drained: tests/test_kube_lb.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from kubernetes import client as k8s
from redis.asyncio import Redis

from lockgate.store.lb_workers import LbWorker, LbWorkers

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]

LB = {"type": "LB", "scalerType": "REQUEST_COUNT", "requestTimeoutS": 60}


def worker_pods(resources: Resources, endpoint: str) -> list[k8s.V1Pod]:
    selector = f"lockgate.dev/endpoint={endpoint},app.kubernetes.io/component=worker"
    return resources.core.list_namespaced_pod(resources.namespace, label_selector=selector).items


async def test_an_lb_endpoint_gets_an_http_worker_deployment_and_a_network_policy(
    resources: Resources, kube: k8s.ApiClient, operator: RunningOperator
) -> None:
    resources.template("lb-tpl", ports=["8000/http"])
    resources.endpoint("lb-build", templateId="lb-tpl", workersMin=0, **LB)
    deployment = resources.wait_until(lambda: resources.deployment("lb-build-workers"), "it")
    pod = deployment.spec.template.spec
    container = pod.containers[0]
    env = {e.name: e.value for e in container.env}
    assert (env["PORT"], env["PORT_HEALTH"], env["HEALTH_CHECK_PATH"]) == ("8000", "8000", "/ping")
    assert container.readiness_probe.http_get.path == "/ping"
    assert container.readiness_probe.http_get.port == 8000
    assert pod.termination_grace_period_seconds == 60 + 15
    networking = k8s.NetworkingV1Api(kube)

    def network_policy() -> k8s.V1NetworkPolicy | None:
        found = networking.list_namespaced_network_policy(resources.namespace).items
        return next((p for p in found if p.metadata.name == "lb-build-lb-workers"), None)

    policy = resources.wait_until(network_policy, "the NetworkPolicy")
    [rule] = policy.spec.ingress
    assert [(p.port, p.protocol) for p in rule.ports] == [(8000, "TCP")]
    assert rule._from[0].pod_selector.match_labels == operator.settings.lb_gateway_labels
    assert policy.spec.pod_selector.match_labels["lockgate.dev/endpoint"] == "lb-build"


async def test_the_scaler_routes_to_a_pod_once_its_worker_runs_and_stops_when_deleted(
    resources: Resources, redis: Redis
) -> None:
    resources.template("lb-tpl2", ports=["8000/http"])
    resources.endpoint("lb-pods", templateId="lb-tpl2", workersMin=1, workersMax=1, **LB)
    [pod] = resources.wait_until(lambda: worker_pods(resources, "lb-pods"), "a worker pod")
    name = pod.metadata.name
    lb = LbWorkers(redis)
    assert await lb.workers("lb-pods") == {}  # no IP yet: nothing to route to
    # Started now: a start long ago would be past the endpoint's startupTimeout (600 s), and
    # the operator would mark the worker and replace its pod (no gateway polls it here).
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = {"running": {"startedAt": now}}
    worker = {"name": "worker", "image": "example.test/echo:1", "imageID": "", "ready": False,
              "restartCount": 0, "state": started}  # fmt: skip
    ip = {"phase": "Running", "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}]}
    resources.core.patch_namespaced_pod_status(name, resources.namespace, {"status": ip})
    await asyncio.sleep(1)  # a scaler tick or more: an IP alone (image still pulling) is not routed
    assert await lb.workers("lb-pods") == {}
    status = {"status": {**ip, "containerStatuses": [worker]}}
    resources.core.patch_namespaced_pod_status(name, resources.namespace, status)
    routed = await resources.eventually(lambda: lb.workers("lb-pods"), "the pod in Redis")
    assert routed == {name: LbWorker("10.1.2.3:8000", "10.1.2.3:8000", "/ping")}

    resources.core.delete_namespaced_pod(name, resources.namespace)

    async def not_routed() -> bool:
        found = await lb.workers("lb-pods")
        return name not in found or found[name].draining

    await resources.eventually(not_routed, "the deleted pod out of routing")
