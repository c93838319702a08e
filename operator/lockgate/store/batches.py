"""Batch Jobs in Redis (issue 49; docs/batch-jobs.md): each batch of an endpoint under the
endpoint's hash tag (keys `bj`, `bja`, `bj:{id}`, `bjq:{id}`, `bjn:{id}`, `bjo:{id}`,
`bjr:{id}`: store/keys.py), and `lg:batches`, the batches the gateways look after.

A request lives first in the batch's inputs (`bjn`); once the batch is FINALIZED the
gateways' batch feeder queues it as a job of the endpoint's batch pool (`JobStore.submit`:
the job path every job takes) and moves it to the open set (`bjo`); the tracker records its
final result (`bjr`) and counts it. Every change is one script on the batch's keys, so
replicas that feed, track or cancel the same batch at once never count a request twice.
The scripts are `store/lua/batch_*.lua`, their arguments named in `store/args_batches.py`,
the record's fields and key parts in `store/keys.py` (`B`, `BP`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio import Redis

from lockgate.models.batch import BatchLimits, BatchStatus
from lockgate.store import args_batches as args
from lockgate.store import keys
from lockgate.store.keys import BP
from lockgate.store.script_args import Arg, ScriptArgs
from lockgate.store.scripts import NO_REPLICATION, Replication, Scripts


class Refused(Exception):
    """A batch change refused: `why` is gone, state, missing, active, requests, bytes or
    queued; `detail` the status or the limit."""

    def __init__(self, why: str, detail: str) -> None:
        super().__init__(f"{why}: {detail}")
        self.why = why
        self.detail = detail


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _names(values: Any) -> list[str]:
    """Members read from Redis, as text."""
    return [_text(v) for v in values]


def _pairs(requests: Sequence[tuple[str, bytes]]) -> list[Arg]:
    """(id, JSON) pairs spread as script arguments."""
    return [part for pair in requests for part in pair]


def _answer(reply: Sequence[Any]) -> str:
    """A script's (word, detail) answer: the detail when the word is ok, else `Refused`."""
    word, detail = _text(reply[0]), _text(reply[1]) if len(reply) > 1 else ""
    if word not in ("ok", "draft", "cancelling"):
        raise Refused(word, detail)
    return detail if word == "ok" else word


class BatchStore:
    """An endpoint's batches, in Redis."""

    def __init__(
        self,
        redis: Redis,
        scripts: Scripts | None = None,
        replication: Replication = NO_REPLICATION,
    ) -> None:
        self.redis = redis
        # the job store's scripts: a change the client is told was made waits for
        # `replication.replicas` replicas, as a submit does (a failover cannot lose it)
        self.scripts = scripts or Scripts.register(redis)
        self.replication = replication

    async def _accepting(self, call: ScriptArgs) -> Any:
        """Run a change the caller is told was made (`JobStore._accepting`'s rule): once it
        returns, the configured replicas have it; NotReplicated (503) when they do not."""
        return await self.scripts.run(call, replication=self.replication)

    async def create(
        self,
        endpoint_id: str,
        batch_id: str,
        created_ms: int,
        requests: Sequence[tuple[str, bytes]],
        webhook: str | None,
        limits: BatchLimits,
    ) -> None:
        """Keep a new DRAFT batch with its first requests (id, JSON); `Refused` past a
        limit."""
        call = args.CreateBatch(
            endpoint_id, batch_id, created_ms, limits.active, limits.requests, limits.bytes,
            webhook or "", _pairs(requests),
        )  # fmt: skip
        _answer(await self._accepting(call))

    async def add(
        self,
        endpoint_id: str,
        batch_id: str,
        requests: Sequence[tuple[str, bytes]],
        limits: BatchLimits,
    ) -> int:
        """Add requests to a DRAFT; its new total. `Refused` (gone, state, a limit)."""
        call = args.AddRequests(
            endpoint_id, batch_id, limits.requests, limits.bytes, _pairs(requests)
        )
        return int(_answer(await self._accepting(call)))

    async def delete_request(self, endpoint_id: str, batch_id: str, request_id: str) -> None:
        """Remove one request of a DRAFT. `Refused` (gone, state, missing)."""
        _answer(await self._accepting(args.DeleteRequest(endpoint_id, batch_id, request_id)))

    async def finalize(self, endpoint_id: str, batch_id: str, now_ms: int, queued: int) -> int:
        """DRAFT → FINALIZED (its requests may now be queued); its total. `Refused`
        (gone, state, queued: the endpoint's finalized requests not yet ended would pass
        `queued`). The batch is among those the gateways look after from before."""
        await self.redis.sadd(keys.ACTIVE_BATCHES, f"{endpoint_id} {batch_id}")
        call = args.FinalizeBatch(endpoint_id, batch_id, now_ms, queued)
        return int(_answer(await self._accepting(call)))

    async def rename(self, endpoint_id: str, batch_id: str, name: str) -> bool:
        """Set the display name; False when there is no such batch."""
        return bool(await self._accepting(args.RenameBatch(endpoint_id, batch_id, name)))

    async def cancel(self, endpoint_id: str, batch_id: str, cancelled_result: bytes) -> str:
        """Cancel: 'draft' (ended CANCELLED at once: `conclude` it) or 'cancelling' (the
        requests not yet queued ended with `cancelled_result`; the tracker cancels the
        queued ones, the running ones finish). `Refused` (gone, state)."""
        await self.redis.sadd(keys.ACTIVE_BATCHES, f"{endpoint_id} {batch_id}")
        call = args.CancelBatch(endpoint_id, batch_id, cancelled_result)
        return _answer(await self._accepting(call))

    async def has_batches(self, endpoint_id: str) -> bool:
        """Whether the endpoint has (had) batches: its batch pool is wanted."""
        return bool(await self.redis.exists(keys.batches(endpoint_id)))

    async def get(self, endpoint_id: str, batch_id: str) -> dict[str, str] | None:
        """The batch's record fields; None when there is none."""
        raw = await self.redis.hgetall(keys.batch(endpoint_id, batch_id))
        return {_text(k): _text(v) for k, v in raw.items()} if raw else None

    async def page(
        self, endpoint_id: str, offset: int, limit: int
    ) -> tuple[list[tuple[str, dict[str, str]]], int]:
        """Batches newest first from `offset`, at most `limit`, each with its record; and
        how many there are. Index entries whose batch expired are dropped."""
        index = keys.batches(endpoint_id)
        ids = _names(await self.redis.zrevrange(index, offset, offset + limit - 1))
        rows = []
        for batch_id in ids:
            fields = await self.get(endpoint_id, batch_id)
            if fields is None:
                await self.redis.zrem(index, batch_id)
                continue
            rows.append((batch_id, fields))
        return rows, int(await self.redis.zcard(index))

    async def request_ids(
        self, endpoint_id: str, batch_id: str, offset: int, limit: int
    ) -> tuple[list[str], int]:
        """Request ids in upload order from `offset` (at most `limit`), and the total."""
        key = keys.batch(endpoint_id, batch_id, BP.IDS)
        ids = _names(await self.redis.zrange(key, offset, offset + limit - 1))
        return ids, int(await self.redis.zcard(key))

    async def results(
        self, endpoint_id: str, batch_id: str, request_ids: Sequence[str]
    ) -> tuple[list[bytes | None], list[bool]]:
        """For each request: its recorded result (JSON, None when not final), and whether
        it waits to be queued still."""
        if not request_ids:
            return [], []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.batch(endpoint_id, batch_id, BP.RESULTS), list(request_ids))
            pipe.hmget(keys.batch(endpoint_id, batch_id, BP.INPUTS), list(request_ids))
            done, waiting = await pipe.execute()
        return list(done), [w is not None for w in waiting]

    async def inputs(self, endpoint_id: str, batch_id: str, count: int) -> list[tuple[str, bytes]]:
        """Up to about `count` requests waiting to be queued (any order), with their JSON."""
        key = keys.batch(endpoint_id, batch_id, BP.INPUTS)
        _, found = await self.redis.hscan(key, 0, count=count)
        pairs = cast(dict[bytes, bytes], found)
        return [(_text(k), v) for k, v in list(pairs.items())[:count]]

    async def queued(
        self, endpoint_id: str, batch_id: str, request_ids: Sequence[str]
    ) -> list[str]:
        """Mark requests queued as jobs; the ids no longer waiting (cancelled meanwhile)."""
        call = args.MarkQueued(endpoint_id, batch_id, list(request_ids))
        return [_text(i) for i in await self.scripts.run(call)]

    async def open_ids(
        self, endpoint_id: str, batch_id: str, cursor: int, count: int
    ) -> tuple[int, list[str]]:
        """A slice of the requests queued and not final (SSCAN from `cursor`): the next
        cursor (0: the set was gone through) and the ids."""
        key = keys.batch(endpoint_id, batch_id, BP.OPEN)
        nxt, ids = await self.redis.sscan(key, cursor, count=count)
        return int(nxt), [_text(i) for i in ids]

    async def record(
        self,
        endpoint_id: str,
        batch_id: str,
        in_progress: int,
        ended: Sequence[tuple[str, bool, bytes]],
    ) -> tuple[int, int, int, int]:
        """Record final results (id, completed?, JSON) of open requests, counted once, and
        the in-progress count seen; (total, completed, failed, still open)."""
        triples: list[Arg] = []
        for rid, completed, raw in ended:
            triples += [rid, 1 if completed else 0, raw]
        call = args.RecordResults(endpoint_id, batch_id, in_progress, triples)
        total, completed, failed, left = await self.scripts.run(call)
        return int(total), int(completed), int(failed), int(left)

    async def waiting(self, endpoint_id: str, batch_id: str) -> int:
        """Requests not yet queued."""
        return int(await self.redis.hlen(keys.batch(endpoint_id, batch_id, BP.INPUTS)))

    async def conclude(
        self,
        endpoint_id: str,
        batch_id: str,
        status: BatchStatus,
        now_ms: int,
        retention_ms: int,
    ) -> bool:
        """End the batch with `status` (the first caller wins: True), its webhook due now,
        its keys kept `retention_ms` from now."""
        call = args.ConcludeBatch(endpoint_id, batch_id, status.value, now_ms, retention_ms)
        return bool(await self._accepting(call))

    async def claim_webhook(
        self, endpoint_id: str, batch_id: str, now_ms: int, lease_ms: int
    ) -> int:
        """Claim the batch's due webhook attempt: its number (from 1), 0 when not claimed."""
        call = args.ClaimBatchWebhook(endpoint_id, batch_id, now_ms, lease_ms)
        return int(await self.scripts.run(call))

    async def settle_webhook(
        self, endpoint_id: str, batch_id: str, *, state: str, due_ms: int = 0
    ) -> None:
        """After an attempt: `state` delivered or gave_up, or pending again at `due_ms`."""
        # "delivered" kept as the others are
        await self._accepting(args.SettleBatchWebhook(endpoint_id, batch_id, state, due_ms))

    async def turn(self, endpoint_id: str, batch_id: str, ms: int) -> bool:
        """Take the batch's turn for `ms` (one replica looks after it per round: the others
        skip it); False when another replica has it."""
        key = keys.batch(endpoint_id, batch_id, BP.TURN)
        return bool(await self.redis.set(key, "1", nx=True, px=ms))

    async def tracked(self) -> list[tuple[str, str]]:
        """(endpoint, batch) of every batch the gateways look after."""
        members = await self.redis.smembers(keys.ACTIVE_BATCHES)
        pairs = [_text(m).split(" ", 1) for m in members]
        return sorted((p[0], p[1]) for p in pairs if len(p) == 2)

    async def running_endpoints(self) -> set[str]:
        """The endpoints with a batch the gateways look after (one SMEMBERS)."""
        return {endpoint_id for endpoint_id, _ in await self.tracked()}

    async def untrack(self, endpoint_id: str, batch_id: str) -> None:
        await self.redis.srem(keys.ACTIVE_BATCHES, f"{endpoint_id} {batch_id}")

    async def delete_endpoint_data(self, endpoint_id: str) -> int:
        """Remove every batch of a deleted endpoint; how many there were."""
        index = keys.batches(endpoint_id)
        ids = _names(await self.redis.zrange(index, 0, -1))
        for batch_id in ids:
            parts = (keys.batch(endpoint_id, batch_id, p) for p in keys.BATCH_PARTS)
            await self.redis.delete(*parts)
            await self.untrack(endpoint_id, batch_id)
        await self.redis.delete(index, keys.active_batches(endpoint_id))
        return len(ids)
