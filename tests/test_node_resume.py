"""`strict-resume` affinity on a real node (issue 47): the example LB worker
(examples/loadbalancer, built by hack/images.sh) behind the gateway Service. A pod the
scale-down parks keeps running out of service (Kubernetes cannot pause a container); a
`strict-resume` request brings the same pod (same uid, no restart) back into routing and
is answered by it; past its resume window the pod is deleted and the same request is 404
`affinity_worker_gone`. Small on purpose: one endpoint, one pod, short windows."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from node_release import (
    USER_NAMESPACE,
    Release,
    apply_lb_endpoint,
    endpoint_status,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

NAME = "resume"
PARKED_UNTIL = "lockgate.dev/parked-until"


def pod(release: Release, name: str) -> dict[str, Any] | None:
    return next((p for p in worker_pods(release, NAME) if p["metadata"]["name"] == name), None)


def parked(release: Release, name: str) -> dict[str, Any] | None:
    found = pod(release, name)
    return found if found and PARKED_UNTIL in (found["metadata"].get("annotations") or {}) else None


def patch_endpoint(release: Release, **spec: Any) -> None:
    release.node.kubectl("-n", USER_NAMESPACE, "patch", "endpoints.lockgate.dev", NAME,
                         "--type", "merge", "-p", json.dumps({"spec": spec}))  # fmt: skip


def test_a_parked_pod_is_resumed_by_strict_resume_and_gone_after_its_window(
    release: Release,
) -> None:
    try:  # Ready within 30 s, or (a node just up, its operator starting) a while later
        apply_lb_endpoint(release, NAME, load_seconds=0, idleTimeout=2, lbResumeWindowS=120)
    except AssertionError:
        print(endpoint_status(release, NAME))
        print(release.describe())
        wait_until(lambda: endpoint_status(release, NAME).get("phase") == "Ready", "Ready", 120)
    http = requests.Session()
    http.headers["authorization"] = release.client_key()
    url = f"{release.gateway_url}/lb/{NAME}/echo/x"

    def get(affinity: str | None = None) -> requests.Response:
        headers = {"X-Runpod-Worker-Id": affinity} if affinity else {}
        return http.get(url, headers=headers, timeout=150)

    first = get()
    assert first.status_code == 200, release.describe()
    worker = first.headers["X-Runpod-Worker-Id"]
    kept = wait_until(lambda: parked(release, worker), "the idle pod parked", 60)
    uid = kept["metadata"]["uid"]
    health = http.get(f"{release.gateway_url}/v2/{NAME}/health", timeout=30).json()
    assert sum(health["workers"].values()) == 0, health  # scaled to zero: counted nowhere

    gone_for_strict = get(f"strict {worker}")
    assert gone_for_strict.status_code == 404, gone_for_strict.text
    assert gone_for_strict.json()["reason"] == "affinity_worker_gone"

    resumed = get(f"strict-resume {worker}")
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers["X-Runpod-Worker-Id"] == worker
    assert resumed.json()["worker"] == worker  # the pod's own RUNPOD_POD_ID
    back = pod(release, worker)
    assert back is not None and back["metadata"]["uid"] == uid  # the same pod
    statuses = back["status"]["containerStatuses"]
    assert next(c for c in statuses if c["name"] == "worker")["restartCount"] == 0  # kept running

    patch_endpoint(release, lbResumeWindowS=1)  # parked again, then removed after 1 s
    wait_until(lambda: pod(release, worker) is None, "the parked pod removed", 90)
    after = get(f"strict-resume {worker}")
    assert after.status_code == 404, after.text
    assert after.json()["reason"] == "affinity_worker_gone"
