"""Worker identity on a real node (issue 13, item 21): every worker pod of an endpoint
holds the same worker key, yet another holder of that key cannot act as a live worker.

An unchanged runpod-SDK worker pod (tests/workers/runpod_echo.py in
localhost/lockgate-test/runpod-worker) runs jobs through the gateway Service; the test,
holding the endpoint's worker key (read from its Secret) but calling from the node, not
from the pod, is refused the pod's worker id, while the pod goes on working. What the
gateway sees as the caller's address is the kernel's and kube-proxy's, not ours.
"""

from __future__ import annotations

import base64
import json

import pytest
import requests

from node_release import USER_NAMESPACE, Jobs, Release, endpoint_status, wait_until, worker_pods

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

IMAGE = "localhost/lockgate-test/runpod-worker:dev"
NAME = "ident"


@pytest.fixture(scope="module")
def jobs(release: Release) -> Jobs:
    meta = {"name": NAME, "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template",
                   "metadata": meta, "spec": {"image": IMAGE}})  # fmt: skip
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                   "spec": {"templateId": NAME, "computeType": "CPU", "vcpuCount": 1,
                            "workersMin": 1, "workersMax": 1, "idleTimeout": 60}})  # fmt: skip
    wait_until(lambda: endpoint_status(release, NAME).get("phase") == "Ready", "Endpoint Ready")
    return Jobs(release, NAME)


def _echo(jobs: Jobs, n: int) -> None:
    job = jobs.runsync({"input": {"n": n}}, wait_ms=90000)
    if job["status"] != "COMPLETED":
        job = jobs.final(job["id"], timeout=180)
    assert job["status"] == "COMPLETED" and job["output"] == {"echo": {"n": n}}, job


def _worker_key(release: Release) -> str:
    secret = json.loads(
        release.node.kubectl(
            "-n", USER_NAMESPACE, "get", "secret", f"{NAME}-worker-key", "-o", "json"
        )
    )
    return base64.b64decode(secret["data"]["RUNPOD_AI_API_KEY"]).decode()


def test_the_worker_key_cannot_act_as_a_live_worker_pod_from_elsewhere(
    release: Release, jobs: Jobs
) -> None:
    _echo(jobs, 1)  # the pod has called the gateway: its id is bound to its address
    [pod] = worker_pods(release, NAME)
    worker_id = pod["metadata"]["name"]
    auth = {"authorization": _worker_key(release)}
    worker_api = release.service_url(f"{release.name}-gateway", "worker")
    base = f"{worker_api}/v2/{NAME}"

    # A ping as the pod not listing its jobs would requeue them; a job-done would forge.
    as_pod = requests.get(f"{base}/ping/{worker_id}?job_id=", headers=auth, timeout=10)
    assert as_pod.status_code == 403, as_pod.text
    assert "bound to another address" in as_pod.json()["error"]
    forged = requests.post(
        f"{base}/job-done/{worker_id}/some-job?isStream=false",
        headers=auth, json={"output": "forged"}, timeout=10,
    )  # fmt: skip
    assert forged.status_code == 403, forged.text
    # The key itself is good: an id first seen from here is this caller's.
    own = requests.get(f"{base}/ping/node-caller", headers=auth, timeout=10)
    assert own.status_code == 200, own.text

    _echo(jobs, 2)  # the pod is unaffected
    assert [p["metadata"]["name"] for p in worker_pods(release, NAME)] == [worker_id]
