"""A rolling release on a real node (issue 46 item 4): an env change of the echo example's
Template, made with kubectl while a long job runs on one of its two worker pods. The job
goes on on its old pod (deleted at once, but it keeps running the job) until it is
cancelled, which ends it and the pod; the idle old pod is replaced at once, and
`/v2/serverless/echo/releases` shows the rollout in progress, then at 100 %: one
release, recorded by the operator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from node_release import (
    REPO,
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    manage_values,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ADMIN_KEY = "lg_node_releases_admin_" + "k" * 24
ECHO = REPO / "examples" / "echo"
VERSION = "lockgate.dev/version"


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    rel = Release(node)
    rel.install(*manage_values(ADMIN_KEY))
    yield rel
    rel.uninstall()


def releases(release: Release) -> dict[str, Any]:
    url = release.service_url(f"{release.name}-manage")
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    resp = requests.get(f"{url}/v2/serverless/echo/releases", headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


def pods_by_version(release: Release) -> dict[str, list[dict[str, Any]]]:
    """The echo worker pods not finished (those being deleted too), by version label."""
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in worker_pods(release, "echo", live=False):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        out.setdefault(pod["metadata"]["labels"].get(VERSION, ""), []).append(pod)
    return out


def test_an_env_change_while_a_job_runs_rolls_by_runpods_rule(release: Release) -> None:
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(ECHO))
    release.node.kubectl(
        "-n", USER_NAMESPACE, "patch", "endpoints.lockgate.dev", "echo", "--type=merge",
        "-p", '{"spec": {"workersMin": 2, "workersMax": 2}}',
    )  # fmt: skip
    wait_until(lambda: endpoint_status(release, "echo").get("phase") == "Ready", "echo Ready")
    jobs = Jobs(release, "echo", key=ADMIN_KEY)  # scopes admin and jobs (manage_values)
    wait_until(lambda: len(pods_by_version(release).get("1", [])) == 2, "2 pods on version 1", 180)
    wait_until(lambda: releases(release)["rollout"]["workersOnLatest"] == 2, "2 on latest", 60)

    # A job far longer than any roll (a 20 s one once ended first on a loaded CI machine);
    # cancelled once the roll was seen, which ends it and lets its pod be replaced.
    job_id = jobs.run({"input": {"sleep": 300}})
    wait_until(lambda: jobs.status(job_id)["status"] == "IN_PROGRESS", "the long job runs", 60)
    release.node.kubectl(
        "-n", USER_NAMESPACE, "patch", "templates.lockgate.dev", "echo", "--type=merge",
        "-p", '{"spec": {"env": {"LOCKGATE_LOG_LEVEL": "INFO"}}}',
    )  # fmt: skip

    def rolling() -> dict[str, Any] | None:  # the idle old pod gone: one left on version 1
        got = releases(release)
        ok = got["endpointVersion"] == 2 and len(got["releases"]) == 2
        return got if ok and got["releases"][1]["workerCount"] == 1 else None

    # The idle old pod is deleted at once, but its end goes through the kubelet: over a
    # minute on a loaded CI node.
    during = wait_until(rolling, "the idle old pod gone, the busy one finishing", 180)
    assert jobs.status(job_id)["status"] == "IN_PROGRESS"  # its job goes on, on the old pod
    [busy] = pods_by_version(release)["1"]
    assert busy["metadata"].get("deletionTimestamp")  # replaced after its job
    assert during["rollout"]["inProgress"] and 0 < during["rollout"]["percentOnLatest"] < 100
    assert [r["version"] for r in during["releases"]] == [2, 1]
    assert during["releases"][0]["diff"][0]["field"] == "template.env"

    assert jobs.status(job_id)["status"] == "IN_PROGRESS"  # never cut by the roll
    cancel = jobs.http.post(f"{jobs.url}/cancel/{job_id}", timeout=10)
    assert cancel.status_code == 200, cancel.text
    assert jobs.final(job_id, timeout=60)["status"] == "CANCELLED"
    after = wait_until(
        lambda: (r := releases(release))["rollout"]["percentOnLatest"] == 100 and r,
        "the rollout at 100 %", 120,
    )  # fmt: skip
    assert not after["rollout"]["inProgress"] and after["rollout"]["workersTotal"] == 2
    assert "1" not in pods_by_version(release)
