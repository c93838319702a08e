"""`LocalProcessPool`: workers as local processes (dev mode), stopped only when idle."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lockgate.scaling.pool import PoolState
from lockgate.workerenv import worker_id_env

log = logging.getLogger("lockgate.pool")


class WorkerKeyIssuer(Protocol):
    """Gives each worker process its own key, bound to its id (`dev.worker_keys`)."""

    async def issue(self, worker_id: str) -> dict[str, str]: ...

    async def revoke(self, worker_id: str) -> None: ...


@dataclass
class LocalWorker:
    id: str
    process: asyncio.subprocess.Process
    stopping: bool = False
    pipes: list[asyncio.Task] = field(default_factory=list)


class LocalProcessPool:
    """Starts `command` once per worker with the worker contract's environment.

    A `WorkerPool`: `resize` starts workers, or stops idle ones only (SIGTERM; the
    runtime finishes the job in hand, then exits)."""

    def __init__(
        self,
        endpoint_id: str,
        command: Sequence[str],
        env: dict[str, str],
        *,
        cwd: str | None,
        keys: WorkerKeyIssuer | None = None,
    ) -> None:
        self.endpoint_id = endpoint_id
        self.command = list(command)
        self.env = env
        self.cwd = cwd
        self.keys = keys
        self.workers: dict[str, LocalWorker] = {}
        self._revoking: set[asyncio.Task] = set()

    @property
    def active(self) -> list[str]:
        """Workers running and not asked to stop."""
        return [w.id for w in self.workers.values() if not w.stopping]

    async def start_worker(self) -> str:
        worker_id = f"{self.endpoint_id}-{secrets.token_hex(3)}"
        own_key = await self.keys.issue(worker_id) if self.keys is not None else {}
        env = {**os.environ, **self.env, **worker_id_env(worker_id), **own_key}
        env["PYTHONUNBUFFERED"] = "1"
        process = await asyncio.create_subprocess_exec(
            *self.command, env=env, cwd=self.cwd,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        worker = LocalWorker(worker_id, process)
        worker.pipes.append(asyncio.create_task(_forward(worker_id, process.stdout)))
        self.workers[worker_id] = worker
        log.info("worker %s started (pid %d)", worker_id, process.pid)
        return worker_id

    def stop_worker(self, worker_id: str) -> None:
        """SIGTERM: the runtime finishes the job in hand, then exits."""
        worker = self.workers.get(worker_id)
        if worker is not None and not worker.stopping and worker.process.returncode is None:
            worker.stopping = True
            worker.process.send_signal(signal.SIGTERM)
            log.info("worker %s stopping (idle)", worker_id)

    async def state(self) -> PoolState:
        active = tuple(self.active)
        return PoolState(len(active), active)

    async def mark_busy(self, busy: Collection[str]) -> None:
        """Nothing to mark: `resize` is told which workers are idle."""

    async def resize(self, desired: int, *, idle_first: Sequence[str]) -> None:
        """Start workers up to `desired`, or stop idle ones (never one not in `idle_first`)."""
        active = self.active
        for _ in range(desired - len(active)):
            await self.start_worker()
        for worker_id in [w for w in idle_first if w in active][: len(active) - desired]:
            self.stop_worker(worker_id)

    def reap(self) -> list[tuple[str, int, bool]]:
        """Forget exited workers; returns (id, exit code, whether it was asked to stop)."""
        gone = [w for w in self.workers.values() if w.process.returncode is not None]
        for w in gone:
            del self.workers[w.id]
            self._revoke(w.id)
            level = logging.INFO if w.stopping else logging.WARNING
            log.log(level, "worker %s exited with %s", w.id, w.process.returncode)
        return [(w.id, w.process.returncode, w.stopping) for w in gone]

    def _revoke(self, worker_id: str) -> None:
        """Revoke a gone worker's own key (in the background: `reap` is not async)."""
        if self.keys is not None:
            task = asyncio.create_task(self.keys.revoke(worker_id))
            self._revoking.add(task)
            task.add_done_callback(self._revoking.discard)

    async def close(self, grace_s: float = 30.0) -> None:
        """Stop every worker; kill those still running after `grace_s` seconds."""
        for worker_id in list(self.workers):
            self.stop_worker(worker_id)
        waits = [w.process.wait() for w in self.workers.values()]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), grace_s)
        except TimeoutError:
            for w in self.workers.values():
                if w.process.returncode is None:
                    w.process.kill()
            await asyncio.gather(*(w.process.wait() for w in self.workers.values()))
        for w in self.workers.values():
            for pipe in w.pipes:
                await pipe
            self._revoke(w.id)
        self.workers.clear()
        await asyncio.gather(*self._revoking, return_exceptions=True)


async def _forward(worker_id: str, stream: asyncio.StreamReader | None) -> None:
    """Copy a worker's output to ours, each line prefixed with the worker id."""
    if stream is None:
        return
    while line := await stream.readline():
        sys.stderr.write(f"[{worker_id}] {line.decode(errors='replace')}")
