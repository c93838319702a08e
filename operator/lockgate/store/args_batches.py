"""The arguments of the Batch Jobs scripts (`store/lua/batch_*.lua`, `store/batches.py`),
one dataclass each (`store/script_args.py` says how they reach Lua). Every script works
on the keys of one batch of the endpoint `ep` (`keys.batch`, derived in Lua from
`batch`). Times are epoch ms.

Each change answers `{word, detail}`: `ok` (detail: a figure, or ""), or why it was
refused: `gone` (no such batch), `state` (detail: its status), `missing` (no such
request), or a limit passed (`active`, `requests`, `bytes`, `queued`; detail: the limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.store.script_args import Arg, ScriptArgs


@dataclass(slots=True)
class CreateBatch(ScriptArgs):
    """A new DRAFT batch with its first requests, within the limits."""

    SCRIPT = "batch_create"
    REST = "requests"

    batch: str
    now: int  # its createdAt
    most_active: int  # batches not yet done per endpoint
    most_requests: int  # per batch
    most_bytes: int  # of request JSON per batch
    webhook: str  # "": none
    requests: Sequence[Arg] = ()  # request id, JSON pairs


@dataclass(slots=True)
class AddRequests(ScriptArgs):
    """More requests for a DRAFT; `ok` with its new total."""

    SCRIPT = "batch_add"
    REST = "requests"

    batch: str
    most_requests: int
    most_bytes: int
    requests: Sequence[Arg] = ()  # request id, JSON pairs


@dataclass(slots=True)
class DeleteRequest(ScriptArgs):
    """Remove one request of a DRAFT."""

    SCRIPT = "batch_delete_request"

    batch: str
    request: str


@dataclass(slots=True)
class FinalizeBatch(ScriptArgs):
    """DRAFT -> FINALIZED, unless the endpoint's finalized requests not yet ended would
    pass `most_queued`; `ok` with its total."""

    SCRIPT = "batch_finalize"

    batch: str
    now: int
    most_queued: int


@dataclass(slots=True)
class CancelBatch(ScriptArgs):
    """End the requests not yet queued with `cancelled`; answers `draft` (a DRAFT: it is
    CANCELLED now) or `cancelling` (a running batch: its queued requests are the runner's)."""

    SCRIPT = "batch_cancel"

    batch: str
    cancelled: bytes  # the result JSON of a request cancelled before it was queued


@dataclass(slots=True)
class MarkQueued(ScriptArgs):
    """Requests queued as jobs leave the inputs for the open set; answers the ids no
    longer waiting (cancelled meanwhile: their jobs are to be cancelled)."""

    SCRIPT = "batch_queued"
    REST = "ids"

    batch: str
    ids: Sequence[str] = ()


@dataclass(slots=True)
class RecordResults(ScriptArgs):
    """Final results of open requests, each counted once; answers {total, completed,
    failed, still open}."""

    SCRIPT = "batch_results"
    REST = "ended"

    batch: str
    in_progress: int  # as the runner saw it
    ended: Sequence[Arg] = ()  # request id, 1|0 (completed), result JSON triples


@dataclass(slots=True)
class ConcludeBatch(ScriptArgs):
    """End the batch with `status` (the first caller wins: 1), its webhook due at `now`,
    its keys kept `retention` ms."""

    SCRIPT = "batch_conclude"

    batch: str
    status: str  # models.batch.BatchStatus
    now: int
    retention: int  # ms


@dataclass(slots=True)
class ClaimBatchWebhook(ScriptArgs):
    """Claim the due webhook attempt for `lease` ms: its number, 0 when not claimed."""

    SCRIPT = "batch_claim_webhook"

    batch: str
    now: int
    lease: int  # ms


@dataclass(slots=True)
class RenameBatch(ScriptArgs):
    """Set the display name: 1, or 0 when there is no such batch."""

    SCRIPT = "batch_rename"

    batch: str
    name: str


@dataclass(slots=True)
class SettleBatchWebhook(ScriptArgs):
    """After an attempt: its delivery's state, due again at `due` (pending)."""

    SCRIPT = "batch_settle_webhook"

    batch: str
    state: str  # pending, delivered, gave_up
    due: int


BATCH_SCRIPTS: tuple[type[ScriptArgs], ...] = (
    CreateBatch, AddRequests, DeleteRequest, FinalizeBatch, CancelBatch, MarkQueued,
    RecordResults, ConcludeBatch, ClaimBatchWebhook, RenameBatch, SettleBatchWebhook,
)  # fmt: skip
