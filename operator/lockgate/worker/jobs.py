"""The jobs a worker holds: waiting for a slot, running in its handler, or finished with
the result on its way; and the slots they run in."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass


@dataclass
class HeldJob:
    """One job in hand; `sending` once its handler finished and the result is being sent;
    `refilling` while that result's answer may bring the job to run next in its slot;
    `started` once it has a slot (a job taken ahead waits for one first)."""

    job_id: str
    task: asyncio.Task[None]
    sending: bool = False
    refilling: bool = False
    started: bool = False


class JobsInHand:
    """Jobs taken and not yet reported, with a wake-up for whoever waits on a change."""

    def __init__(self) -> None:
        self._jobs: dict[str, HeldJob] = {}
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    @property
    def running(self) -> int:
        """How many concurrency slots are taken: jobs inside the handler, and jobs whose
        result is on its way with the next job for their slot asked for."""
        return sum(not held.sending or held.refilling for held in self._jobs.values())

    def ids(self) -> list[str]:
        """The ids of every job in hand, as the heartbeat reports them."""
        return list(self._jobs)

    def get(self, job_id: str) -> HeldJob | None:
        """Return the held job with this id, if any."""
        return self._jobs.get(job_id)

    def add(self, job_id: str, task: asyncio.Task[None]) -> None:
        """Hold a job whose handler is starting in `task`."""
        self._jobs[job_id] = HeldJob(job_id, task)

    def started(self, job_id: str) -> None:
        """Mark a job's handler as starting (it had a slot)."""
        if (held := self._jobs.get(job_id)) is not None:
            held.started = True

    def sending(self, job_id: str, *, refilling: bool = False) -> None:
        """Mark a job's handler finished. Its slot is free while the result is sent, unless
        `refilling`: the answer to the result may bring the next job for that slot."""
        held = self._jobs[job_id]
        held.sending, held.refilling = True, refilling
        if not refilling:
            self._changed.set()

    def remove(self, job_id: str) -> None:
        """Let go of a job (its result was sent, or it was stopped)."""
        self._jobs.pop(job_id, None)
        self._changed.set()

    async def wait_change(self, timeout_s: float | None = None) -> None:
        """Wait until a job frees its slot or leaves, or until `timeout_s` passes."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()

    async def drained(self) -> None:
        """Wait until no job is in hand."""
        while self._jobs:
            await self.wait_change()


class Slots:
    """The concurrency slots handlers run in. A job taken ahead of a free slot
    (`Runtime._ahead`) waits here for one, first come first served; one that waits too long,
    or is still waiting when the worker stops taking jobs, is not started (its caller gives
    it back to the queue)."""

    def __init__(self) -> None:
        self.busy = 0
        self._queue: deque[asyncio.Future[bool]] = deque()

    @property
    def waiting(self) -> int:
        """How many jobs wait for a slot."""
        return len(self._queue)

    async def enter(self, limit: int, within_s: float | None) -> bool:
        """Take one of `limit` slots: at once when one is free and nobody waits, else in
        turn. False when none came within `within_s` seconds or the waiters were sent
        away (`send_away`): the job is not to be started."""
        if self.busy < limit and not self._queue:
            self.busy += 1
            return True
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        try:
            async with asyncio.timeout(within_s):
                return await turn
        except BaseException as err:
            if turn.done() and not turn.cancelled() and turn.result():
                self.leave(limit)  # granted as the wait ended: the slot passes on
            if isinstance(err, TimeoutError):
                return False
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._queue.remove(turn)

    def leave(self, limit: int) -> None:
        """Free a slot: the first waiter (if any) takes it."""
        self.busy -= 1
        self.admit(limit)

    def admit(self, limit: int) -> None:
        """Give free slots of `limit` to waiters, in turn (also after `limit` grew)."""
        while self._queue and self.busy < limit:
            turn = self._queue.popleft()
            if not turn.done():
                self.busy += 1
                turn.set_result(True)

    def send_away(self) -> None:
        """Every waiter gives up its turn (its job is not started)."""
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(False)
