"""Batch jobs (issue 49; docs/batch-jobs.md): RunPod's Batch Jobs states, shapes and limits,
and the pure decisions about them. A batch's requests run as jobs of its endpoint's hidden
batch pool, the endpoint `batch_pool_id(endpoint)` (`batch_pool_spec`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models.endpoint import EndpointSpec
from lockgate.models.jobs import FINAL_STATES, JobStatus

BATCH_ID_PREFIX = "batch_"
BATCH_POOL_PREFIX = "batch-"
NAME_MAX_CHARS = 256
# The status of a request of a DRAFT batch: uploaded, not queued (beyond RunPod's enum).
DRAFT_REQUEST = "DRAFT"


class BatchStatus(StrEnum):
    """RunPod's batch states: DRAFT → FINALIZED → (FAILED | CANCELLED). There is no
    RUNNING nor COMPLETED: a FINALIZED batch runs, and is done when completed + failed ==
    total; a done batch none of whose requests failed stays FINALIZED."""

    DRAFT = "DRAFT"
    FINALIZED = "FINALIZED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """Per endpoint: batches not yet done (DRAFT or FINALIZED and running), requests per
    batch, requests queued in its batch pool, and bytes of input per batch."""

    active: int = 10
    requests: int = 5_000
    queued: int = 50_000
    bytes: int = 256 * 1024 * 1024


class BatchRename(BaseModel):
    """`PUT …/batch/{id}`'s body: the batch's display name (RunPod's schema is not given:
    `{"name": "…"}`, docs/batch-jobs.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., max_length=NAME_MAX_CHARS, description="the display name")


@dataclass(frozen=True, slots=True)
class Counts:
    """How a batch's requests stand."""

    total: int
    completed: int
    failed: int

    @property
    def ended(self) -> int:
        return self.completed + self.failed

    @property
    def done(self) -> bool:
        return self.ended >= self.total


def counted_as_completed(status: str) -> bool | None:
    """How a child job's final status counts: True completed, False failed (FAILED,
    TIMED_OUT and CANCELLED: a cancelled batch's queued requests count as failed), None
    while it is not final."""
    if status not in FINAL_STATES:
        return None
    return status == JobStatus.COMPLETED


def status_when_done(counts: Counts, *, cancelling: bool) -> BatchStatus:
    """A finalized batch's status once its requests all ended: CANCELLED when it was
    cancelled, FAILED when a request failed, else it stays FINALIZED (RunPod has no
    COMPLETED)."""
    if cancelling:
        return BatchStatus.CANCELLED
    return BatchStatus.FAILED if counts.failed else BatchStatus.FINALIZED


def batch_pool_id(endpoint_id: str) -> str:
    """The hidden endpoint that runs an endpoint's batches: `batch-<id>` (an endpoint id
    as any, at most 63 characters: a long id is cut and a digest of it added)."""
    whole = BATCH_POOL_PREFIX + endpoint_id
    if len(whole) <= 63:
        return whole
    digest = hashlib.sha256(endpoint_id.encode()).hexdigest()[:8]
    return f"{BATCH_POOL_PREFIX}{endpoint_id[:48].rstrip('-')}-{digest}"


def batch_pool_parent(endpoint_id: str, known: Iterable[str] = ()) -> str | None:
    """The endpoint whose batch pool `endpoint_id` is (`batch_pool_id` read back): the one
    of `known` whose pool it is, else the id after `batch-` when that names it back (a cut
    long id reads back only through `known`); None when it is no batch pool."""
    if not endpoint_id.startswith(BATCH_POOL_PREFIX):
        return None
    if found := next((k for k in known if batch_pool_id(k) == endpoint_id), None):
        return found
    short = endpoint_id.removeprefix(BATCH_POOL_PREFIX)
    return short if short and batch_pool_id(short) == endpoint_id else None


def batch_pool_spec(spec: EndpointSpec) -> EndpointSpec:
    """The batch pool's settings: the endpoint's template, GPUs and policies, from zero
    workers up to its `batchWorkersMax` (default its `workersMax`); no warm-up, no
    replicas of its own, never built (it runs what the endpoint runs)."""
    most = spec.batchWorkersMax if spec.batchWorkersMax is not None else spec.workersMax
    update: dict[str, Any] = {
        "workersMin": 0, "workersMax": most, "replicas": None, "warmup": None,
        "batchWorkersMax": None,
    }  # fmt: skip
    return spec.model_copy(update=update)


def summary(
    batch_id: str,
    endpoint_id: str,
    fields: dict[str, str],
) -> dict[str, Any]:
    """`GET …/batch/{id}`'s body from the stored record: RunPod's summary (`createdAt` in
    epoch ms), plus `name`, `doneAt` (epoch ms once done, else null) and `webhook`: how its
    webhook's delivery stands (`webhook_state`)."""
    done_at = fields.get("doneAt")
    return {
        "id": batch_id,
        "endpointId": endpoint_id,
        "status": fields.get("status", BatchStatus.DRAFT),
        "name": fields.get("name", ""),
        "requestTotal": int(fields.get("total", 0)),
        "requestInProgress": int(fields.get("inProgress", 0)),
        "requestCompleted": int(fields.get("completed", 0)),
        "requestFailed": int(fields.get("failed", 0)),
        "createdAt": int(fields.get("createdAt", 0)),
        "doneAt": int(done_at) if done_at else None,
        "webhook": webhook_state(fields),
    }


def webhook_state(fields: dict[str, str]) -> str | None:
    """None without a webhook; else WAITING (the batch is not done), PENDING (being
    delivered), DELIVERED or GAVE_UP (every attempt failed)."""
    if not fields.get("webhook"):
        return None
    return (fields.get("whState") or "waiting").upper()
