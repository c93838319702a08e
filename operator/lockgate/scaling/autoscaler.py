"""The dev-mode scaling loop: read the store, decide, start or stop local workers."""

from __future__ import annotations

import asyncio
import logging
import time

from lockgate.scaling.decision import Limits, PoolView, desired_workers
from lockgate.scaling.local_pool import LocalProcessPool
from lockgate.store import JobStore

log = logging.getLogger("lockgate.scaler")

INTERVAL_S = 0.25


class LocalAutoscaler:
    """Keeps a `LocalProcessPool` at the size `desired_workers` asks for."""

    def __init__(
        self, store: JobStore, pool: LocalProcessPool, endpoint_id: str, limits: Limits
    ) -> None:
        self.store = store
        self.pool = pool
        self.endpoint_id = endpoint_id
        self.limits = limits
        self.last_busy: dict[str, float] = {}  # worker id -> monotonic time it last held a job

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as err:  # keep scaling through a Redis restart
                log.warning("scaling tick failed: %s", err)
            await asyncio.sleep(INTERVAL_S)

    async def tick(self) -> None:
        await self._reap()
        now = time.monotonic()
        loads = await self.store.worker_loads(self.endpoint_id)
        active = self.pool.active
        for worker_id in active:
            if loads.get(worker_id, (0, 0))[1] > 0 or worker_id not in self.last_busy:
                self.last_busy[worker_id] = now
        idle = {w: now - self.last_busy[w] for w in active if loads.get(w, (0, 0))[1] == 0}
        snap = await self.store.snapshot(self.endpoint_id)
        view = PoolView(snap.in_queue, snap.in_progress, len(active), tuple(idle.values()))
        desired = desired_workers(view, self.limits)
        for _ in range(desired - len(active)):
            await self.pool.start_worker()
        longest_idle = sorted(idle, key=idle.__getitem__, reverse=True)
        for worker_id in longest_idle[: max(0, len(active) - desired)]:
            self.pool.stop_worker(worker_id)

    async def _reap(self) -> None:
        """Workers that exited give their jobs back to the queue at once."""
        for worker_id, code, asked in self.pool.reap():
            self.last_busy.pop(worker_id, None)
            requeued, failed = await self.store.release_worker(self.endpoint_id, worker_id)
            if requeued or failed or not asked:
                log.warning(
                    "worker %s exited (code %s): %d job(s) requeued, %d failed",
                    worker_id, code, requeued, failed,
                )  # fmt: skip

    async def release_all(self) -> None:
        """After the pool closed: forget every worker it had."""
        await self._reap()
