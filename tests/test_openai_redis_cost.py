"""A non-streaming OpenAI request reads its job from Redis no more often than the same job
through /runsync (a real `lockgate dev` with the bench's vLLM-style handler; Redis's own
command counters). Each read is a round trip on the gateway's busiest path."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from bench import load
from bench.measure import wait_workers
from bench.openai_route import HANDLER, Route, routes
from bench.procs import Service, lockgate_dev

REQUESTS = 100
JOB_READ = "cmdstat_hmget"  # JobStore.get: the job record's fields


async def job_reads(dev: Service) -> int:
    """Job record reads (HMGET) Redis has served so far (INFO commandstats)."""
    client = Redis(port=dev.redis_port)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return stats[JOB_READ]["calls"]


async def reads_per_request(dev: Service, route: Route) -> float:
    """Job reads per completed request of `route`, one request at a time."""
    async with load.session(1) as http:
        before = await job_reads(dev)
        for _ in range(REQUESTS):
            assert route.marker in await load.post(http, route.url, route.body)
        return (await job_reads(dev) - before) / REQUESTS


async def test_an_openai_completion_reads_its_job_as_often_as_runsync(tmp_path: Path) -> None:
    with lockgate_dev(tmp_path, "cost", 1, {}, handler=HANDLER) as dev:
        async with load.session(1) as http:
            await wait_workers(http, dev, 1)
        openai, runsync = routes(dev)
        per_openai = await reads_per_request(dev, openai)
        per_runsync = await reads_per_request(dev, runsync)
    # Other readers (worker pings, the scaler) may fall into either count: a tenth of a
    # read per request is noise, one is a round trip more (reading a job just queued).
    assert per_openai <= per_runsync + 0.5, (per_openai, per_runsync)
