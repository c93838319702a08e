"""`LbProcessPool`: a load-balancing endpoint's workers as local processes (dev mode).

Each worker gets a free loopback `PORT` (its HTTP server; `PORT_HEALTH` is the same port,
RunPod's default) and `HEALTH_CHECK_PATH`, and is registered in Redis as an LB worker for
the gateways to poll and route to. Stopping one is a drain: it is taken out of routing
first, its requests in flight finish (up to the endpoint's `requestTimeoutS`), then it
gets SIGTERM; it is unregistered once it exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from lockgate.dev.redis_server import free_port
from lockgate.scaling.local_pool import Exited, LocalProcessPool
from lockgate.store import JobStore
from lockgate.store.keys import LB_REQUESTS_TTL_MS
from lockgate.store.lb_workers import LbWorker, LbWorkers

log = logging.getLogger("lockgate.pool")

HOST = "127.0.0.1"
HEALTH_CHECK_PATH = "/ping"  # RunPod's default
# After a worker is taken out of routing, gateways report their in-flight requests within
# a few report intervals; its count is trusted only after this (s).
DRAIN_SETTLE_S = 0.5
DRAIN_POLL_S = 0.1


class LbProcessPool(LocalProcessPool):
    """A `LocalProcessPool` whose workers serve HTTP and are drained before they stop."""

    def __init__(
        self,
        *args,
        lb: LbWorkers,
        store: JobStore,
        drain_s: float,
        health_path: str = HEALTH_CHECK_PATH,
        **kwargs,
    ) -> None:
        super().__init__(*args, store=None, **kwargs)  # no job-take to stop: not a queue
        self.lb = lb
        self.jobs = store
        self.drain_s = drain_s
        self.health_path = health_path
        self.ports: dict[str, int] = {}
        self._drains: set[asyncio.Task] = set()

    async def prepare(self, worker_id: str) -> dict[str, str]:
        """A free port, the worker registered under it (gateways start polling it)."""
        port = self.ports[worker_id] = free_port()
        path = self.env.get("HEALTH_CHECK_PATH", self.health_path)
        address = f"{HOST}:{port}"
        await self.lb.register(self.endpoint_id, worker_id, LbWorker(address, address, path))
        # HOST: loopback only (the example reads it; a container listens on 0.0.0.0).
        env = {"PORT": str(port), "PORT_HEALTH": str(port), "HEALTH_CHECK_PATH": path}
        return {**env, "HOST": HOST}

    async def stop_worker(self, worker_id: str, why: str = "idle") -> None:
        """Out of routing now; SIGTERM once its requests in flight ended (in the background)."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.stopping or worker.process.returncode is not None:
            return
        worker.stopping = True
        await self._withdraw(worker_id)
        task = asyncio.create_task(self._drain_then_stop(worker_id, why))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def withdraw_all(self) -> None:
        """Take every worker out of routing now (they are being replaced)."""
        for worker_id in list(self.workers):
            await self._withdraw(worker_id)

    async def _withdraw(self, worker_id: str) -> None:
        port = self.ports.get(worker_id)
        if port is None:
            return
        address = f"{HOST}:{port}"
        path = self.env.get("HEALTH_CHECK_PATH", self.health_path)
        try:
            leaving = LbWorker(address, address, path, draining=True)
            await self.lb.register(self.endpoint_id, worker_id, leaving)
        except Exception as err:  # Redis away: it still stops, after the drain wait
            log.warning("worker %s: cannot take it out of routing: %s", worker_id, err)

    async def _drain_then_stop(self, worker_id: str, why: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s
        await asyncio.sleep(DRAIN_SETTLE_S)
        while loop.time() < deadline:
            try:
                snap = await self.jobs.snapshot(self.endpoint_id)
                if snap.worker_jobs.get(worker_id, 0) == 0:
                    break
            except Exception as err:  # Redis away: wait out a report's life instead
                log.warning("worker %s: in-flight requests unknown: %s", worker_id, err)
                await asyncio.sleep(LB_REQUESTS_TTL_MS / 1000)
                break
            await asyncio.sleep(DRAIN_POLL_S)
        worker = self.workers.get(worker_id)
        if worker is not None and worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
            log.info("worker %s stopping (%s), its requests done", worker_id, why)

    def reap(self) -> list[Exited]:
        """As `LocalProcessPool.reap`; exited workers are unregistered (in the background)."""
        exited = super().reap()
        for w in exited:
            self.ports.pop(w.id, None)
            task = asyncio.create_task(self.lb.unregister(self.endpoint_id, w.id))
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
        return exited

    async def close(self, grace_s: float = 30.0) -> list[Exited]:
        """Drain and stop every worker (killed after `grace_s`), then unregister them."""
        self.drain_s = min(self.drain_s, grace_s)
        exited = await super().close(grace_s)
        for task in list(self._drains):
            task.cancel()
        await asyncio.gather(*self._drains, return_exceptions=True)
        for w in exited:
            with contextlib.suppress(Exception):
                await self.lb.unregister(self.endpoint_id, w.id)
        return exited
