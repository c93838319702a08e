"""RunPod's own MCP server (@runpod/mcp-server 4.0.0, over stdio, `tests/mcp_server.py`)
reading a real `lockgate dev`'s catalog through REST v2 (issue 46, item 6): each catalog
tool in turn, and a query RunPod refuses reaching the tool as lockgate's problem."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devproc import REPO, DevProcess
from tests.mcp_server import runpod_mcp

pytest_plugins = ["mcp_fixtures"]

ECHO = str(REPO / "examples/echo/handler.py")


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("mcp-catalog")
    with DevProcess(ECHO, "--workers-max", "0", data_dir=data) as dev:
        yield dev


def mcp(binary: Path, dev: DevProcess) -> Any:
    return runpod_mcp(binary, api_key=dev.key, origin=dev.url)


async def test_the_catalog_tools_read_this_machine(runpod_mcp_bin: Path, dev: DevProcess) -> None:
    async with mcp(runpod_mcp_bin, dev) as server:
        cpus = await server.call(
            "list-cpu-types", {"include": ["AVAILABILITY"], "product": ["SERVERLESS"]}
        )
        [cpu] = cpus["cpus"]
        most = 1 << ((os.cpu_count() or 1).bit_length() - 1)
        assert (cpu["id"], cpu["vcpu"]["max"]) == ("cpu3c", most)
        assert cpu["availability"] in ("LOW", "MEDIUM", "HIGH")
        one = await server.call("get-cpu-type", {"id": "cpu3c"})
        assert one["id"] == "cpu3c" and "availability" not in one

        dcs = await server.call(
            "list-data-centers",
            {"include": ["GPU_AVAILABILITY", "CPU_AVAILABILITY"], "regions": ["UNKNOWN", "ASIA"]},
        )
        [local] = dcs["dataCenters"]
        assert local["id"] == "local" and local["cpuAvailability"][0]["id"] == "cpu3c"
        assert await server.call("list-data-centers", {"regions": ["EUROPE"]}) == {
            "dataCenters": []
        }
        assert (await server.call("get-data-center", {"id": "local"}))["region"] == "UNKNOWN"

        gpus = await server.call("list-gpu-types", {"include": ["AVAILABILITY"],
                                                    "product": ["SERVERLESS"]})  # fmt: skip
        assert isinstance(gpus["gpus"], list)  # this machine's NVIDIA GPUs, if it has any
        missing = await server.failure("get-gpu-type", {"id": "NVIDIA H200"})
        assert missing["status"] == 404 and "in this catalog" in missing["detail"]


async def test_a_query_runpod_refuses_reaches_the_tool_as_lockgates_problem(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    async with mcp(runpod_mcp_bin, dev) as server:
        both = {"include": ["AVAILABILITY"], "product": ["POD"], "cudaVersions": ["12.4"],
                "minCudaVersion": "12"}  # fmt: skip
        refused = await server.failure("list-gpu-types", both)
        assert refused["status"] == 400
        assert (
            refused["detail"] == "cudaVersions and minCudaVersion are mutually exclusive: send one"
        )
        alone = await server.failure("list-cpu-types", {"include": ["AVAILABILITY"]})
        assert alone["status"] == 400 and "product is required" in alone["detail"]
