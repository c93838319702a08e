"""Crash loops through the real kube-apiserver (envtest) and the real operator (issue 47
item 4): a worker pod whose container the kubelet restarted in place (CrashLoopBackOff,
written here as the kubelet would) counts one failed start per restart; at the Endpoint's
`crashLoopThreshold` the Endpoint shows phase CrashLoop with a `CrashLoop` condition naming
the exit code and last line, its registry entry holds the state for the gateway, and its
Deployment is held at its healthy pods (none). The management API's restart (the
annotation `lockgate.dev/restart-requested-at`) and a new release each clear it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest
import requests
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.models.crashloop import CrashLoop
from lockgate.store import Registry

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("metrics_served")]

EP = "ep-crashloop"
IMAGE = "registry.example.test/team/worker:crashy"
POD = "w-crashloop"


def crashed(restarts: int) -> dict[str, Any]:
    """A worker container the kubelet restarted `restarts` times, each exiting 3."""
    last = {"exitCode": 3, "reason": "Error", "finishedAt": "2026-12-06T10:00:00Z",
            "message": "loading model\nKeyError: 'MODEL_PATH'\n"}  # fmt: skip
    container = {
        "name": "worker", "image": IMAGE, "imageID": "", "ready": False,
        "restartCount": restarts, "lastState": {"terminated": last},
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
    }  # fmt: skip
    return {"phase": "Running", "containerStatuses": [container]}


def worker_pod(resources: Resources) -> None:
    labels = {
        "lockgate.dev/endpoint": EP,
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "lockgate-operator",
    }
    body = {
        "metadata": {"name": POD, "labels": labels},
        "spec": {"containers": [{"name": "worker", "image": IMAGE}]},
    }
    resources.core.create_namespaced_pod(resources.namespace, body)


def pod_status(resources: Resources, status: dict[str, Any]) -> None:
    resources.core.patch_namespaced_pod_status(POD, resources.namespace, {"status": status})


def registered_loop(redis_server: EmbeddedRedis) -> CrashLoop | None:
    async def read() -> CrashLoop | None:
        redis = Redis.from_url(redis_server.url)
        try:
            entry = await Registry(redis).get_endpoint(EP)
            return entry.crashLoop if entry is not None else None
        finally:
            await redis.aclose()

    return asyncio.run(read())


def test_crash_loop_status_hold_and_what_clears_it(
    resources: Resources, operator: RunningOperator, redis_server: EmbeddedRedis
) -> None:
    resources.template("crashloop-tpl", image=IMAGE)
    resources.endpoint(
        EP, templateId="crashloop-tpl", computeType="CPU", workersMin=1, crashLoopThreshold=2
    )
    deployment = f"{EP}-workers"
    resources.wait_until(lambda: resources.deployment(deployment), "the worker Deployment")
    worker_pod(resources)

    def phase() -> str:
        return resources.status(EP).get("phase", "")

    def replicas() -> int:
        return resources.deployment(deployment).spec.replicas

    try:
        pod_status(resources, crashed(1))  # one failed start: below the threshold
        resources.wait_until(lambda: resources.condition(resources.status(EP), "CrashLoop"),
                             "the CrashLoop condition")  # fmt: skip
        assert resources.condition(resources.status(EP), "CrashLoop")["status"] == "False"
        pod_status(resources, crashed(2))
        resources.wait_until(lambda: phase() == "CrashLoop", "phase CrashLoop")
        status = resources.status(EP)
        cond = resources.condition(status, "CrashLoop")
        assert (cond["status"], cond["reason"]) == ("True", "WorkersCrashAtStart")
        assert "exit code 3: KeyError: 'MODEL_PATH'" in cond["message"]
        assert "2 failed starts in a row" in cond["message"]
        assert resources.condition(status, "Ready")["status"] == "False"
        loop = registered_loop(redis_server)
        assert loop is not None and (loop.exitCode, loop.failedStarts) == (3, 2)
        resources.wait_until(lambda: replicas() == 0, "the Deployment held at zero")
        events = resources.core.list_namespaced_event(resources.namespace).items
        assert any(e.reason == "CrashLoop" and e.involved_object.name == EP for e in events)

        # The management API's restart: the annotation, and the operator clears the loop.
        answer = requests.post(
            f"{operator.manage_url}/v2/serverless/{EP}/workers/restart",
            headers={"Authorization": f"Bearer {operator.file_admin_key}"}, timeout=30,
        )  # fmt: skip
        assert answer.status_code == 202, answer.text
        annotations = resources.get("endpoints", EP)["metadata"]["annotations"]
        assert "lockgate.dev/restart-requested-at" in annotations
        resources.wait_until(lambda: phase() not in ("CrashLoop", ""), "the loop cleared")
        assert resources.condition(resources.status(EP), "CrashLoop")["status"] == "False"
        assert registered_loop(redis_server) is None
        resources.wait_until(lambda: replicas() == 1, "workersMin again")

        # Two more restarts in place: the loop again; a new release (the Template's image)
        # clears it.
        pod_status(resources, crashed(4))
        resources.wait_until(lambda: phase() == "CrashLoop", "phase CrashLoop again")
        resources.patch("templates", "crashloop-tpl", {"spec": {"image": IMAGE + "-fixed"}})
        resources.wait_until(lambda: phase() not in ("CrashLoop", ""), "cleared by a release")
        assert registered_loop(redis_server) is None
    finally:
        with contextlib.suppress(ApiException):
            resources.core.delete_namespaced_pod(POD, resources.namespace, grace_period_seconds=0)


def test_restart_of_an_unknown_endpoint_is_a_404_problem(operator: RunningOperator) -> None:
    answer = requests.post(
        f"{operator.manage_url}/v2/serverless/no-such-ep/workers/restart",
        headers={"Authorization": f"Bearer {operator.file_admin_key}"}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/problem+json")
