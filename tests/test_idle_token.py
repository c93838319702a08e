"""The idle token of a job-done whose `take=1` found the queue empty: the worker's next
job-take sends it (`?idle=`) and, while no job was queued since, waits at once instead of
running a take that would find nothing (one Redis round trip less per job for a worker
that is kept busy one job at a time). The gateways here re-check Redis only every 30 s,
so a job-take that slept through a queued job would be caught."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from redis.asyncio import Redis

from lockgate.gateway.state import GATEWAY
from lockgate.store import JobStore
from lockgate.store.keys import prefix
from tests.conftest import LiveGateway
from tests.redis_monitor import Commands, monitored
from tests.test_connections import requests_by_status
from tests.test_done_take import done
from tests.test_job_api import get, submit
from tests.test_lifecycle import eventually
from tests.test_worker_gateway import Worker
from tests.test_worker_stop import running_job

GATEWAY_SETTINGS = {"poll_fallback_s": 30.0, "take_wait_s": 2.0}
PROMPTLY_S = 10.0


async def idle_token(http, gw: LiveGateway, worker: str) -> str:
    """Run a job on `worker` and send its result with `take=1` on an empty queue, once the
    job's `q:` event has reached the gateway (a token read before it would turn stale at
    it: the gateway cannot tell that event was for this very job)."""
    notifier = gw.app[GATEWAY].notifier
    queued_before = notifier.generation(gw.endpoint)
    job_id = await running_job(http, gw, worker, {})
    await eventually(lambda: asyncio.sleep(0, notifier.generation(gw.endpoint) > queued_before))
    answer = await done(http, gw, worker, job_id, {"output": 1}, "?take=1")
    assert "job" not in answer
    return answer["idle"]


async def take_with(http, gw: LiveGateway, worker: str, idle: str) -> dict:
    url = gw.job_url(f"job-take/{worker}?job_in_progress=0&idle={idle}")
    async with http.get(url, headers=gw.worker_headers()) as resp:
        assert resp.status in (200, 204), await resp.text()
        return await resp.json() if resp.status == 200 else {}


def takes_run(redis: Redis, gw: LiveGateway, sent: Commands) -> int:
    """The take scripts run for the gateway's endpoint in the MONITOR record `sent`."""
    take = JobStore(redis).scripts.by_name["take"].sha
    return sent.count("EVALSHA", take, key=prefix(gw.endpoint))


async def test_a_take_with_a_current_token_waits_and_gets_the_next_job(http, gateway):
    idle = await idle_token(http, gateway, "w-1")
    taking = asyncio.create_task(take_with(http, gateway, "w-1", idle))
    await asyncio.sleep(0.3)
    assert not taking.done()
    job = await submit(http, gateway, {"input": {"n": 1}})
    assert (await asyncio.wait_for(taking, PROMPTLY_S))["id"] == job["id"]


async def test_a_job_queued_before_the_take_arrives_is_taken_at_once(http, gateway):
    idle = await idle_token(http, gateway, "w-1")
    job = await submit(http, gateway, {"input": {"n": 2}})
    taken = await asyncio.wait_for(take_with(http, gateway, "w-1", idle), PROMPTLY_S)
    assert taken["id"] == job["id"]


async def test_a_current_token_skips_the_take_and_a_stale_one_does_not(http, gateway, redis):
    idle = await idle_token(http, gateway, "w-1")

    async def takes_during(token: str) -> int:
        """Take scripts run by a job-take that waits its 2 s on an empty queue."""
        async with monitored(redis) as sent:
            assert await take_with(http, gateway, "w-1", token) == {}
        return takes_run(redis, gateway, sent)

    # One take when the wait is over (a last look before answering empty); the stale
    # token's take also takes first.
    assert await takes_during(idle) == 1
    stale = idle.rsplit(".", 1)[0] + ".999"
    assert await takes_during(stale) == 2
    assert await takes_during("not-a-token") == 2


async def test_the_runtime_kept_busy_one_job_at_a_time_skips_the_empty_takes(
    http, gateway, redis, tmp_path: Path
) -> None:
    """lockgate's runtime sends its idle token: per job one take finds it (woken by its
    submit) and one, sent with its result, finds the queue empty (3 queue pops); a
    job-take of its own that took first would add one more empty take (5 pops)."""
    worker = Worker(gateway, tmp_path)
    await worker.start("async")
    loop = asyncio.get_running_loop()
    try:
        await run_one(http, worker)  # the worker is up and waiting
        started = loop.time()
        polls_before = await job_takes(http, gateway)
        async with monitored(redis) as sent:
            for _ in range(JOBS):
                await run_one(http, worker)
        takes, took_s = takes_run(redis, gateway, sent), loop.time() - started
        polls = await job_takes(http, gateway) - polls_before
    finally:
        assert worker.process is not None
        worker.process.kill()
        await worker.process.wait()
    # A long-poll that reaches its 2 s deadline takes once more: at most one per 2 s
    # begun, however slow the machine is today.
    assert takes <= 2 * JOBS + math.ceil(took_s / 2) + 1, (takes, took_s)
    # Each result's answer waited (`wait=`) for the next job: no job-take between jobs
    # (one more only if a wait ran out on a slow machine; without the wait, one per job).
    assert polls <= 2, polls


async def job_takes(http, gw) -> int:
    """job-take requests the gateway has answered so far."""
    counts = await requests_by_status(http, gw.url)
    return sum(n for (route, _), n in counts.items() if route.endswith("/job-take/{worker}"))


JOBS = 20


async def run_one(http, worker: Worker) -> None:
    job_id = await worker.submit(http, sleep=0)
    _, body = await asyncio.wait_for(
        get(http, worker.gw, f"status/{job_id}?wait=10000"), PROMPTLY_S
    )
    assert body["status"] == "COMPLETED", body
    await asyncio.sleep(0.05)  # its result's answer is back at the worker, its take sent
