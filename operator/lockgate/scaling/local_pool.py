"""`LocalProcessPool`: workers as local processes (dev mode), stopped only when idle.

Each worker runs in its own session (process group), as a container would: SIGTERM goes
to the worker process alone (it finishes its job in hand; its own children are its
business), and once it exits, or when it is killed after its grace, whatever it left
behind in its group (the runpod SDK's heartbeat process) is killed too. Output pipes are
never waited on for long: a descendant that escaped the group could hold them forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lockgate.scaling.backoff import CrashBackoff
from lockgate.scaling.pool import PoolState
from lockgate.store import JobStore
from lockgate.workerenv import worker_id_env

log = logging.getLogger("lockgate.pool")

PIPE_DRAIN_S = 1.0  # how long a gone worker's output may still be copied after it exits
ECHO_EVERY_S = 0.02  # workers' lines are copied to our stderr together, this often

# Gets each line a worker writes: (worker id, "stdout" or "stderr", the line), and the
# line None when that stream ends (dev mode's log buffer, `manage.logbook`); and, as
# "system", the pool's lines about the worker process (started, stopping, exited).
LineSink = Callable[[str, str, str | None], None]
LIFECYCLE = "system"


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
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None  # monotonic, once reaped
    last_line: str = ""  # its latest line of output, for a crash's condition message


@dataclass(frozen=True, slots=True)
class Exited:
    """A worker process that ended: its exit code, and whether it was asked to stop."""

    id: str
    code: int
    asked: bool

    @property
    def clean(self) -> bool:
        """Asked to stop and exited 0: it ran no job it still held (it never started it)."""
        return self.asked and self.code == 0


class Echo:
    """Workers' lines copied to our stderr, the lines of `ECHO_EVERY_S` in one write rather
    than a write per line (a runtime writes two lines per job; a chatty handler, thousands
    per second to a terminal). The log buffer (`LineSink`) still gets each line as it
    comes."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._due: asyncio.TimerHandle | None = None

    def write(self, text: str) -> None:
        self._lines.append(text)
        if self._due is None:
            self._due = asyncio.get_running_loop().call_later(ECHO_EVERY_S, self.flush)

    def flush(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._lines:
            lines, self._lines = self._lines, []
            sys.stderr.write("".join(lines))
            sys.stderr.flush()


class LocalProcessPool:
    """Starts `command` once per worker with the worker contract's environment.

    A `WorkerPool`: `resize` starts workers, or stops idle ones only (SIGTERM; the
    runtime finishes the job in hand, then exits). With a `store`, a worker being stopped
    is first told to take no new job (`JobStore.stop_taking`), which also answers its
    open job-take long-poll at once."""

    def __init__(
        self,
        endpoint_id: str,
        command: Sequence[str],
        env: dict[str, str],
        *,
        cwd: str | None,
        keys: WorkerKeyIssuer | None = None,
        store: JobStore | None = None,
        sink: LineSink | None = None,
        env_at_start: Callable[[dict[str, str]], dict[str, str]] | None = None,
    ) -> None:
        self.endpoint_id = endpoint_id
        self.command = list(command)
        self.env = env
        # `env` as a worker about to start gets it (dev mode: account secrets' values,
        # read at each start so a rotation reaches the next worker); may raise.
        self.env_at_start = env_at_start
        self.cwd = cwd
        self.keys = keys
        self.store = store
        self.sink = sink
        self.echo = Echo()
        self.workers: dict[str, LocalWorker] = {}
        self.crashes: deque[LocalWorker] = deque(maxlen=32)  # exited without being asked
        self.backoff = CrashBackoff()  # no restart storm after crashes
        self._revoking: set[asyncio.Task] = set()

    @property
    def active(self) -> list[str]:
        """Workers running and not asked to stop."""
        return [w.id for w in self.workers.values() if not w.stopping]

    async def start_worker(self) -> str:
        worker_id = f"{self.endpoint_id}-{secrets.token_hex(3)}"
        base = self.env
        if self.env_at_start is not None:
            base = await asyncio.to_thread(self.env_at_start, self.env)
        own_key = await self.keys.issue(worker_id) if self.keys is not None else {}
        extra = await self.prepare(worker_id)
        env = {**os.environ, **base, **worker_id_env(worker_id), **own_key, **extra}
        env["PYTHONUNBUFFERED"] = "1"
        started = self.store.clock() if self.store is not None else 0
        process = await asyncio.create_subprocess_exec(
            *self.command, env=env, cwd=self.cwd, start_new_session=True,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        worker = LocalWorker(worker_id, process)
        for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
            forward = _forward(worker, pipe, name, self.echo, self.sink)
            worker.pipes.append(asyncio.create_task(forward))
        self.workers[worker_id] = worker
        log.info("worker %s started (pid %d)", worker_id, process.pid)
        self._lifecycle(worker_id, f"worker process started (pid {process.pid})")
        if self.store is not None:  # its cold-start time: from now to its first call
            await self.store.note_worker_starts(self.endpoint_id, {worker_id: started})
        return worker_id

    async def prepare(self, worker_id: str) -> dict[str, str]:
        """More environment for a worker about to start (a subclass's ports); none here."""
        return {}

    async def stop_worker(self, worker_id: str, why: str = "idle") -> None:
        """No new job for it, then SIGTERM: the runtime finishes the job in hand, then exits."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.stopping or worker.process.returncode is not None:
            return
        worker.stopping = True
        if self.store is not None:
            try:
                await self.store.stop_taking(self.endpoint_id, [worker_id])
            except Exception as err:  # Redis away: SIGTERM still stops it
                log.warning("worker %s: cannot tell the gateway it stops: %s", worker_id, err)
        with contextlib.suppress(ProcessLookupError):
            worker.process.send_signal(signal.SIGTERM)
        log.info("worker %s stopping (%s)", worker_id, why)
        self._lifecycle(worker_id, f"stopping ({why}): SIGTERM, the job in hand finishes")

    async def upkeep(self) -> None:
        """Work done at each scaler tick before it decides (`LbProcessPool`: parked
        workers); none here."""

    async def retire(self, worker_id: str, why: str, grace_s: float) -> None:
        """Stop a worker taken out of service for good (marked unhealthy: it holds no job),
        as `stop_worker` does; its process group is killed if it still runs `grace_s`
        seconds later (a process hung at import may ignore SIGTERM)."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.stopping:
            return
        await self.stop_worker(worker_id, why)

        def kill() -> None:
            if worker.process.returncode is None:
                said = f"still running {grace_s:.0f} s after SIGTERM: killed"
                log.warning("worker %s %s", worker_id, said)
                self._lifecycle(worker_id, said)
                _kill_group(worker.process)

        asyncio.get_running_loop().call_later(grace_s, kill)

    async def state(self) -> PoolState:
        active = tuple(self.active)
        return PoolState(len(active), active)

    async def mark_busy(self, busy: Collection[str]) -> None:
        """Nothing to mark: `resize` is told which workers are idle."""

    async def resize(self, desired: int, *, idle_first: Sequence[str]) -> None:
        """Start workers up to `desired` (none while backing off after a crash: see
        `CrashBackoff`), or stop idle ones (never one not in `idle_first`)."""
        active = self.active
        if desired > len(active) and not self.backoff.may_start(time.monotonic()):
            return
        for _ in range(desired - len(active)):
            await self.start_worker()
        for worker_id in [w for w in idle_first if w in active][: len(active) - desired]:
            await self.stop_worker(worker_id)

    def reap(self) -> list[Exited]:
        """Forget exited workers, killing what they left in their process group."""
        gone = [w for w in self.workers.values() if w.process.returncode is not None]
        for w in gone:
            del self.workers[w.id]
            w.ended = time.monotonic()
            if not w.stopping:
                self.crashes.append(w)
            if not w.stopping and w.process.returncode != 0:  # exit 0: it meant to go
                delay = self.backoff.crashed(w.ended, ran_s=w.ended - w.started)
                log.warning("worker %s crashed: the next start in %.0f s", w.id, delay)
            self._revoke(w.id)
            _kill_group(w.process)
            level = logging.INFO if w.stopping else logging.WARNING
            log.log(level, "worker %s exited with %s", w.id, w.process.returncode)
            asked = "as asked" if w.stopping else "unasked"
            self._lifecycle(w.id, f"worker process exited with {w.process.returncode} ({asked})")
        return [Exited(w.id, w.process.returncode, w.stopping) for w in gone]

    def _lifecycle(self, worker_id: str, text: str) -> None:
        """A line about the worker process, for its log's `system` source."""
        if self.sink is not None:
            self.sink(worker_id, LIFECYCLE, text)

    def _revoke(self, worker_id: str) -> None:
        """Revoke a gone worker's own key (in the background: `reap` is not async)."""
        if self.keys is not None:
            task = asyncio.create_task(self.keys.revoke(worker_id))
            self._revoking.add(task)
            task.add_done_callback(self._revoking.discard)

    def kill_all(self) -> None:
        """SIGKILL every running worker with its process group, now (a second Ctrl-C in
        `lockgate dev`); `close` and `reap` then find them exited."""
        for w in self.workers.values():
            if w.process.returncode is None:
                w.stopping = True
                _kill_group(w.process)

    async def close(self, grace_s: float = 30.0) -> list[Exited]:
        """Stop every worker; kill (with its process group) each still running after
        `grace_s` seconds. Returns the workers as `reap` does."""
        for worker_id in list(self.workers):
            await self.stop_worker(worker_id, "closing")
        workers = list(self.workers.values())
        waits = [w.process.wait() for w in workers]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), grace_s)
        except TimeoutError:
            for w in workers:
                if w.process.returncode is None:
                    log.warning("worker %s still running after %.0f s: killed", w.id, grace_s)
                    self._lifecycle(w.id, f"still running after {grace_s:.0f} s: killed")
                    _kill_group(w.process)
            await asyncio.gather(*(w.process.wait() for w in workers))
        exited = self.reap()  # revokes their keys too
        pipes = [pipe for w in workers for pipe in w.pipes]
        if pipes:
            _, late = await asyncio.wait(pipes, timeout=PIPE_DRAIN_S)
            for pipe in late:  # held open by a descendant outside the group
                pipe.cancel()
        await asyncio.gather(*self._revoking, return_exceptions=True)
        self.echo.flush()
        return exited


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the worker's process group (its session: the worker and its descendants)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _forward(
    worker: LocalWorker,
    stream: asyncio.StreamReader | None,
    name: str,
    echo: Echo,
    sink: LineSink | None,
) -> None:
    """Copy a worker's output to ours (`echo`), each line prefixed with the worker id, and
    to `sink`."""
    if stream is None:
        return
    try:
        while line := await _readline(stream):
            text = line.decode(errors="replace")
            worker.last_line = text.strip() or worker.last_line
            echo.write(f"[{worker.id}] {text}")
            if sink is not None:
                sink(worker.id, name, text)
    finally:
        echo.flush()  # a worker's last lines (an exit, a traceback) at once
        if sink is not None:
            sink(worker.id, name, None)


async def _readline(stream: asyncio.StreamReader) -> bytes:
    """The next line; a line over the stream's limit (64 KiB) comes in pieces."""
    try:
        return await stream.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        return err.partial  # the last line, without a line break (b"" at the end)
    except asyncio.LimitOverrunError as err:
        return await stream.readexactly(err.consumed)
