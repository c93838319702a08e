"""Plain data the store hands out: job records, taken jobs, snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from lockgate.store.keys import F


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

    FIELDS: ClassVar[tuple[str, ...]] = (
        F.STATUS,
        F.CREATED,
        F.TTL,
        F.QUEUED,
        F.STARTED,
        F.FINISHED,
    )
    FIELDS += (F.OUTPUT, F.ERROR, F.PROGRESS)

    @classmethod
    def from_fields(cls, job_id: str, values: list[bytes | None]) -> JobRecord | None:
        status, created, ttl, queued, started, finished, output, error, progress = values
        if status is None:
            return None
        return cls(
            id=job_id,
            status=status.decode(),
            created=int(created or 0),
            ttl=int(ttl or 0),
            queued=int(queued or 0),
            started=int(started) if started else None,
            finished=int(finished) if finished else None,
            output=output,
            error=error.decode() if error is not None else None,
            progress=progress,
        )

    @classmethod
    def from_event(cls, job_id: str, payload: bytes) -> JobRecord | None:
        """The final record a `d:` event carries after its first line (common.lua
        `done_event`); None when it is not one."""
        head, _, rest = payload.partition(b"\n")
        try:
            status, created, ttl, queued, started, finished, err_len, has_out = head.split(b" ")
            n = int(err_len)
            return cls(
                id=job_id,
                status=status.decode(),
                created=int(created),
                ttl=int(ttl),
                queued=int(queued),
                started=None if started == b"-" else int(started),
                finished=int(finished),
                output=rest[max(n, 0) :] if has_out == b"1" else None,
                error=rest[:n].decode() if n >= 0 else None,
            )
        except ValueError:  # not a record (an older script's event, a damaged one)
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
