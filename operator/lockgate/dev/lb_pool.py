"""`LbProcessPool`: a load-balancing endpoint's workers as local processes (dev mode).

Each worker gets a free loopback `PORT` (its HTTP server; `PORT_HEALTH` is the same port,
RunPod's default) and `HEALTH_CHECK_PATH`, and is registered in Redis as an LB worker for
the gateways to poll and route to. Stopping one is a drain: it is taken out of routing
first, its requests in flight finish (up to the endpoint's `requestTimeoutS`), then it
gets SIGTERM; it is unregistered once it exited.

A scale-down's victim is parked instead when the endpoint has a resume window
(`lbResumeWindowS`, `scaling.parking`): drained the same way, then moved to the parked
workers in Redis (`lbp`) and its process group stopped (SIGSTOP: no CPU, its memory kept).
A `strict-resume` request asks it back (`lbpw`, read at each scaler tick by `upkeep`), and a
scale-up resumes parked workers before it starts new ones: SIGCONT, registered again, and
routable at the gateways' first health poll that answers 200. Past its window it gets
SIGTERM (then SIGCONT, so it can act on it) and is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Sequence

from lockgate.dev.redis_server import free_port
from lockgate.scaling.local_pool import Exited, LocalProcessPool
from lockgate.scaling.parking import adopt_first, expired, parks
from lockgate.store import JobStore
from lockgate.store.keys import LB_REQUESTS_TTL_MS
from lockgate.store.lb_workers import LbWorker, LbWorkers, Parked

log = logging.getLogger("lockgate.pool")

HOST = "127.0.0.1"
HEALTH_CHECK_PATH = "/ping"  # RunPod's default
# After a worker is taken out of routing, gateways report their in-flight requests within
# a few report intervals; its count is trusted only after this (s).
DRAIN_SETTLE_S = 0.5
DRAIN_POLL_S = 0.1


class LbProcessPool(LocalProcessPool):
    """A `LocalProcessPool` whose workers serve HTTP, are drained before they stop, and
    are parked (resumable for `resume_window_s`) when a scale-down removes them."""

    def __init__(
        self,
        *args,
        lb: LbWorkers,
        store: JobStore,
        drain_s: float,
        health_path: str = HEALTH_CHECK_PATH,
        resume_window_s: float = 0.0,
        **kwargs,
    ) -> None:
        super().__init__(*args, store=None, **kwargs)  # no job-take to stop: not a queue
        self.lb = lb
        self.jobs = store
        self.drain_s = drain_s
        self.health_path = health_path
        self.resume_window_s = resume_window_s
        self.ports: dict[str, int] = {}
        self.parking: set[str] = set()  # draining now, parked once their requests ended
        self.parked: dict[str, float] = {}  # worker id -> end of its window (monotonic)
        self._drains: set[asyncio.Task] = set()

    async def prepare(self, worker_id: str) -> dict[str, str]:
        """A free port, the worker registered under it (gateways start polling it)."""
        port = self.ports[worker_id] = free_port()
        record = self._record(worker_id)
        await self.lb.register(self.endpoint_id, worker_id, record)
        path = record.path
        # HOST: loopback only (the example reads it; a container listens on 0.0.0.0).
        env = {"PORT": str(port), "PORT_HEALTH": str(port), "HEALTH_CHECK_PATH": path}
        return {**env, "HOST": HOST}

    def _record(self, worker_id: str, *, draining: bool = False) -> LbWorker:
        address = f"{HOST}:{self.ports[worker_id]}"
        path = self.env.get("HEALTH_CHECK_PATH", self.health_path)
        return LbWorker(address, address, path, draining=draining)

    async def stop_worker(self, worker_id: str, why: str = "idle") -> None:
        """Out of routing now; once its requests in flight ended (in the background),
        parked (a scale-down with a resume window) or SIGTERM."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.stopping or worker.process.returncode is not None:
            return
        worker.stopping = True
        if parks(self.resume_window_s, why):
            self.parking.add(worker_id)
        await self._withdraw(worker_id)
        self._background(self._drain_then_stop(worker_id, why))

    async def resize(self, desired: int, *, idle_first: Sequence[str]) -> None:
        """As `LocalProcessPool.resize`, but a scale-up resumes parked workers first (the
        most recently parked: warm, and it ends what they hold)."""
        for worker_id in adopt_first(self.parked, desired - len(self.active)):
            await self.resume(worker_id, "scale-up")
        await super().resize(desired, idle_first=idle_first)

    async def upkeep(self) -> None:
        """Each scaler tick, before it decides: resume the workers a `strict-resume`
        request asked back, and stop for good those whose window passed. No Redis call
        while no worker is parked or being parked (only those can be asked back)."""
        if not self.parked and not self.parking:
            return
        for worker_id in await self.lb.take_resumes(self.endpoint_id):
            await self.resume(worker_id, "strict-resume")
        for worker_id in expired(self.parked, time.monotonic()):
            await self._end_parked(worker_id, "its resume window (lbResumeWindowS) passed")

    async def resume(self, worker_id: str, why: str) -> bool:
        """Bring back a parked worker (SIGCONT) or one draining to be parked: a worker
        again, routable once its health answers 200. False when it is neither (gone,
        stopping for good, or running)."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.process.returncode is not None:
            return False
        was_parked = self.parked.pop(worker_id, None) is not None
        if not was_parked and worker_id not in self.parking:
            return False
        self.parking.discard(worker_id)
        worker.stopping = False
        if was_parked:
            _signal_group(worker.process, signal.SIGCONT)
            await self.lb.unpark(self.endpoint_id, worker_id, self._record(worker_id))
        else:
            await self.lb.register(self.endpoint_id, worker_id, self._record(worker_id))
        log.info("worker %s resumed (%s)", worker_id, why)
        self._lifecycle(worker_id, f"resumed ({why})")
        return True

    async def withdraw_all(self) -> None:
        """Take every worker out of routing now (they are being replaced); parked ones
        can no longer be resumed (they ran the old release)."""
        for worker_id in list(self.workers):
            await self._withdraw(worker_id)
        await self._end_all_parked("the endpoint's workers are replaced")

    async def _withdraw(self, worker_id: str) -> None:
        if worker_id not in self.ports or worker_id in self.parked:
            return
        try:
            leaving = self._record(worker_id, draining=True)
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
        if worker is None or worker.process.returncode is not None or not worker.stopping:
            return  # exited, or resumed meanwhile
        if worker_id in self.parking:
            await self._park(worker_id)
            return
        with contextlib.suppress(ProcessLookupError):
            worker.process.send_signal(signal.SIGTERM)
        log.info("worker %s stopping (%s), its requests done", worker_id, why)

    async def _park(self, worker_id: str) -> None:
        """Out of `lbw` into `lbp` (gateways stop polling it), then its group stopped."""
        self.parking.discard(worker_id)
        window = self.resume_window_s
        until_ms = self.jobs.clock() + int(window * 1000)
        self.parked[worker_id] = time.monotonic() + window
        await self.lb.park(self.endpoint_id, worker_id, Parked(self._record(worker_id), until_ms))
        _signal_group(self.workers[worker_id].process, signal.SIGSTOP)
        log.info("worker %s parked (scaled down): resumable for %g s", worker_id, window)
        self._lifecycle(worker_id, f"parked (scaled down): SIGSTOP, resumable for {window:g} s")

    async def _end_parked(self, worker_id: str, why: str) -> None:
        """A parked worker gone for good: no longer resumable, then SIGTERM and SIGCONT
        (a stopped process acts on its SIGTERM once continued)."""
        if self.parked.pop(worker_id, None) is None:
            return
        with contextlib.suppress(Exception):  # Redis away: its `until` says it all the same
            await self.lb.forget_parked(self.endpoint_id, [worker_id])
        worker = self.workers.get(worker_id)
        if worker is not None and worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
            _signal_group(worker.process, signal.SIGCONT)
        log.info("worker %s stopping: %s", worker_id, why)
        self._lifecycle(worker_id, f"stopping: {why}: SIGTERM")

    async def _end_all_parked(self, why: str) -> None:
        self.parking.clear()  # those draining now stop when done
        for worker_id in list(self.parked):
            await self._end_parked(worker_id, why)

    def _background(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    def reap(self) -> list[Exited]:
        """As `LocalProcessPool.reap`; exited workers are unregistered (in the background),
        parked ones too."""
        exited = super().reap()
        for w in exited:
            self.ports.pop(w.id, None)
            self.parking.discard(w.id)
            self.parked.pop(w.id, None)
            self._background(self.lb.unregister(self.endpoint_id, w.id))
        return exited

    async def close(self, grace_s: float = 30.0) -> list[Exited]:
        """Drain and stop every worker (killed after `grace_s`), parked ones too, then
        unregister them."""
        self.drain_s = min(self.drain_s, grace_s)
        self.resume_window_s = 0.0
        await self._end_all_parked("closing")
        exited = await super().close(grace_s)
        for task in list(self._drains):
            task.cancel()
        await asyncio.gather(*self._drains, return_exceptions=True)
        for w in exited:
            with contextlib.suppress(Exception):
                await self.lb.unregister(self.endpoint_id, w.id)
        return exited


def _signal_group(process: asyncio.subprocess.Process, signum: int) -> None:
    """Send `signum` to the worker's process group (its session: it and its children)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
