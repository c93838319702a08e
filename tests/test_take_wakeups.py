"""Waiting job-takes are woken by submits, across replicas, even though a submit publishes
its wake-up only when the queue was empty. The gateways here re-check Redis only every
30 s, so any wake-up that went missing would leave a taker empty-handed."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
from redis.asyncio import Redis

from lockgate.dev.redis_server import free_port
from lockgate.store import JobStore, NewJob, keys
from tests.conftest import LiveGateway, make_settings, start_gateway
from tests.test_job_api import submit, take

GATEWAY_SETTINGS = {"poll_fallback_s": 30.0, "take_wait_s": 20.0}
PROMPTLY_S = 10.0  # well under poll_fallback_s: only a wake-up gets a taker its job by then


async def waiting_takers(http, gw: LiveGateway, workers: list[str]) -> list[asyncio.Task]:
    """Long-polls that have gone to sleep on an empty queue, in the order given."""
    takers = []
    for worker in workers:
        takers.append(asyncio.create_task(take(http, gw, worker)))
        await asyncio.sleep(0.2)  # let it reach its wait
    assert not any(t.done() for t in takers)
    return takers


async def queued_at_once(redis: Redis, gw: LiveGateway, n: int) -> set[str]:
    """Queue `n` jobs in one transaction: the first finds the queue empty and publishes, the
    rest find it full and publish nothing, and no taker can run in between."""
    store, ids = JobStore(redis), [uuid.uuid4().hex for _ in range(n)]
    async with redis.pipeline(transaction=True) as pipe:
        for job_id in ids:
            job = NewJob(id=job_id, input=b"{}", ttl_ms=60_000)
            args = store.submit_args(gw.endpoint, job)
            submit = store.scripts.by_name["submit"]  # the script itself, into the transaction
            await submit(keys=[keys.prefix(gw.endpoint)], args=args, client=pipe)
        assert await pipe.execute() == [[i.encode(), b"IN_QUEUE"] for i in ids]
    return set(ids)


async def taken_ids(takers: list[asyncio.Task]) -> set[str]:
    jobs = await asyncio.wait_for(asyncio.gather(*takers), PROMPTLY_S)
    return {job["id"] for job in jobs}


async def test_a_burst_of_submits_wakes_every_waiting_taker(http, gateway, redis):
    takers = await waiting_takers(http, gateway, ["w1", "w2", "w3", "w4"])
    ids = await queued_at_once(redis, gateway, 4)
    assert await taken_ids(takers) == ids


async def test_submits_over_http_wake_every_waiting_taker(http, gateway):
    takers = await waiting_takers(http, gateway, ["w1", "w2", "w3"])
    submits = [submit(http, gateway, {"input": {"n": n}}) for n in range(3)]
    ids = {job["id"] for job in await asyncio.gather(*submits)}
    assert await taken_ids(takers) == ids


async def test_waiting_takers_on_two_replicas_are_all_woken(http, gateway, redis, redis_server):
    second = await start_gateway(
        make_settings(redis_server.url, port := free_port(), **GATEWAY_SETTINGS)
    )
    try:
        other = LiveGateway(
            f"http://127.0.0.1:{port}", gateway.endpoint, gateway.client_key,
            gateway.worker_key, gateway.settings, second.app,
        )  # fmt: skip
        takers = await waiting_takers(http, gateway, ["a1", "a2"])
        takers += await waiting_takers(http, other, ["b1", "b2", "b3"])
        ids = await queued_at_once(redis, gateway, 5)
        assert await taken_ids(takers) == ids
    finally:
        await second.cleanup()


async def test_a_taker_woken_after_its_worker_hung_up_passes_the_wake_up_on(http, gateway):
    async with aiohttp.ClientSession() as other_connection:
        gone = (await waiting_takers(other_connection, gateway, ["gone"]))[0]
        gone.cancel()  # the worker hangs up; its long-poll is still first in line
        await asyncio.sleep(0.2)
    takers = await waiting_takers(http, gateway, ["w1"])
    job = await submit(http, gateway, {"input": {}})
    assert await taken_ids(takers) == {job["id"]}
