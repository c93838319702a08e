"""The gateway's background loops end when cancelled, even when the cancellation lands
inside a Redis call that swallows it (redis-py does so in some of its awaits, e.g. a
cluster client's topology refresh): else the task outlives the gateway's shutdown and the
event loop's close waits for it forever (seen as a hung test teardown on Redis Cluster)."""

from __future__ import annotations

import asyncio

import pytest

from lockgate.gateway.background import _every


async def test_a_loop_whose_work_swallows_the_cancellation_still_ends():
    inside, swallowed = asyncio.Event(), asyncio.Event()

    async def work() -> None:  # what redis-py does with a CancelledError in some awaits
        inside.set()
        if swallowed.is_set():
            return
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.set()

    task = asyncio.create_task(_every(0.01, work, "work"))
    await inside.wait()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    ended = task.done()
    if not ended:  # a second cancel, with nothing left to swallow it, ends it for the teardown
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert swallowed.is_set() and ended
