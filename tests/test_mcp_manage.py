"""RunPod's own MCP server (@runpod/mcp-server 4.0.0, over stdio, `tests/mcp_server.py`)
managing a real `lockgate dev` through REST v2 (issue 46): templates, endpoints (QUEUE from a
template, LOAD_BALANCER from an image), registries and network volumes, each tool in turn,
checked by what lockgate then holds (read back through v1, a job run through the endpoint).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.devproc import DevProcess
from tests.mcp_server import runpod_mcp

pytest_plugins = ["mcp_fixtures"]

ECHO_ARGS = "python tests/handlers/sync_echo.py"  # dev mode runs a template's args


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("mcp-manage")
    args = ["--worker-command", ECHO_ARGS, "--endpoint-id", "mcp-cli"]
    with DevProcess(*args, data_dir=data) as dev:
        yield dev


def v1(dev: DevProcess, path: str) -> tuple[int, Any]:
    answer = requests.get(f"{dev.url}/v1{path}", headers=dev.headers(), timeout=10)
    return answer.status_code, answer.json()


def mcp(binary: Path, dev: DevProcess) -> Any:
    return runpod_mcp(binary, api_key=dev.key, origin=dev.url)


async def test_templates_and_a_queue_endpoint_from_one_are_managed_and_run(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    async with mcp(runpod_mcp_bin, dev) as server:
        template = await server.call(
            "create-template",
            {"body": {"name": "mcp echo", "image": "python:3.12-slim", "args": ECHO_ARGS,
                      "serverless": True, "env": {"FROM": "template"}}},
        )  # fmt: skip
        assert template["args"] == ECHO_ARGS and template["serverless"] is True
        listed = await server.call("list-templates")
        assert template["id"] in str(listed)
        got = await server.call("get-template", {"id": template["id"]})
        assert got == template
        changed = await server.call(
            "update-template", {"id": template["id"], "body": {"env": {"FROM": "edited"}}}
        )
        assert changed["env"] == {"FROM": "edited"}

        body = {
            "name": "mcp queue", "type": "QUEUE", "templateId": template["id"],
            "cpu": [{"id": "cpu3c", "vcpuCount": 2}], "env": {"MINE": "1"},
            "workers": {"min": 1, "max": 1, "idleTimeout": 5},
            "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
        }  # fmt: skip
        endpoint = await server.call("create-endpoint", {"body": body})
        assert endpoint["type"] == "QUEUE" and endpoint["env"] == {"FROM": "edited", "MINE": "1"}
        endpoint_id = endpoint["id"]
        status, record = v1(dev, f"/endpoints/{endpoint_id}")
        assert status == 200 and record["workersMin"] == 1 and record["templateId"] == endpoint_id

        listed = await server.call("list-endpoints")
        assert endpoint_id in {e["id"] for e in listed["items"]}, listed
        assert await server.call("get-endpoint", {"id": endpoint_id}) == endpoint

        done = await server.call(
            "runsync-endpoint", {"endpointId": endpoint_id, "input": {"via": "mcp"}}
        )
        assert done["status"] == "COMPLETED" and done["output"] == {"echo": {"via": "mcp"}}

        after = await server.call(
            "update-endpoint",
            {"id": endpoint_id, "body": {"workers": {"min": 0, "max": 2, "idleTimeout": 5}}},
        )
        assert after["workers"] == {"min": 0, "max": 2, "idleTimeout": 5}
        status, record = v1(dev, f"/endpoints/{endpoint_id}")
        assert record["workersMax"] == 2

        # the template is in use no more once the endpoint is gone (its own bound template
        # goes with it)
        await server.call("delete-endpoint", {"id": endpoint_id})
        status, _ = v1(dev, f"/endpoints/{endpoint_id}")
        assert status == 404
        await server.call("delete-template", {"id": template["id"]})
        status, _ = v1(dev, f"/templates/{template['id']}")
        assert status == 404


async def test_a_load_balancer_endpoint_from_an_image_and_its_errors(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    async with mcp(runpod_mcp_bin, dev) as server:
        body = {
            "name": "mcp lb", "type": "LOAD_BALANCER", "image": "python:3.12-slim",
            "args": "python examples/loadbalancer/worker.py",
            "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
            "scaling": {"type": "REQUEST_COUNT", "requestCount": 4},
        }  # fmt: skip
        endpoint = await server.call("create-endpoint", {"body": body})
        assert endpoint["type"] == "LOAD_BALANCER"
        base = f"{dev.url}/lb/{endpoint['id']}"
        assert endpoint["requestUrls"] == {"base": base, "health": f"{base}/ping"}
        # a 400 of lockgate's rules reaches the tool's caller in the problem's words
        refused = await server.failure(
            "update-endpoint", {"id": endpoint["id"], "body": {"gpu": {"pools": ["ADA_24"]}}}
        )
        assert "this is a CPU endpoint" in str(refused)
        await server.call("delete-endpoint", {"id": endpoint["id"]})


async def test_registries_and_network_volumes_are_managed(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    async with mcp(runpod_mcp_bin, dev) as server:
        registry = await server.call(
            "create-registry", {"body": {"name": "mine", "username": "u", "password": "p4ss"}}
        )
        assert set(registry) == {"id", "name"}
        listed = await server.call("list-registries")
        assert "p4ss" not in str(listed) and registry["id"] in str(listed)
        assert await server.call("get-registry", {"id": registry["id"]}) == registry
        await server.call("delete-registry", {"id": registry["id"]})

        volume = await server.call(
            "create-network-volume", {"body": {"name": "data", "size": 10, "dataCenter": "local"}}
        )
        assert volume["size"] == 10
        grown = await server.call(
            "update-network-volume", {"id": volume["id"], "body": {"size": 20}}
        )
        assert grown["size"] == 20
        assert volume["id"] in str(await server.call("list-network-volumes"))
        assert (await server.call("get-network-volume", {"id": volume["id"]}))["size"] == 20
        await server.call("delete-network-volume", {"id": volume["id"]})


async def test_set_endpoint_gpus_pins_one_type_of_a_pool_and_a_cuda_floor(
    runpod_mcp_bin: Path, dev: DevProcess
) -> None:
    async with mcp(runpod_mcp_bin, dev) as server:
        body = {
            "name": "mcp gpu", "type": "QUEUE", "image": "python:3.12-slim", "args": ECHO_ARGS,
            "gpu": {"pools": ["ADA_24"], "count": 1},
            "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
        }  # fmt: skip
        endpoint = await server.call("create-endpoint", {"body": body})
        pinned = await server.call(
            "set-endpoint-gpus",
            {"endpointId": endpoint["id"], "pools": ["AMPERE_24"], "minCudaVersion": "12.4",
             "excludeGpuTypeIds": ["NVIDIA RTX A5000", "NVIDIA GeForce RTX 3090"], "gpuCount": 2},
        )  # fmt: skip
        assert pinned["endpoint"]["gpuCount"] == 2
        _, record = v1(dev, f"/endpoints/{endpoint['id']}")
        assert record["gpuTypeIds"] == ["NVIDIA L4"] and record["gpuCount"] == 2
        assert record["allowedCudaVersions"] == ["12.4"]
        await server.call("delete-endpoint", {"id": endpoint["id"]})
