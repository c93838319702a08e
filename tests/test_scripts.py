"""Script calls batched per loop tick: each caller gets its own reply, error or recovery."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from lockgate.store import JobStore, NewJob
from lockgate.store.connection import RedisSettings, connect, send_on_one
from lockgate.store.scripts import Scripts
from tests.conftest import LiveGateway


async def test_concurrent_calls_each_get_their_own_reply(redis: Redis):
    store = JobStore(redis)
    jobs = [NewJob(id=f"j{n}", input=b'{"n": %d}' % n, ttl_ms=600_000) for n in range(50)]
    await asyncio.gather(*(store.submit("ep", job) for job in jobs))
    got = await asyncio.gather(*(store.get("ep", job.id) for job in jobs))
    assert [record.id for record in got] == [job.id for job in jobs]
    taken = await asyncio.gather(*(store.take("ep", f"w{n}", 1, 60_000) for n in range(50)))
    assert sorted(job.id for batch, _ in taken for job in batch) == sorted(j.id for j in jobs)


async def test_an_error_in_one_call_fails_that_call_alone(redis: Redis):
    both = Scripts(
        redis,
        {
            "boom": redis.register_script("return redis.error_reply('boom')"),
            "ok": redis.register_script("return ARGV[1]"),
        },
    )
    results = await asyncio.gather(
        both.ok(keys=[], args=["a"]), both.boom(), both.ok(args=["b"]), return_exceptions=True
    )
    assert results[0] == b"a" and results[2] == b"b"
    assert isinstance(results[1], ResponseError) and "boom" in str(results[1])


@pytest.mark.parametrize("calls", [1, 8])
async def test_scripts_flushed_from_redis_are_loaded_again(redis: Redis, calls: int):
    scripts = Scripts(redis, {"echo": redis.register_script("return ARGV[1]")})
    assert await scripts.echo(args=["x"]) == b"x"
    await redis.script_flush()  # what a Redis restart without persistence of scripts does
    replies = await asyncio.gather(*(scripts.echo(args=[str(n)]) for n in range(calls)))
    assert replies == [str(n).encode() for n in range(calls)]


FLUSH_JOBS = 300  # submitted by FLUSH_CLIENTS clients while FLUSH_WORKERS workers run them
FLUSH_CLIENTS, FLUSH_WORKERS = 4, 4
FLUSHED_GATEWAY = {"rate_limited": False}


@pytest.mark.parametrize("gateway_settings", [FLUSHED_GATEWAY], indirect=True)
async def test_scripts_flushed_again_and_again_under_load_fail_no_request(http, gateway, redis):
    """SCRIPT FLUSH on the serving master(s), again and again while jobs are submitted and
    run: what a failover to a replica without the scripts does, forced, so the test does
    not wait for the race. A NOSCRIPT anywhere (a lone call, a tick's batch, an accepting
    write and its WAIT, a call sent once more after a redirection) is answered by running
    the script again where it failed: every /run is acknowledged (200, never 500) and every
    job completes."""
    accepted = await scripts_flushed_under_load(http, gateway, redis)
    assert len(accepted) == FLUSH_JOBS


async def scripts_flushed_under_load(http, gw: LiveGateway, redis: Redis) -> set[str]:
    """Submit FLUSH_JOBS jobs and run them to completion while `redis` flushes its scripts
    (on every master) every few milliseconds; every answer must be a 200 (or 204 to a
    take); the ids accepted, once each is COMPLETED."""
    accepted: set[str] = set()
    done: set[str] = set()
    pending = iter(range(FLUSH_JOBS))
    stop = asyncio.Event()
    flushes = 0

    async def flusher() -> None:
        nonlocal flushes
        while not stop.is_set():
            await redis.script_flush()
            flushes += 1
            await asyncio.sleep(0.002)

    async def client() -> None:
        for n in pending:
            url, body = gw.job_url("run"), {"input": {"n": n}}
            async with http.post(url, json=body, headers=gw.client_headers()) as r:
                assert r.status == 200, (r.status, await r.text())
                accepted.add((await r.json())["id"])

    async def worker(i: int) -> None:
        while len(done) < FLUSH_JOBS:
            url = gw.job_url(f"job-take-batch/w{i}?batch_size=5")
            async with http.get(url, headers=gw.worker_headers()) as r:
                assert r.status in (200, 204), (r.status, await r.text())
                jobs = await r.json() if r.status == 200 else []
            for job in jobs:
                url = gw.job_url(f"job-done/w{i}/{job['id']}?isStream=false")
                body = {"output": job["input"]}
                async with http.post(url, json=body, headers=gw.worker_headers()) as r:
                    assert r.status == 200, (r.status, await r.text())
                done.add(job["id"])

    flushing = asyncio.create_task(flusher())
    try:
        async with asyncio.timeout(90):
            await asyncio.gather(
                *(client() for _ in range(FLUSH_CLIENTS)),
                *(worker(i) for i in range(FLUSH_WORKERS)),
            )
    finally:
        stop.set()
        await flushing
    assert flushes > 10, flushes  # the scripts were flushed while the jobs ran
    assert done == accepted
    for job_id in sorted(accepted):
        async with http.get(gw.job_url(f"status/{job_id}"), headers=gw.client_headers()) as r:
            assert (await r.json())["status"] == "COMPLETED"
    return accepted


async def test_a_batch_cut_before_its_replies_leaves_no_reply_for_the_next(
    redis_target: RedisSettings,
):
    client = connect(redis_target, max_connections=1)  # the next batch gets the same socket
    try:
        cut = asyncio.create_task(send_on_one(client, [("BLPOP", "nothing", 0.3)]))
        await asyncio.sleep(0.1)  # sent; its reply (nil) comes at 0.3 s
        cut.cancel()
        await asyncio.sleep(0.3)
        assert await send_on_one(client, [("ECHO", "a"), ("ECHO", "b")]) == [b"a", b"b"]
    finally:
        await client.aclose()
