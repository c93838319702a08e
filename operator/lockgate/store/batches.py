"""Batch Jobs in Redis (issue 49; docs/batch-jobs.md): each batch of an endpoint under the
endpoint's hash tag (keys `bj`, `bja`, `bj:{id}`, `bjq:{id}`, `bjn:{id}`, `bjo:{id}`,
`bjr:{id}`: store/keys.py), and `lg:batches`, the batches the gateways look after.

A request lives first in the batch's inputs (`bjn`); once the batch is FINALIZED the
gateways' batch feeder queues it as a job of the endpoint's batch pool (`JobStore.submit`:
the job path every job takes) and moves it to the open set (`bjo`); the tracker records its
final result (`bjr`) and counts it. Every change is one script on the batch's keys, so
replicas that feed, track or cancel the same batch at once never count a request twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio import Redis

from lockgate.models.batch import BatchLimits, BatchStatus
from lockgate.store import keys
from lockgate.store.scripts import NO_REPLICATION, Replication, Scripts

PARTS = ("", "q", "n", "o", "r", "l")  # record, request ids, inputs, open, results, turn

# KEYS: index, active set, record, ids, inputs. ARGV: batch id, createdAt, most active,
# most requests, most bytes, webhook ("" none), then id/JSON pairs.
# Returns 'ok', or 'active', 'requests', 'bytes' (a limit), with the limit's figure.
CREATE = """
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return {'active', ARGV[3]} end
local n = (#ARGV - 6) / 2
if n > tonumber(ARGV[4]) then return {'requests', ARGV[4]} end
local bytes = 0
for i = 8, #ARGV, 2 do bytes = bytes + #ARGV[i] end
if bytes > tonumber(ARGV[5]) then return {'bytes', ARGV[5]} end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], 'status', 'DRAFT', 'createdAt', ARGV[2], 'total', n,
  'completed', 0, 'failed', 0, 'inProgress', 0, 'bytes', bytes, 'name', '')
if ARGV[6] ~= '' then redis.call('HSET', KEYS[3], 'webhook', ARGV[6]) end
for i = 7, #ARGV, 2 do
  redis.call('ZADD', KEYS[4], (i - 5) / 2, ARGV[i])
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[3], 'seq', n)
return {'ok', ''}
"""
# KEYS: record, ids, inputs. ARGV: most requests, most bytes, then id/JSON pairs.
# Returns 'ok' with the new total, 'gone', 'state' with the status, or a limit as CREATE.
ADD = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'gone', ''} end
if st ~= 'DRAFT' then return {'state', st} end
local n = (#ARGV - 2) / 2
local total = tonumber(redis.call('HGET', KEYS[1], 'total'))
if total + n > tonumber(ARGV[1]) then return {'requests', ARGV[1]} end
local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes'))
for i = 4, #ARGV, 2 do bytes = bytes + #ARGV[i] end
if bytes > tonumber(ARGV[2]) then return {'bytes', ARGV[2]} end
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq'))
for i = 3, #ARGV, 2 do
  seq = seq + 1
  redis.call('ZADD', KEYS[2], seq, ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'seq', seq, 'total', total + n, 'bytes', bytes)
return {'ok', tostring(total + n)}
"""
# KEYS: record, ids, inputs. ARGV: the request id. Returns 'ok', 'gone', 'state' (with the
# status) or 'missing' (no such request).
DELETE_REQUEST = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'gone', ''} end
if st ~= 'DRAFT' then return {'state', st} end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return {'missing', ''} end
local raw = redis.call('HGET', KEYS[3], ARGV[1]) or ''
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'total', -1)
redis.call('HINCRBY', KEYS[1], 'bytes', -#raw)
return {'ok', ''}
"""
# KEYS: record, active set, then the records of the endpoint's active batches (FINALIZED
# ones count their requests not yet ended against the queued limit). ARGV: batch id, now,
# most queued, then each active batch's inputs and open keys (pairs, as the records).
# Returns 'ok' (with the total), 'gone', 'state' or 'queued' (with the limit).
FINALIZE = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'gone', ''} end
if st ~= 'DRAFT' then return {'state', st} end
local total = tonumber(redis.call('HGET', KEYS[1], 'total'))
local queued = total
for i = 3, #KEYS do
  if redis.call('HGET', KEYS[i], 'status') == 'FINALIZED' then
    local j = 4 + (i - 3) * 2
    queued = queued + redis.call('HLEN', ARGV[j]) + redis.call('SCARD', ARGV[j + 1])
  end
end
if queued > tonumber(ARGV[3]) then return {'queued', ARGV[3]} end
redis.call('HSET', KEYS[1], 'status', 'FINALIZED', 'finalizedAt', ARGV[2])
return {'ok', tostring(total)}
"""
# KEYS: record, inputs, open, results, active set. ARGV: batch id, the result JSON of a
# request cancelled before it was queued. Its requests not yet queued are ended CANCELLED
# (counted failed); a DRAFT is then CANCELLED at once, a running batch marked cancelling.
# Returns 'draft' or 'cancelling' (or 'gone', 'state' with the status).
CANCEL = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'gone', ''} end
local draft = st == 'DRAFT'
if not draft and (st ~= 'FINALIZED' or redis.call('HEXISTS', KEYS[1], 'doneAt') == 1) then
  return {'state', st}
end
redis.call('HSET', KEYS[1], 'cancelling', 1)
local left = redis.call('HKEYS', KEYS[2])
for _, id in ipairs(left) do
  redis.call('HSET', KEYS[4], id, ARGV[2])
end
if #left > 0 then
  redis.call('DEL', KEYS[2])
  redis.call('HINCRBY', KEYS[1], 'failed', #left)
end
if draft then
  redis.call('HSET', KEYS[1], 'status', 'CANCELLED')
  return {'draft', ''}
end
return {'cancelling', ''}
"""
# KEYS: record, inputs, open. ARGV: request ids queued as jobs. Moves each still waiting
# from the inputs to the open set; returns the ids that were no longer waiting (the batch
# was cancelled meanwhile: their jobs are to be cancelled).
QUEUED = """
local gone = {}
for i = 1, #ARGV do
  if redis.call('HDEL', KEYS[2], ARGV[i]) == 1 then
    redis.call('SADD', KEYS[3], ARGV[i])
  else
    table.insert(gone, ARGV[i])
  end
end
return gone
"""
# KEYS: record, open, results. ARGV: in-progress count seen, then (id, 1|0 completed, JSON)
# triples. A request still open gets its result and is counted. Returns {total,
# completed, failed, inputs left + open left}.
RESULTS = """
for i = 2, #ARGV, 3 do
  if redis.call('SREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 2])
    redis.call('HINCRBY', KEYS[1], ARGV[i + 1] == '1' and 'completed' or 'failed', 1)
  end
end
redis.call('HSET', KEYS[1], 'inProgress', ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'total', 'completed', 'failed')
return {tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), redis.call('SCARD', KEYS[2])}
"""
# KEYS: record, active set, and the batch's other keys. ARGV: batch id, status, doneAt,
# retention (ms), webhook due ("" none). The first to conclude wins; returns 1 then.
CONCLUDE = """
if redis.call('HSETNX', KEYS[1], 'doneAt', ARGV[3]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'inProgress', 0)
redis.call('SREM', KEYS[2], ARGV[1])
if ARGV[5] ~= '' and redis.call('HEXISTS', KEYS[1], 'webhook') == 1 then
  redis.call('HSET', KEYS[1], 'whState', 'pending', 'whDue', ARGV[5], 'whAttempts', 0)
end
for i = 3, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""
# KEYS: record. ARGV: now, lease (ms). Claims the batch's webhook attempt when it is due
# and no other replica holds it; returns the attempt's number, 0 when not claimed.
CLAIM_WEBHOOK = """
local f = redis.call('HMGET', KEYS[1], 'whState', 'whDue', 'whLease')
if f[1] ~= 'pending' then return 0 end
local now = tonumber(ARGV[1])
if tonumber(f[2] or 0) > now or tonumber(f[3] or 0) > now then return 0 end
redis.call('HSET', KEYS[1], 'whLease', now + tonumber(ARGV[2]))
return redis.call('HINCRBY', KEYS[1], 'whAttempts', 1)
"""

# KEYS: record. ARGV: the name. Returns 1 when set, 0 when there is no such batch.
RENAME = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'name', ARGV[1])
return 1
"""
# KEYS: record. ARGV: the delivery's state, when it is due again (ms).
SETTLE_WEBHOOK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'whState', ARGV[1], 'whDue', ARGV[2])
redis.call('HDEL', KEYS[1], 'whLease')
return 1
"""


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
        self._create = redis.register_script(CREATE)
        self._add = redis.register_script(ADD)
        self._delete_request = redis.register_script(DELETE_REQUEST)
        self._finalize = redis.register_script(FINALIZE)
        self._cancel = redis.register_script(CANCEL)
        self._queued = redis.register_script(QUEUED)
        self._results = redis.register_script(RESULTS)
        self._conclude = redis.register_script(CONCLUDE)
        self._claim = redis.register_script(CLAIM_WEBHOOK)
        self._rename = redis.register_script(RENAME)
        self._settle = redis.register_script(SETTLE_WEBHOOK)

    async def _accepting(self, script: Any, keys_: list[str], args: list[Any]) -> Any:
        """Run a change the caller is told was made (`JobStore._accepting`'s rule): once it
        returns, the configured replicas have it; NotReplicated (503) when they do not."""
        return await self.scripts.call(script, keys_, args, replication=self.replication)

    @staticmethod
    def _active(endpoint_id: str) -> str:
        return keys.batches(endpoint_id) + "a"

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
        ks = [keys.batches(endpoint_id), self._active(endpoint_id)]
        ks += [keys.batch(endpoint_id, batch_id, p) for p in ("", "q", "n")]
        args: list[Any] = [
            batch_id, created_ms, limits.active, limits.requests, limits.bytes, webhook or "",
        ]  # fmt: skip
        for rid, raw in requests:
            args += [rid, raw]
        _answer(await self._accepting(self._create, ks, args))

    async def add(
        self,
        endpoint_id: str,
        batch_id: str,
        requests: Sequence[tuple[str, bytes]],
        limits: BatchLimits,
    ) -> int:
        """Add requests to a DRAFT; its new total. `Refused` (gone, state, a limit)."""
        ks = [keys.batch(endpoint_id, batch_id, p) for p in ("", "q", "n")]
        args: list[Any] = [limits.requests, limits.bytes]
        for rid, raw in requests:
            args += [rid, raw]
        return int(_answer(await self._accepting(self._add, ks, args)))

    async def delete_request(self, endpoint_id: str, batch_id: str, request_id: str) -> None:
        """Remove one request of a DRAFT. `Refused` (gone, state, missing)."""
        ks = [keys.batch(endpoint_id, batch_id, p) for p in ("", "q", "n")]
        _answer(await self._accepting(self._delete_request, ks, [request_id]))

    async def finalize(self, endpoint_id: str, batch_id: str, now_ms: int, queued: int) -> int:
        """DRAFT → FINALIZED (its requests may now be queued); its total. `Refused`
        (gone, state, queued: the endpoint's finalized requests not yet ended would pass
        `queued`). The batch is among those the gateways look after from before."""
        await self.redis.sadd(keys.ACTIVE_BATCHES, f"{endpoint_id} {batch_id}")
        others = [
            _text(b) for b in await self.redis.smembers(self._active(endpoint_id))
            if _text(b) != batch_id
        ]  # fmt: skip
        ks = [keys.batch(endpoint_id, batch_id), self._active(endpoint_id)]
        ks += [keys.batch(endpoint_id, b) for b in others]
        args: list[Any] = [batch_id, now_ms, queued]
        for b in others:
            args += [keys.batch(endpoint_id, b, "n"), keys.batch(endpoint_id, b, "o")]
        return int(_answer(await self._accepting(self._finalize, ks, args)))

    async def rename(self, endpoint_id: str, batch_id: str, name: str) -> bool:
        """Set the display name; False when there is no such batch."""
        key = keys.batch(endpoint_id, batch_id)
        return bool(await self._accepting(self._rename, [key], [name]))

    async def cancel(self, endpoint_id: str, batch_id: str, cancelled_result: bytes) -> str:
        """Cancel: 'draft' (ended CANCELLED at once: `conclude` it) or 'cancelling' (the
        requests not yet queued ended with `cancelled_result`; the tracker cancels the
        queued ones, the running ones finish). `Refused` (gone, state)."""
        ks = [keys.batch(endpoint_id, batch_id, p) for p in ("", "n", "o", "r")]
        ks.append(self._active(endpoint_id))
        await self.redis.sadd(keys.ACTIVE_BATCHES, f"{endpoint_id} {batch_id}")
        return _answer(await self._accepting(self._cancel, ks, [batch_id, cancelled_result]))

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
        key = keys.batch(endpoint_id, batch_id, "q")
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
            pipe.hmget(keys.batch(endpoint_id, batch_id, "r"), list(request_ids))
            pipe.hmget(keys.batch(endpoint_id, batch_id, "n"), list(request_ids))
            done, waiting = await pipe.execute()
        return list(done), [w is not None for w in waiting]

    async def inputs(self, endpoint_id: str, batch_id: str, count: int) -> list[tuple[str, bytes]]:
        """Up to about `count` requests waiting to be queued (any order), with their JSON."""
        key = keys.batch(endpoint_id, batch_id, "n")
        _, found = await self.redis.hscan(key, 0, count=count)
        pairs = cast(dict[bytes, bytes], found)
        return [(_text(k), v) for k, v in list(pairs.items())[:count]]

    async def queued(
        self, endpoint_id: str, batch_id: str, request_ids: Sequence[str]
    ) -> list[str]:
        """Mark requests queued as jobs; the ids no longer waiting (cancelled meanwhile)."""
        ks = [keys.batch(endpoint_id, batch_id, p) for p in ("", "n", "o")]
        return [_text(i) for i in await self._queued(keys=ks, args=list(request_ids))]

    async def open_ids(
        self, endpoint_id: str, batch_id: str, cursor: int, count: int
    ) -> tuple[int, list[str]]:
        """A slice of the requests queued and not final (SSCAN from `cursor`): the next
        cursor (0: the set was gone through) and the ids."""
        key = keys.batch(endpoint_id, batch_id, "o")
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
        ks = [keys.batch(endpoint_id, batch_id, p) for p in ("", "o", "r")]
        args: list[Any] = [in_progress]
        for rid, completed, raw in ended:
            args += [rid, 1 if completed else 0, raw]
        total, completed, failed, left = await self._results(keys=ks, args=args)
        return int(total), int(completed), int(failed), int(left)

    async def waiting(self, endpoint_id: str, batch_id: str) -> int:
        """Requests not yet queued."""
        return int(await self.redis.hlen(keys.batch(endpoint_id, batch_id, "n")))

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
        ks = [keys.batch(endpoint_id, batch_id), self._active(endpoint_id)]
        ks += [keys.batch(endpoint_id, batch_id, p) for p in PARTS[1:]]
        args = [batch_id, status.value, now_ms, retention_ms, now_ms]
        return bool(await self._accepting(self._conclude, ks, args))

    async def claim_webhook(
        self, endpoint_id: str, batch_id: str, now_ms: int, lease_ms: int
    ) -> int:
        """Claim the batch's due webhook attempt: its number (from 1), 0 when not claimed."""
        key = keys.batch(endpoint_id, batch_id)
        return int(await self._claim(keys=[key], args=[now_ms, lease_ms]))

    async def settle_webhook(
        self, endpoint_id: str, batch_id: str, *, state: str, due_ms: int = 0
    ) -> None:
        """After an attempt: `state` delivered or gave_up, or pending again at `due_ms`."""
        key = keys.batch(endpoint_id, batch_id)
        await self._accepting(self._settle, [key], [state, due_ms])  # "delivered" kept

    async def turn(self, endpoint_id: str, batch_id: str, ms: int) -> bool:
        """Take the batch's turn for `ms` (one replica looks after it per round: the others
        skip it); False when another replica has it."""
        key = keys.batch(endpoint_id, batch_id, "l")
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
            await self.redis.delete(*(keys.batch(endpoint_id, batch_id, p) for p in PARTS))
            await self.untrack(endpoint_id, batch_id)
        await self.redis.delete(index, self._active(endpoint_id))
        return len(ids)
