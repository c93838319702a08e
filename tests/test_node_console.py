"""What the console reads, on a real node (issue 14), in one module (one node start):

- worker logs: the management API, running with only the chart's RBAC, reads the echo worker
  pod's log through the Kubernetes API, by job and live; the console (Chromium on this host,
  through the manage Service) shows the pod's state on the Endpoints page and its lines on
  the Logs page;
- worker states: a Template whose image does not exist makes the worker pod fail to pull
  (ErrImagePull / ImagePullBackOff, as the kubelet writes it); `/health` counts it
  `unhealthy` and the Endpoint's `WorkersHealthy` condition names the image and what to do.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from console_browser import assert_clean, screenshot, sign_in
from node_release import (
    REPO,
    USER_NAMESPACE,
    Release,
    endpoint_status,
    manage_values,
    running,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures", "console_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ADMIN_KEY = "lg_node_logs_admin_" + "k" * 24
ECHO = REPO / "examples" / "echo"


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    """The chart with an admin key, its management API serving the examples' namespace."""
    rel = Release(node)
    rel.install(*manage_values(ADMIN_KEY))
    yield rel
    rel.uninstall()


class Manage:
    """The management API through its Service, with the admin key."""

    def __init__(self, release: Release) -> None:
        self.url = release.service_url(f"{release.name}-manage")
        self.gateway = release.gateway_url
        self.http = requests.Session()
        self.http.headers["authorization"] = f"Bearer {ADMIN_KEY}"

    def logs(self, endpoint: str, **params: Any) -> list[dict]:
        resp = self.http.get(f"{self.url}/v1/endpoints/{endpoint}/logs", params=params, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()["lines"]

    def runsync(self, endpoint: str, job_input: dict) -> dict:
        resp = self.http.post(
            f"{self.gateway}/v2/{endpoint}/runsync?wait=60000",
            json={"input": job_input},
            timeout=90,
        )
        assert resp.status_code == 200, resp.text
        return resp.json()


@pytest.fixture(scope="module")
def manage(release: Release) -> Manage:
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(ECHO))
    api = Manage(release)
    resp = api.http.patch(f"{api.url}/v1/endpoints/echo", json={"workersMin": 1}, timeout=30)
    assert resp.status_code == 200, resp.text  # one worker pod stays up
    return api


@pytest.fixture(scope="module")
def pod(release: Release, manage: Manage) -> str:
    pods = wait_until(
        lambda: [p for p in worker_pods(release, "echo") if running(p)], "a running echo pod", 120
    )
    return pods[0]["metadata"]["name"]


def test_the_worker_pods_lines_come_through_the_management_api(manage: Manage, pod: str) -> None:
    started = wait_until(
        lambda: [x for x in manage.logs("echo") if f"worker {pod} started" in x["line"]],
        "the worker's start line",
        60,
    )
    assert started[0]["worker"] == pod and started[0]["stream"] == "stdout"
    job = manage.runsync("echo", {"hello": "node"})
    assert job["status"] == "COMPLETED", job
    lines = wait_until(
        lambda: [x for x in manage.logs("echo", job=job["id"]) if "completed" in x["line"]],
        "the job's end line",
        60,
    )
    assert lines[0]["worker"] == pod and lines[0]["job"] == job["id"]
    assert manage.logs("echo", worker=pod, tail=1)[0]["worker"] == pod
    assert manage.logs("echo", worker="echo-workers-nobody") == []


def test_follow_streams_a_pods_new_line(manage: Manage, pod: str) -> None:
    url = f"{manage.url}/v1/endpoints/echo/logs?follow=true&tail=1"
    found: dict[str, Any] = {}
    ended: list[dict] = []  # the end lines that came, of any job
    deadline = time.monotonic() + 120
    with manage.http.get(url, stream=True, timeout=120) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        worker = threading.Thread(target=lambda: found.update(manage.runsync("echo", {"n": 2})))
        worker.start()
        # The worker writes the job's end line before /runsync answers, so the line may come
        # before the job's id is known: keep them all, stop once the id is known and seen
        # (the keep-alive comments every 15 s give the loop back control).
        for raw in resp.iter_lines(decode_unicode=True):
            if raw.startswith("data: "):
                line = json.loads(raw[6:])
                if "completed" in line["line"] and line["job"]:
                    ended.append(line)
            if not worker.is_alive() and any(x["job"] == found.get("id") for x in ended):
                break
            assert time.monotonic() < deadline, f"no end line of {found.get('id')}: {ended}"
        worker.join()
    line = next(x for x in ended if x["job"] == found["id"])
    assert line["worker"] == pod


def test_the_console_shows_the_pods_log_lines(page, manage: Manage, pod: str) -> None:
    job = manage.runsync("echo", {"from": "console"})
    sign_in(page, manage, ADMIN_KEY)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    # the Endpoints page shows the worker pod's state (a live worker: running or idle)
    row = page.locator('tr[data-endpoint="echo"]')
    expect(row).to_contain_text(re.compile(r"[1-9]\d* (running|idle)"), timeout=60_000)
    # Ready once the operator's status refresh (at most `resync_s`, 10 s) saw the pod ready
    expect(row).to_contain_text("Ready", timeout=60_000)
    screenshot(page, "endpoints-node")
    page.goto(f"{manage.url}/console/#/endpoints/echo/logs")
    log = page.get_by_role("log", name="Worker log lines")
    line = log.locator(".log-line", has_text=f"job {job['id']} completed")
    line.wait_for(timeout=60_000)
    assert line.locator(".who").inner_text() == pod
    page.get_by_label("Worker", exact=True).select_option(pod)
    screenshot(page, "logs-node")
    # The Endpoints page also asks each endpoint's /health at its jobApiUrl, which is the
    # gateway's in-cluster name with the chart's default baseUrl: a browser outside the
    # cluster cannot resolve it (the page shows the Endpoint's status instead).
    assert_clean(page, allow=("ERR_NAME_NOT_RESOLVED",))


def lockgate(manage: Manage, config_home: Any, *args: str) -> str:
    """The real `lockgate` CLI against the management API (and the gateway for jobs), as a
    user outside the cluster runs it with LOCKGATE_URL, LOCKGATE_JOB_URL and a key (over
    plain http:// to the Services' ClusterIPs: LOCKGATE_INSECURE=1, docs/cli.md)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(
        XDG_CONFIG_HOME=str(config_home), LOCKGATE_URL=manage.url,
        LOCKGATE_JOB_URL=manage.gateway, LOCKGATE_API_KEY=ADMIN_KEY,
        LOCKGATE_INSECURE="1",  # plain http:// to ClusterIPs: the node's own network
        PYTHONPATH=str(REPO / "operator"),
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_the_cli_manages_endpoints_runs_jobs_and_reads_logs_on_the_cluster(
    release: Release, manage: Manage, pod: str, tmp_path
) -> None:
    """Issue 35 item 6 against `lockgate manage` on the node, not only `lockgate dev`."""
    table = lockgate(manage, tmp_path, "endpoints", "list")
    assert table.split()[:2] == ["ID", "NAME"] and "\necho " in table
    got = json.loads(lockgate(manage, tmp_path, "endpoints", "get", "echo", "-o", "json"))
    assert (got["id"], got["workers"]["min"]) == ("echo", 1)  # the v2 object (/v2/serverless)

    made = json.loads(lockgate(
        manage, tmp_path, "endpoints", "create", "--name", "cli-made", "--template-id", "echo",
        "--cpu", "any", "--workers-max", "2", "-o", "json",
    ))  # fmt: skip
    made_id = made["id"]  # generated, as on RunPod
    assert (made["name"], made["workers"]["max"]) == ("cli-made", 2)
    edited = json.loads(
        lockgate(manage, tmp_path, "endpoints", "edit", made_id, "--workers-max", "4", "-o", "json")
    )
    assert edited["workers"]["max"] == 4
    spec = json.loads(release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "endpoints.lockgate.dev", made_id, "-o", "json"
    ))["spec"]  # fmt: skip
    assert spec["workersMax"] == 4  # the Endpoint resource the operator reads
    lockgate(manage, tmp_path, "endpoints", "delete", made_id)
    wait_until(
        lambda: made_id not in release.node.kubectl(
            "-n", USER_NAMESPACE, "get", "endpoints.lockgate.dev", "-o", "name", check=False
        ),
        "the endpoint made through the CLI to be deleted",
        60,
    )  # fmt: skip

    job = json.loads(
        lockgate(manage, tmp_path, "jobs", "run", "echo", '{"cli": "node"}', "--wait", "-o", "json")
    )
    assert job["status"] == "COMPLETED", job
    lines = wait_until(
        lambda: (
            (out := lockgate(manage, tmp_path, "logs", "echo", "--job", job["id"]))
            and "completed" in out
            and out
        ),
        "the job's log lines through the CLI",
        60,
    )
    assert pod in lines and job["id"] in lines


def test_create_from_an_image_with_a_secret_reference_on_the_cluster(
    release: Release, page, manage: Manage
) -> None:
    """The console on a cluster offers a variable read from a Secret's key: the template
    gets `secretEnv`, the worker Deployment a `secretKeyRef` (issue 34 item 7), once the
    Secret is labelled for workers (issue 45)."""
    release.node.kubectl("-n", USER_NAMESPACE, "create", "secret", "generic", "hf-token",
                         "--from-literal=token=hf_console")  # fmt: skip
    release.node.kubectl("-n", USER_NAMESPACE, "label", "secret", "hf-token",
                         "lockgate.dev/worker-secret=true")  # fmt: skip
    sign_in(page, manage, ADMIN_KEY)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{manage.url}/console/#/new")
    page.get_by_label("Endpoint id").fill("with-secret")
    page.get_by_label("Name", exact=True).fill("With a secret")
    page.get_by_label("A container image").check()
    page.get_by_label("Container image", exact=True).fill("registry.example.com/worker:1")
    page.get_by_label("Variable 1 name").fill("HF_TOKEN")
    page.get_by_label("Variable 1 from").select_option("secret")
    page.get_by_label("Variable 1 Secret/key").fill("hf-token/token")
    screenshot(page, "create-secret-env-node")
    page.get_by_role("button", name="Create endpoint").click()
    # the page follows the new endpoint: "Creating with-secret", then "Created" once Ready
    expect(page.get_by_role("heading", level=1)).to_have_text(
        re.compile(r"^Creat(ing|ed) with-secret$"), timeout=60_000
    )
    record = manage.http.get(f"{manage.url}/v1/endpoints/with-secret", timeout=30).json()
    template = manage.http.get(f"{manage.url}/v1/templates/{record['templateId']}", timeout=30)
    assert template.json()["secretEnv"] == {"HF_TOKEN": {"name": "hf-token", "key": "token"}}

    def worker_env() -> list:
        out = release.node.kubectl("-n", USER_NAMESPACE, "get", "deployment",
                                   "with-secret-workers", "-o", "json", check=False)  # fmt: skip
        if not out:
            return []
        return json.loads(out)["spec"]["template"]["spec"]["containers"][0]["env"]

    env = wait_until(worker_env, "the worker Deployment", 60)
    ref = {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert {"name": "HF_TOKEN", "valueFrom": ref} in env
    deleted = manage.http.delete(f"{manage.url}/v1/endpoints/with-secret", timeout=30)
    assert deleted.status_code == 204, deleted.text
    template_url = f"{manage.url}/v1/templates/{record['templateId']}"
    wait_until(  # 409 while the Endpoint is still being deleted
        lambda: manage.http.delete(template_url, timeout=30).status_code in (204, 404),
        "the template deleted",
        60,
    )
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "secret", "hf-token", "--wait=false")


MISSING = "localhost/lockgate-test/no-such-image:404"


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_an_image_that_cannot_be_pulled_is_unhealthy_with_the_cause(
    release: Release, manage: Manage
) -> None:
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

    def read_health() -> dict:
        resp = manage.http.get(f"{manage.gateway}/v2/missing/health", timeout=30)
        return resp.json() if resp.status_code == 200 else {}

    health = wait_until(
        lambda: (h := read_health()).get("workers", {}).get("unhealthy", 0) >= 1 and h,
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


def test_the_workers_tab_shows_the_pod_its_log_and_restarts_it(
    page, release: Release, manage: Manage, pod: str
) -> None:
    """Issue 50, item 10 on a real node: the Workers tab's row of the echo pod (its state
    and node), its live log, and a restart: the management API, with the chart's RBAC (it
    may not change pods), asks it in the job store; the operator deletes the pod and the
    ReplicaSet starts a fresh one. Last in the module: the `pod` fixture's pod is gone."""
    sign_in(page, manage, ADMIN_KEY)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{manage.url}/console/#/endpoints/echo/workers")
    table = page.get_by_role("table", name="Workers")
    row = table.locator(f'tbody tr[data-worker="{pod}"]')
    row.wait_for(timeout=60_000)
    expect(row.locator("td").nth(1)).to_have_text(re.compile(r"^(IDLE|RUNNING)$"), timeout=60_000)
    assert row.locator("td").nth(6).inner_text() not in ("", "—")  # the pod's node

    page.get_by_role("button", name=f"Log of {pod}").click()
    log = page.get_by_role("log", name=f"Log of worker {pod}")
    log.get_by_text(f"worker {pod} started", exact=False).first.wait_for(timeout=60_000)
    screenshot(page, "workers-node")

    page.get_by_role("button", name=f"Restart {pod}").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Restart worker {pod}?")
    dialog.get_by_role("button", name="Restart worker").click()
    expect(table.locator(f'tbody tr[data-worker="{pod}"]')).to_have_count(0, timeout=120_000)
    fresh = table.locator(f'tbody tr:not([data-worker="{pod}"])')
    expect(fresh).to_have_count(1, timeout=120_000)
    screenshot(page, "workers-node-restarted")
    assert_clean(page, allow=("ERR_NAME_NOT_RESOLVED",))
