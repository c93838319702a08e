"""Parked load-balancing pods under the real operator, a real kube-apiserver and its
ReplicaSet controller (envtest) and a real gateway serving `/metrics`: a scale-down parks
its routed pod (kept by the replica count, annotated, out of routing, resumable in
Redis), a `strict-resume` request's ask (`LbWorkers.ask_resume`, what the gateway calls)
puts it back in service and in routing, and past its window it is removed. envtest runs no
kubelet: the test gives the pod its IP and a running worker, as the kubelet would. Over
HTTP, with real worker processes: tests/test_lb_resume.py (dev mode)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from lockgate.kube.deployment_pool import DELETION_COST, PARKED_COST
from lockgate.kube.lb_pods import PARKED_UNTIL
from lockgate.kube.manifests.names import SERVING_CONDITION
from lockgate.store import Registry
from lockgate.store.lb_workers import LbWorkers

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator", "metrics_served")]

LB = {"type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1, "requestTimeoutS": 30}
EP = "rs-park"


def worker_pods(resources: Resources) -> list[k8s.V1Pod]:
    selector = f"lockgate.dev/endpoint={EP},app.kubernetes.io/component=worker"
    pods = resources.core.list_namespaced_pod(resources.namespace, label_selector=selector).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def run_worker(resources: Resources, name: str) -> None:
    """What the kubelet would write: the pod's IP and its worker container running."""
    # Started now: a start long ago would be past the endpoint's startupTimeout, and the
    # operator would replace the pod (no gateway polls its health here).
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = {"running": {"startedAt": now}}
    worker = {"name": "worker", "image": "example.test/echo:1", "imageID": "", "ready": False,
              "restartCount": 0, "state": started}  # fmt: skip
    status = {"phase": "Running", "podIP": "10.1.2.9", "podIPs": [{"ip": "10.1.2.9"}],
              "containerStatuses": [worker]}  # fmt: skip
    resources.core.patch_namespaced_pod_status(name, resources.namespace, {"status": status})


def pod_of(resources: Resources, name: str) -> k8s.V1Pod | None:
    try:
        return resources.core.read_namespaced_pod(name, resources.namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def serving(pod: k8s.V1Pod) -> str | None:
    return next(
        (c.status for c in pod.status.conditions or [] if c.type == SERVING_CONDITION), None
    )


def replicas(resources: Resources) -> int:
    return resources.deployment(f"{EP}-workers").spec.replicas


async def test_a_parked_pod_is_resumed_when_asked_and_removed_after_its_window(
    resources: Resources, redis: Redis
) -> None:
    resources.template("rs-tpl", ports=["8000/http"])
    resources.endpoint(
        EP, templateId="rs-tpl", workersMin=1, workersMax=1, idleTimeout=1, lbResumeWindowS=300,
        **LB,
    )  # fmt: skip
    [pod] = resources.wait_until(lambda: worker_pods(resources), "a worker pod")
    name = pod.metadata.name
    run_worker(resources, name)
    lb = LbWorkers(redis)
    await resources.eventually(lambda: lb.workers(EP), "the pod routed")

    resources.patch("endpoints", EP, {"spec": {"workersMin": 0}})  # idle: scaled down

    async def parked() -> bool:
        roster = await lb.roster(EP)
        return name in roster.parked and name not in roster.workers

    await resources.eventually(parked, "the pod parked")
    kept = pod_of(resources, name)
    assert kept is not None  # still there, out of service, cheapest to remove
    assert kept.metadata.annotations[PARKED_UNTIL]
    assert kept.metadata.annotations[DELETION_COST] == PARKED_COST
    assert serving(kept) == "False"
    assert replicas(resources) == 1  # kept by the count: 0 workers + 1 parked

    resources.patch("endpoints", EP, {"spec": {"idleTimeout": 3600}})  # no re-park meanwhile
    registry = Registry(redis)

    async def idle_long() -> bool:
        entry = await registry.get_endpoint(EP)
        return entry is not None and entry.settings()["idleTimeout"] == 3600

    await resources.eventually(idle_long, "the new idleTimeout in the registry")
    await lb.ask_resume(EP, name)  # a strict-resume request's ask

    async def routed() -> bool:
        record = (await lb.workers(EP)).get(name)
        return (
            record is not None and not record.draining and name not in (await lb.roster(EP)).parked
        )

    await resources.eventually(routed, "the pod routed again")
    back = resources.wait_until(
        lambda: (p := pod_of(resources, name)) and serving(p) == "True" and p, "in service"
    )
    assert PARKED_UNTIL not in (back.metadata.annotations or {})
    assert replicas(resources) == 1

    # parked again with a 1 s window: then removed for good
    resources.patch("endpoints", EP, {"spec": {"idleTimeout": 1, "lbResumeWindowS": 1}})
    resources.wait_until(lambda: pod_of(resources, name) is None, "the pod removed", timeout=60)
    roster = await lb.roster(EP)
    assert name not in roster.parked and name not in roster.workers
    resources.wait_until(lambda: replicas(resources) == 0, "no replica kept")
