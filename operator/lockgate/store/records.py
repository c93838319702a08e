"""Plain data the store hands out: job records, taken jobs, snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from lockgate.store.keys import F

# What of a job record each reader reads, by field (F); the Lua scripts get the same tuples
# (store/lua_preamble.py), so a field is added in one place.
RECORD_FIELDS = (
    F.STATUS, F.CREATED, F.TTL, F.QUEUED, F.STARTED, F.FINISHED, F.OUTPUT, F.ERROR, F.PROGRESS,
)  # fmt: skip  # `/status`: JobStore.get, watch.lua
LISTED_FIELDS = (
    F.STATUS, F.CREATED, F.TTL, F.QUEUED, F.STARTED, F.FINISHED, F.WORKER, F.ERROR,
)  # fmt: skip  # GET /requests rows (list_jobs.lua), after the id
DONE_HEAD = (F.STATUS, F.CREATED, F.TTL, F.QUEUED, F.STARTED, F.FINISHED)  # a `d:` event's
# How a take of a job ended (`ah`'s `o`, common.lua): the console says each in words.
ATTEMPT_ENDS = ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELLED", "WORKER_LOST", "GIVEN_BACK")


def _ms(raw: bytes | None) -> int | None:
    return int(raw) if raw else None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One take of a job: the worker, when (ms), and once it ended, when and how
    (COMPLETED, FAILED, TIMED_OUT, CANCELLED, WORKER_LOST or GIVEN_BACK; common.lua)."""

    worker: str
    taken: int
    ended: int | None = None
    how: str | None = None


@dataclass(frozen=True, slots=True)
class JobExtras:
    """What the request inspector reads beyond `/status`: the takes since the last /retry
    (`attempts`), the last 10 takes whenever (`history`, oldest first), and the stream
    chunks no /stream read has taken."""

    attempts: int
    history: list[Attempt]
    chunks: list[bytes]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What `/status` needs of one job. Times are ms since the epoch; output is raw JSON."""

    id: str
    status: str
    created: int
    ttl: int
    queued: int
    started: int | None
    finished: int | None
    output: bytes | None
    error: str | None
    progress: bytes | None = None  # raw JSON of the latest progress report, while running
    worker: str | None = None  # the worker running or that ran it, where known (listings)

    FIELDS: ClassVar[tuple[str, ...]] = RECORD_FIELDS

    @classmethod
    def from_fields(cls, job_id: str, values: Sequence[bytes | None]) -> JobRecord | None:
        """The record of HMGET's `values` of FIELDS; None without one."""
        return cls.from_named(job_id, dict(zip(cls.FIELDS, values, strict=True)))

    @classmethod
    def from_named(cls, job_id: str, f: Mapping[str, bytes | None]) -> JobRecord | None:
        """The record of its fields by name (F; a field not read is None); None without a
        status (no record)."""
        status, error, worker = f.get(F.STATUS), f.get(F.ERROR), f.get(F.WORKER)
        if status is None:
            return None
        created = int(f.get(F.CREATED) or 0)
        return cls(
            id=job_id,
            status=status.decode(),
            created=created,
            ttl=int(f.get(F.TTL) or 0),
            queued=int(f.get(F.QUEUED) or created),
            started=_ms(f.get(F.STARTED)),
            finished=_ms(f.get(F.FINISHED)),
            output=f.get(F.OUTPUT),
            error=error.decode() if error is not None else None,
            progress=f.get(F.PROGRESS),
            worker=worker.decode() if worker is not None else None,
        )

    @classmethod
    def from_listed(cls, row: Sequence[bytes]) -> JobRecord:
        """A row of list_jobs.lua: the id, then LISTED_FIELDS (None for a field not set)."""
        record = cls.from_named(row[0].decode(), dict(zip(LISTED_FIELDS, row[1:], strict=True)))
        assert record is not None  # list_jobs.lua lists records with a status only
        return record

    @classmethod
    def from_event(cls, job_id: str, payload: bytes) -> JobRecord | None:
        """The final record a `d:` event carries after its first line (common.lua
        `done_event`: DONE_HEAD's values, '-' for none, then the error's length (-1: none)
        and 1 with an output; a line; the error and the output); None when it is not one."""
        head, _, rest = payload.partition(b"\n")
        parts = head.split(b" ")
        if len(parts) != len(DONE_HEAD) + 2:
            return None  # not a record (an older script's event, a damaged one)
        *values, err_len, has_out = parts
        try:
            n = int(err_len)
        except ValueError:
            return None
        named: dict[str, bytes | None] = {
            k: None if v == b"-" else v for k, v in zip(DONE_HEAD, values, strict=True)
        }
        named[F.ERROR] = rest[:n] if n >= 0 else None
        named[F.OUTPUT] = rest[max(n, 0) :] if has_out == b"1" else None
        try:
            return cls.from_named(job_id, named)
        except ValueError:
            return None

    def expired(self, now: int) -> bool:
        """Past its ttl: gone for clients even while the sweeper has not deleted it yet."""
        return now >= self.created + self.ttl

    def delay_ms(self, now: int) -> int:
        """Time spent queued (until start, end, or now)."""
        return max(0, (self.started or self.finished or now) - self.queued)

    def execution_ms(self, now: int) -> int:
        """Time spent running (until end or now); 0 when never started."""
        if self.started is None:
            return 0
        return max(0, (self.finished or now) - self.started)


@dataclass(frozen=True, slots=True)
class TakenJob:
    """A job handed to a worker: raw JSON of its input and storage configuration."""

    id: str
    input: bytes
    s3_config: bytes | None
    warmup: int | None = None  # a warm-up job: the index of the endpoint's warm-up input


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counts of one endpoint, as `/health` and `/metrics` report them."""

    in_queue: int
    in_queue_low: int
    in_progress: int
    workers_idle: int
    workers_running: int
    completed: int
    failed: int
    retried: int
    oldest_queued_ms: int | None  # submission time of the oldest normal job waiting
    oldest_queued_low_ms: int | None
    worker_jobs: dict[str, int] = field(default_factory=dict)  # live worker -> jobs it holds
    # Worker states the operator (pod state) or dev pool (process state) reported.
    workers_initializing: int = 0
    workers_throttled: int = 0
    workers_unhealthy: int = 0
    # Load-balancing endpoints: requests held for a routable worker, and in flight.
    requests_held: int = 0
    requests_in_flight: int = 0
    # Live workers still warming up (counted in `workers_initializing`, not in worker_jobs).
    workers_warming: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Finished:
    """A result the store recorded: when its job entered the queue, started and ended (ms)."""

    queued: int
    started: int
    finished: int

    @property
    def delay_ms(self) -> int:
        return max(0, self.started - self.queued)

    @property
    def execution_ms(self) -> int:
        return max(0, self.finished - self.started)
