"""The jobs a worker holds: running in its handler, or finished with the result on its way."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass
class HeldJob:
    """One job in hand; `sending` once its handler finished and the result is being sent;
    `refilling` while that result's answer may bring the job to run next in its slot."""

    job_id: str
    task: asyncio.Task[None]
    sending: bool = False
    refilling: bool = False


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
