"""The arguments of the worker and endpoint scripts (`store/lua/<SCRIPT>.lua`), one
dataclass each (`store/script_args.py` says how they reach Lua). Times are epoch ms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.store.script_args import Arg, ScriptArgs


@dataclass(slots=True)
class Heartbeat(ScriptArgs):
    SCRIPT = "heartbeat"

    worker: str
    now: int


@dataclass(slots=True)
class Stops(ScriptArgs):
    SCRIPT = "stops"

    worker: str
    now: int


@dataclass(slots=True)
class ReleaseWorker(ScriptArgs):
    SCRIPT = "release_worker"

    worker: str
    now: int
    max_attempts: int
    ret_run: int
    ret_sync: int
    reason: str  # the error of a job failed out of attempts
    clean: str  # "1": it exited cleanly when told to stop
    gone_ms: int
    # Marked unhealthy: why (JSON, models/unhealthy.py), and how long that is kept (ms).
    why: str | None = None
    keep_ms: int | None = None


@dataclass(slots=True)
class Reconcile(ScriptArgs):
    SCRIPT = "reconcile"
    REST = "ids"

    worker: str
    now: int
    grace: int
    max_attempts: int
    ret_run: int
    ret_sync: int
    reason: str
    ids: Sequence[str] = ()  # the jobs the worker says it runs


@dataclass(slots=True)
class GiveBack(ScriptArgs):
    SCRIPT = "give_back"
    REST = "ids"

    worker: str
    now: int
    ids: Sequence[str] = ()  # the jobs it took and did not start


@dataclass(slots=True)
class WorkerStates(ScriptArgs):
    SCRIPT = "worker_states"

    initializing: int
    throttled: int
    unhealthy: int
    ttl: int


@dataclass(slots=True)
class WorkerStarted(ScriptArgs):
    SCRIPT = "worker_started"
    REST = "starts"

    now: int
    starts: Sequence[Arg] = ()  # worker, start (ms) pairs


@dataclass(slots=True)
class WarmupDone(ScriptArgs):
    SCRIPT = "warmup_done"

    worker: str
    job: str
    now: int
    failed: str  # "1": the warm-up job failed


@dataclass(slots=True)
class WarmupOverdue(ScriptArgs):
    SCRIPT = "warmup_overdue"

    now: int
    again: int  # ms between two reports of one


@dataclass(slots=True)
class Snapshot(ScriptArgs):
    SCRIPT = "snapshot"

    now: int
    timeout: int  # heartbeat timeout (ms)
    stale: int  # a load-balancing worker's polled health is stale after (ms)
    unhealthy_keep: int  # a worker marked unhealthy counts this long at most (ms)


@dataclass(slots=True)
class Sweep(ScriptArgs):
    SCRIPT = "sweep"

    now: int
    hb: int  # heartbeat timeout (ms)
    max_attempts: int
    ret_run: int
    ret_sync: int
    lock_ms: int
    batch: int
    reason: str
    horizon: int  # ms


@dataclass(slots=True)
class DeleteEndpoint(ScriptArgs):
    SCRIPT = "delete_endpoint"

    now_s: int  # epoch seconds


@dataclass(slots=True)
class History(ScriptArgs):
    SCRIPT = "history"
    REST = "slots"

    now: int
    timeout: int  # heartbeat timeout (ms)
    keep: int  # points kept
    keep_minutes: int  # minute points kept
    zeros: int  # how many of the first intervals were quiet
    gpu_type: str
    gpus: int  # per worker; 0 for a CPU endpoint
    vcpus: int  # per worker; 0 for a GPU endpoint
    chunk_s: int  # seconds of hours per usage hash
    use_keep: int  # how long (s) a usage hash outlives its last hour
    slots: Sequence[int] = ()  # the intervals' epoch seconds, oldest first


@dataclass(slots=True)
class Limit(ScriptArgs):
    SCRIPT = "limit"

    op: str
    owner: str
    now: int
    window: int  # ms
    rate: int  # -1: none
    want: int  # units
    conc: int  # -1: none
    replica: str
    slots: int  # -1: leave as is
    lease: int  # ms


WORKER_SCRIPTS: tuple[type[ScriptArgs], ...] = (
    Heartbeat, Stops, ReleaseWorker, Reconcile, GiveBack, WorkerStates, WorkerStarted,
    WarmupDone, WarmupOverdue, Snapshot, Sweep, DeleteEndpoint, History, Limit,
)  # fmt: skip
