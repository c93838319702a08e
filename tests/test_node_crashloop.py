"""A crash loop on a real node (issue 47 item 4; docs/crash-loops.md): a runpod-SDK handler
that exits at import (tests/workers/runpod_trouble.py in the runpod-worker image, with
TROUBLE_EXIT_AT_IMPORT=1). The kubelet restarts its container in place; after the
Endpoint's `crashLoopThreshold` (2 here, to keep node time low) failed starts the Endpoint
shows phase CrashLoop with the exit code and last line, the operator scales its workers to
zero and starts no more pods, the queued jobs stay IN_QUEUE, and `/run` and `/health` say
why. A fixed release (the Template's env without TROUBLE_EXIT_AT_IMPORT) brings the queued
jobs to COMPLETED."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from node_release import USER_NAMESPACE, Jobs, Release, endpoint_status, wait_until, worker_pods

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

IMAGE = "localhost/lockgate-test/runpod-worker:dev"
NAME = "crashy"
LINE = "cannot load the model"


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    rel = Release(node)
    rel.install()
    yield rel
    rel.uninstall()


def apply_template(release: Release, env: dict[str, str]) -> None:
    meta = {"name": NAME, "namespace": USER_NAMESPACE}
    spec = {"image": IMAGE, "command": ["python", "-u", "/app/runpod_trouble.py"], "env": env}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template",
                   "metadata": meta, "spec": spec})  # fmt: skip


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_a_crash_loop_stops_starting_pods_and_a_fixed_release_runs_the_queued_jobs(
    release: Release,
) -> None:
    apply_template(release, {"TROUBLE_EXIT_AT_IMPORT": "1"})
    meta = {"name": NAME, "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                   "spec": {"templateId": NAME, "computeType": "CPU", "vcpuCount": 1,
                            "workersMin": 0, "workersMax": 1, "idleTimeout": 5,
                            "crashLoopThreshold": 2}})  # fmt: skip
    try:
        wait_until(lambda: endpoint_status(release, NAME).get("phase") == "Ready", "Ready", 120)
    except AssertionError:
        print(endpoint_status(release, NAME))
        raise
    jobs = Jobs(release, NAME)
    queued = [jobs.run({"input": {"n": n}}) for n in range(2)]

    def looping() -> dict[str, Any] | None:
        status = endpoint_status(release, NAME)
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
    wait_until(lambda: not worker_pods(release, NAME), "the crashing pod removed", 120)
    seen = {p["metadata"]["name"] for p in worker_pods(release, NAME, live=False)}
    deployment = json.loads(release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "deployment", f"{NAME}-workers", "-o", "json"))  # fmt: skip
    assert deployment["spec"]["replicas"] == 0

    answer = jobs.http.post(f"{jobs.url}/run", json={"input": {"n": 2}}, timeout=10).json()
    assert answer["status"] == "IN_QUEUE"
    assert answer["message"].startswith(f"IN_QUEUE: workers crash at start (exit code 1: {LINE})")
    queued.append(answer["id"])
    health = jobs.health()
    assert health["jobs"]["inQueue"] == 3
    assert (health["crashLoop"]["exitCode"], health["crashLoop"]["lastLine"]) == (1, LINE)
    assert all(jobs.status(job)["status"] == "IN_QUEUE" for job in queued)
    assert endpoint_status(release, NAME)["phase"] == "CrashLoop"
    assert not worker_pods(release, NAME)  # still none started
    assert {p["metadata"]["name"] for p in worker_pods(release, NAME, live=False)} <= seen

    # A fixed release: the queued jobs complete.
    apply_template(release, {})
    for job in queued:
        assert jobs.final(job, timeout=240)["status"] == "COMPLETED"
    status = endpoint_status(release, NAME)
    assert status["phase"] != "CrashLoop"
    assert condition(status, "CrashLoop")["status"] == "False"
