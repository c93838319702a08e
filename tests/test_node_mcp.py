"""RunPod's own MCP server (@runpod/mcp-server 4.0.0, `tests/mcp_server.py`) managing a real
node through `lockgate manage` (REST v2) and running jobs through the gateway, as a team's
assistant would (issue 46): a template and a QUEUE endpoint made with the MCP tools become a
Template and an Endpoint resource whose worker is a pod (`list-endpoint-workers`), whose
system log is the pod's events (`stream-worker-logs`), and whose env naming an account
secret is a `secretKeyRef` in the Deployment; a job runs through it; an edit reaches the
Endpoint; delete removes both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cluster import Cluster
from node_release import (
    USER_NAMESPACE,
    Release,
    manage_values,
    running,
    wait_until,
    worker_pods,
)
from tests.mcp_server import runpod_mcp

pytest_plugins = ["node_fixtures", "mcp_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ADMIN_KEY = "lg_node_mcp_admin_" + "m" * 28  # scopes admin and jobs (manage_values)
IMAGE = "localhost/lockgate-test/runpod-worker:dev"  # imported: never pulled
ECHO_ARGS = "python -u /app/runpod_echo.py"
SECRET = "s3cr3t-" + "v" * 20  # never to be seen in an object or an answer


@pytest.fixture(scope="module")
def release(node: Cluster) -> Iterator[Release]:
    rel = Release(node)
    rel.install(*manage_values(ADMIN_KEY))
    yield rel
    rel.uninstall()


def user_get(release: Release, kind: str, name: str) -> Any:
    """One object of the namespace the management API writes in, as JSON."""
    return json.loads(release.node.kubectl("-n", USER_NAMESPACE, "get", kind, name, "-o", "json"))


def mcp(binary: Path, release: Release) -> Any:
    """The MCP server pointed at the release: management at `lockgate manage`'s Service, the
    job API at the gateway's (two origins, as on RunPod)."""
    manage = release.service_url(f"{release.name}-manage")
    return runpod_mcp(binary, api_key=ADMIN_KEY, origin=manage, job_origin=release.gateway_url)


async def test_an_endpoint_made_with_the_mcp_tools_runs_a_job_on_a_worker_pod(
    release: Release, runpod_mcp_bin: Path
) -> None:
    async with mcp(runpod_mcp_bin, release) as server:
        template = await server.call(
            "create-template",
            {"body": {"name": "mcp echo", "image": IMAGE, "args": ECHO_ARGS,
                      "serverless": True, "category": "CPU", "disk": 5}},
        )  # fmt: skip
        # an account secret (RunPod's MCP server has no secrets tool: REST v2 makes it)
        manage = release.service_url(f"{release.name}-manage")
        made = requests.post(
            f"{manage}/v2/account/secrets", json={"name": "mcp-token", "value": SECRET},
            headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30,
        )  # fmt: skip
        assert made.status_code == 201, made.text
        body = {
            "name": "mcp on a node", "type": "QUEUE", "templateId": template["id"],
            "cpu": [{"id": "any", "vcpuCount": 2}],
            "env": {"FROM": "mcp", "TOKEN": "{{ RUNPOD_SECRET_mcp-token }}"},
            "workers": {"min": 1, "max": 1, "idleTimeout": 5},
            "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}, "timeout": 60_000,
        }  # fmt: skip
        endpoint = await server.call("create-endpoint", {"body": body})
        endpoint_id = endpoint["id"]
        assert endpoint["requestUrls"]["runSync"].endswith(f"/v2/{endpoint_id}/runsync")
        resource = user_get(release, "endpoints.lockgate.dev", endpoint_id)
        assert resource["spec"]["templateId"] == endpoint_id
        assert resource["spec"]["executionTimeoutMs"] == 60_000
        bound = user_get(release, "templates.lockgate.dev", endpoint_id)
        assert bound["spec"]["image"] == IMAGE
        assert bound["spec"]["env"] == {"FROM": "mcp", "TOKEN": "{{ RUNPOD_SECRET_mcp-token }}"}

        wait_until(
            lambda: any(running(p) for p in worker_pods(release, endpoint_id)),
            "the endpoint's worker pod to run",
            240,
        )
        deployment = release.node.kubectl(
            "-n", USER_NAMESPACE, "get", "deployments", "-l",
            f"lockgate.dev/endpoint={endpoint_id}", "-o", "json",
        )  # fmt: skip
        assert SECRET not in deployment
        env = json.loads(deployment)["items"][0]["spec"]["template"]["spec"]["containers"][0]
        token = next(e for e in env["env"] if e["name"] == "TOKEN")
        assert token["valueFrom"]["secretKeyRef"]["key"] == "value"

        workers = await server.call("list-endpoint-workers", {"id": endpoint_id})
        pods = {p["metadata"]["name"] for p in worker_pods(release, endpoint_id)}
        assert {w["id"] for w in workers["workers"]} <= pods and workers["workers"], workers
        assert workers["summary"]["total"] == len(workers["workers"])
        pod = workers["workers"][0]["id"]
        system = await server.call(
            "stream-worker-logs",
            {"endpointId": endpoint_id, "workerId": pod, "source": "system", "maxWaitMs": 1500},
        )
        lines = " ".join(item["line"] for item in system["items"])
        assert "Scheduled" in lines or "Started" in lines, system  # the pod's events

        done = await server.call(
            "runsync-endpoint", {"endpointId": endpoint_id, "input": {"on": "node"}}
        )
        assert done["status"] == "COMPLETED", done
        assert done["output"] == {"echo": {"on": "node"}}
        health = await server.call("endpoint-health", {"endpointId": endpoint_id})
        assert health["jobs"]["completed"] >= 1

        after = await server.call(
            "update-endpoint",
            {"id": endpoint_id, "body": {"workers": {"min": 0, "max": 2, "idleTimeout": 5}}},
        )
        assert after["workers"]["max"] == 2
        resource = user_get(release, "endpoints.lockgate.dev", endpoint_id)
        assert resource["spec"]["workersMax"] == 2

        await server.call("delete-endpoint", {"id": endpoint_id})
        await server.call("delete-template", {"id": template["id"]})
    wait_until(
        lambda: not release.node.kubectl(
            "-n", USER_NAMESPACE, "get", "endpoints.lockgate.dev,templates.lockgate.dev",
            "-o", "name", check=False,
        ).strip(),
        "the Endpoint and both Templates to be deleted",
        120,
    )  # fmt: skip
    gone = requests.delete(
        f"{manage}/v2/account/secrets/{made.json()['id']}",
        headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30,
    )  # fmt: skip
    assert gone.status_code == 204, gone.text  # no env refers to it any more
