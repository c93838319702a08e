"""The operator's scaler reacts to a job arriving at an empty endpoint at once, not at its
next tick: the store's `q:` event (a real Redis) wakes the `ScalingLoop`, as does a worker
new to an endpoint (`a:`). Without a wake-up it waits its interval, and while every
endpoint is at rest its longer rest interval."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from redis.asyncio import Redis

from lockgate.apps.operator import wake_on_events
from lockgate.gateway.notify import Notifier
from lockgate.kube.scale_first import ScaleFirst
from lockgate.kube.scaler import ScalingLoop
from lockgate.kube.settings import OperatorSettings
from lockgate.store import JobStore, NewJob


class CountingLoop(ScalingLoop):
    """The real loop's timing; each tick only records when it ran (and, `resting`, says
    every endpoint was at rest)."""

    def __init__(self, interval_s: float, rest_s: float = 10.0, resting: bool = False) -> None:
        settings = OperatorSettings(scale_interval_s=interval_s, scale_rest_interval_s=rest_s)
        ctx = SimpleNamespace(settings=settings, scale_first=ScaleFirst())
        super().__init__(ctx, session=None)  # type: ignore[arg-type]
        self.ticks: list[float] = []
        self.rests = resting

    async def tick(self) -> None:
        self.ticks.append(time.monotonic())
        self.resting = self.rests

    async def tick_queued(self) -> None:  # a wake-up by jobs alone: counted the same
        self.queued.clear()
        await self.tick()


async def ticks(loop: CountingLoop, n: int, within_s: float) -> None:
    for _ in range(int(within_s / 0.01)):
        if len(loop.ticks) >= n:
            return
        await asyncio.sleep(0.01)


async def test_a_job_queued_on_empty_queues_wakes_the_scaler_at_once(redis: Redis) -> None:
    """The operator's wiring (`apps.operator.wake_on_events`): a `q:` event wakes the loop
    whether it rests or not; a worker new to an endpoint (`a:`) only ends a rest."""
    loop = CountingLoop(interval_s=60, rest_s=60, resting=True)
    notifier = Notifier(redis)
    wake_on_events(loop, notifier)
    notifier.start()
    store = JobStore(redis)
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(notifier.connected.wait(), 5)
        # The first tick, and one more when the subscription came after it (a subscription
        # ends a rest: events may have been missed before it).
        await ticks(loop, 1, within_s=10)
        await asyncio.sleep(0.3)
        n = len(loop.ticks)
        assert n <= 2
        await store.submit("sleepy", NewJob(id="j1", input=b"{}", ttl_ms=60_000))
        await ticks(loop, n + 1, within_s=10)
        assert len(loop.ticks) == n + 1, "the loop ticked again long before its 60 s interval"
        await store.heartbeat("other", "w-new")  # a worker new to an endpoint, at rest
        await ticks(loop, n + 2, within_s=10)
        assert len(loop.ticks) == n + 2
        loop.rests = False
        await store.submit("sleepy-2", NewJob(id="j2", input=b"{}", ttl_ms=60_000))
        await ticks(loop, n + 3, within_s=10)
        assert len(loop.ticks) == n + 3 and not loop.resting
        await store.heartbeat("other", "w-newer")  # not at rest: the next tick sees it
        await asyncio.sleep(0.5)
        assert len(loop.ticks) == n + 3
        await store.submit("sleepy-3", NewJob(id="j3", input=b"{}", ttl_ms=60_000))
        await ticks(loop, n + 4, within_s=10)
        assert len(loop.ticks) == n + 4
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await notifier.close()


async def test_without_a_wake_up_the_loop_waits_its_interval() -> None:
    loop = CountingLoop(interval_s=0.3)
    task = asyncio.create_task(loop.run())
    try:
        await ticks(loop, 3, within_s=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    gaps = [b - a for a, b in zip(loop.ticks, loop.ticks[1:], strict=False)]
    assert len(gaps) >= 2 and min(gaps) >= 0.29, gaps  # never sooner than its interval


async def test_at_rest_the_loop_waits_its_rest_interval_until_woken() -> None:
    loop = CountingLoop(interval_s=0.05, rest_s=60, resting=True)
    task = asyncio.create_task(loop.run())
    try:
        await ticks(loop, 1, within_s=10)
        await asyncio.sleep(0.5)  # ten intervals: none ticks while at rest
        assert len(loop.ticks) == 1
        loop.wakeup.set()
        await ticks(loop, 2, within_s=10)
        assert len(loop.ticks) == 2
        loop.rests = False  # something to decide: back to the interval
        loop.wakeup.set()
        await ticks(loop, 5, within_s=30)
        assert len(loop.ticks) == 5
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
