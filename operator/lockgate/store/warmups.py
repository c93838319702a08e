"""Queue workers' warm-up in the job store (`lg:{ep}:wu`, see keys.py and docs/warm-up.md).

A worker new to an endpoint with warm-up inputs warms up before it takes real jobs: `take`
hands it each input in turn as a job no client sees (take.lua), and `warmup_done` records
each result. A failed or overdue warm-up marks the worker unhealthy (`mark_unhealthy`).
"""

from __future__ import annotations

from enum import IntEnum

from lockgate.models.unhealthy import REASON_CHARS, UnhealthyWorker
from lockgate.store import args_workers
from lockgate.store.jobs import JobStore

# A warm-up job's id: `warmup-<input index>-<times handed>-<handed at ms>` (take.lua).
WARMUP_JOB_PREFIX = "warmup-"
OVERDUE_AGAIN_MS = 60_000  # an overdue warm-up not marked yet is reported again after this


class Step(IntEnum):
    """What a warm-up job's result did (warmup_done.lua)."""

    IGNORED = 0  # not the worker's current warm-up job (late, or its worker released)
    FAILED = -1  # the worker is marked unhealthy
    NEXT = 1  # the next input is due
    WARM = 2  # warmed up: real jobs come next


def is_warmup_job(job_id: str) -> bool:
    """Whether a job id is a warm-up job's (real job ids are UUIDs: no such prefix)."""
    return job_id.startswith(WARMUP_JOB_PREFIX)


async def warmup_done(
    store: JobStore, endpoint_id: str, worker_id: str, job_id: str, error: str | None
) -> Step:
    """Record a warm-up job's result; a failure (`error`) marks the worker unhealthy."""
    now = store.clock()
    failed = "1" if error is not None else "0"
    args = args_workers.WarmupDone(endpoint_id, worker_id, job_id, now, failed)
    step = Step(int(await store.scripts.run(args)))
    if step == Step.FAILED:
        reason = f"job {job_id} failed: {error}"[:REASON_CHARS]
        await store.mark_unhealthy(
            endpoint_id, UnhealthyWorker(worker=worker_id, kind="warmup", reason=reason, at=now)
        )
    return step


async def mark_overdue(store: JobStore, endpoint_id: str, timeout_ms: int) -> list[str]:
    """Mark unhealthy the workers whose warm-up job outran `timeout_ms` (the endpoint's
    execution timeout, the deadline take.lua set); returns their ids."""
    now = store.clock()
    reply = await store.scripts.run(args_workers.WarmupOverdue(endpoint_id, now, OVERDUE_AGAIN_MS))
    marked = []
    for worker, index in zip(reply[::2], reply[1::2], strict=True):
        reason = f"warm-up input {int(index) + 1} did not finish within {timeout_ms / 1000:g} s"
        why = UnhealthyWorker(worker=worker.decode(), kind="warmup", reason=reason, at=now)
        await store.mark_unhealthy(endpoint_id, why)
        marked.append(why.worker)
    return marked
