"""RunPod's own MCP server (@runpod/mcp-server 4.0.0, over stdio, `tests/mcp_server.py`)
against a real `lockgate dev`: its tool list, then each job tool with real jobs, checked by
what lockgate did (job states and counts read back through the job API), not only by what the
tool says. The management tools are issue 46's other parts (tests/test_mcp_*.py beside this).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests

from tests.conftest import eventually
from tests.devproc import DevProcess
from tests.mcp_server import VERSION, McpServer, ToolFailed, runpod_mcp, server_env

pytest_plugins = ["mcp_fixtures"]

JOBS = "mcp-jobs"  # the sleeper (tests/handlers/sleeper.py): one worker, never more
STREAM = "mcp-stream"  # a generator handler: one chunk per word
JOB_TOOLS = {
    "run-endpoint", "runsync-endpoint", "get-job-status", "stream-job", "cancel-job",
    "retry-job", "purge-endpoint-queue", "endpoint-health",
}  # fmt: skip
# Every tool of 4.0.0 (src/specgen/server.ts: the curated tools, then the generated ones in
# their spec's order), as tools/list answers them.
TOOLS_4_0_0 = [
    "list-endpoints", "list-templates", "run-endpoint", "runsync-endpoint", "get-job-status",
    "stream-job", "cancel-job", "retry-job", "endpoint-health", "purge-endpoint-queue",
    "stream-pod-logs", "stream-worker-logs", "get-capacity", "list-hub-repos",
    "deploy-hub-repo", "set-endpoint-gpus", "list-public-endpoints", "create-cluster",
    "create-delegation", "create-endpoint", "create-network-volume", "create-pod",
    "create-registry", "create-template", "delete-cluster", "delete-endpoint",
    "delete-network-volume", "delete-pod", "delete-registry", "delete-template", "get-cluster",
    "get-cpu-type", "get-data-center", "get-endpoint", "get-endpoint-build", "get-gpu-type",
    "get-network-volume", "get-pod", "get-registry", "get-ssh-keys", "get-template",
    "list-billing", "list-cluster-billing", "list-cluster-pods", "list-clusters",
    "list-cpu-types", "list-data-centers", "list-delegations", "list-endpoint-billing",
    "list-endpoint-builds", "list-endpoint-releases", "list-endpoint-workers",
    "list-gpu-types", "list-network-volume-billing", "list-network-volumes",
    "list-pod-billing", "list-pods", "list-public-templates", "list-registries",
    "list-serverless-billing", "pod-action", "revoke-delegation", "update-cluster",
    "update-endpoint", "update-network-volume", "update-pod", "update-ssh-keys",
    "update-template",
]  # fmt: skip
# The serverless tools issue 46 drives (its Tests section), management ones included.
ISSUE_46_TOOLS = JOB_TOOLS | {
    "create-template", "create-endpoint", "list-endpoints", "get-endpoint", "update-endpoint",
    "delete-endpoint", "list-endpoint-workers", "list-endpoint-releases", "stream-worker-logs",
    "list-gpu-types", "list-cpu-types", "list-data-centers", "list-registries",
    "create-registry", "list-network-volumes", "create-network-volume", "list-templates",
}  # fmt: skip


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` serving JOBS (one sleeper worker, so a long job holds the queue) and
    STREAM (made through /v1/endpoints)."""
    data = tmp_path_factory.mktemp("mcp-dev")
    sleeper = "python tests/handlers/sleeper.py async"
    args = ["--worker-command", sleeper, "--endpoint-id", JOBS, "--workers-min", "1"]
    with DevProcess(*args, "--workers-max", "1", data_dir=data) as dev:
        body = {"id": STREAM, "name": STREAM, "templateId": "tests/handlers/generator.py"}
        made = requests.post(f"{dev.url}/v1/endpoints", json=body, headers=dev.headers())
        assert made.status_code == 200, made.text
        yield dev


@pytest.fixture
async def job_api(dev: DevProcess) -> Any:
    """GET or POST on the job API of `dev` (as a client, not through the MCP server)."""
    async with aiohttp.ClientSession(headers=dev.headers()) as http:

        async def call(path: str, method: str = "GET") -> tuple[int, Any]:
            async with http.request(method, f"{dev.url}/v2/{path}") as r:
                return r.status, await r.json()

        yield call


def mcp(binary: Path, dev: DevProcess) -> Any:
    """RunPod's MCP server pointed at `dev` (management and job API on one port)."""
    return runpod_mcp(binary, api_key=dev.key, origin=dev.url)


async def status_of(job_api: Any, endpoint_id: str, job_id: str) -> str:
    code, body = await job_api(f"{endpoint_id}/status/{job_id}")
    assert code == 200, body
    return body["status"]


async def busy_worker(server: McpServer, job_api: Any, marks: Path) -> str:
    """A job holding JOBS' one worker (IN_PROGRESS, its handler started); its id."""
    long = {"sleep": 60, "marks": str(marks)}
    job = await server.call("run-endpoint", {"endpointId": JOBS, "input": long})
    await eventually(lambda: _exists(marks / f"{job['id']}.start"), "the long job to start")
    assert await status_of(job_api, JOBS, job["id"]) == "IN_PROGRESS"
    return job["id"]


async def _exists(path: Path) -> bool:
    return path.exists()


async def test_the_server_lists_every_tool_of_4_0_0(runpod_mcp_bin: Path, dev: DevProcess):
    async with mcp(runpod_mcp_bin, dev) as server:
        assert server.session.initialize_result.server_info.version == f"{VERSION} [specgen]"
        names = await server.tool_names()
    assert names == TOOLS_4_0_0
    assert set(names) >= ISSUE_46_TOOLS


def test_the_harness_points_every_host_the_stdio_server_reads_at_lockgate(runpod_mcp_bin: Path):
    """What 4.0.0's stdio server (dist/stdio.mjs and the chunks it imports; not the hosted
    http.mjs nor the `add` wizard) reads as a host is what `server_env` sets, so no call of a
    test goes to RunPod; its analytics need POSTHOG_API_KEY, which the harness never passes."""
    dist = runpod_mcp_bin.resolve().parent
    code = "".join(f.read_text() for f in [dist / "stdio.mjs", *dist.glob("chunk-*.mjs")])
    hosts = set(re.findall(r"env\.(RUNPOD_\w*URL)\b", code))
    env = server_env("k", "http://127.0.0.1:1")
    assert hosts == {name for name in env if name.endswith("URL")}
    assert all(value.startswith("http://127.0.0.1:1") for value in env.values() if "//" in value)
    assert "process.env.POSTHOG_API_KEY" in code and "POSTHOG_API_KEY" not in env


async def test_runsync_endpoint_answers_the_completed_job(
    runpod_mcp_bin: Path, dev: DevProcess, job_api
):
    async with mcp(runpod_mcp_bin, dev) as server:
        done = await server.call(
            "runsync-endpoint", {"endpointId": JOBS, "input": {"x": 1}, "wait": 60_000}
        )
    assert done["status"] == "COMPLETED" and done["output"] == {"echo": {"x": 1}}
    assert done["id"].startswith("sync-")
    code, stored = await job_api(f"{JOBS}/status/{done['id']}")
    assert code == 200 and stored["status"] == "COMPLETED"
    assert stored["output"] == {"echo": {"x": 1}}


async def test_run_endpoint_then_get_job_status_waits_until_it_completed(
    runpod_mcp_bin: Path, dev: DevProcess, job_api
):
    async with mcp(runpod_mcp_bin, dev) as server:
        queued = await server.call(
            "run-endpoint",
            {"endpointId": JOBS, "input": {"sleep": 1, "n": 2}, "policy": {"ttl": 600_000}},
        )
        assert queued["status"] in {"IN_QUEUE", "IN_PROGRESS"}
        done = await server.call(
            "get-job-status", {"endpointId": JOBS, "jobId": queued["id"], "wait": 60_000}
        )
        now = await server.call("get-job-status", {"endpointId": JOBS, "jobId": queued["id"]})
    assert done["id"] == queued["id"] and done["status"] == "COMPLETED"
    assert done["output"] == {"echo": {"sleep": 1, "n": 2}}
    assert now["status"] == "COMPLETED"
    assert await status_of(job_api, JOBS, queued["id"]) == "COMPLETED"


async def test_stream_job_collects_every_chunk_in_order(
    runpod_mcp_bin: Path, dev: DevProcess, job_api
):
    async with mcp(runpod_mcp_bin, dev) as server:
        job = await server.call("run-endpoint", {"endpointId": STREAM, "input": {"text": "a b c"}})
        streamed = await server.call("stream-job", {"endpointId": STREAM, "jobId": job["id"]})
    assert streamed["status"] == "COMPLETED"
    assert [c["output"] for c in streamed["stream"]] == [{"word": w} for w in "abc"]
    code, stored = await job_api(f"{STREAM}/status/{job['id']}")
    assert code == 200 and stored["status"] == "COMPLETED"
    assert stored["output"] == [{"word": w} for w in "abc"]  # the aggregate of the stream


async def test_cancel_job_cancels_a_queued_job_and_stops_a_running_one(
    runpod_mcp_bin: Path, dev: DevProcess, job_api, tmp_path: Path
):
    async with mcp(runpod_mcp_bin, dev) as server:
        running = await busy_worker(server, job_api, tmp_path)
        queued = await server.call("run-endpoint", {"endpointId": JOBS, "input": {"x": 2}})
        assert await status_of(job_api, JOBS, queued["id"]) == "IN_QUEUE"
        first = await server.call("cancel-job", {"endpointId": JOBS, "jobId": queued["id"]})
        second = await server.call("cancel-job", {"endpointId": JOBS, "jobId": running})
        again = await server.failure("cancel-job", {"endpointId": JOBS, "jobId": running})
    assert first == {"id": queued["id"], "status": "CANCELLED"}
    assert second == {"id": running, "status": "CANCELLED"}
    assert await status_of(job_api, JOBS, queued["id"]) == "CANCELLED"
    assert await status_of(job_api, JOBS, running) == "CANCELLED"
    # the handler itself was stopped, not left running: its sleep was cancelled
    await eventually(lambda: _exists(tmp_path / f"{running}.cancelled"), "the handler to stop")
    assert not (tmp_path / f"{running}.end").exists()
    # lockgate's own 400 reaches the agent as the tool's error
    assert "only IN_QUEUE or IN_PROGRESS jobs can be cancelled" in str(again)


async def test_retry_job_runs_a_failed_job_again(
    runpod_mcp_bin: Path, dev: DevProcess, job_api, tmp_path: Path
):
    _, before = await job_api(f"{JOBS}/health")
    failing = {"fail": "no model", "marks": str(tmp_path)}
    async with mcp(runpod_mcp_bin, dev) as server:
        job = await server.call("run-endpoint", {"endpointId": JOBS, "input": failing})
        failed = await server.call(
            "get-job-status", {"endpointId": JOBS, "jobId": job["id"], "wait": 60_000}
        )
        assert failed["status"] == "FAILED" and "no model" in failed["error"]
        (tmp_path / f"{job['id']}.start").unlink()
        retried = await server.call("retry-job", {"endpointId": JOBS, "jobId": job["id"]})
        assert retried == {"id": job["id"], "status": "IN_QUEUE"}
        again = await server.call(
            "get-job-status", {"endpointId": JOBS, "jobId": job["id"], "wait": 60_000}
        )
        done = await server.call("runsync-endpoint", {"endpointId": JOBS, "input": {}})
        refused = await server.failure("retry-job", {"endpointId": JOBS, "jobId": done["id"]})
    assert again["status"] == "FAILED" and "no model" in again["error"]
    assert (tmp_path / f"{job['id']}.start").exists()  # the handler ran it a second time
    _, after = await job_api(f"{JOBS}/health")
    assert after["jobs"]["retried"] == before["jobs"]["retried"] + 1
    assert "only FAILED or TIMED_OUT jobs can be retried" in str(refused)


async def test_purge_endpoint_queue_removes_the_queued_jobs_not_the_running_one(
    runpod_mcp_bin: Path, dev: DevProcess, job_api, tmp_path: Path
):
    async with mcp(runpod_mcp_bin, dev) as server:
        running = await busy_worker(server, job_api, tmp_path)
        queued = [
            (await server.call("run-endpoint", {"endpointId": JOBS, "input": {"i": i}}))["id"]
            for i in range(3)
        ]
        _, health = await job_api(f"{JOBS}/health")
        assert health["jobs"]["inQueue"] == 3
        purged = await server.call("purge-endpoint-queue", {"endpointId": JOBS})
        assert purged == {"removed": 3, "status": "completed"}
        _, health = await job_api(f"{JOBS}/health")
        assert health["jobs"]["inQueue"] == 0 and health["jobs"]["inProgress"] == 1
        for job_id in queued:
            code, body = await job_api(f"{JOBS}/status/{job_id}")
            assert code == 404, body  # gone with the queue
        assert await status_of(job_api, JOBS, running) == "IN_PROGRESS"
        await server.call("cancel-job", {"endpointId": JOBS, "jobId": running})  # frees it


async def test_endpoint_health_is_the_job_apis_health(
    runpod_mcp_bin: Path, dev: DevProcess, job_api
):
    async with mcp(runpod_mcp_bin, dev) as server:
        await server.call("runsync-endpoint", {"endpointId": JOBS, "input": {}})
        _, direct = await job_api(f"{JOBS}/health")
        health = await server.call("endpoint-health", {"endpointId": JOBS})
    assert set(health) == {"jobs", "workers"}
    assert health["jobs"]["completed"] >= 1
    assert health["jobs"]["completed"] == direct["jobs"]["completed"]
    assert health["jobs"]["failed"] == direct["jobs"]["failed"]
    assert health["workers"]["idle"] + health["workers"]["running"] == 1  # the one worker


async def test_a_job_tool_on_an_unknown_job_reports_lockgates_404(
    runpod_mcp_bin: Path, dev: DevProcess
):
    async with mcp(runpod_mcp_bin, dev) as server:
        missing = await server.failure("get-job-status", {"endpointId": JOBS, "jobId": "nope"})
        no_endpoint = await server.failure("endpoint-health", {"endpointId": "no-such-endpoint"})
        with pytest.raises(ToolFailed, match=r"job 'nope' not found") as failed:
            await server.call("cancel-job", {"endpointId": JOBS, "jobId": "nope"})
    assert 'tool_call {"tool":"cancel-job"' in str(
        failed.value
    )  # the server's own log line is shown
    assert missing["detail"] == {"error": "job 'nope' not found"}
    assert "Runpod runtime API error (404)" in missing["error"]
    assert no_endpoint["error"] == "Runpod runtime API error (404)"
