"""The arguments of the job scripts (`store/lua/<SCRIPT>.lua`), one dataclass each
(`store/script_args.py` says how they reach Lua). Times are epoch ms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.store.script_args import Arg, ScriptArgs


@dataclass(slots=True)
class Submit(ScriptArgs):
    SCRIPT = "submit"
    REST = "fields"

    id: str
    now: int
    ttl: int
    low: str  # "1": lowPriority
    max_jobs: int  # the endpoint's queued-jobs quota (0: none)
    max_bytes: int  # its queued-bytes quota (0: none)
    size: int  # the input's bytes
    idem: str  # the idempotency key's digest; "" for none
    fields: Sequence[Arg] = ()  # the record's optional field/value pairs


@dataclass(slots=True)
class Take(ScriptArgs):
    SCRIPT = "take"

    worker: str
    now: int
    n: int  # jobs wanted
    det: int  # the default execution timeout (ms)
    max_bytes: int  # the inputs taken stay within it (the first whatever its size)
    # The worker holds no job (all four, or none): jobs recorded as its are an earlier
    # process's, given back first.
    max_attempts: int | None = None
    ret_run: int | None = None
    ret_sync: int | None = None
    reason: str | None = None


@dataclass(slots=True)
class Finish(ScriptArgs):
    SCRIPT = "finish"
    REST = "fields"

    id: str
    worker: str
    now: int
    status: str
    ret_run: int
    ret_sync: int
    gpu_type: str  # the endpoint's usage rate (store/usage.py UsageRate)
    gpus: int
    vcpus: int
    fields: Sequence[Arg] = ()  # output / error field/value pairs


@dataclass(slots=True)
class Progress(ScriptArgs):
    SCRIPT = "progress"

    id: str
    worker: str
    progress: bytes  # JSON


@dataclass(slots=True)
class Stream(ScriptArgs):
    SCRIPT = "stream"
    REST = "chunks"

    id: str
    worker: str
    cap: int  # bytes of unread chunks at most
    chunks: Sequence[bytes] = ()


@dataclass(slots=True)
class ReadStream(ScriptArgs):
    SCRIPT = "read_stream"

    id: str
    now: int


@dataclass(slots=True)
class Cancel(ScriptArgs):
    SCRIPT = "cancel"

    id: str
    now: int
    ret_run: int
    ret_sync: int


@dataclass(slots=True)
class Retry(ScriptArgs):
    SCRIPT = "retry"

    id: str
    now: int


@dataclass(slots=True)
class Purge(ScriptArgs):
    SCRIPT = "purge"


@dataclass(slots=True)
class SetTtl(ScriptArgs):
    SCRIPT = "set_ttl"

    id: str
    ttl: int
    now: int


@dataclass(slots=True)
class Watch(ScriptArgs):
    SCRIPT = "watch"

    id: str


@dataclass(slots=True)
class ListJobs(ScriptArgs):
    SCRIPT = "list_jobs"
    REST = "states"

    now: int
    hi: str  # the highest index score, Redis range syntax
    lo: str  # the lowest
    limit: int
    states: Sequence[str] = ()


@dataclass(slots=True)
class ClaimWebhooks(ScriptArgs):
    SCRIPT = "claim_webhooks"

    now: int
    lease: int  # ms
    limit: int


@dataclass(slots=True)
class SettleWebhook(ScriptArgs):
    SCRIPT = "settle_webhook"

    id: str
    done: str  # "1": delivered or out of attempts
    retry_at: int
    refund: str  # "1": the claim made no attempt


JOB_SCRIPTS: tuple[type[ScriptArgs], ...] = (
    Submit, Take, Finish, Progress, Stream, ReadStream, Cancel, Retry, Purge, SetTtl, Watch,
    ListJobs, ClaimWebhooks, SettleWebhook,
)  # fmt: skip
