"""A non-streaming OpenAI request reads its job from Redis no more often than the same job
through /runsync (a real `lockgate dev` with the bench's vLLM-style handler; Redis's own
MONITOR, the reads of each request's own job counted). Each read is a round trip on the
gateway's busiest path."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import orjson
from redis.asyncio import Redis

from bench import load
from bench.measure import wait_workers
from bench.openai_route import HANDLER, Route, routes
from bench.procs import ENDPOINT, Service, lockgate_dev
from lockgate.gateway.openai_api import JOB_HEADER
from lockgate.store import keys
from tests.redis_monitor import monitored

REQUESTS = 100


async def job_of(http: aiohttp.ClientSession, route: Route) -> str:
    """Make one request of `route`; the id of the job it ran."""
    async with http.post(route.url, data=route.body) as reply:
        data = await reply.read()
        assert reply.status == 200 and route.marker in data, data[:200]
        return reply.headers.get(JOB_HEADER) or orjson.loads(data)["id"]


async def reads_per_request(dev: Service, route: Route) -> float:
    """Reads of its job record (JobStore.get: an HMGET of the job's key, which nothing but a
    request following its job sends; the scripts read inside Redis) per completed request
    of `route`, one request at a time, counted in a MONITOR record of the dev's Redis."""
    client = Redis(port=dev.redis_port, password=dev.redis_password)
    try:
        async with load.session(1) as http, monitored(client) as sent:
            ids = [await job_of(http, route) for _ in range(REQUESTS)]
    finally:
        await client.aclose()
    records = {keys.job(ENDPOINT, job_id) for job_id in ids}
    reads = sum(1 for args in sent.seen if args[0].upper() == "HMGET" and args[1] in records)
    return reads / REQUESTS


async def test_an_openai_completion_reads_its_job_as_often_as_runsync(tmp_path: Path) -> None:
    with lockgate_dev(tmp_path, "cost", 1, {}, handler=HANDLER) as dev:
        async with load.session(1) as http:
            await wait_workers(http, dev, 1)
        openai, runsync = routes(dev)
        per_openai = await reads_per_request(dev, openai)
        per_runsync = await reads_per_request(dev, runsync)
    # When the job's end event comes against a wait's timeout varies a tenth of a read per
    # request; one more is a round trip more (reading a job just queued).
    assert per_openai <= per_runsync + 0.5, (per_openai, per_runsync)
