"""The registered ids every Endpoint's resync asks about, read once for all of them (issue
32: a thousand resyncs made a hundred HEXISTS a second). Against a real Redis."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry
from lockgate.store.registry import RegisteredIds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _hkeys(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_hkeys", {}).get("calls", 0))


async def test_many_askers_share_one_read_until_it_is_max_age_old(redis: Redis) -> None:
    registry, clock = Registry(redis), Clock()
    for ep in ("a", "b"):
        await registry.put_endpoint(ep, RegistryEntry(id=ep))
    ids = RegisteredIds(registry, max_age_s=5.0, clock=clock)
    before = await _hkeys(redis)
    found = await asyncio.gather(*(ids.has(ep) for ep in ("a", "b", "c") * 100))
    assert found == [True, True, False] * 100
    assert await _hkeys(redis) - before == 1  # three hundred askers, one read

    await registry.delete_endpoint("a")  # a Redis loss, say
    clock.now = 4.9
    assert await ids.has("a")  # as last read: at most max_age old
    clock.now = 5.0
    assert not await ids.has("a")
    assert await _hkeys(redis) - before == 2


async def test_an_asker_cancelled_does_not_cancel_the_shared_read(redis: Redis) -> None:
    registry = Registry(redis)
    await registry.put_endpoint("a", RegistryEntry(id="a"))
    ids = RegisteredIds(registry, max_age_s=5.0)
    first = asyncio.create_task(ids.has("a"))
    second = asyncio.create_task(ids.has("a"))
    await asyncio.sleep(0)
    first.cancel()
    assert await second
