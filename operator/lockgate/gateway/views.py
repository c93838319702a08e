"""Response bodies of the job API, built from store records (pure functions)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import orjson

from lockgate.models import JobStatus
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobExtras, JobRecord


def job_body(record: JobRecord, now: int) -> dict[str, Any]:
    """The `/status` (and webhook, and finished `/runsync`) body of a job."""
    body: dict[str, Any] = {
        "id": record.id,
        "status": record.status,
        "delayTime": record.delay_ms(now),
        "executionTime": record.execution_ms(now),
    }
    if record.status == JobStatus.COMPLETED and record.output is not None:
        body["output"] = orjson.Fragment(record.output)
    elif record.status == JobStatus.IN_PROGRESS and record.progress is not None:
        body["output"] = orjson.Fragment(record.progress)  # the latest progress_update
    if record.error is not None:
        body["error"] = record.error
    return body


# At most this many of the last hour's unhealthy workers are listed in /health.
UNHEALTHY_LISTED = 20


def unhealthy_list(
    marked: Mapping[str, UnhealthyWorker], present: Collection[str]
) -> list[dict[str, Any]]:
    """`/health`'s `unhealthyWorkers` (beyond the spec): the workers marked unhealthy in
    the last hour, newest first (at most `UNHEALTHY_LISTED`), each with why and whether
    its pod or process is still there (`present`: counted in `workers.unhealthy`)."""
    newest = sorted(marked.items(), key=lambda item: (-item[1].at, item[0]))
    return [
        {
            "id": worker,
            "kind": why.kind,
            "check": why.check,
            "reason": why.reason,
            "at": why.at,
            "present": worker in present,
        }
        for worker, why in newest[:UNHEALTHY_LISTED]
    ]


def stream_body(job_id: str, status: str, chunks: list[bytes]) -> dict[str, Any]:
    """`/stream`: the chunks produced since the previous read; empty and final means ended."""
    return {"id": job_id, "status": status, "stream": [orjson.Fragment(c) for c in chunks]}


def job_details(extras: JobExtras) -> dict[str, Any]:
    """`/status?details=1`'s extra fields (lockgate's own, absent without the flag):
    `attempts`, times a worker took the job since it was submitted or last retried;
    `attemptHistory`, its last 10 takes (oldest first: `workerId`, `takenAt`, and once
    it ended `endedAt` (epoch ms) and `ended`, how); `stream`, the chunks no /stream
    read has taken yet."""
    history = []
    for a in extras.history:
        entry: dict[str, Any] = {"workerId": a.worker, "takenAt": a.taken}
        if a.ended is not None:
            entry |= {"endedAt": a.ended, "ended": a.how}
        history.append(entry)
    return {
        "attempts": extras.attempts,
        "attemptHistory": history,
        "stream": [orjson.Fragment(c) for c in extras.chunks],
    }
