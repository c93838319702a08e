"""Dev mode's marked workers and startup deadline: what `kube.worker_health` does with pods,
done with local processes.

A worker process marked unhealthy (`JobStore.mark_unhealthy`: a failed fitness check or
warm-up, or the deadline below) already gets no job; it is stopped here (SIGTERM, killed
`MARKED_GRACE_S` later if it still runs), and the pool's scaler starts a new process, under
a new worker id, as it would for any missing worker. A process that has not made its first
worker-API call (a load-balancing one: its first health check answered 200) within the
endpoint's `startupTimeout` of its spawn is marked, quoting the last line it wrote
(`scaling.worker_health`). Models are cached before any process starts, so they count apart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from lockgate.dev.lb_pool import LbProcessPool
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.scaling.local_pool import LocalProcessPool
from lockgate.scaling.worker_health import overdue, shown, startup_record
from lockgate.store import JobStore
from lockgate.store.lb_workers import HEALTHY

log = logging.getLogger("lockgate.dev")

MARKED_GRACE_S = 5.0  # a marked worker holds no job: killed this soon after SIGTERM


@dataclass
class LocalHealth:
    """One endpoint's worker processes, looked after (`tend`, with each state report)."""

    store: JobStore
    pool: LocalProcessPool
    endpoint_id: str
    startup_timeout_s: int  # the endpoint's `startupTimeout` (0: no deadline); may change
    ready: set[str] = field(default_factory=set)  # workers seen ready: deadline met
    records: dict[str, UnhealthyWorker] = field(default_factory=dict)  # as last read

    def shown(self) -> tuple[str, str] | None:
        """The `WorkersHealthy` reason and message of a worker replaced recently, if any."""
        return shown(self.records, self.store.clock())

    async def tend(self, live: Collection[str]) -> None:
        """Mark the processes past their deadline, stop the marked ones. `live`: the
        workers the store reports now (a load-balancing pool's: every registered one)."""
        active = self.pool.active
        if not active:
            return  # nothing to look after: no Redis call
        now_ms = self.store.clock()
        for worker_id in await self._late(active, live, now_ms):
            worker = self.pool.workers[worker_id]
            why = startup_record(worker_id, self.startup_timeout_s, worker.last_line, now_ms)
            log.warning("worker %s of %s: %s", worker_id, self.endpoint_id, why.reason)
            await self.store.mark_unhealthy(self.endpoint_id, why)
        marked = self.records = await self.store.unhealthy_workers(self.endpoint_id)
        for worker_id in [w for w in active if w in marked]:
            text = marked[worker_id].text()
            log.warning("worker %s of %s replaced: %s", worker_id, self.endpoint_id, text)
            await self.pool.retire(worker_id, f"marked unhealthy: {text}", MARKED_GRACE_S)
        self.ready &= set(self.pool.workers)

    async def _late(self, active: list[str], live: Collection[str], now_ms: int) -> list[str]:
        """The active workers past their startup deadline, not yet ready."""
        if self.startup_timeout_s <= 0:
            return []
        pool = self.pool
        if isinstance(pool, LbProcessPool):
            if any(w not in self.ready for w in active):  # a first 200 seen meanwhile?
                health = await pool.lb.health(self.endpoint_id)
                self.ready |= {w for w, h in health.items() if h.state == HEALTHY}
        else:
            self.ready |= set(live)
        mono = time.monotonic()
        started = {w: now_ms - int((mono - pool.workers[w].started) * 1000) for w in active}
        return overdue(started, self.ready, self.startup_timeout_s, now_ms)
