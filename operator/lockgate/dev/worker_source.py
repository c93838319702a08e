"""Dev mode's `WorkerSource`: the local worker processes of `LocalControlPlane`, and their
logs as `manage.logbook` keeps them.

A worker is a process of one of the endpoint's pools (the current one, and those retiring
while their workers finish their jobs on an older version). Its `container` log is what
it wrote on stdout and stderr; its `system` log is the pool's lines about the process
(started, stopping, exited). Both live in the worker's buffer, in memory: they end with
`lockgate dev`, as its worker processes do.
"""

from __future__ import annotations

import os
import socket
import time

from lockgate.dev.controlplane import LocalControlPlane, gpus_here
from lockgate.dev.workers import LocalWorkers
from lockgate.manage.controlplane import EndpointNotFound
from lockgate.manage.loglines import LIFECYCLE, STDERR, STDOUT
from lockgate.manage.workerlogs import CONTAINER, SYSTEM, LogEvent, Position, after, last, newest
from lockgate.manage.workersource import (
    STARTING,
    UNHEALTHY,
    LogBatch,
    LogRead,
    WorkerFacts,
    WorkerNotFound,
)
from lockgate.models import EndpointRecord
from lockgate.workerenv import resource_env


def _facts(workers: LocalWorkers, gpus: int, now_s: float, now_mono: float) -> list[WorkerFacts]:
    host = socket.gethostname()
    crash_loop = workers.states.unhealthy > 0
    out = []
    parked = workers.parked
    for worker in workers.pool.workers.values():
        if worker.process.returncode is not None or worker.id in parked:
            continue  # exited, not reaped yet; or scaled down (only resumable)
        started_s = now_s - (now_mono - worker.started)
        out.append(
            WorkerFacts(
                id=worker.id,
                lifecycle=UNHEALTHY if crash_loop else STARTING,
                version=workers.version,
                gpu_count=gpus,
                started_ms=int(started_s * 1000),
                node=host,
            )
        )
    return out


class DevWorkers:
    """Workers and worker logs of `lockgate dev`'s endpoints."""

    def __init__(self, plane: LocalControlPlane) -> None:
        self.plane = plane

    async def workers(self, endpoint: EndpointRecord) -> list[WorkerFacts]:
        given = resource_env(endpoint, cpus_here=os.cpu_count() or 1, gpus_here=gpus_here())
        gpus = int(given.get("RUNPOD_GPU_COUNT", 0))
        now_s, now_mono = time.time(), time.monotonic()
        return [
            facts
            for pool in self.plane.pools(endpoint.id)
            for facts in _facts(pool, gpus, now_s, now_mono)
        ]

    async def stop(self, endpoint_id: str, worker_id: str, *, restart: bool) -> None:
        """Stop one worker process (`LocalControlPlane.stop_worker`)."""
        try:
            stopped = await self.plane.stop_worker(endpoint_id, worker_id, restart=restart)
        except EndpointNotFound as err:
            raise WorkerNotFound(worker_id) from err
        if not stopped:
            raise WorkerNotFound(worker_id)

    def _running(self, endpoint_id: str, worker_id: str) -> bool:
        try:
            pools = self.plane.pools(endpoint_id)
        except EndpointNotFound:  # deleted meanwhile: its workers are stopping
            return False
        return any(worker_id in pool.pool.workers for pool in pools)

    async def read(self, endpoint_id: str, worker_id: str, read: LogRead) -> LogBatch:
        buffer = self.plane.logs.worker(endpoint_id, worker_id)
        if buffer is None:
            raise WorkerNotFound(worker_id)
        # Whether it may write more, asked before its lines are read: a worker gone and
        # with both pipes drained has every line in the buffer.
        alive = self._running(endpoint_id, worker_id) or not buffer.closed >= {STDOUT, STDERR}
        events = [
            LogEvent(SYSTEM if line.stream == LIFECYCLE else CONTAINER,
                     Position(line.ms, line.seq), line.line)
            for line in buffer.lines
        ]  # fmt: skip
        events = [e for e in events if e.source in read.sources]
        if read.cursor is not None:
            return LogBatch(after(events, read.cursor, read.limit), read.cursor, alive)
        return LogBatch(last(events, read.tail), newest(events), alive)
