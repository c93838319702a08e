"""RunPod's own MCP server (@runpod/mcp-server 4.0.0, over stdio, `tests/mcp_server.py`)
reading a real `lockgate dev`'s usage with its `list-serverless-billing` tool: the records
are `GET /v2/billing/serverless`'s, priced from LOCKGATE_GPU_PRICES, and a refusal reaches
the tool in lockgate's words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import wait_until
from tests.devproc import DevProcess
from tests.mcp_server import runpod_mcp

pytest_plugins = ["mcp_fixtures"]

ECHO = "tests/handlers/sync_echo.py"
ENDPOINT = "mcp-billed"
QUERY = {"bucketSize": "hour", "lastN": 2, "serverlessId": ENDPOINT}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("mcp-billing")
    env = {"LOCKGATE_GPU_PRICES": json.dumps({"NVIDIA L4": 0.44})}
    with DevProcess(ECHO, "--workers-max", "0", data_dir=data, env=env) as dev:
        body = {"id": ENDPOINT, "name": ENDPOINT, "templateId": ECHO, "workersMin": 1}
        body |= {"gpuTypeIds": ["NVIDIA L4"]}
        r = requests.post(f"{dev.url}/v1/endpoints", json=body, headers=dev.headers(), timeout=10)
        assert r.status_code == 200, r.text
        yield dev


def rest(dev: DevProcess) -> Any:
    r = requests.get(
        f"{dev.url}/v2/billing/serverless", params=QUERY, headers=dev.headers(), timeout=10
    )
    assert r.status_code == 200, r.text
    return r.json()


async def test_list_serverless_billing_reads_lockgates_usage(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    # The dev process's sampler writes a point 10 s after each interval.
    wait_until(lambda: rest(dev)["records"], "a point with the worker up", timeout=60, every=1)
    async with runpod_mcp(runpod_mcp_bin, api_key=dev.key, origin=dev.url) as server:
        for _ in range(10):  # a new point may land between the two reads: read again
            before = rest(dev)
            got = await server.call("list-serverless-billing", QUERY)
            if got == before == rest(dev):
                break
        assert got == before, (got, before)
        [record] = got["records"][-1:]
        assert record["serverlessId"] == ENDPOINT and record["workerSeconds"] > 0
        l4 = record["gpuSecondsByType"]["NVIDIA L4"]
        assert record["gpuAmount"] == round(l4 / 3600 * 0.44, 6) == record["totalAmount"]
        refused = await server.failure(
            "list-serverless-billing", {"lastN": 1, "startTime": "2026-12-01T00:00:00Z"}
        )
        assert "lastN cannot be combined with startTime" in str(refused)
