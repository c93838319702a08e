"""`helm uninstall` with Endpoints left in place, on a real node (tests/cluster.py): the
chart's pre-delete hook (`lockgate uninstall-cleanup`) leaves no worker running without a
gateway and no Endpoint holding the operator's finalizer, so the namespace (or the CRDs)
can be deleted afterwards without hanging. docs/install.md, "Uninstall", is the runbook.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from node_release import REPO, Release, running, wait_until

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

NAMESPACE = "kept"  # the user's namespace, with an Endpoint that outlives the release
TEMPLATE = REPO / "examples" / "echo" / "template.yaml"
ENDPOINT = {
    "apiVersion": "lockgate.dev/v1alpha1",
    "kind": "Endpoint",
    "metadata": {"name": "kept-echo"},
    "spec": {
        "name": "Kept echo",
        "templateId": "echo",
        "computeType": "CPU",
        "vcpuCount": 1,
        "workersMin": 1,  # a worker runs whatever the queue says
        "workersMax": 1,
        "idleTimeout": 5,
        # The pod's grace period follows the execution timeout (600 s by default). Kubernetes'
        # namespace controller re-checks a namespace whose pods are still going after half the
        # longest grace period, so with the default it looks again only after 301 s.
        "executionTimeoutMs": 20_000,
    },
}


def _get(node: Any, kind: str, *args: str) -> Any:
    return json.loads(node.kubectl("-n", NAMESPACE, "get", kind, *args, "-o", "json"))


def _worker_pods(node: Any) -> list[dict[str, Any]]:
    return _get(node, "pods", "-l", "lockgate.dev/endpoint=kept-echo")["items"]


def _no_container_runs(node: Any) -> bool:
    """No worker pod is left, or each is being deleted with no container running."""
    pods = _worker_pods(node)
    return all(p["metadata"].get("deletionTimestamp") for p in pods) and not any(
        "running" in (c.get("state") or {})
        for p in pods
        for c in p.get("status", {}).get("containerStatuses") or []
    )


def _wait(check: Any, seconds: float) -> bool:
    """Whether `check()` turned true within `seconds` (polled every second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1)
    return bool(check())


def _namespace_gone(node: Any) -> bool:
    return NAMESPACE not in node.kubectl("get", "namespaces", "-o", "name")


def test_helm_uninstall_with_endpoints_left_stops_workers_and_frees_the_endpoints(node) -> None:
    release = Release(node)
    release.install("--set", "operator.peering=true")
    node.kubectl("create", "namespace", NAMESPACE)
    node.kubectl("-n", NAMESPACE, "apply", "-f", str(TEMPLATE))
    node.kubectl("-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(ENDPOINT))
    wait_until(
        lambda: any(running(p) for p in _worker_pods(node)),
        "the kept Endpoint's worker pod to run",
        180,
    )
    peerings = "app.kubernetes.io/instance=" + release.name
    written = node.kubectl("get", "clusterkopfpeerings", "-l", peerings, "-o", "name")
    assert written.strip(), "peering is on: the release wrote its ClusterKopfPeering"

    t0 = time.monotonic()
    release.uninstall()
    print(f"\nhelm uninstall --wait (with the hook): {time.monotonic() - t0:.1f} s")

    wait_until(lambda: _no_container_runs(node), "no worker container left running", 120)
    assert not _get(node, "deployments")["items"], "the worker Deployment is deleted"
    endpoint = _get(node, "endpoints.lockgate.dev", "kept-echo")
    assert not endpoint["metadata"].get("finalizers"), endpoint["metadata"]
    template = _get(node, "templates.lockgate.dev", "echo")
    assert not template["metadata"].get("finalizers"), template["metadata"]
    left = node.kubectl("get", "clusterkopfpeerings", "-l", peerings, "-o", "name")
    assert left.strip() == "", "the release's peering object is deleted"
    hook_objects = lambda: node.kubectl(  # noqa: E731
        "get", "all,sa,role,rolebinding,clusterrole,clusterrolebinding", "-A",
        "-l", "app.kubernetes.io/component=uninstall-cleanup", "-o", "name",
    ).strip()  # fmt: skip
    wait_until(lambda: not hook_objects(), "the hook's objects to go once it succeeded", 60)

    node.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    # The last worker pod goes only when the kubelet confirms it (its container is already
    # gone, above); on a loaded machine that took over 120 s once, and the namespace
    # controller then waits half the pod's grace period (ENDPOINT's executionTimeoutMs) before
    # it looks again (CI once failed at 300 s with the default 600 s grace). What this test
    # holds lockgate to is that nothing of its own (a finalizer) keeps the namespace: after
    # 60 s the pod objects the kubelet has not yet confirmed are removed without it, and the
    # namespace must then go.
    if not _wait(lambda: _namespace_gone(node), 60):
        node.kubectl("-n", NAMESPACE, "delete", "pods", "--all", "--force", "--grace-period=0",
                     "--wait=false", check=False)  # fmt: skip
    try:
        wait_until(lambda: _namespace_gone(node), f"namespace {NAMESPACE} to be deleted", 240)
    except AssertionError as err:  # say what holds it (the namespace's conditions, what is left)
        held = node.kubectl("get", "namespace", NAMESPACE, "-o", "jsonpath={.status}")
        left = node.kubectl("-n", NAMESPACE, "get", "all,secrets,endpoints.lockgate.dev,"
                            "templates.lockgate.dev", "-o", "name", check=False)  # fmt: skip
        raise AssertionError(f"{err}\nnamespace status: {held}\nleft in it: {left}") from err
