"""Warm-up on a real node (issue 47, item 3; docs/warm-up.md): the operator's registry
entry carries the Endpoint's `warmup` to the gateway, which hands the worker pod's unchanged
runpod SDK (tests/workers/runpod_trouble.py in localhost/lockgate-test/runpod-worker) the
warm-up input first; its first real job finds the file the warm-up made in its container."""

from __future__ import annotations

import pytest

from node_release import USER_NAMESPACE, Jobs, Release, endpoint_status, wait_until

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

IMAGE = "localhost/lockgate-test/runpod-worker:dev"


def test_a_worker_pods_first_job_finds_its_warmups_side_effect(release: Release) -> None:
    name = "warmed"
    meta = {"name": name, "namespace": USER_NAMESPACE}
    template = {"image": IMAGE, "command": ["python", "-u", "/app/runpod_trouble.py"]}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template",
                   "metadata": meta, "spec": template})  # fmt: skip
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                   "spec": {"templateId": name, "computeType": "CPU", "vcpuCount": 1,
                            "workersMin": 0, "workersMax": 1, "idleTimeout": 5,
                            "warmup": {"inputs": [{"touch": "/tmp/warmed"}]}}})  # fmt: skip
    wait_until(lambda: endpoint_status(release, name).get("phase") == "Ready", f"{name} Ready")
    jobs = Jobs(release, name)
    job = jobs.runsync({"input": {"exists": "/tmp/warmed"}}, wait_ms=90000)
    if job["status"] != "COMPLETED":
        job = jobs.final(job["id"], timeout=180)
    assert job["status"] == "COMPLETED", job
    assert job["output"]["exists"] is True
    assert jobs.health()["jobs"]["completed"] == 1  # the warm-up job is not counted
