"""Worker states on a real node (kubelet + containerd): a Template whose image does not exist
makes the worker pod fail to pull (ErrImagePull / ImagePullBackOff, as the kubelet writes
it); `/health` counts it `unhealthy` and the Endpoint's `WorkersHealthy` condition names the
image and what to do (issue 14, item 4)."""

from __future__ import annotations

import pytest

from node_release import USER_NAMESPACE, Jobs, Release, endpoint_status, wait_until

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

MISSING = "localhost/lockgate-test/no-such-image:404"


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_an_image_that_cannot_be_pulled_is_unhealthy_with_the_cause(release: Release) -> None:
    meta = {"namespace": USER_NAMESPACE}
    release.apply({
        "apiVersion": "lockgate.dev/v1alpha1", "kind": "Template",
        "metadata": {"name": "missing", **meta},
        "spec": {"image": MISSING, "containerDiskInGb": 1},
    })  # fmt: skip
    release.apply({
        "apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint",
        "metadata": {"name": "missing", **meta},
        "spec": {"templateId": "missing", "computeType": "CPU", "vcpuCount": 1,
                 "workersMin": 1, "workersMax": 1},
    })  # fmt: skip
    jobs = Jobs(release, "missing")
    health = wait_until(
        lambda: (h := jobs.health()).get("workers", {}).get("unhealthy", 0) >= 1 and h,
        "/health to count the worker unhealthy",
        timeout=180,
    )
    assert health["workers"]["idle"] == health["workers"]["running"] == 0

    def failing() -> dict:
        cond = condition(endpoint_status(release, "missing"), "WorkersHealthy")
        return cond if cond.get("status") == "False" else {}

    cond = wait_until(failing, "WorkersHealthy=False", timeout=60)
    assert cond["reason"] == "ImagePullError", cond
    assert MISSING in cond["message"] and "Check the image name" in cond["message"]
    described = release.node.kubectl(
        "-n", USER_NAMESPACE, "describe", "endpoints.lockgate.dev", "missing"
    )
    assert "ImagePullError" in described and MISSING in described
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "endpoints.lockgate.dev", "missing")
