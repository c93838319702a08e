"""Rate and concurrency limits: the spec's table, per owner/endpoint/operation, the dynamic
rule, and limits shared by two gateways on one Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack

import pytest
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.gateway.limits import (
    Limiter,
    effective_rate,
    rate_batch,
    retry_after_s,
    slot_batch,
)
from lockgate.models.limits import (
    DEFAULT_LIMITS,
    LimitOverride,
    Operation,
    OperationLimit,
    limits_table,
)
from lockgate.store import JobStore, Registry, keys
from lockgate.store.limits import Grant, RateLimits
from tests.conftest import eventually, make_settings, register, start_gateway

ROUTES = {
    Operation.RUNSYNC: ("POST", "runsync?wait=1000"),
    Operation.RUN: ("POST", "run"),
    Operation.STATUS: ("GET", "status/nope"),
    Operation.STREAM: ("GET", "stream/nope"),
    Operation.CANCEL: ("POST", "cancel/nope"),
    Operation.RETRY: ("POST", "retry/nope"),
    Operation.PURGE_QUEUE: ("POST", "purge-queue"),
    Operation.HEALTH: ("GET", "health"),
}


# Windows are aligned to the clock: an hour-long one keeps a test's few requests in one
# window (a 10-second one would sometimes split them); the 1-second test aligns itself.
HOUR_WINDOW = {"rate_limit_window_s": 3600.0}


GATEWAY_SETTINGS = HOUR_WINDOW


async def call(http, url: str, key: str, op: Operation = Operation.HEALTH, endpoint="echo"):
    method, path = ROUTES[op]
    body = {"input": {}} if method == "POST" else None
    target = f"{url}/v2/{endpoint}/{path}"
    async with http.request(method, target, json=body, headers={"authorization": key}) as r:
        return r.status, r.headers.get("Retry-After"), await r.json()


def limited(op: str, **limit) -> dict:
    return {"rate_limits": {op: limit}}


# -- the table and the decisions (pure)


def test_the_default_table_is_the_specs():
    spec = {  # the spec's "Limits" table: per 10 seconds, and in flight
        "runsync": (2000, 400), "run": (1000, 200), "status": (2000, 400),
        "stream": (2000, 400), "cancel": (100, 20), "purge-queue": (2, None),
    }  # fmt: skip
    for op, (rate, concurrency) in spec.items():
        limit = DEFAULT_LIMITS[Operation(op)]
        assert (limit.rate, limit.concurrency) == (rate, concurrency), op


@pytest.mark.parametrize(
    ("base", "running", "per_worker", "effective"),
    [
        (2000, 20, 50, 2000),  # the spec's examples
        (2000, 50, 50, 2500),
        (2000, 0, 50, 2000),
        (2, 1000, 0, 2),  # no dynamic rule for the operation
        (None, 100, 50, None),  # no limit stays no limit
    ],
)
def test_the_dynamic_rule_takes_the_larger_of_base_and_workers(
    base, running, per_worker, effective
):
    assert effective_rate(base, running, per_worker) == effective


@pytest.mark.parametrize(("ms", "seconds"), [(0, 1), (1, 1), (999, 1), (1001, 2), (9500, 10)])
def test_retry_after_is_whole_seconds_and_never_zero(ms, seconds):
    assert retry_after_s(ms) == seconds


def test_overrides_change_only_the_fields_they_name_and_zero_removes_a_limit():
    table = limits_table(
        {
            Operation.STATUS: LimitOverride(rate=5),
            Operation.RUN: LimitOverride(concurrency=0, requests_per_worker=7),
        }
    )
    assert table[Operation.STATUS] == OperationLimit(
        rate=5, concurrency=400, requests_per_worker=50
    )
    assert table[Operation.RUN] == OperationLimit(
        rate=1000, concurrency=None, requests_per_worker=7
    )
    assert table[Operation.CANCEL] == DEFAULT_LIMITS[Operation.CANCEL]


# -- each limit, live


@pytest.mark.parametrize("op", list(ROUTES))
async def test_each_operation_is_refused_past_its_rate_with_retry_after(http, gateway, op):
    port = free_port()
    settings = make_settings(gateway.settings.redis_url, port, **HOUR_WINDOW, **limited(op, rate=2))
    runner = await start_gateway(settings)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(2):
            assert (await call(http, url, gateway.client_key, op))[0] != 429
        status, retry_after, body = await call(http, url, gateway.client_key, op)
        assert status == 429 and f"/{op}" in body["error"]
        assert 1 <= int(retry_after) <= 3600
        other = Operation.HEALTH if op != Operation.HEALTH else Operation.STATUS
        assert (await call(http, url, gateway.client_key, other))[0] != 429  # per operation
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("gateway_settings", [limited("health", rate=2)], indirect=True)
async def test_limits_count_per_key_owner_and_per_endpoint(http, gateway, redis):
    other_client, _ = await register(redis, "other")
    second_key = "second-key"
    await Registry(redis).put_key(second_key, {"name": "second-owner", "scopes": ["jobs"]})
    for _ in range(2):
        assert (await call(http, gateway.url, gateway.client_key))[0] == 200
    assert (await call(http, gateway.url, gateway.client_key))[0] == 429
    assert (await call(http, gateway.url, second_key))[0] == 200  # another owner
    assert (await call(http, gateway.url, other_client, endpoint="other"))[0] == 200


@pytest.mark.parametrize(
    "gateway_settings", [{"rate_limit_window_s": 1.0, **limited("health", rate=1)}], indirect=True
)
async def test_a_new_window_admits_again(http, gateway):
    await asyncio.sleep(1.02 - time.time() % 1)  # just after a window starts
    assert (await call(http, gateway.url, gateway.client_key))[0] == 200
    status, retry_after, _ = await call(http, gateway.url, gateway.client_key)
    assert status == 429 and retry_after == "1"
    await asyncio.sleep(1.05)
    assert (await call(http, gateway.url, gateway.client_key))[0] == 200


@pytest.mark.parametrize(
    "gateway_settings", [limited("health", rate=1), {"rate_limited": False}], indirect=True
)
async def test_rate_limits_can_be_switched_off(http, gateway, gateway_settings):
    statuses = [(await call(http, gateway.url, gateway.client_key))[0] for _ in range(3)]
    expected = [200, 429, 429] if gateway_settings.get("rate_limited", True) else [200] * 3
    assert statuses == expected


@pytest.mark.parametrize("gateway_settings", [limited("runsync", concurrency=2)], indirect=True)
async def test_requests_in_flight_past_the_concurrency_limit_are_refused(http, gateway):
    async def hold() -> int:  # waits 5 s for a worker that never comes
        target = f"{gateway.url}/v2/echo/runsync?wait=5000"
        headers = {"authorization": gateway.client_key}
        async with http.post(target, json={"input": {}}, headers=headers) as r:
            return r.status

    async def both_queued() -> bool:  # past the limiter: their jobs wait in the queue
        _, _, health = await call(http, gateway.url, gateway.client_key, Operation.HEALTH)
        return health["jobs"]["inQueue"] == 2

    held = [asyncio.create_task(hold()) for _ in range(2)]
    await eventually(both_queued, "both held /runsync in flight", timeout=4)
    status, retry_after, body = await call(http, gateway.url, gateway.client_key, Operation.RUNSYNC)
    assert status == 429 and retry_after == "1" and "in flight" in body["error"]
    assert await asyncio.gather(*held) == [200, 200]
    assert (await call(http, gateway.url, gateway.client_key, Operation.RUNSYNC))[0] == 200


def reserve(counts: RateLimits, now: int, **kw) -> Awaitable[Grant]:
    args = dict(window_ms=10_000, rate=None, units=0, concurrency=None, slots=None, lease_ms=100)
    return counts.reserve("ep", "run", "owner", now=now, **{**args, **kw})


async def test_replicas_are_never_granted_more_than_the_rate_together(redis):
    one, two = RateLimits(redis), RateLimits(redis)
    assert (await reserve(one, 1_000, rate=4, units=3)).units == 3
    assert (await reserve(two, 1_001, rate=4, units=3)).units == 1
    spent = await reserve(one, 1_002, rate=4, units=3)
    assert (spent.units, spent.window_left_ms) == (0, 8_998)
    assert (await reserve(one, 10_000, rate=4, units=3)).units == 3  # the next window


async def test_replicas_hold_no_more_slots_than_the_concurrency_together(redis):
    one, two = RateLimits(redis), RateLimits(redis)
    assert (await reserve(one, 1_000, concurrency=3, slots=2)).slots == 2
    assert (await reserve(two, 1_001, concurrency=3, slots=2)).slots == 1
    assert (await reserve(one, 1_002, concurrency=3, slots=0)).slots == 0  # given back
    assert (await reserve(two, 1_003, concurrency=3, slots=3)).slots == 3


async def test_slots_of_a_replica_that_stops_renewing_are_freed_when_its_lease_ends(redis):
    gone, alive = RateLimits(redis), RateLimits(redis)
    assert (await reserve(gone, 1_000, concurrency=1, slots=1)).slots == 1
    assert (await reserve(alive, 1_050, concurrency=1, slots=1)).slots == 0
    assert (await reserve(alive, 1_101, concurrency=1, slots=1)).slots == 1


async def reads_processed(redis) -> int:
    """Socket reads the Redis server has processed: one per round trip of a small request."""
    return int((await redis.info("stats"))["total_reads_processed"])


@pytest.fixture
async def private_redis(tmp_path) -> AsyncIterator[Redis]:
    """A Redis server of this test alone: the server-wide read count sees no other client
    (a task another test left behind once added a read to the shared server's count)."""
    server = EmbeddedRedis(tmp_path)
    server.start()
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()
    server.stop()


async def test_renewal_keeps_every_held_slot_leased_in_one_round_trip(private_redis):
    redis = private_redis
    owners = [f"owner-{i}" for i in range(20)]
    table = limits_table({Operation.RUN: LimitOverride(concurrency=1)})
    store = JobStore(redis)
    limiter = Limiter(
        RateLimits(redis, store.scripts), store, table,
        window_s=3600.0, workers_cache_s=60.0, lease_ms=300,
    )  # fmt: skip
    other = RateLimits(redis)  # another replica, wanting the same slots

    async def others_slots() -> list[int]:
        now, slots = store.clock(), []
        for owner in owners:
            grant = await other.reserve(
                "ep", "run", owner, now=now, window_ms=10_000, rate=None, units=0,
                concurrency=1, slots=1, lease_ms=300,
            )  # fmt: skip
            slots.append(grant.slots)
        return slots

    async with AsyncExitStack() as held:
        for owner in owners:  # each owner has one request in flight: its one slot
            await held.enter_async_context(limiter.hold("ep", Operation.RUN, owner))
        await limiter.renew()  # warm up: the connection is open, the script loaded
        rounds = []
        for _ in range(8):  # 8 x 100 ms: well past the 300 ms lease
            await asyncio.sleep(0.1)
            before = await reads_processed(redis)
            await limiter.renew()
            rounds.append(await reads_processed(redis) - before - 1)  # - the INFO itself
        assert rounds == [1] * 8  # one round trip renews all 20 leases
        assert await others_slots() == [0] * len(owners)  # all still held
    await limiter.renew()  # nothing in flight: the slots are given back at once
    assert await others_slots() == [1] * len(owners)


async def test_a_request_admitted_during_a_renewal_holds_a_slot_in_redis(redis):
    table = limits_table({Operation.RUN: LimitOverride(concurrency=100)})
    store = JobStore(redis)
    limiter = Limiter(
        RateLimits(redis, store.scripts), store, table, window_s=3600.0, workers_cache_s=60.0
    )
    slots = keys.prefix("ep") + "rc:run:me"

    async def held_in_redis() -> int:
        (value,) = (await redis.hgetall(slots)).values()
        return int(value.split(b":")[0])

    async with limiter.hold("ep", Operation.RUN, "me"):  # 1 in flight, a batch of 5 held
        assert await held_in_redis() == 5
        renewal = asyncio.create_task(limiter.renew())  # gives back the 4 idle slots...
        await asyncio.sleep(0)  # ...and is on its way to Redis
        async with limiter.hold("ep", Operation.RUN, "me"):  # admitted meanwhile
            await renewal
            assert await held_in_redis() >= 2  # both requests hold a slot in Redis


@pytest.mark.parametrize(
    ("limit", "rate_units", "slots"), [(1, 1, 1), (2, 1, 1), (400, 4, 20), (2000, 20, 100)]
)
def test_replicas_reserve_small_batches_and_exactly_one_for_small_limits(limit, rate_units, slots):
    assert (rate_batch(limit), slot_batch(limit)) == (rate_units, slots)


# -- the dynamic rule, live


async def hold_jobs(http, gateway, workers: list[str]) -> None:
    """Queue one job per worker and let each take one, so they count as running."""
    for _ in workers:
        assert (await call(http, gateway.url, gateway.client_key, Operation.RUN))[0] == 200
    for worker in workers:
        url = gateway.job_url(f"job-take/{worker}")
        async with http.get(url, headers=gateway.worker_headers()) as r:
            assert r.status == 200


@pytest.mark.parametrize(
    "gateway_settings",
    [{"workers_cache_s": 0.0, **limited("health", rate=2, requests_per_worker=2)}],
    indirect=True,
)
async def test_running_workers_raise_the_rate_by_requests_per_worker(http, gateway):
    await hold_jobs(http, gateway, ["w1", "w2", "w3"])  # 3 x 2 = 6 > base 2
    statuses = [(await call(http, gateway.url, gateway.client_key))[0] for _ in range(7)]
    assert statuses == [200] * 6 + [429]


@pytest.mark.parametrize(
    "gateway_settings",
    [{"workers_cache_s": 0.0, **limited("health", rate=3, requests_per_worker=1)}],
    indirect=True,
)
async def test_fewer_running_workers_than_the_base_leave_the_base(http, gateway):
    await hold_jobs(http, gateway, ["w1", "w2"])  # 2 x 1 = 2 < base 3
    statuses = [(await call(http, gateway.url, gateway.client_key))[0] for _ in range(4)]
    assert statuses == [200] * 3 + [429]


# -- two gateways, one Redis


@pytest.mark.parametrize(
    "gateway_settings",
    [{"rate_limits": {"health": {"rate": 4}, "runsync": {"concurrency": 1}}}],
    indirect=True,
)
async def test_two_gateways_on_one_redis_share_the_limits(http, gateway, gateway_settings):
    port = free_port()
    second = await start_gateway(
        make_settings(gateway.settings.redis_url, port, **gateway_settings)
    )
    try:
        urls = [gateway.url, f"http://127.0.0.1:{port}"] * 3
        statuses = [(await call(http, url, gateway.client_key))[0] for url in urls]
        assert statuses == [200] * 4 + [429] * 2
        held = asyncio.create_task(call(http, gateway.url, gateway.client_key, Operation.RUNSYNC))
        await asyncio.sleep(0.4)
        refused = await call(http, urls[1], gateway.client_key, Operation.RUNSYNC)
        assert refused[0] == 429 and "in flight" in refused[2]["error"]
        assert (await held)[0] == 200
    finally:
        await second.cleanup()


@pytest.mark.parametrize(
    "gateway_settings",
    [{"workers_cache_s": 0.0, **limited("health", rate=2, requests_per_worker=2)}],
    indirect=True,
)
async def test_workers_starting_mid_window_raise_a_spent_rate(http, gateway):
    statuses = [(await call(http, gateway.url, gateway.client_key))[0] for _ in range(3)]
    assert statuses == [200, 200, 429]
    await hold_jobs(http, gateway, ["w1", "w2"])  # 2 x 2 = 4: two more in this window
    statuses = [(await call(http, gateway.url, gateway.client_key))[0] for _ in range(3)]
    assert statuses == [200, 200, 429]


async def test_a_request_whose_window_turns_while_it_reserves_is_admitted_in_the_new_one(redis):
    """Request A reads the clock at the end of a window and reserves; request B, a moment
    later in the next window, starts that one meanwhile. A's units (of the old window) are
    dropped, but A is admitted out of the new window's, not refused a rate it is far from."""
    table = limits_table({Operation.RUN: LimitOverride(rate=1000)})
    store = JobStore(redis)
    window_ms, base = 10_000, store.clock() // 10_000 * 10_000
    readings = iter([base + window_ms - 1])  # A's reading; every later one is in the next

    def clock() -> int:
        return next(readings, base + window_ms + 1)

    limiter = Limiter(
        RateLimits(redis, store.scripts), store, table,
        window_s=window_ms / 1000, workers_cache_s=60.0, clock=clock,
    )  # fmt: skip

    async def admitted() -> bool:
        async with limiter.hold("ep", Operation.RUN, "me"):
            return True

    assert await asyncio.gather(admitted(), admitted()) == [True, True]


async def test_a_wall_clock_stepped_back_across_a_window_start_refuses_nothing(redis):
    """An NTP step back puts a request's reading in the window before the one the budget
    already counts in: the request counts in the newer window, far below the rate, instead
    of reserving in the old one, dropping those units and being refused."""
    table = limits_table({Operation.RUN: LimitOverride(rate=100)})  # batches of one unit
    store = JobStore(redis)
    window_ms, base = 10_000, store.clock() // 10_000 * 10_000
    now = [0]
    limiter = Limiter(
        RateLimits(redis, store.scripts), store, table,
        window_s=window_ms / 1000, workers_cache_s=60.0, clock=lambda: now[0],
    )  # fmt: skip
    for reading in (window_ms + 1, window_ms - 1, window_ms + 2):  # the second stepped back
        now[0] = base + reading
        async with limiter.hold("ep", Operation.RUN, "me"):
            pass
