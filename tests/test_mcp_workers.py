"""RunPod's own MCP server (@runpod/mcp-server 4.0.0, over stdio) against a real `lockgate
dev`: `list-endpoint-workers` while a job runs, and `stream-worker-logs` (issue 46, items 2
and 3; docs/workers.md), checked against what lockgate did.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import eventually
from tests.devproc import DevProcess
from tests.mcp_server import McpServer, runpod_mcp

pytest_plugins = ["mcp_fixtures"]

ENDPOINT = "mcp-workers"
NUMBERED = "python tests/workers/numbered_lines.py"  # prints `<tag> 1` … `<tag> N`, sleeps


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` with two workers of the numbered-lines handler."""
    args = ["--worker-command", NUMBERED, "--endpoint-id", ENDPOINT, "--workers-min", "2"]
    data = tmp_path_factory.mktemp("mcp-workers")
    with DevProcess(*args, "--workers-max", "2", "--idle-timeout", "60", data_dir=data) as dev:
        yield dev


async def _busy_and_idle(server: McpServer) -> dict | None:
    answer = await server.call("list-endpoint-workers", {"id": ENDPOINT})
    statuses = sorted(w["status"] for w in answer["workers"])
    return answer if statuses == ["IDLE", "RUNNING"] else None


async def test_workers_and_their_logs_through_runpods_mcp_server(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    tag = f"m{secrets.token_hex(3)}"
    job = {"input": {"lines": 8, "tag": tag, "sleep": 8}}
    made = requests.post(dev.job_url("run"), json=job, headers=dev.headers(), timeout=30)
    assert made.status_code == 200, made.text
    async with runpod_mcp(runpod_mcp_bin, api_key=dev.key, origin=dev.url) as server:
        answer = await eventually(
            lambda: _busy_and_idle(server), "a RUNNING and an IDLE worker", timeout=30
        )
        assert answer["summary"]["total"] == len(answer["workers"]) == 2
        assert answer["summary"]["running"] == answer["summary"]["idle"] == 1
        assert answer["endpointVersion"] == 1
        [busy] = [w for w in answer["workers"] if w["status"] == "RUNNING"]

        logs = await server.call(
            "stream-worker-logs",
            {"endpointId": ENDPOINT, "workerId": busy["id"], "tail": 100, "maxWaitMs": 1500},
        )
        lines = [item["line"] for item in logs["items"]]
        assert sorted(x for x in lines if x.startswith(f"{tag} ")) == sorted(
            f"{tag} {n}" for n in range(1, 9)
        )
        assert {item["source"] for item in logs["items"]} == {"container", "system"}
        assert logs["truncated"] is False

        system = await server.call(
            "stream-worker-logs",
            {"endpointId": ENDPOINT, "workerId": busy["id"], "source": "system",
             "maxWaitMs": 1000},
        )  # fmt: skip
        assert [item["source"] for item in system["items"]] == ["system"]
        assert system["items"][0]["line"].startswith("worker process started (pid ")

        unknown = await server.failure(
            "stream-worker-logs", {"endpointId": ENDPOINT, "workerId": "nobody"}
        )
        assert "404" in str(unknown)
    cancel = requests.post(dev.job_url(f"cancel/{made.json()['id']}"), headers=dev.headers())
    assert cancel.status_code == 200
