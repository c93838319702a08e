"""Script calls batched per loop tick: each caller gets its own reply, error or recovery."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from lockgate.store import JobStore, NewJob
from lockgate.store.connection import RedisSettings, connect, send_on_one
from lockgate.store.scripts import Scripts


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
