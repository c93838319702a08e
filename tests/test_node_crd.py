"""The Endpoint CRD on the real node (tests/cluster.py): with the chart installed by helm,
the echo example is Ready once the scaler reads the gateway's `/metrics` (the phase is
Degraded otherwise), and `kubectl scale lgep/echo` runs that many worker pods, which the
Endpoint's `/scale` selects, until `spec.replicas` is unset and the scaler takes over.
"""

from __future__ import annotations

import json

import pytest

from node_release import (
    REPO,
    USER_NAMESPACE,
    Release,
    endpoint_status,
    running,
    wait_until,
    worker_pods,
    workers_stopped,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]


def kubectl(release: Release, *args: str) -> str:
    return release.node.kubectl("-n", USER_NAMESPACE, *args)


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_the_echo_endpoint_is_ready_with_its_metrics_read(release: Release) -> None:
    kubectl(release, "apply", "-f", str(REPO / "examples" / "echo"))

    def ready_with_metrics() -> dict | None:
        status = endpoint_status(release, "echo")
        seen = condition(status, "MetricsAvailable").get("status") == "True"
        return status if seen and status.get("phase") == "Ready" else None

    status = wait_until(ready_with_metrics, "echo Ready, its metrics read", timeout=90)
    assert condition(status, "Ready")["status"] == "True", status


def test_kubectl_scale_runs_that_many_workers_which_the_scale_selects(release: Release) -> None:
    kubectl(release, "scale", "lgep/echo", "--replicas=2")
    wait_until(
        lambda: len([p for p in worker_pods(release, "echo") if running(p)]) == 2,
        "two worker pods running",
        timeout=120,
    )
    path = f"/apis/lockgate.dev/v1alpha1/namespaces/{USER_NAMESPACE}/endpoints/echo/scale"
    wait_until(
        lambda: (
            json.loads(release.node.kubectl("get", "--raw", path))["status"].get("replicas") == 2
        ),
        "status.replicas 2",
    )
    scale = json.loads(release.node.kubectl("get", "--raw", path))
    assert scale["spec"]["replicas"] == 2
    selected = json.loads(
        kubectl(release, "get", "pods", "-l", scale["status"]["selector"], "-o", "json")
    )["items"]
    assert sorted(p["metadata"]["name"] for p in selected if running(p)) == sorted(
        p["metadata"]["name"] for p in worker_pods(release, "echo") if running(p)
    )


def test_unsetting_replicas_lets_the_scaler_remove_the_idle_workers(release: Release) -> None:
    kubectl(release, "patch", "lgep", "echo", "--type", "merge", "-p", '{"spec":{"replicas":null}}')
    # No job waits and idleTimeout is 5 s: the scaler takes both workers away.
    wait_until(lambda: workers_stopped(release, "echo"), "the workers stopped", timeout=120)
    assert endpoint_status(release, "echo")["phase"] == "Ready"
