"""The chart's Redis on a real node: bounded by maxmemory (noeviction), its password on no
command line, and a password change through `helm upgrade` that rolls Redis together with
its clients, after which jobs still complete (tests/cluster.py, tests/node_fixtures.py).

The tests run in order on one release. The node has no storage provisioner, so Redis keeps
its data in an emptyDir there (tests/node-values.yaml): only jobs submitted after the
password change are checked.
"""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest

from node_release import REPO, USER_NAMESPACE, Jobs, Release, endpoint_status, running, wait_until

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

REDIS = "app.kubernetes.io/component=redis"
CLIENTS = ("app.kubernetes.io/component=gateway", "app.kubernetes.io/component=operator")
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
MAXMEMORY_PERCENT = 60  # the chart's redis.maxmemoryPercent


def redis_pod(release: Release) -> dict[str, Any]:
    [pod] = [p for p in release.pods(REDIS) if running(p)]
    return pod


def redis_cli(release: Release, *args: str) -> list[str]:
    """redis-cli inside the Redis pod (authenticated by the container's REDISCLI_AUTH)."""
    name = redis_pod(release)["metadata"]["name"]
    return release.kubectl("exec", name, "-c", "redis", "--", "redis-cli", *args).split()


def redis_password(release: Release) -> str:
    secret = release.get("secret", f"{release.name}-settings")
    return base64.b64decode(secret["data"]["REDIS_PASSWORD"]).decode()


def runtime_process(release: Release, pod: dict[str, Any]) -> dict[str, Any]:
    """The Redis container's process as containerd runs it (args after the kubelet
    expanded $(VAR) references, and env)."""
    [status] = pod["status"]["containerStatuses"]
    container_id = status["containerID"].rpartition("/")[2]
    ctr = ["ctr", "-a", release.node.socket, "-n", "k8s.io", "containers", "info", container_id]
    info = json.loads(subprocess.run(ctr, capture_output=True, text=True, check=True).stdout)
    return info["Spec"]["process"]


def bytes_of(quantity: str) -> int:
    unit = quantity[-2:]
    return int(quantity[:-2]) * UNITS[unit] if unit in UNITS else int(quantity)


def test_redis_runs_with_maxmemory_from_its_limit_and_noeviction(release: Release) -> None:
    [container] = redis_pod(release)["spec"]["containers"]
    limit = bytes_of(container["resources"]["limits"]["memory"])
    assert redis_cli(release, "config", "get", "maxmemory") == [
        "maxmemory",
        str(limit * MAXMEMORY_PERCENT // 100),
    ]
    assert redis_cli(release, "config", "get", "maxmemory-policy") == [
        "maxmemory-policy",
        "noeviction",
    ]


def test_the_redis_password_is_on_no_command_line_or_probe(release: Release) -> None:
    password = redis_password(release)
    pod = redis_pod(release)
    [container] = pod["spec"]["containers"]
    process = runtime_process(release, pod)
    assert password not in " ".join(process["args"]), process["args"]
    probes = json.dumps([container.get("livenessProbe"), container.get("readinessProbe")])
    assert password not in probes
    # Every process in the container, as `ps` would show it.
    name = pod["metadata"]["name"]
    cmdlines = release.kubectl("exec", name, "-c", "redis", "--", "sh", "-c",
                               "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")  # fmt: skip
    assert "redis-server" in cmdlines and password not in cmdlines
    # ...and Redis does require it.
    unauthenticated = release.kubectl(
        "exec", name, "-c", "redis", "--", "env", "-u", "REDISCLI_AUTH", "redis-cli", "ping",
        check=False,
    )  # fmt: skip
    assert "NOAUTH" in unauthenticated, unauthenticated


def test_a_password_change_rolls_redis_and_its_clients_and_jobs_complete(
    release: Release,
) -> None:
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(REPO / "examples" / "echo"))
    wait_until(
        lambda: endpoint_status(release, "echo").get("phase") == "Ready",
        "the echo Endpoint to be Ready",
        timeout=90,
    )
    echo = Jobs(release, "echo")
    assert echo.runsync({"input": {"before": 1}})["status"] == "COMPLETED"
    before = {sel: {p["metadata"]["uid"] for p in release.pods(sel)} for sel in (REDIS, *CLIENTS)}
    release.upgrade("--set", "redis.auth.password=changed-Passw0rd")
    assert redis_password(release) == "changed-Passw0rd"
    for selector, uids in before.items():
        now = {p["metadata"]["uid"] for p in release.pods(selector) if running(p)}
        assert now and not now & uids, f"{selector}: pods not replaced"
    job = Jobs(release, "echo").runsync({"input": {"after": 2}}, wait_ms=90000)
    assert job["status"] == "COMPLETED" and job["output"] == {"echo": {"after": 2}}, job
