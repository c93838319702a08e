"""Every background loop ends when cancelled, even when the cancellation lands inside a
call that swallows it. redis-py does (a cluster client's topology refresh; on Python 3.11
any command sent under `socket_timeout`, whose `asyncio.wait_for` drops a cancel that comes
as the send completes): else the task outlives the cancel, and what awaits it waits forever
(seen in CI as hung teardowns: the gateway's sweep loop on Redis Cluster, dev mode stopping
a crash-looping endpoint's scaler)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.dev.workers import LocalWorkers
from lockgate.gateway import limits
from lockgate.gateway.background import _every
from lockgate.gateway.limits import Limiter
from lockgate.kube.leader import LeaderElector
from lockgate.kube.scale_first import ScaleFirst
from lockgate.kube.scaler import ScalingLoop
from lockgate.manage.history import HistorySampler
from lockgate.scaling.autoscaler import LocalAutoscaler

Work = Callable[[], Awaitable[Any]]


def _with(cls: type, **fields: Any) -> Any:
    """An instance of `cls` holding only what its loop reads: the loop is under test, and
    `work` stands for the collaborator call that swallows the cancel."""
    obj = cls.__new__(cls)
    obj.__dict__.update(fields)
    return obj


async def _every_loop(work: Work) -> None:
    await _every(0.01, work, "work")


async def _dev_scaler(work: Work) -> None:
    await _with(LocalAutoscaler, tick=work).run()


async def _dev_worker_states(work: Work) -> None:
    await _with(LocalWorkers, observe=work, endpoint_id="e").report()


async def _history(work: Work) -> None:
    await _with(HistorySampler, sample=work, clock=lambda: 0.0).run()


async def _operator_scaler(work: Work) -> None:
    settings = SimpleNamespace(scale_interval_s=0.01)
    await _with(
        ScalingLoop, tick=work, wakeup=asyncio.Event(), ctx=SimpleNamespace(settings=settings),
        busy={}, reporting={}, routing=set(), unsent={}, first=ScaleFirst(),  # cancelled at its end
        resting=False, queued=set(), stirred=False, full_due=0.0, clock=time.monotonic,
    ).run()  # fmt: skip


async def _leader(work: Work) -> None:
    async def try_once() -> bool:
        await work()
        return False  # not leading: no work task to stop

    await _with(LeaderElector, try_once=try_once, renew_s=0.01, leading=False).run(work)


async def _rate_limit_renewal(work: Work) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(limits, "RENEW_S", 0.01)
        await _with(Limiter, renew=work).run()


LOOPS: dict[str, Callable[[Work], Coroutine[Any, Any, None]]] = {
    "gateway sweep and webhooks": _every_loop,
    "dev scaler": _dev_scaler,
    "dev worker states": _dev_worker_states,
    "history sampler": _history,
    "operator scaler": _operator_scaler,
    "scaler leader election": _leader,
    "rate-limit renewal": _rate_limit_renewal,
}


@pytest.mark.parametrize("loop", list(LOOPS))
async def test_a_loop_whose_work_swallows_the_cancellation_still_ends(loop: str) -> None:
    inside, swallowed = asyncio.Event(), asyncio.Event()

    async def work() -> None:  # what redis-py does with a CancelledError in some awaits
        inside.set()
        if swallowed.is_set():
            return
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.set()

    task = asyncio.create_task(LOOPS[loop](work))
    await asyncio.wait_for(inside.wait(), 10)
    task.cancel()
    await asyncio.wait({task}, timeout=10)
    ended = task.done()
    if not ended:  # a second cancel, with nothing left to swallow it, ends it for the teardown
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert swallowed.is_set() and ended
