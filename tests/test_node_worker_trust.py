"""Workers you can trust, on a real node (issue 47): one module, one chart install, five
endpoints, each test deleting or idling its own. The official runpod SDK worker
(tests/workers/runpod_trouble.py in the runpod-worker image) misbehaves as its environment
says; the LB example worker (examples/loadbalancer) serves the affinity test.

- startup deadline (docs/worker-health.md): a worker asleep at import, on an endpoint whose
  `startupTimeout` is 20 s, is marked unhealthy with its last log line and its pod deleted:
  `WorkersHealthy` says why, and a new pod (a new worker id) takes its place;
- fitness checks (docs/fitness-checks.md): a worker whose check fails reports it (the SDK's
  `status=unhealthy` ping) and is marked, its pod deleted and replaced; a job submitted
  meanwhile completes on the healthy worker that replaced it. Only the first pod is unfit:
  its start command creates a marker on a volume every pod of the endpoint mounts (a
  hostPath PersistentVolume the test makes), and a pod that finds the marker there passes;
- warm-up (docs/warm-up.md): the gateway hands the worker pod's unchanged SDK the warm-up
  input first; its first real job finds the file the warm-up made in its container;
- crash loops (docs/crash-loops.md): a handler that exits at import; after the Endpoint's
  `crashLoopThreshold` (2 here) failed starts it shows phase CrashLoop with the exit code and
  last line, no more pods start, the queued jobs stay IN_QUEUE and `/run` and `/health` say
  why; a fixed release (the Template's env without TROUBLE_EXIT_AT_IMPORT) completes them;
- strict-resume (docs/load-balancing.md): a pod the scale-down parks keeps running out of
  service; a `strict-resume` request brings the same pod (same uid, no restart) back and is
  answered by it; past its resume window the pod is deleted and the request is 404
  `affinity_worker_gone`.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cluster import Cluster
from node_release import (
    USER_NAMESPACE,
    Jobs,
    Release,
    apply_lb_endpoint,
    endpoint_status,
    running,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

IMAGE = "localhost/lockgate-test/runpod-worker:dev"  # imported: never pulled
TROUBLE = ["python", "-u", "/app/runpod_trouble.py"]
# executionTimeoutMs at its least: a pod's grace period is 20 s, not 10 min (a worker asleep
# at import is PID 1 and ignores SIGTERM), so the endpoints' pods go fast at the end.
CPU = {"computeType": "CPU", "vcpuCount": 1, "workersMin": 1, "workersMax": 1,
       "executionTimeoutMs": 5000}  # fmt: skip
# The SDK's automatic checks (memory, disk, a TCP connection to 8.8.8.8) are not what is
# tested here, and no traffic may leave the machine: only the custom check runs.
NO_AUTO_CHECKS = {"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true"}
CRASHY = "crashy"  # the crash-loop endpoint; its handler prints LINE and exits
LINE = "cannot load the model"
RESUME = "resume"  # the strict-resume LB endpoint
PARKED_UNTIL = "lockgate.dev/parked-until"
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


def apply_crashy_template(release: Release, env: dict[str, str]) -> None:
    meta = {"name": CRASHY, "namespace": USER_NAMESPACE}
    spec = {"image": IMAGE, "command": ["python", "-u", "/app/runpod_trouble.py"], "env": env}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template",
                   "metadata": meta, "spec": spec})  # fmt: skip


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_a_crash_loop_stops_starting_pods_and_a_fixed_release_runs_the_queued_jobs(
    release: Release,
) -> None:
    apply_crashy_template(release, {"TROUBLE_EXIT_AT_IMPORT": "1"})
    meta = {"name": CRASHY, "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                   "spec": {"templateId": CRASHY, "computeType": "CPU", "vcpuCount": 1,
                            "workersMin": 0, "workersMax": 1, "idleTimeout": 5,
                            "crashLoopThreshold": 2}})  # fmt: skip
    try:
        wait_until(lambda: endpoint_status(release, CRASHY).get("phase") == "Ready", "Ready", 120)
    except AssertionError:
        print(endpoint_status(release, CRASHY))
        raise
    jobs = Jobs(release, CRASHY)
    queued = [jobs.run({"input": {"n": n}}) for n in range(2)]

    def looping() -> dict[str, Any] | None:
        status = endpoint_status(release, CRASHY)
        return status if status.get("phase") == "CrashLoop" else None

    try:
        status = wait_until(looping, "phase CrashLoop", 180)
    except AssertionError:
        print(release.describe())
        raise
    cond = condition(status, "CrashLoop")
    assert (cond["status"], cond["reason"]) == ("True", "WorkersCrashAtStart")
    assert f"exit code 1: {LINE}" in cond["message"], cond

    # Held at zero: the crashing pod goes, and none comes after it.
    wait_until(lambda: not worker_pods(release, CRASHY), "the crashing pod removed", 120)
    seen = {p["metadata"]["name"] for p in worker_pods(release, CRASHY, live=False)}
    deployment = json.loads(release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "deployment", f"{CRASHY}-workers", "-o", "json"))  # fmt: skip
    assert deployment["spec"]["replicas"] == 0

    answer = jobs.http.post(f"{jobs.url}/run", json={"input": {"n": 2}}, timeout=10).json()
    assert answer["status"] == "IN_QUEUE"
    assert answer["message"].startswith(f"IN_QUEUE: workers crash at start (exit code 1: {LINE})")
    queued.append(answer["id"])
    health = jobs.health()
    assert health["jobs"]["inQueue"] == 3
    assert (health["crashLoop"]["exitCode"], health["crashLoop"]["lastLine"]) == (1, LINE)
    assert all(jobs.status(job)["status"] == "IN_QUEUE" for job in queued)
    assert endpoint_status(release, CRASHY)["phase"] == "CrashLoop"
    assert not worker_pods(release, CRASHY)  # still none started
    assert {p["metadata"]["name"] for p in worker_pods(release, CRASHY, live=False)} <= seen

    # A fixed release: the queued jobs complete.
    apply_crashy_template(release, {})
    for job in queued:
        assert jobs.final(job, timeout=240)["status"] == "COMPLETED"
    status = endpoint_status(release, CRASHY)
    assert status["phase"] != "CrashLoop"
    assert condition(status, "CrashLoop")["status"] == "False"


def resume_pod(release: Release, name: str) -> dict[str, Any] | None:
    return next((p for p in worker_pods(release, RESUME) if p["metadata"]["name"] == name), None)


def parked(release: Release, name: str) -> dict[str, Any] | None:
    found = resume_pod(release, name)
    return found if found and PARKED_UNTIL in (found["metadata"].get("annotations") or {}) else None


def patch_resume_endpoint(release: Release, **spec: Any) -> None:
    release.node.kubectl("-n", USER_NAMESPACE, "patch", "endpoints.lockgate.dev", RESUME,
                         "--type", "merge", "-p", json.dumps({"spec": spec}))  # fmt: skip


def test_a_parked_pod_is_resumed_by_strict_resume_and_gone_after_its_window(
    release: Release,
) -> None:
    try:  # Ready within 30 s, or (a node just up, its operator starting) a while later
        apply_lb_endpoint(release, RESUME, load_seconds=0, idleTimeout=2, lbResumeWindowS=120)
    except AssertionError:
        print(endpoint_status(release, RESUME))
        print(release.describe())
        wait_until(lambda: endpoint_status(release, RESUME).get("phase") == "Ready", "Ready", 120)
    http = requests.Session()
    http.headers["authorization"] = release.client_key()
    url = f"{release.gateway_url}/lb/{RESUME}/echo/x"

    def get(affinity: str | None = None) -> requests.Response:
        headers = {"X-Runpod-Worker-Id": affinity} if affinity else {}
        return http.get(url, headers=headers, timeout=150)

    first = get()
    assert first.status_code == 200, release.describe()
    worker = first.headers["X-Runpod-Worker-Id"]
    kept = wait_until(lambda: parked(release, worker), "the idle pod parked", 60)
    uid = kept["metadata"]["uid"]
    health = http.get(f"{release.gateway_url}/v2/{RESUME}/health", timeout=30).json()
    assert sum(health["workers"].values()) == 0, health  # scaled to zero: counted nowhere

    gone_for_strict = get(f"strict {worker}")
    assert gone_for_strict.status_code == 404, gone_for_strict.text
    assert gone_for_strict.json()["reason"] == "affinity_worker_gone"

    resumed = get(f"strict-resume {worker}")
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers["X-Runpod-Worker-Id"] == worker
    assert resumed.json()["worker"] == worker  # the pod's own RUNPOD_POD_ID
    back = resume_pod(release, worker)
    assert back is not None and back["metadata"]["uid"] == uid  # the same pod
    statuses = back["status"]["containerStatuses"]
    assert next(c for c in statuses if c["name"] == "worker")["restartCount"] == 0  # kept running

    patch_resume_endpoint(release, lbResumeWindowS=1)  # parked again, then removed after 1 s
    try:
        wait_until(lambda: resume_pod(release, worker) is None, "the parked pod removed", 90)
    except AssertionError:
        print(json.dumps(resume_pod(release, worker), indent=1))
        print(release.kubectl("logs", "deployment/lockgate-operator", "--tail=80", check=False))
        raise
    after = get(f"strict-resume {worker}")
    assert after.status_code == 404, after.text
    assert after.json()["reason"] == "affinity_worker_gone"
