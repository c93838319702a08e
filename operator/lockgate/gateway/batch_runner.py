"""What every gateway replica does for the running batches (issue 49; docs/batch-jobs.md),
every `batch_interval_s`, for each batch of `lg:batches`:

- feed: queue its requests not yet queued as jobs of the endpoint's batch pool
  (`batch-<endpoint>`), each under its request id and an idempotency key of its own (a
  second replica's submit of the same request is the same job), as many as the pool's
  queue quota takes (a full queue: the rest waits for the next round);
- track: read a slice of its queued requests' jobs (`JobStore.get`: the job path's own
  records) and record the final ones; while it is cancelled, cancel those still queued
  (the running ones finish);
- end: once completed + failed == total, conclude it (FINALIZED, FAILED or CANCELLED:
  `models.batch.status_when_done`) and deliver its webhook, once, signed like a job's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import aiohttp
import orjson
from pydantic import ValidationError

from lockgate.gateway import jsonbody
from lockgate.gateway.background import webhook_connector
from lockgate.gateway.state import Gateway
from lockgate.models import JobRequest
from lockgate.models.batch import (
    BatchStatus,
    Counts,
    batch_pool_id,
    counted_as_completed,
    status_when_done,
    summary,
)
from lockgate.models.jobs import MAX_DURATION_MS, JobStatus
from lockgate.signing import signature_headers
from lockgate.store import IneligibleState, JobNotFound, JobRecord, NewJob, QueueFull
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.keys import B

log = logging.getLogger("lockgate.gateway.batches")

FEED_CHUNK = 500  # requests queued per batch and round, at most
TRACK_CHUNK = 500  # queued requests looked at per batch and round
READS_AT_ONCE = 32  # job reads in flight per batch
EXPIRED = "its job's result expired before the batch recorded it"


def idempotency_digest(batch_id: str, request_id: str) -> str:
    """The idempotency key of a request's job: one job however many replicas queue it."""
    return hashlib.sha256(f"batch\0{batch_id}\0{request_id}".encode()).hexdigest()


def new_job(batch_id: str, request_id: str, raw: bytes) -> NewJob:
    """A stored request as a job of the batch pool: its ttl, when it set none, the longest
    a job may have (a batch may wait long for its turn)."""
    req = JobRequest.model_validate(jsonbody.parse(raw), strict=True)
    policy = req.policy
    ttl = policy.ttl if "ttl" in policy.model_fields_set else MAX_DURATION_MS
    return NewJob(
        id=request_id,
        input=jsonbody.dumps(req.input, "input"),
        ttl_ms=ttl,
        low_priority=policy.lowPriority,
        execution_timeout_ms=policy.executionTimeout,
        s3_config=orjson.dumps(req.s3Config.model_dump()) if req.s3Config else None,
        idempotency_key=idempotency_digest(batch_id, request_id),
    )


def result_of(record: JobRecord) -> bytes:
    """A final job's result as the batch keeps it (times in epoch ms)."""
    body: dict[str, Any] = {
        "status": record.status, "startedAt": record.started, "completedAt": record.finished,
    }  # fmt: skip
    if record.output is not None and record.status == JobStatus.COMPLETED:
        body["output"] = orjson.Fragment(record.output)
    if record.error is not None:
        body["error"] = record.error
    return orjson.dumps(body)


class BatchRunner:
    """Feeds, tracks and ends the running batches; delivers their webhooks."""

    def __init__(self, gw: Gateway, session: aiohttp.ClientSession) -> None:
        self.gw = gw
        self.session = session
        self.cursors: dict[tuple[str, str], int] = {}  # where each batch's tracking is

    async def run_once(self) -> None:
        """One round over every batch the gateways look after."""
        for endpoint_id, batch_id in await self.gw.batches.tracked():
            try:
                await self.look_after(endpoint_id, batch_id)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # one batch's trouble does not stop the others
                log.warning("batch %s of %s: %s", batch_id, endpoint_id, err)
            raise_if_cancelled()

    async def look_after(self, endpoint_id: str, batch_id: str) -> None:
        batches = self.gw.batches
        fields = await batches.get(endpoint_id, batch_id)
        if fields is None:
            await batches.untrack(endpoint_id, batch_id)
            return
        if fields.get(B.DONE):
            if fields.get(B.WH_STATE) == "pending":
                await self.deliver(endpoint_id, batch_id, fields)
            else:
                await batches.untrack(endpoint_id, batch_id)
                self.cursors.pop((endpoint_id, batch_id), None)
            return
        turn_ms = max(100, int(self.gw.settings.batch_interval_s * 900))
        if not await batches.turn(endpoint_id, batch_id, turn_ms):
            return  # another replica's round
        status = fields.get(B.STATUS)
        if status == BatchStatus.CANCELLED:  # a DRAFT cancelled whose end was not recorded
            await self.conclude(endpoint_id, batch_id, BatchStatus.CANCELLED)
            return
        if status != BatchStatus.FINALIZED:
            return  # a DRAFT: nothing runs yet
        if self.gw.pool_needed is not None:  # dev mode: its pool, made at its first batch
            await self.gw.pool_needed(endpoint_id)
        cancelling = bool(fields.get(B.CANCELLING))
        if not cancelling:
            await self.feed(endpoint_id, batch_id)
        counts = await self.track(endpoint_id, batch_id, cancelling=cancelling)
        if counts.done:
            await self.conclude(
                endpoint_id, batch_id, status_when_done(counts, cancelling=cancelling)
            )

    async def feed(self, endpoint_id: str, batch_id: str) -> None:
        """Queue a chunk of the batch's waiting requests as jobs of its pool."""
        pool = batch_pool_id(endpoint_id)
        waiting = await self.gw.batches.inputs(endpoint_id, batch_id, FEED_CHUNK)
        queued: list[str] = []
        for request_id, raw in waiting:
            try:
                job = new_job(batch_id, request_id, raw)
            except ValidationError as err:  # stored before a stricter rule: ends FAILED
                bad = orjson.dumps({"status": JobStatus.FAILED, "error": str(err)[:500]})
                await self.gw.batches.queued(endpoint_id, batch_id, [request_id])
                await self.gw.batches.record(endpoint_id, batch_id, 0, [(request_id, False, bad)])
                continue
            try:
                await self.gw.submit(pool, job)
            except QueueFull:
                break  # the pool's queue is at its quota: the rest waits for a later round
            queued.append(request_id)
        if queued:
            late = await self.gw.batches.queued(endpoint_id, batch_id, queued)
            for request_id in late:  # cancelled while being queued: its job goes too
                await self._cancel_job(pool, request_id)

    async def track(self, endpoint_id: str, batch_id: str, *, cancelling: bool) -> Counts:
        """Record the final results among a slice of the queued requests (cancelling the
        still-queued ones of a cancelled batch); the batch's counts after."""
        pool = batch_pool_id(endpoint_id)
        key = (endpoint_id, batch_id)
        cursor, ids = await self.gw.batches.open_ids(
            endpoint_id, batch_id, self.cursors.get(key, 0), TRACK_CHUNK
        )
        self.cursors[key] = cursor
        turns = asyncio.Semaphore(READS_AT_ONCE)

        async def read(request_id: str) -> JobRecord | None:
            async with turns:
                try:
                    return await self.gw.store.get(pool, request_id)
                except JobNotFound:
                    return None

        records = await asyncio.gather(*(read(i) for i in ids))
        ended: list[tuple[str, bool, bytes]] = []
        running = 0
        for request_id, record in zip(ids, records, strict=True):
            if record is None:
                gone = orjson.dumps({"status": JobStatus.FAILED, "error": EXPIRED})
                ended.append((request_id, False, gone))
                continue
            completed = counted_as_completed(record.status)
            if completed is not None:
                ended.append((request_id, completed, result_of(record)))
            elif record.status == JobStatus.IN_PROGRESS:
                running += 1
            elif cancelling:
                await self._cancel_job(pool, request_id)
        total, completed_n, failed_n, _ = await self.gw.batches.record(
            endpoint_id, batch_id, running, ended
        )
        return Counts(total=total, completed=completed_n, failed=failed_n)

    async def _cancel_job(self, pool: str, request_id: str) -> None:
        """Cancel a queued job of the pool; a running or ended one is left alone."""
        try:
            record = await self.gw.store.get(pool, request_id)
            if record.status == JobStatus.IN_QUEUE:
                await self.gw.store.cancel(pool, request_id)
        except (JobNotFound, IneligibleState):
            pass

    async def conclude(self, endpoint_id: str, batch_id: str, status: BatchStatus) -> None:
        retention_ms = int(self.gw.settings.batch_retention_s * 1000)
        now = self.gw.store.clock()
        if await self.gw.batches.conclude(endpoint_id, batch_id, status, now, retention_ms):
            log.info("batch %s of %s ended %s", batch_id, endpoint_id, status)

    async def deliver(self, endpoint_id: str, batch_id: str, fields: dict[str, str]) -> None:
        """One attempt of the batch's webhook, when due and claimed by this replica: POST
        its summary, signed (Standard Webhooks, as a job's); settled delivered, due again
        after `webhook_retry_interval_s`, or given up after `webhook_attempts`."""
        s = self.gw.settings
        lease_ms = int((s.webhook_timeout_s + s.webhook_lease_margin_s) * 1000)
        now = self.gw.store.clock()
        attempt = await self.gw.batches.claim_webhook(endpoint_id, batch_id, now, lease_ms)
        if not attempt:
            return
        body = orjson.dumps(summary(batch_id, endpoint_id, fields))
        headers = {"content-type": "application/json"}
        if s.webhook_secret:
            msg_id = f"{batch_id}-{fields.get('status')}"
            headers |= signature_headers(s.webhook_secret, body, msg_id=msg_id)
        timeout = aiohttp.ClientTimeout(total=s.webhook_timeout_s)
        try:
            async with self.session.post(
                fields[B.WEBHOOK], data=body, headers=headers, timeout=timeout,
                allow_redirects=False,
            ) as response:  # fmt: skip
                ok = 200 <= response.status < 300
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("webhook of batch %s attempt %d: %s", batch_id, attempt, err)
            ok = False
        if ok:
            await self.gw.batches.settle_webhook(endpoint_id, batch_id, state="delivered")
        elif attempt >= s.webhook_attempts:
            log.warning("webhook of batch %s failed %d times; giving up", batch_id, attempt)
            await self.gw.batches.settle_webhook(endpoint_id, batch_id, state="gave_up")
        else:
            due = self.gw.store.clock() + int(s.webhook_retry_interval_s * 1000)
            await self.gw.batches.settle_webhook(endpoint_id, batch_id, state="pending", due_ms=due)


async def run_batches(gw: Gateway) -> None:
    """The batch runner, every `batch_interval_s`, until cancelled."""
    async with aiohttp.ClientSession(connector=webhook_connector(gw)) as session:
        runner = BatchRunner(gw, session)
        while True:
            try:
                await runner.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # Redis away: the next round tries again
                log.warning("batches: %s", err)
            raise_if_cancelled()
            await asyncio.sleep(gw.settings.batch_interval_s)
