"""The worker API's unhealthy report (gateway/fitness_report.py): a runpod-SDK worker whose
fitness check fails is marked unhealthy with the check's name and reason and gets no job,
while a healthy worker takes the job submitted meanwhile; the route's query checks."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lockgate.models.unhealthy import REASON_CHARS
from lockgate.store import JobStore
from lockgate.workerenv import WORKER_DEFAULTS, worker_env, worker_id_env
from tests.conftest import LiveGateway
from tests.test_job_api import get, submit, take
from tests.test_lifecycle import _is, eventually, status_of
from tests.test_worker_local import REPO, exit_status
from tests.test_worker_local import worker_env as clean_env

TROUBLE = REPO / "tests" / "workers" / "runpod_trouble.py"


class SdkWorkers:
    """tests/workers/runpod_trouble.py run by the official runpod SDK, as the endpoint's
    workers of a live gateway (the environment a pool gives them), each logging to a file."""

    def __init__(self, gw: LiveGateway, tmp_path: Path) -> None:
        self.gw, self.tmp_path = gw, tmp_path
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self, worker_id: str, **env: str) -> asyncio.subprocess.Process:
        pool_env = worker_env(self.gw.url, self.gw.endpoint, self.gw.worker_key)
        full = clean_env(**WORKER_DEFAULTS, **pool_env, **worker_id_env(worker_id), **env)
        with (self.tmp_path / f"{worker_id}.log").open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, str(TROUBLE), env=full, stdout=log, stderr=log
            )
        self.processes.append(process)
        return process

    def log(self, worker_id: str) -> str:
        return (self.tmp_path / f"{worker_id}.log").read_text(errors="replace")


@pytest.fixture
async def sdk_workers(gateway: LiveGateway, tmp_path: Path) -> AsyncIterator[SdkWorkers]:
    workers = SdkWorkers(gateway, tmp_path)
    yield workers
    for process in workers.processes:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_failing_sdk_fitness_check_marks_its_worker_and_a_healthy_one_runs_the_job(
    http, gateway, redis, sdk_workers
):
    store = JobStore(redis)
    job_id = (await submit(http, gateway, {"input": {}}))["id"]
    sick = await sdk_workers.start("sick", TROUBLE_FITNESS="no GPU visible")
    assert await exit_status(sick, timeout_s=30) == 1
    log = sdk_workers.log("sick")
    assert "Fitness check failed: check_trouble | RuntimeError: no GPU visible" in log
    marked = await store.unhealthy_workers(gateway.endpoint)
    assert set(marked) == {"sick"}
    assert (marked["sick"].kind, marked["sick"].check) == ("fitness", "check_trouble")
    assert marked["sick"].reason == "RuntimeError: no GPU visible"
    assert await status_of(http, gateway, job_id) == "IN_QUEUE"
    assert await take(http, gateway, "sick") is None  # its id gets no job, ever

    await sdk_workers.start("well")
    await eventually(lambda: _is(status_of(http, gateway, job_id), "COMPLETED"), timeout_s=30)
    details = (await get(http, gateway, f"status/{job_id}?details=1"))[1]
    assert details["output"] == {"worker": "well"}
    assert [a["workerId"] for a in details["attemptHistory"]] == ["well"]


async def ping(http, gw: LiveGateway, worker: str, **query: str) -> tuple[int, dict]:
    url = gw.job_url(f"ping/{worker}")
    async with http.get(url, params=query, headers=gw.worker_headers()) as r:
        return r.status, await r.json()


async def test_an_unhealthy_ping_marks_the_worker_and_requeues_its_job(http, gateway, redis):
    job_id = (await submit(http, gateway, {"input": {}}))["id"]
    assert (await take(http, gateway, "w1"))["id"] == job_id
    status, body = await ping(
        http, gateway, "w1", status="unhealthy", check="check_disk", reason="OSError: full",
        runpod_version="1.12.0",
    )  # fmt: skip
    assert (status, body) == (200, {})
    why = (await JobStore(redis).unhealthy_workers(gateway.endpoint))["w1"]
    assert (why.worker, why.kind, why.check, why.reason) == (
        "w1",
        "fitness",
        "check_disk",
        "OSError: full",
    )
    assert await status_of(http, gateway, job_id) == "IN_QUEUE"
    assert await take(http, gateway, "w1") is None
    assert (await take(http, gateway, "w2"))["id"] == job_id


async def test_a_long_reason_is_cut_and_a_missing_one_said(http, gateway, redis):
    assert (await ping(http, gateway, "w1", status="unhealthy", reason="x" * 3_000))[0] == 200
    assert (await ping(http, gateway, "w2", status="unhealthy"))[0] == 200
    marked = await JobStore(redis).unhealthy_workers(gateway.endpoint)
    assert marked["w1"].reason == "x" * REASON_CHARS and marked["w1"].check is None
    assert marked["w2"].reason == "(no reason given)"


@pytest.mark.parametrize(
    ("check", "said"),
    [
        ("c" * 129, "at most 128 characters"),
        ("check\nforged", "printable"),
        ("a\x00b", "printable"),
    ],
)
async def test_a_bad_check_name_is_refused_with_400(http, gateway, redis, check, said):
    status, body = await ping(http, gateway, "w1", status="unhealthy", check=check, reason="r")
    assert status == 400
    assert "'check'" in body["error"] and said in body["error"]
    assert await JobStore(redis).unhealthy_workers(gateway.endpoint) == {}


@pytest.mark.parametrize("status", ["healthy", "UNHEALTHY", ""])
async def test_other_status_values_are_an_ordinary_heartbeat(http, gateway, redis, status):
    assert await ping(http, gateway, "w1", status=status, reason="r") == (200, {})
    assert await JobStore(redis).unhealthy_workers(gateway.endpoint) == {}
    job_id = (await submit(http, gateway, {"input": {}}))["id"]
    assert (await take(http, gateway, "w1"))["id"] == job_id


async def test_only_the_workers_own_key_may_report_it(http, gateway, redis):
    async with http.get(
        gateway.job_url("ping/w1"), params={"status": "unhealthy"}, headers=gateway.client_headers()
    ) as r:
        assert r.status == 401
    assert await JobStore(redis).unhealthy_workers(gateway.endpoint) == {}


async def test_health_counts_a_marked_worker_while_it_is_there_and_lists_why(http, gateway, redis):
    store = JobStore(redis)
    assert set((await get(http, gateway, "health"))[1]) == {"jobs", "workers"}  # RunPod's shape
    await store.report_worker_states(gateway.endpoint, initializing=0, throttled=0, unhealthy=1)
    await ping(http, gateway, "w1", status="unhealthy", check="check_gpu", reason="no GPU")
    health = (await get(http, gateway, "health"))[1]
    assert health["workers"]["unhealthy"] == 2  # the pool's crash-looping one, and w1
    [listed] = health["unhealthyWorkers"]
    assert listed.pop("at") > 0
    assert listed == {
        "id": "w1", "kind": "fitness", "check": "check_gpu", "reason": "no GPU", "present": True
    }  # fmt: skip
    await store.release_worker(gateway.endpoint, "w1")  # its control plane saw it go
    health = (await get(http, gateway, "health"))[1]
    assert health["workers"]["unhealthy"] == 1
    assert [(w["id"], w["present"]) for w in health["unhealthyWorkers"]] == [("w1", False)]
