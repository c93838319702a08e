"""Endpoint registry and API keys: the small global hashes the gateway reads."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
from redis.asyncio import Redis

from lockgate.models.endpoint import WorkerLostPolicy
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import keys
from lockgate.store.replies import text

# A management record or a key's record as stored: a JSON object.
Record = dict[str, Any]


def key_digest(api_key: str) -> str:
    """Keys are stored as their SHA-256: they are random, long, and never kept in clear."""
    return hashlib.sha256(api_key.encode()).hexdigest()


KEY_ID_CHARS = 12  # a key's id is this much of its digest (the keys API, `keys list`)


def key_id(digest: str) -> str:
    """A key's id, as the keys API lists it: the start of its digest."""
    return digest[:KEY_ID_CHARS]


def lost_policy(entry: RegistryEntry) -> list[str | int]:
    """The endpoint's `lost` hash (keys.py) as field/value pairs, which common.lua's
    `requeue` reads when a worker is lost with a job: the policy and requeueMaxRunS in ms;
    none (no key) for the default, every lost job requeued."""
    if entry.onWorkerLost == WorkerLostPolicy.REQUEUE and entry.requeueMaxRunS == 0:
        return []
    return ["p", str(entry.onWorkerLost), "n", entry.requeueMaxRunS * 1000]


class Registry:
    """Endpoints known to the gateway, and the API keys allowed to call it."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def put_endpoint(self, endpoint_id: str, entry: RegistryEntry) -> None:
        """Register (or update) an endpoint with the settings the gateway needs, and beside
        its other keys what the store's scripts read: its onWorkerLost policy
        (`lost_policy`) and its count of warm-up inputs (`warmup_count`, for the scripts
        that see a new worker)."""
        await self.redis.hset(keys.ENDPOINTS, endpoint_id, orjson.dumps(entry.stored()))
        # Both in the endpoint's own slot: one round trip.
        pipe = self.redis.pipeline(transaction=False)
        if policy := lost_policy(entry):
            pipe.hset(keys.lost_policy(endpoint_id), items=policy)
        else:
            pipe.delete(keys.lost_policy(endpoint_id))
        if warmups := len(entry.warmup.inputs or []) if entry.warmup is not None else 0:
            pipe.set(keys.warmup_count(endpoint_id), warmups)
        else:
            pipe.delete(keys.warmup_count(endpoint_id))
        await pipe.execute()
        await self.redis.publish(keys.EVENTS_CHANNEL, f"r:{endpoint_id}")

    async def get_endpoint(self, endpoint_id: str) -> RegistryEntry | None:
        raw = await self.redis.hget(keys.ENDPOINTS, endpoint_id)
        return RegistryEntry.model_validate_json(raw) if raw is not None else None

    async def has_endpoint(self, endpoint_id: str) -> bool:
        """Whether the endpoint is registered (one HEXISTS; nothing is parsed)."""
        return bool(await self.redis.hexists(keys.ENDPOINTS, endpoint_id))

    async def endpoint_ids(self) -> list[str]:
        """The registered endpoints' ids alone (no entry is read or parsed)."""
        return [text(k) for k in await self.redis.hkeys(keys.ENDPOINTS)]

    async def list_endpoints(self) -> dict[str, RegistryEntry]:
        raw = await self.redis.hgetall(keys.ENDPOINTS)
        return {text(k): RegistryEntry.model_validate_json(v) for k, v in raw.items()}

    async def delete_endpoint(self, endpoint_id: str) -> None:
        await self.redis.hdel(keys.ENDPOINTS, endpoint_id)
        await self.redis.publish(keys.EVENTS_CHANNEL, f"r:{endpoint_id}")

    async def put_template(self, template_id: str, entry: Record) -> None:
        """Keep (or replace) a dev-mode template."""
        await self.put_record(keys.TEMPLATES, template_id, entry)

    async def get_template(self, template_id: str) -> Record | None:
        return await self.get_record(keys.TEMPLATES, template_id)

    async def list_templates(self) -> dict[str, Record]:
        return await self.list_records(keys.TEMPLATES)

    async def delete_template(self, template_id: str) -> bool:
        """Forget a dev-mode template; False when it was not there."""
        return await self.delete_record(keys.TEMPLATES, template_id)

    # Management records kept by id in one hash each: `keys.TEMPLATES`,
    # `keys.REGISTRY_AUTHS`, `keys.NETWORK_VOLUMES`.

    async def put_record(self, kind: str, record_id: str, entry: Record) -> None:
        """Keep (or replace) a record of `kind` (one of the hashes above)."""
        await self.redis.hset(kind, record_id, orjson.dumps(entry))

    async def add_record(self, kind: str, record_id: str, entry: Record) -> bool:
        """Keep a new record; False (nothing written) when the id is taken."""
        return bool(await self.redis.hsetnx(kind, record_id, orjson.dumps(entry)))

    async def get_record(self, kind: str, record_id: str) -> Record | None:
        raw = await self.redis.hget(kind, record_id)
        return orjson.loads(raw) if raw is not None else None

    async def list_records(self, kind: str) -> dict[str, Record]:
        raw = await self.redis.hgetall(kind)
        return {text(k): orjson.loads(v) for k, v in raw.items()}

    async def delete_record(self, kind: str, record_id: str) -> bool:
        """Forget a record; False when it was not there."""
        return bool(await self.redis.hdel(kind, record_id))

    async def put_key(self, api_key: str, record: Record) -> None:
        """Store a key's record (name, scopes, endpoints) under the key's digest."""
        await self.put_key_digest(key_digest(api_key), record)

    async def put_key_digest(self, digest: str, record: Record) -> None:
        await self.redis.hset(keys.API_KEYS, digest, orjson.dumps(record))
        await self.redis.publish(keys.EVENTS_CHANNEL, f"k:{digest}")

    async def get_key(self, digest: str) -> Record | None:
        raw = await self.redis.hget(keys.API_KEYS, digest)
        return orjson.loads(raw) if raw is not None else None

    async def list_keys(self) -> dict[str, Record]:
        """Every key record by digest (for `lockgate keys list`; never on a request path)."""
        raw = await self.redis.hgetall(keys.API_KEYS)
        return {text(k): orjson.loads(v) for k, v in raw.items()}

    async def delete_key(self, digest: str) -> None:
        """Revoke a key; gateways drop it from their caches at once (the event) or within
        their cache time (a missed event)."""
        await self.redis.hdel(keys.API_KEYS, digest)
        await self.redis.publish(keys.EVENTS_CHANNEL, f"k:{digest}")


class SharedIds:
    """A set of ids read at most once per `max_age_s` however many ask: a thousand
    Endpoints' resyncs share one read a period instead of a call each. Concurrent askers
    wait on the same read; one cancelled does not cancel it."""

    def __init__(
        self,
        read: Callable[[], Awaitable[Iterable[str]]],
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.max_age_s = max_age_s
        self.clock = clock
        self._ids: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None

    async def has(self, id_: str) -> bool:
        """Whether the id was in the set at the last read, at most `max_age_s` old."""
        if self.clock() - self._read_at >= self.max_age_s:
            if self._reading is None:
                self._reading = asyncio.create_task(self._read())
            await asyncio.shield(self._reading)
        return id_ in self._ids

    async def _read(self) -> None:
        try:
            started = self.clock()
            self._ids = frozenset(await self.read())
            self._read_at = started
        finally:
            self._reading = None


class RegisteredIds(SharedIds):
    """The registered endpoint ids (issue 32: one HKEYS a period, not a HEXISTS each)."""

    def __init__(
        self, registry: Registry, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(registry.endpoint_ids, max_age_s, clock)
