"""Gateway memory is bounded by its body budget, whatever clients and workers send at once:
a real `lockgate gateway` process, sized by a memory figure as the chart sizes it, refuses
bodies past its budget with 503 and Retry-After, takes jobs for workers only as its budget
allows, and its peak RSS stays under that figure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from lockgate.gateway.worker_api import CLIENT_ROOM, MAX_JOB_BYTES, take_room
from lockgate.settings import MIN_BODY_BUDGET, Settings
from tests.gateway_process import GatewayProcess, run_gateway

MIB = 1024 * 1024
# The gateway's memory figure (LOCKGATE_MEMORY_LIMIT_BYTES, as the chart passes its limit):
# its body budget is derived from it, and its peak RSS must stay below it.
MEMORY_FIGURE = 400 * MIB
BODY = orjson.dumps({"input": {"blob": "x" * (99 * MIB // 10)}})  # a 9.9 MB /run body
INPUT_9MB = {"input": {"blob": "y" * (9 * MIB)}}


@pytest.fixture
async def gateway_process(redis, redis_server, tmp_path) -> AsyncIterator[GatewayProcess]:
    env = {
        "LOCKGATE_MEMORY_LIMIT_BYTES": str(MEMORY_FIGURE),
        "LOCKGATE_TAKE_WAIT_S": "2",
        "LOCKGATE_MAX_QUEUED_BYTES": "0",  # 360 MB queued here: no quota (test_quotas.py)
    }
    async with run_gateway(redis, redis_server, tmp_path, env) as gw:
        yield gw


def test_the_body_budget_is_derived_from_the_memory_figure() -> None:
    budget = Settings(memory_limit_bytes=MEMORY_FIGURE).body_budget()
    assert budget == (MEMORY_FIGURE - 160 * MIB) // 4
    assert Settings(memory_limit_bytes=100 * MIB).body_budget() == 21 * MIB, "one body fits"
    assert (
        Settings(body_budget_bytes=50 * MIB, memory_limit_bytes=MEMORY_FIGURE).body_budget()
        == 50 * MIB
    )


async def test_concurrent_large_bodies_past_the_budget_get_503_and_memory_stays_bounded(
    gateway_process: GatewayProcess,
) -> None:
    gw = gateway_process
    url = f"{gw.url}/v2/echo/run"
    headers = {**gw.client, "Content-Type": "application/json"}

    async def post(http: aiohttp.ClientSession) -> tuple[int, str | None]:
        try:
            async with http.post(url, data=BODY, headers=headers) as r:
                await r.read()
                return r.status, r.headers.get("Retry-After")
        except aiohttp.ClientError:  # refused early: the gateway closed before all was sent
            return -1, None

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        answers = await asyncio.gather(*(post(http) for _ in range(48)))
    statuses = sorted({status for status, _ in answers})
    accepted = sum(status == 200 for status, _ in answers)
    refused = [retry for status, retry in answers if status == 503]
    print(f"48 x 9.9 MB /run: {accepted} accepted, {len(refused)} refused with 503, "
          f"peak RSS {gw.peak_rss() / MIB:.0f} MiB")  # fmt: skip
    assert set(statuses) <= {200, 503, -1}, statuses
    assert accepted >= 1 and refused, statuses
    assert all(retry for retry in refused), "every 503 says when to retry"
    assert gw.peak_rss() < MEMORY_FIGURE, f"peak RSS {gw.peak_rss() / MIB:.0f} MiB"


async def test_batch_and_concurrent_takes_of_large_jobs_stay_within_the_budget(
    gateway_process: GatewayProcess,
) -> None:
    gw = gateway_process
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        for _ in range(40):  # one at a time: each fits the budget
            async with http.post(f"{gw.url}/v2/echo/run", json=INPUT_9MB, headers=gw.client) as r:
                assert r.status == 200, await r.text()
        batch = f"{gw.url}/v2/echo/job-take-batch/w-batch?batch_size=20"
        async with http.get(batch, headers=gw.worker) as r:
            assert r.status == 200, await r.text()
            jobs = await r.json()
        taken = sum(len(orjson.dumps(job["input"])) for job in jobs)
        assert 1 <= len(jobs) < 20 and taken <= 32 * MIB, (len(jobs), taken)

        async def take(worker: int) -> int:
            async with http.get(f"{gw.url}/v2/echo/job-take/w{worker}", headers=gw.worker) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(take(n) for n in range(30)))
    print(f"batch of 20 x 9 MB: {len(jobs)} taken; 30 concurrent takes: "
          f"{statuses.count(200)} jobs; peak RSS {gw.peak_rss() / MIB:.0f} MiB")  # fmt: skip
    assert set(statuses) <= {200, 204}, statuses
    assert gw.peak_rss() < MEMORY_FIGURE, f"peak RSS {gw.peak_rss() / MIB:.0f} MiB"


def test_takes_leave_room_for_clients_and_the_smallest_budget_still_takes() -> None:
    """A take reserves at least the largest job and never the budget's last CLIENT_ROOM
    bytes: a batch pool's workers taking at once left a small `/runsync` no room (a 503,
    seen by `make bench-batching`)."""
    assert take_room(MIN_BODY_BUDGET, MAX_JOB_BYTES) == MAX_JOB_BYTES  # nothing else held
    assert take_room(256 * MIB, 64 * MIB) == 64 * MIB
    assert take_room(40 * MIB, 64 * MIB) == 40 * MIB - CLIENT_ROOM
    assert take_room(MAX_JOB_BYTES + CLIENT_ROOM - 1, 64 * MIB) is None  # it waits for room
    assert take_room(MAX_JOB_BYTES, MAX_JOB_BYTES) is None
