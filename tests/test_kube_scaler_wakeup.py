"""The operator's scaler reacts to a job arriving at an empty endpoint at once, not at its
next tick: the store's `q:` event (a real Redis) wakes the `ScalingLoop`."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from redis.asyncio import Redis

from lockgate.gateway.notify import Notifier
from lockgate.kube.scaler import ScalingLoop
from lockgate.kube.settings import OperatorSettings
from lockgate.store import JobStore, NewJob


class CountingLoop(ScalingLoop):
    """The real loop's timing; each tick only records when it ran."""

    def __init__(self, interval_s: float) -> None:
        settings = OperatorSettings(scale_interval_s=interval_s)
        super().__init__(SimpleNamespace(settings=settings), session=None)  # type: ignore[arg-type]
        self.ticks: list[float] = []

    async def tick(self) -> None:
        self.ticks.append(time.monotonic())


async def test_a_job_queued_on_empty_queues_wakes_the_scaler_at_once(redis: Redis) -> None:
    loop = CountingLoop(interval_s=60)
    notifier = Notifier(redis)
    woken: list[str] = []
    notifier.on_queued = lambda endpoint: (woken.append(endpoint), loop.wakeup.set())
    notifier.start()
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(notifier.connected.wait(), 5)
        while not loop.ticks:
            await asyncio.sleep(0.01)
        job = NewJob(id="j1", input=b"{}", ttl_ms=60_000)
        await JobStore(redis).submit("sleepy", job)
        for _ in range(200):
            if len(loop.ticks) > 1:
                break
            await asyncio.sleep(0.01)
        assert woken == ["sleepy"]
        assert len(loop.ticks) == 2, "the loop ticked again long before its 60 s interval"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await notifier.close()


async def test_without_a_wake_up_the_loop_waits_its_interval() -> None:
    loop = CountingLoop(interval_s=0.3)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.45)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(loop.ticks) == 2
