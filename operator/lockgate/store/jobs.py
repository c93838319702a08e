"""The job store: every job state transition, each one atomic Lua script in Redis."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError

from lockgate.models import JobStatus
from lockgate.models.endpoint import WORKER_LOST
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.models.waiting import queue_position
from lockgate.store import args_jobs, args_workers, keys, pipe
from lockgate.store.keys import F
from lockgate.store.records import Attempt, Finished, JobExtras, JobRecord, Snapshot, TakenJob
from lockgate.store.replies import text
from lockgate.store.script_args import Arg, ScriptArgs
from lockgate.store.scripts import NO_REPLICATION, Replication, Scripts
from lockgate.store.usage import NO_USAGE, UsageRate


def now_ms() -> int:
    """Wall-clock milliseconds: the store's default clock (shared by gateway replicas)."""
    return time.time_ns() // 1_000_000


class JobNotFound(LookupError):
    """The job does not exist: never submitted, expired or deleted."""


class StreamFull(ValueError):
    """The job's unread stream data would exceed its cap; nothing was appended."""


class QueueFull(Exception):
    """The endpoint's queue quota (`what`: "jobs" or "bytes") would be exceeded; nothing
    was queued."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(what)
        self.what = what
        self.limit = limit


class IneligibleState(ValueError):
    """The job's state does not allow the transition."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


@dataclass(frozen=True)
class Retention:
    """How long results stay readable after a final state (ms)."""

    run_ms: int = keys.RETENTION_RUN_MS
    sync_ms: int = keys.RETENTION_SYNC_MS


@dataclass(frozen=True)
class Liveness:
    """When a worker counts as lost, and how often a job may be lost before it fails."""

    heartbeat_timeout_ms: int = 30_000
    max_attempts: int = 3
    unlisted_grace_ms: int = 10_000  # a job a worker's ping does not list, taken this long ago


@dataclass(frozen=True)
class QueueQuota:
    """How much one endpoint may have queued (0: no limit)."""

    max_jobs: int = 0
    max_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Sweep:
    """What one sweep of an endpoint did."""

    timed_out: int
    expired: int
    lost_workers: int
    requeued: int
    quiet: bool = False  # nothing to look after until a sign of activity (sweep.lua)


@dataclass(frozen=True, slots=True)
class Sampled:
    """What `record_history` did: points written, and whether the newest interval's point
    (written now or before) is quiet: nothing queued, running, ended or alive."""

    written: int
    quiet: bool
    used_hour: int = 0  # the newest hour (epoch s) whose usage the points added to; 0: none


@dataclass(frozen=True, slots=True)
class Delivery:
    """A webhook delivery claimed by this replica."""

    job_id: str
    url: str
    attempt: int


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated job, ready to queue. JSON fields are already serialised."""

    id: str
    input: bytes
    ttl_ms: int
    low_priority: bool = False
    sync: bool = False
    live: bool = False  # a client waits on each stream chunk (an OpenAI stream)
    execution_timeout_ms: int | None = None
    webhook: str | None = None
    s3_config: bytes | None = None
    idempotency_key: str = ""  # a digest naming the key, its holder and route; "" for none
    api_key: str | None = None  # the submitting key's id (the keys API's `id`); None: no key

    def fields(self) -> list[str | bytes | int]:
        """The optional record fields, as flat field/value pairs."""
        pairs: list[str | bytes | int] = [F.INPUT, self.input]
        optional = (
            (F.LOW_PRIORITY, "1" if self.low_priority else None),
            (F.SYNC, "1" if self.sync else None),
            (F.LIVE, "1" if self.live else None),
            (F.EXEC_TIMEOUT, self.execution_timeout_ms),
            (F.WEBHOOK, self.webhook),
            (F.S3, self.s3_config),
            (F.API_KEY, self.api_key),
        )
        for name, value in optional:
            if value is not None:
                pairs += [name, value]
        return pairs


STOPPING = -1  # `take`'s count of jobs left when the worker was told to stop
WARMING = -3  # `take`'s count while the worker warms up: its warm-up job, or none


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Which jobs a listing wants: states (empty: all), createdAt in [since_ms, until_ms)
    (None: open), and where the previous page ended (`after`: an index score, exclusive)."""

    states: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None
    after: int | None = None
    limit: int = 20


def _bounds(query: JobQuery) -> tuple[str, str]:
    """The (hi, lo) index score range of a query, in Redis range syntax."""
    his = [query.until_ms * keys.ORDER_SLOTS] if query.until_ms is not None else []
    his += [query.after] if query.after is not None else []
    hi = f"({min(his)}" if his else "+inf"
    lo = str(query.since_ms * keys.ORDER_SLOTS) if query.since_ms is not None else "-inf"
    return hi, lo


class JobStore:
    """Jobs of every endpoint in one Redis. Methods map one to one onto transitions."""

    def __init__(
        self,
        redis: Redis,
        *,
        clock: Callable[[], int] = now_ms,
        retention: Retention | None = None,
        liveness: Liveness | None = None,
        quota: QueueQuota | None = None,
        replication: Replication = NO_REPLICATION,
    ) -> None:
        self.redis = redis
        self.replication = replication
        self.clock = clock
        self.retention = retention or Retention()
        self.liveness = liveness or Liveness()
        self.quota = quota or QueueQuota()
        self.scripts = Scripts.register(redis)
        # endpoint -> (counts, when) of the last worker-state report (report_worker_states)
        self._reported_states: dict[str, tuple[tuple[int, int, int], int]] = {}

    async def _accepting(self, args: ScriptArgs) -> Any:
        """Run an accepting write (a job submitted, a worker's result recorded): once it
        returns, `replication.replicas` replicas have it, so a failover cannot lose it.
        NotReplicated (an UNAVAILABLE error) when they do not confirm it in time.

        Only these two wait: what the client or worker is told was taken in. A cancel,
        retry, ttl change or purge lost by a failover is seen as not done and can be sent
        again; a take lost so is re-run (at least once); stream chunks are not covered."""
        return await self.scripts.run(args, replication=self.replication)

    def _retention(self) -> dict[str, int]:
        """The retention arguments of the scripts that end jobs."""
        return {"ret_run": self.retention.run_ms, "ret_sync": self.retention.sync_ms}

    def _lost(self) -> dict[str, Any]:
        """The arguments of the scripts that take jobs from lost workers."""
        reason = self._lost_reason()
        return {"max_attempts": self.liveness.max_attempts, **self._retention(), "reason": reason}

    async def submit(self, endpoint_id: str, job: NewJob) -> tuple[str, str]:
        """Record a job and put it at the back of its endpoint's queue; returns its (id,
        status). With an idempotency key that a living job was submitted with, that job's
        id and status instead, and nothing is queued. QueueFull when the endpoint's quota
        would be exceeded."""
        reply = await self._accepting(self._submit(endpoint_id, job))
        if reply == -1:
            raise QueueFull("jobs", self.quota.max_jobs)
        if reply == -2:
            raise QueueFull("bytes", self.quota.max_bytes)
        job_id, status = reply
        return job_id.decode(), status.decode()

    def _submit(self, endpoint_id: str, job: NewJob) -> args_jobs.Submit:
        low = "1" if job.low_priority else "0"
        return args_jobs.Submit(
            endpoint_id, job.id, self.clock(), job.ttl_ms, low, self.quota.max_jobs,
            self.quota.max_bytes, len(job.input), job.idempotency_key, job.fields(),
        )  # fmt: skip

    def submit_args(self, endpoint_id: str, job: NewJob) -> list[Arg]:
        """The ARGV of the `submit` script for `job`."""
        return self._submit(endpoint_id, job).argv()

    async def take(
        self,
        endpoint_id: str,
        worker_id: str,
        count: int,
        default_timeout_ms: int,
        *,
        holds_none: bool = False,
        max_bytes: int = 2**53,
    ) -> tuple[list[TakenJob], int]:
        """Hand up to `count` queued jobs to a worker; also whether jobs still wait (0:
        none; else a lower bound of how many: the normal queue's count while it has any).
        The inputs taken stay within `max_bytes` (the first job is taken whatever its size).

        `holds_none`: the worker says it has no job in hand (`job_in_progress=0`), so jobs
        still recorded as its belong to an earlier process with the same worker id (a
        container restarted in its pod): they go back to the queue first, as if that
        process had been released, instead of waiting for their execution timeout."""
        lost = self._lost() if holds_none else {}
        args = args_jobs.Take(
            endpoint_id, worker_id, self.clock(), count, default_timeout_ms, max_bytes, **lost
        )
        reply = await self.scripts.run(args)
        if int(reply[0]) == WARMING:  # its warm-up input to hand now, if any (take.lua)
            warm = [TakenJob(reply[2].decode(), b"", None, int(reply[1]))] if reply[1:] else []
            return warm, WARMING
        jobs = [TakenJob(i.decode(), inp, s3) for i, inp, s3 in reply[1:]]
        return jobs, int(reply[0])

    async def finish(
        self,
        endpoint_id: str,
        worker_id: str,
        job_id: str,
        *,
        output: bytes | None,
        error: str | None,
        rate: UsageRate = NO_USAGE,
    ) -> Finished | None:
        """Record a worker's result; None when the result is late and was ignored. The
        job's execution time is added to its API key's usage (`uk:`), its GPU- and
        vCPU-time at the endpoint's `rate`, in the same script."""
        status = "FAILED" if error is not None else "COMPLETED"
        fields: list[str | bytes] = []
        if output is not None:
            fields += [F.OUTPUT, output]
        if error is not None:
            fields += [F.ERROR, error]
        now = self.clock()
        args = args_jobs.Finish(
            endpoint_id, job_id, worker_id, now, status, **self._retention(),
            gpu_type=rate.gpu_type, gpus=rate.gpus, vcpus=rate.vcpus, fields=fields,
        )  # fmt: skip
        done = await self._accepting(args)
        return Finished(int(done[0]), int(done[1]), now) if done else None

    async def progress(
        self, endpoint_id: str, worker_id: str, job_id: str, progress: bytes
    ) -> bool:
        """Keep a running job's latest progress report (JSON); False when the worker no
        longer holds the job. The job's state does not change."""
        kept = await self.scripts.run(args_jobs.Progress(endpoint_id, job_id, worker_id, progress))
        return bool(kept)

    async def push_stream(
        self,
        endpoint_id: str,
        worker_id: str,
        job_id: str,
        chunks: Sequence[bytes],
        *,
        max_unread_bytes: int,
    ) -> bool:
        """Append stream chunks (all or none) to a job the worker holds; False when it no
        longer does. StreamFull when the chunks not yet read would pass `max_unread_bytes`."""
        accepted = await self.scripts.run(
            args_jobs.Stream(endpoint_id, job_id, worker_id, max_unread_bytes, chunks)
        )
        if int(accepted) < 0:
            raise StreamFull(job_id)
        return bool(accepted)

    async def read_stream(self, endpoint_id: str, job_id: str) -> tuple[str, list[bytes]]:
        """The job's status and the chunks produced since the previous read."""
        status, chunks, _first = await self.read_live(endpoint_id, job_id)
        return status, chunks

    async def read_live(self, endpoint_id: str, job_id: str) -> tuple[str, list[bytes], int]:
        """`read_stream`, and the number of the first chunk returned (of a live job; chunks
        count from 0 in the order the worker sent them)."""
        reply = await self.scripts.run(args_jobs.ReadStream(endpoint_id, job_id, self.clock()))
        if reply is None:
            raise JobNotFound(job_id)
        return reply[0].decode(), list(reply[1]), int(reply[2])

    async def get(self, endpoint_id: str, job_id: str) -> JobRecord:
        """The job's record; JobNotFound once it expired or never existed."""
        values = await pipe.read(
            self.redis, "HMGET", keys.job(endpoint_id, job_id), *JobRecord.FIELDS
        )
        return self._living(job_id, values)

    async def job_input(self, endpoint_id: str, job_id: str) -> bytes | None:
        """The raw JSON of the job's `input` (its s3Config is kept apart), None without one."""
        key = keys.job(endpoint_id, job_id)
        raw: bytes | None = await pipe.read(self.redis, "HGET", key, F.INPUT)
        return raw

    async def queue_position(self, endpoint_id: str, job_id: str) -> int | None:
        """The queued job's place in its endpoint's queues (1: taken next; a lowPriority
        job waits behind every normal one), None once it left them. Three reads in one
        write, not atomic: a take meanwhile shifts the answer by what it took. Only where
        a person asks (`/status?position=1`): never on the job path."""
        p = keys.prefix(endpoint_id)
        normal, low, normal_queued = await asyncio.gather(
            pipe.read(self.redis, "ZRANK", p + "q", job_id),
            pipe.read(self.redis, "ZRANK", p + "ql", job_id),
            pipe.read(self.redis, "ZCARD", p + "q"),
        )
        return queue_position(
            normal_rank=None if normal is None else int(normal),
            low_rank=None if low is None else int(low),
            normal_queued=int(normal_queued or 0),
        )

    async def job_extras(self, endpoint_id: str, job_id: str) -> JobExtras:
        """How many times a worker took the job (since its last /retry), its last takes,
        and its stream chunks not yet read by /stream (read without removing them; those
        /stream read are gone)."""
        record = keys.job(endpoint_id, job_id)
        taken, log = await pipe.read(self.redis, "HMGET", record, F.ATTEMPTS, F.ATTEMPT_LOG)
        chunks = await pipe.read(self.redis, "LRANGE", keys.stream(endpoint_id, job_id), 0, -1)
        history = [
            Attempt(a["w"], int(a["t"]), int(a["e"]) if "e" in a else None, a.get("o"))
            for a in (json.loads(log) if log else [])
        ]
        return JobExtras(int(taken or 0), history, list(chunks or []))

    async def final_record(
        self, endpoint_id: str, job_id: str, carried: JobRecord | None
    ) -> JobRecord:
        """The final record the job's end event carried while the job lives (no read), else
        `get`."""
        if carried is not None and not carried.expired(self.clock()):
            return carried
        return await self.get(endpoint_id, job_id)

    def _living(self, job_id: str, values: list[bytes | None] | None) -> JobRecord:
        """The record of HMGET's `values` of JobRecord.FIELDS; JobNotFound when there is
        none or it expired (the sweeper may not have deleted it yet)."""
        record = JobRecord.from_fields(job_id, values) if values else None
        if record is None or record.expired(self.clock()):
            raise JobNotFound(job_id)
        return record

    async def watch(self, endpoint_id: str, job_id: str) -> JobRecord:
        """`get`, and unless the job is final, mark it watched: its end then publishes a
        `d:` event (most often carrying its final record), as a /runsync job's does. With
        Redis at its maxmemory (the mark is a write) it is `get` alone: a waiter still
        sees the end at its next re-check."""
        try:
            values = await self.scripts.run(args_jobs.Watch(endpoint_id, job_id))
        except OutOfMemoryError:
            return await self.get(endpoint_id, job_id)
        return self._living(job_id, values)

    async def list_jobs(
        self, endpoint_id: str, query: JobQuery
    ) -> tuple[list[JobRecord], int | None]:
        """A page of the endpoint's living jobs, newest first (records without input or
        output), and where the next page starts (None: this was the last). A page can
        hold fewer than `limit` jobs while more follow (records that just died)."""
        hi, lo = _bounds(query)
        states = query.states or tuple(JobStatus)
        args = args_jobs.ListJobs(endpoint_id, self.clock(), hi, lo, query.limit, states)
        reply = await self.scripts.run(args)
        after = int(float(reply[0])) if reply[0] else None  # a score: an exact integer
        return [JobRecord.from_listed(row) for row in reply[1:]], after

    async def set_ttl(self, endpoint_id: str, job_id: str, ttl_ms: int) -> None:
        """Give a job a new ttl, counted from its submission."""
        if not await self.scripts.run(args_jobs.SetTtl(endpoint_id, job_id, ttl_ms, self.clock())):
            raise JobNotFound(job_id)

    async def cancel(self, endpoint_id: str, job_id: str) -> str:
        """Cancel a queued or running job (a running job's worker is told to stop)."""
        args = args_jobs.Cancel(endpoint_id, job_id, self.clock(), **self._retention())
        return self._outcome(job_id, await self.scripts.run(args))

    async def retry(self, endpoint_id: str, job_id: str) -> str:
        """Queue a FAILED or TIMED_OUT job again, same id and input."""
        args = args_jobs.Retry(endpoint_id, job_id, self.clock())
        return self._outcome(job_id, await self.scripts.run(args))

    @staticmethod
    def _outcome(job_id: str, reply: list[Any] | None) -> str:
        if reply is None:
            raise JobNotFound(job_id)
        ok, state = reply
        if not ok:
            raise IneligibleState(text(state))
        return text(state)

    async def purge(self, endpoint_id: str) -> int:
        """Remove every queued job of the endpoint; returns how many."""
        return int(await self.scripts.run(args_jobs.Purge(endpoint_id)))

    async def delete_endpoint_data(self, endpoint_id: str) -> int:
        """Remove all jobs, queues, workers and counters of an endpoint; returns jobs removed.

        Rate-limit counters and idempotency keys are not indexed, so they are found by a
        SCAN of the endpoint's prefix: deleting an endpoint is rare and never on a request
        path."""
        prefix = keys.prefix(endpoint_id)
        reply = await self.scripts.run(
            args_workers.DeleteEndpoint(endpoint_id, self.clock() // 1000)
        )
        for pattern in ("r[lc]:*", "ik:*", "lb[whru]"):
            found = [k async for k in self.redis.scan_iter(match=prefix + pattern, count=1000)]
            if found:
                await self.redis.unlink(*found)
        return int(reply)

    async def snapshot(self, endpoint_id: str) -> Snapshot:
        """Queue, progress, worker and outcome counts of one endpoint."""
        args = args_workers.Snapshot(
            endpoint_id, self.clock(), self.liveness.heartbeat_timeout_ms,
            keys.LB_HEALTH_STALE_MS, keys.UNHEALTHY_KEEP_MS,
        )  # fmt: skip
        r = await self.scripts.run(args)
        oldest, oldest_low = (int(v) if int(v) >= 0 else None for v in r[8:10])
        listed = {w.decode(): int(n) for w, n in zip(r[15::2], r[16::2], strict=True)}
        held = {w: n for w, n in listed.items() if n >= 0}  # -1: warming up
        initializing, throttled, unhealthy, lb_held, lb_flight = (int(v) for v in r[10:15])
        in_queue, in_queue_low, in_progress, idle, running, done, failed, retried = map(int, r[:8])
        return Snapshot(
            in_queue, in_queue_low, in_progress, idle, running, done, failed, retried,
            oldest, oldest_low, held,
            workers_initializing=initializing, workers_throttled=throttled,
            workers_unhealthy=unhealthy, requests_held=lb_held, requests_in_flight=lb_flight,
            workers_warming=frozenset(listed.keys() - held.keys()),
        )  # fmt: skip

    async def report_worker_states(
        self, endpoint_id: str, *, initializing: int, throttled: int, unhealthy: int
    ) -> None:
        """Worker states only the operator or dev pool can see; they vanish
        `WORKER_STATES_TTL_MS` after the last report. A report that changes nothing is not
        sent, but for a refresh of non-zero counts a third of the way through their life;
        zero counts are no key (an idle endpoint's reports cost nothing)."""
        counts = (initializing, throttled, unhealthy)
        now = self.clock()
        last = self._reported_states.get(endpoint_id)
        fresh = last is not None and now - last[1] < keys.WORKER_STATES_TTL_MS // 3
        if last is not None and last[0] == counts and (counts == (0, 0, 0) or fresh):
            return
        args = args_workers.WorkerStates(endpoint_id, *counts, keys.WORKER_STATES_TTL_MS)
        await self.scripts.run(args)
        self._reported_states[endpoint_id] = (counts, now)

    async def note_worker_starts(self, endpoint_id: str, starts: Mapping[str, int]) -> int:
        """When workers started (epoch ms), as their control plane knows it: each one's
        cold-start time, from then to its first call, is counted in the history (whichever
        of the two comes second counts it; worker_started.lua). Returns how many were
        counted by this call."""
        if not starts:
            return 0
        pairs: list[Arg] = []
        for worker, started in starts.items():
            pairs += [worker, int(started)]
        args = args_workers.WorkerStarted(endpoint_id, self.clock(), pairs)
        return int(await self.scripts.run(args))

    async def record_history(
        self,
        endpoint_id: str,
        slots: Sequence[int],
        *,
        quiet: int = 0,
        rate: UsageRate = NO_USAGE,
    ) -> Sampled:
        """Write the history points of the intervals starting at the epoch seconds `slots`
        (oldest first) that have none yet (another replica wrote it), in one call: the
        first `quiet` with zero gauges (the endpoint was quiet then), the others with the
        gauges as of now; each point's ready workers are added to its hour's usage at
        `rate` (`store.usage`). Says how many were written, whether the newest is quiet
        and the newest hour with usage added."""
        args = args_workers.History(
            endpoint_id, self.clock(), self.liveness.heartbeat_timeout_ms, keys.HISTORY_POINTS,
            keys.HISTORY_MINUTE_POINTS, quiet, rate.gpu_type, rate.gpus, rate.vcpus,
            keys.USAGE_CHUNK_S, keys.USAGE_KEEP_S, slots,
        )  # fmt: skip
        written, newest_quiet, used_hour = await self.scripts.run(args)
        return Sampled(int(written), bool(newest_quiet), int(used_hour))

    async def history(
        self, endpoint_id: str, since: int = 0, *, minutes: bool = False
    ) -> list[dict[str, Any]]:
        """History points of the endpoint from epoch second `since` on, oldest first: the
        10 s points, or with `minutes` the minute points (a day of them)."""
        key = keys.prefix(endpoint_id) + ("hist1m" if minutes else "hist")
        raw = cast(list[bytes], await self.redis.zrangebyscore(key, since, "+inf"))  # members
        return [json.loads(p) for p in raw]

    async def stop_taking(
        self, endpoint_id: str, workers: Sequence[str], *, resume: Sequence[str] = ()
    ) -> None:
        """Workers told to stop (their pod is going) get no new job from `take` (it answers
        STOPPING) for `STOPPING_MS`, and their open job-take long-polls are woken to answer
        empty at once; those in `resume` get jobs again."""
        key = keys.prefix(endpoint_id) + "stopping"
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", now)
        for worker in workers:
            pipe.zadd(key, {worker: now + keys.STOPPING_MS})
        if workers:
            pipe.pexpire(key, keys.STOPPING_MS)
        if resume:
            pipe.zrem(key, *resume)
        added = (await pipe.execute())[1 : 1 + len(workers)]
        told = [worker for worker, new in zip(workers, added, strict=True) if new]
        # Newly told (a pod being deleted is told again every tick): wake its polls. One
        # PUBLISH each, concurrently: a cluster client refuses PUBLISH in a pipeline.
        wakes = (self.redis.publish(keys.EVENTS_CHANNEL, f"s:{endpoint_id}:{w}") for w in told)
        await asyncio.gather(*wakes)

    async def refresh_worker(self, endpoint_id: str, worker_id: str) -> None:
        """The worker asked to be replaced after its job (`refresh_worker`), or a person
        asked it restarted: it gets no new job, and `refreshing` lists it for its pool to
        stop and replace."""
        await self.stop_taking(endpoint_id, [worker_id])
        await self._ask(endpoint_id, worker_id, 0)

    async def ask_stop(self, endpoint_id: str, worker_id: str) -> None:
        """One worker asked to stop for good (the Workers tab's Stop on a cluster): it gets
        no new job, and `worker_asks` lists it for the operator's scaler, which deletes its
        pod with one replica fewer (kube/deployment_pool.py `act_on_asks`)."""
        await self.stop_taking(endpoint_id, [worker_id])
        await self._ask(endpoint_id, worker_id, keys.STOP_ASK)

    async def _ask(self, endpoint_id: str, worker_id: str, mark: int) -> None:
        """Note a restart (`mark` 0) or a stop (`keys.STOP_ASK`) of the worker in `refresh`,
        until `STOPPING_MS` from now; the latest ask of a worker wins."""
        key = keys.prefix(endpoint_id) + "refresh"
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", now)
        pipe.zremrangebyscore(key, keys.STOP_ASK, keys.STOP_ASK + now)
        pipe.zadd(key, {worker_id: mark + now + keys.STOPPING_MS})
        pipe.pexpire(key, keys.STOPPING_MS)
        await pipe.execute()

    async def worker_asks(self, endpoint_id: str) -> tuple[list[str], list[str]]:
        """The workers to replace (`refresh_worker`) and those to stop for good
        (`ask_stop`), in one read of `refresh`."""
        now = self.clock()
        key = keys.prefix(endpoint_id) + "refresh"
        scored = await self.redis.zrangebyscore(key, now, "+inf", withscores=True)
        pairs = cast(list[tuple[bytes, float]], scored)  # (member, score) pairs
        restart = [w.decode() for w, at in pairs if at < keys.STOP_ASK]
        stop = [w.decode() for w, at in pairs if at > keys.STOP_ASK + now]
        return restart, stop

    async def refreshing(self, endpoint_id: str) -> list[str]:
        """Workers to replace (see `refresh_worker`)."""
        return (await self.worker_asks(endpoint_id))[0]

    async def heartbeat(self, endpoint_id: str, worker_id: str) -> None:
        """Mark a worker alive now, running no job (a ping without a job list); a worker
        released for good is not registered again."""
        await self.scripts.run(args_workers.Heartbeat(endpoint_id, worker_id, self.clock()))

    def _lost_reason(self) -> str:
        """The error of a job failed out of attempts by lost workers: it starts with
        WORKER_LOST, as one failed by the endpoint's onWorkerLost policy (common.lua)."""
        attempts = self.liveness.max_attempts
        return f"{WORKER_LOST}: the worker running this job was lost ({attempts} attempts made)"

    async def release_worker(
        self, endpoint_id: str, worker_id: str, *, clean: bool = False
    ) -> tuple[int, int]:
        """Forget a worker whose process or pod is gone, for good (a late ping with its id
        registers nothing); requeue its jobs, failing those out of attempts. `clean`: it
        exited cleanly when told to stop, so it never ran them: they go back without using
        an attempt. Returns (requeued, failed)."""
        args = args_workers.ReleaseWorker(
            endpoint_id, worker_id, self.clock(), **self._lost(), clean="1" if clean else "0",
            gone_ms=keys.GONE_MS,
        )  # fmt: skip
        requeued, failed = await self.scripts.run(args)
        return int(requeued), int(failed)

    async def mark_unhealthy(self, endpoint_id: str, why: UnhealthyWorker) -> tuple[int, int]:
        """Take a worker out of service for good, saying why (a failing fitness check, no
        readiness within its deadline, a failed warm-up): released as `release_worker` does
        (no job again, its held jobs requeued), the reason kept in `un` for an hour for
        every surface that shows workers, and for its control plane, which replaces it.
        Returns (requeued, failed)."""
        args = args_workers.ReleaseWorker(
            endpoint_id, why.worker, self.clock(), **self._lost(), clean="0",
            gone_ms=keys.GONE_MS, why=why.model_dump_json(), keep_ms=keys.UNHEALTHY_KEEP_MS,
        )  # fmt: skip
        requeued, failed = await self.scripts.run(args)
        return int(requeued), int(failed)

    async def unhealthy_workers(self, endpoint_id: str) -> dict[str, UnhealthyWorker]:
        """The workers marked unhealthy within the last hour, by id (`mark_unhealthy`)."""
        raw = await self.redis.hgetall(keys.prefix(endpoint_id) + "un")
        since = self.clock() - keys.UNHEALTHY_KEEP_MS
        found: dict[str, UnhealthyWorker] = {}
        for worker, record in cast(dict[bytes, bytes], raw).items():
            try:
                why = UnhealthyWorker.model_validate_json(record)
            except ValueError:
                continue  # a record of another release's shape: not shown
            if why.at >= since:
                found[worker.decode()] = why
        return found

    async def unhealthy_present(self, endpoint_id: str) -> set[str]:
        """The workers marked unhealthy (`mark_unhealthy`) whose pod or process is still
        there: not released since by their control plane, as a gone worker is."""
        since = self.clock() - keys.UNHEALTHY_KEEP_MS
        found = await self.redis.zrangebyscore(keys.prefix(endpoint_id) + "unp", since, "+inf")
        return {w.decode() for w in cast(list[bytes], found)}

    async def reconcile_worker(
        self, endpoint_id: str, worker_id: str, running: Sequence[str]
    ) -> int:
        """Heartbeat with the worker's own list of running jobs; jobs it should hold but does
        not list (their take reply was lost) go back to the queue. Returns how many."""
        args = args_workers.Reconcile(
            endpoint_id, worker_id, self.clock(), self.liveness.unlisted_grace_ms, **self._lost(),
            ids=running,
        )  # fmt: skip
        return int(await self.scripts.run(args))

    async def give_back(self, endpoint_id: str, worker_id: str, job_ids: Sequence[str]) -> int:
        """Jobs a worker took ahead of a free slot and never started: back to the front of
        their queue, no attempt used (give_back.lua); only those it still holds. How many."""
        args = args_workers.GiveBack(endpoint_id, worker_id, self.clock(), ids=job_ids)
        return int(await self.scripts.run(args))

    async def sweep(
        self, endpoint_id: str, *, lock_ms: int, batch: int = 1000, horizon_ms: int = 0
    ) -> Sweep:
        """Time out, expire and reclaim what is due (one replica per `lock_ms`); `quiet`
        when nothing is left to look after, nor any record to expire within `horizon_ms`."""
        hb = self.liveness.heartbeat_timeout_ms
        args = args_workers.Sweep(
            endpoint_id, self.clock(), hb, lock_ms=lock_ms, batch=batch, horizon=horizon_ms,
            **self._lost(),
        )  # fmt: skip
        reply = await self.scripts.run(args)
        timed_out, expired, lost, requeued, quiet = (int(v) for v in reply)
        return Sweep(timed_out, expired, lost, requeued, quiet=quiet == 1)

    async def claim_webhooks(
        self, endpoint_id: str, *, lease_ms: int, limit: int = 100
    ) -> list[Delivery]:
        """Due webhook deliveries, leased to the caller."""
        reply = await self.scripts.run(
            args_jobs.ClaimWebhooks(endpoint_id, self.clock(), lease_ms, limit)
        )
        return [Delivery(i.decode(), u.decode(), int(a)) for i, u, a in reply]

    async def settle_webhook(
        self,
        endpoint_id: str,
        job_id: str,
        *,
        done: bool,
        retry_in_ms: int = 0,
        attempted: bool = True,
    ) -> None:
        """Record an attempt's outcome: finished with, or due again in `retry_in_ms`;
        `attempted=False` gives back the attempt its claim counted (none was made)."""
        done_flag, refund = "1" if done else "0", "0" if attempted else "1"
        args = args_jobs.SettleWebhook(
            endpoint_id, job_id, done_flag, self.clock() + retry_in_ms, refund
        )
        await self.scripts.run(args)

    async def worker_loads(self, endpoint_id: str) -> dict[str, tuple[int, int]]:
        """Every known worker: (last heartbeat ms, jobs running: held, or told to stop
        while their handler has not returned)."""
        p = keys.prefix(endpoint_id)
        scored = await self.redis.zrange(p + "w", 0, -1, withscores=True)
        seen = cast(list[tuple[bytes, float]], scored)  # (member, score) pairs
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker, _ in seen:
                pipe.scard(p + "wj:" + worker.decode())
                pipe.scard(p + "wx:" + worker.decode())
            counts = await pipe.execute()
        loads = [a + b for a, b in zip(counts[::2], counts[1::2], strict=True)]
        return {w.decode(): (int(ts), n) for (w, ts), n in zip(seen, loads, strict=True)}

    async def take_stop_signals(self, endpoint_id: str, worker_id: str) -> list[str]:
        """Heartbeat, then the ids of jobs the worker must stop (each handed out once)."""
        ids = await self.scripts.run(args_workers.Stops(endpoint_id, worker_id, self.clock()))
        return [i.decode() for i in ids]
