"""Workers that must go, on a real node (issue 47, items 1 and 2; docs/worker-health.md),
with the official runpod SDK worker (tests/workers/runpod_trouble.py in the runpod-worker
image):

- a worker that sleeps forever at import, on an endpoint whose `startupTimeout` is 20 s, is
  marked unhealthy with its last log line and its pod deleted: the Endpoint's
  `WorkersHealthy` says why, and a new pod (a new worker id) takes its place;
- a worker whose fitness check fails reports it (the SDK's `status=unhealthy` ping) and is
  marked, its pod deleted and replaced; a job submitted meanwhile completes on the healthy
  worker that replaced it. Only the first pod is unfit: its start command creates a marker
  on a volume every pod of the endpoint mounts (a hostPath PersistentVolume the test makes),
  and a pod that finds the marker there passes.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster
from node_release import (
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    running,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

IMAGE = "localhost/lockgate-test/runpod-worker:dev"  # imported: never pulled
TROUBLE = ["python", "-u", "/app/runpod_trouble.py"]
# executionTimeoutMs at its least: a pod's grace period is 20 s, not 10 min (a worker asleep
# at import is PID 1 and ignores SIGTERM), so the endpoints' pods go fast at the end.
CPU = {"computeType": "CPU", "vcpuCount": 1, "workersMin": 1, "workersMax": 1,
       "executionTimeoutMs": 5000}  # fmt: skip
# The SDK's automatic checks (memory, disk, a TCP connection to 8.8.8.8) are not what is
# tested here, and no traffic may leave the machine: only the custom check runs.
NO_AUTO_CHECKS = {"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true"}
UNFIT = "no GPU here"
SHARED = "h47-shared"  # the PersistentVolumeClaim every pod of the fitness endpoint mounts
FIRST_UNFIT = (
    # The first pod to start creates the marker and fails its fitness check; any later one
    # (a new pod, or this pod's container restarted by the kubelet) finds it and passes.
    f"if mkdir /runpod-volume/unfit-once 2>/dev/null; then export TROUBLE_FITNESS='{UNFIT}'; "
    "fi; exec python -u /app/runpod_trouble.py"
)


def apply(release: Release, name: str, template: dict[str, Any], **endpoint: Any) -> None:
    meta = {"name": name, "namespace": USER_NAMESPACE}
    spec = {"image": IMAGE, **template}
    for kind, body in (("Template", spec), ("Endpoint", {"templateId": name, **endpoint})):
        release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": kind, "metadata": meta,
                       "spec": body})  # fmt: skip


def workers_healthy(release: Release, name: str) -> dict[str, Any]:
    conditions = endpoint_status(release, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "WorkersHealthy"), {})


def events(release: Release, name: str, reason: str) -> list[dict[str, Any]]:
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "events", "-o", "json",
        "--field-selector", f"involvedObject.name={name},reason={reason}",
    )  # fmt: skip
    return json.loads(out)["items"]


def first_running_pod(release: Release, name: str) -> str:
    pods = wait_until(
        lambda: [p for p in worker_pods(release, name) if running(p)], f"a {name} pod", 120
    )
    return pods[0]["metadata"]["name"]


def gone(release: Release, name: str, pod: str) -> bool:
    """The pod is being deleted, or no longer there."""
    return all(p["metadata"]["name"] != pod for p in worker_pods(release, name))


@pytest.fixture(scope="module")
def shared_volume(node: Cluster, release: Release) -> Iterator[Path]:
    """A claim bound to a node folder any uid may write (ReadWriteMany), for every pod of
    the fitness endpoint (`networkVolumeId`); removed after the module."""
    assert node.dir is not None
    folder = node.dir / SHARED
    folder.mkdir()
    folder.chmod(0o777)
    pv = f"{SHARED}-{secrets.token_hex(3)}"
    release.apply({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                 "claimRef": {"namespace": USER_NAMESPACE, "name": SHARED},
                 "hostPath": {"path": str(folder), "type": "Directory"}},
    })  # fmt: skip
    release.apply({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": SHARED, "namespace": USER_NAMESPACE},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    yield folder
    node.kubectl("delete", "pv", pv, "--ignore-not-found", "--wait=false", check=False)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_worker_asleep_at_import_is_replaced_after_its_startup_timeout(
    release: Release,
) -> None:
    name = "asleep"
    template = {"command": TROUBLE, "env": {"TROUBLE_SLEEP_AT_IMPORT": "1", **NO_AUTO_CHECKS}}
    apply(release, name, template, **CPU, startupTimeout=20)
    first = first_running_pod(release, name)
    said = "did not become ready within 20 s; last log line: loading weights (forever)"

    def named() -> dict[str, Any] | None:
        cond = workers_healthy(release, name)
        return cond if cond.get("reason") == "StartupTimeout" else None

    cond = wait_until(named, "WorkersHealthy naming the startup deadline", 120)
    assert cond["status"] == "False"
    assert said in cond["message"], cond  # the newest replaced worker's (each one sleeps)
    wait_until(lambda: gone(release, name, first), f"pod {first} deleted", 60)
    [event] = wait_until(
        lambda: [e for e in events(release, name, "StartupTimeout") if first in e["message"]],
        f"the Event naming {first}",
        60,
    )
    assert event["message"] == f"worker {first} replaced (its pod deleted): startup failed: {said}"
    new = first_running_pod(release, name)  # the Deployment's new pod: a new worker id
    assert new != first
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "endpoints.lockgate.dev", name)


def test_a_worker_failing_its_fitness_check_is_replaced_and_the_job_runs_elsewhere(
    release: Release, shared_volume: Path
) -> None:
    name = "unfit"
    template = {"command": ["sh", "-c", FIRST_UNFIT], "env": NO_AUTO_CHECKS}
    apply(release, name, template, **CPU, networkVolumeId=SHARED)
    jobs = Jobs(release, name)
    job_id = jobs.run({"input": {"sleep": 0}})  # waits while the first worker fails
    job = jobs.final(job_id, timeout=240)
    assert job["status"] == "COMPLETED", job
    assert (shared_volume / "unfit-once").is_dir()  # the first pod was the unfit one

    [event, *_] = wait_until(lambda: events(release, name, "FitnessCheckFailed"), "Event", 60)
    unfit = event["message"].split()[1]  # "worker <id> replaced (its pod deleted): …"
    assert event["message"] == (
        f"worker {unfit} replaced (its pod deleted): "
        f"fitness check check_trouble failed: RuntimeError: {UNFIT}"
    )
    assert job["output"]["worker"] != unfit  # ran on the healthy worker that replaced it
    assert gone(release, name, unfit)
    cond = workers_healthy(release, name)
    assert (cond["status"], cond["reason"]) == ("False", "FitnessCheckFailed"), cond
    assert f"Worker {unfit} was replaced: fitness check check_trouble failed" in cond["message"]
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "endpoints.lockgate.dev", name)
