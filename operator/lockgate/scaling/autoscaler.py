"""Scaling one endpoint: a reading goes through `decide` and the result to a `WorkerPool`.

`Autoscaler` is shared by the operator's loop (readings from the gateway's `/metrics`)
and by dev mode's `LocalAutoscaler`, which reads its own Redis directly: in one process
there is no reason for an HTTP hop, and the snapshot it reads is the one `/metrics`
would publish (`readings.from_snapshot`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from lockgate.scaling.decision import Decision, EndpointMetrics, Limits, Workers, decide
from lockgate.scaling.local_pool import Exited, LocalProcessPool
from lockgate.scaling.memory import ScalerMemory
from lockgate.scaling.pool import WorkerPool
from lockgate.scaling.readings import from_snapshot
from lockgate.store import JobStore
from lockgate.store.connection import raise_if_cancelled

log = logging.getLogger("lockgate.scaler")

INTERVAL_S = 0.25


class Autoscaler:
    """Keeps one endpoint's pool at the size `decide` asks for."""

    def __init__(self, pool: WorkerPool, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.clock = clock
        self.memory = ScalerMemory()

    async def step(self, metrics: EndpointMetrics | None, limits: Limits) -> Decision:
        """One decision, applied. Without a reading the pool is held (within bounds)."""
        state = await self.pool.state()
        now = self.clock()
        jobs = metrics.worker_jobs if metrics is not None else {}
        if metrics is None:  # nothing is known of the workers: remember nothing
            workers = Workers(state.size)
        else:
            workers = self.memory.observe(state.size, state.members, jobs, now)
            await self.pool.mark_busy([w for w in state.members if jobs.get(w, 0) > 0])
        last_up = self.memory.last_scale_up
        decision = decide(metrics, limits, workers, now=now, last_scale_up=last_up)
        if decision.desired != state.size:
            idle_first = self.memory.idle_first(state.members, jobs) if metrics else []
            await self.pool.resize(decision.desired, idle_first=idle_first)
        self.memory.record(decision, state.size, now)
        return decision


Change = tuple[int, int]  # a pool's size, and the size a decision wants


def change_to_say(size: int, desired: int, said: Change | None) -> tuple[bool, Change | None]:
    """Whether a resize is worth a log line (a change not said since it was first wanted:
    a pool that cannot grow, in a crash loop, is asked again every tick), and what is said
    from now on."""
    if desired == size:
        return False, None
    return (size, desired) != said, (size, desired)


class LocalAutoscaler:
    """Dev mode: reads the store, decides, starts or stops local worker processes.

    `limits` may be replaced at any time (an edited endpoint takes effect next tick)."""

    def __init__(
        self, store: JobStore, pool: LocalProcessPool, endpoint_id: str, limits: Limits
    ) -> None:
        self.store = store
        self.pool = pool
        self.endpoint_id = endpoint_id
        self.limits = limits
        self.scaler = Autoscaler(pool)
        self.said: Change | None = None  # the last resize logged, while it is still wanted
        # What the limits are at each tick (dev mode's crash loop: `scaling.crashloop.held`).
        self.hold: Callable[[Limits], Limits] | None = None

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as err:  # keep scaling through a Redis restart
                log.warning("scaling tick failed: %s", err)
            raise_if_cancelled()
            await asyncio.sleep(INTERVAL_S)

    async def tick(self) -> Decision:
        await self._reap()
        await self.pool.upkeep()  # a worker resumed now counts in this decision
        for worker_id in await self.store.refreshing(self.endpoint_id):
            await self.pool.stop_worker(worker_id, "refresh_worker: replaced after its job")
        snap = await self.store.snapshot(self.endpoint_id)
        metrics = from_snapshot(snap, self.store.clock())
        before = len(self.pool.active)
        limits = self.hold(self.limits) if self.hold is not None else self.limits
        decision = await self.scaler.step(metrics, limits)
        say, self.said = change_to_say(before, decision.desired, self.said)
        if say:
            log.info("endpoint %s: %s", self.endpoint_id, decision.reason)
        return decision

    async def _reap(self) -> None:
        """Workers that exited give their jobs back to the queue at once."""
        await release_exited(self.store, self.endpoint_id, self.pool.reap())

    async def release_all(self) -> None:
        """After the pool closed: forget every worker it had."""
        await self._reap()


async def release_exited(store: JobStore, endpoint_id: str, exited: Sequence[Exited]) -> None:
    """Forget exited workers for good: their jobs go back to the queue (without using an
    attempt when the worker exited cleanly after being asked to stop: it never ran them)."""
    for w in exited:
        requeued, failed = await store.release_worker(endpoint_id, w.id, clean=w.clean)
        if requeued or failed or not w.asked:
            log.warning(
                "worker %s exited (code %s): %d job(s) requeued, %d failed",
                w.id, w.code, requeued, failed,
            )  # fmt: skip
