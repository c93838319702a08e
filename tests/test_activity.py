"""Idle endpoints cost almost nothing (issue 32, item 3; gateway/activity.py).

A sweep that finds an endpoint quiet takes it out of the per-interval work of its gateway
process (sweeps, webhook claims, `/metrics` snapshot reads) until a sign of activity: a
`q:`/`a:`/`r:` event from any process, a request, or the full pass. Against a real Redis
and real gateways on loopback (two gateways stand for two processes or replicas).
"""

from __future__ import annotations

import asyncio

import aiohttp
from redis.asyncio import Redis

from conftest import eventually, make_settings, register, start_gateway
from lockgate.dev.redis_server import free_port
from lockgate.gateway.activity import Activity
from lockgate.gateway.state import GATEWAY
from lockgate.models.registry_entry import RegistryEntry
from lockgate.scaling.readings import parse_metrics
from lockgate.store import JobStore, NewJob, Registry
from lockgate.store.connection import RedisSettings
from lockgate.store.keys import prefix
from redis_monitor import Commands, monitored

HORIZON_MS = 62_000


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def quiet(store: JobStore, endpoint_id: str, horizon_ms: int = HORIZON_MS) -> bool:
    return (await store.sweep(endpoint_id, lock_ms=1, horizon_ms=horizon_ms)).quiet


async def test_the_sweep_calls_an_endpoint_quiet_only_when_nothing_is_left_to_look_after(
    redis: Redis,
) -> None:
    store = JobStore(redis)
    assert await quiet(store, "never-used")
    await store.submit("ep", NewJob(id="j1", input=b"{}", ttl_ms=3_600_000))
    assert not await quiet(store, "ep")  # queued
    [job], _ = await store.take("ep", "w1", 1, 60_000)
    assert not await quiet(store, "ep")  # running, and a live worker
    await store.finish("ep", "w1", job.id, output=b"1", error=None)
    assert not await quiet(store, "ep")  # its worker is still alive
    await store.release_worker("ep", "w1")
    # The result is kept 30 minutes: beyond the horizon, then within a longer one.
    assert await quiet(store, "ep")
    assert not await quiet(store, "ep", horizon_ms=31 * 60_000)
    await store.report_worker_states("ep", initializing=1, throttled=0, unhealthy=0)
    assert not await quiet(store, "ep")  # a pod starting
    await store.report_worker_states("ep", initializing=0, throttled=0, unhealthy=0)
    assert await redis.exists(prefix("ep") + "ws") == 0  # no state is no key
    assert await quiet(store, "ep")


async def test_a_quiet_endpoint_leaves_the_sweeps_until_marked_or_the_full_pass(
    redis: Redis,
) -> None:
    store, registry, clock = JobStore(redis), Registry(redis), Clock()
    activity = Activity(full_pass_s=60, clock=clock)
    for ep in ("a", "b", "c"):
        await registry.put_endpoint(ep, RegistryEntry(id=ep))
    await store.submit("b", NewJob(id="j1", input=b"{}", ttl_ms=3_600_000))

    async def one_pass() -> list[str]:
        swept = await activity.to_sweep(registry)
        for ep in swept:
            generation = activity.generation(ep)
            activity.swept(ep, quiet=await quiet(store, ep), generation=generation)
        return swept

    assert await one_pass() == ["a", "b", "c"]  # the first pass is a full one
    assert await one_pass() == ["b"]  # a job waits on b; a and c are quiet
    activity.mark("c")  # e.g. a worker's call
    assert await one_pass() == ["b", "c"]
    assert await one_pass() == ["b"]
    # A mark that comes while a sweep is out keeps the endpoint active.
    generation = activity.generation("a")
    activity.mark("a")
    activity.swept("a", quiet=True, generation=generation)
    assert "a" in activity.active
    assert await one_pass() == ["a", "b"]
    clock.now = 61.0  # a lost event is made up for by the full pass
    await registry.put_endpoint("d", RegistryEntry(id="d"))
    assert await one_pass() == ["a", "b", "c", "d"]


def _sha(redis: Redis, script: str) -> str:
    """The SHA1 of one of the store's scripts, as EVALSHA names it."""
    return JobStore(redis).scripts.by_name[script].sha


def _swept(redis: Redis, sent: Commands) -> set[str]:
    """The endpoints whose sweep script ran (its one key: the endpoint's prefix)."""
    prefixes = sent.keys_of("EVALSHA", _sha(redis, "sweep"), at=3)
    return {p.removeprefix("lg:{").removesuffix("}:") for p in prefixes}


async def _scrape(http: aiohttp.ClientSession, url: str) -> dict:
    async with http.get(f"{url}/metrics") as response:
        assert response.status == 200
        return parse_metrics(await response.text())


async def test_metrics_of_a_quiet_endpoint_cost_no_snapshot_and_follow_other_replicas(
    redis: Redis, redis_target: RedisSettings
) -> None:
    """Replica B serves /metrics; jobs and workers arrive through replica A."""
    client_key, _ = await register(redis, "echo")
    _, idle_worker_key = await register(redis, "idle")
    runners = []
    for _ in range(2):
        settings = make_settings(redis_target, free_port(), sweep_interval_s=0.2)
        runners.append(await start_gateway(settings))
    a, b = (f"http://127.0.0.1:{r.app[GATEWAY].settings.port}" for r in runners)
    b_activity = runners[1].app[GATEWAY].activity
    try:
        async with aiohttp.ClientSession() as http:
            await eventually(lambda: _true({"echo", "idle"} <= b_activity.quiet), "B: quiet")

            async def scrapes_read_no_snapshot() -> bool:
                """Five scrapes after one that read the quiet endpoints' snapshots: no
                snapshot read (the sweeps of A and B that ran meanwhile are not counted)."""
                await _scrape(http, b)
                async with monitored(redis) as sent:
                    for _ in range(5):
                        assert (await _scrape(http, b))["echo"].queued == 0
                return sent.count("EVALSHA", _sha(redis, "snapshot")) == 0

            # (A full pass, which reads the snapshots again, follows B's first subscription:
            # on a slow machine that may come after the endpoints were first found quiet.)
            await eventually(scrapes_read_no_snapshot, "scrapes that read no snapshot")

            # A job through A: B's next scrapes show it (the `q:` event marks it in B).
            async with http.post(
                f"{a}/v2/echo/run", json={"input": {}}, headers={"authorization": client_key}
            ) as response:
                assert response.status == 200

            async def queued_in_b() -> bool:
                return (await _scrape(http, b))["echo"].queued == 1

            async with monitored(redis) as sent:
                await eventually(queued_in_b, "B's /metrics to count the job")
            assert sent.count("EVALSHA", _sha(redis, "snapshot"), key=prefix("echo")) >= 1  # read

            # A worker new to a quiet endpoint, through A: B counts it (the `a:` event).
            assert "idle" in b_activity.quiet
            async with http.get(
                f"{a}/v2/idle/ping/w-1", headers={"authorization": idle_worker_key}
            ) as response:
                assert response.status == 200

            async def worker_in_b() -> bool:
                return (await _scrape(http, b))["idle"].workers_idle == 1

            await eventually(worker_in_b, "B's /metrics to count the new worker")
    finally:
        for runner in runners:
            await runner.cleanup()


async def _true(value: bool) -> bool:
    return value


async def test_a_resubscription_makes_the_next_sweep_a_full_pass(
    redis: Redis, redis_target: RedisSettings
) -> None:
    """Events published while the subscription is down are lost: when it (re)connects, the
    gateway sweeps every endpoint again at once rather than at the next periodic full pass
    (five minutes away)."""
    names = [f"rs-{i}" for i in range(40)]
    for name in names:
        await register(redis, name)
    # A busy endpoint (a job queued, never taken) is swept at every pass: it counts them.
    await register(redis, "busy")
    await JobStore(redis).submit("busy", NewJob(id="j1", input=b"{}", ttl_ms=3_600_000))
    settings = make_settings(redis_target, free_port(), sweep_interval_s=0.2)
    runner = await start_gateway(settings)
    activity = runner.app[GATEWAY].activity
    try:
        await eventually(lambda: _true(set(names) <= activity.quiet), "all quiet")

        async def unswept() -> bool:
            """Three passes (the busy endpoint swept three times), none of these swept."""
            async with monitored(redis) as sent:
                while sent.count("EVALSHA", _sha(redis, "sweep"), key=prefix("busy")) < 3:
                    await asyncio.sleep(0.05)
            return not _swept(redis, sent) & set(names)

        # (The first subscription counts as one: a second full pass may follow the first.)
        await eventually(unswept, "the quiet endpoints left out of the sweeps")
        async with monitored(redis) as sent:
            killed = await redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            assert killed >= 1
            swept_again = lambda: _true(set(names) <= _swept(redis, sent))  # noqa: E731
            await eventually(swept_again, "a full pass after the resubscription")
    finally:
        await runner.cleanup()
