"""Usage for billing: worker-, GPU- and vCPU-seconds per endpoint and hour, and the
execution time of each API key's jobs per hour, in Redis.

history.lua adds to them with each history point it writes (once per 10 s interval,
however many replicas sample: the point's ready workers times the interval), so usage is
measured by the same samples as the console's charts. This module reads them back, keeps
the index of endpoints with usage (deleted endpoints stay in it: their usage is still
billed) and says at which rate an endpoint's workers count (`UsageRate`).

finish.lua adds each job a worker finished to its API key's usage (`uk:`): its execution
ms, and its GPU-ms or vCPU-ms at the endpoint's rate (`KeyUsage`), in the same script.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from lockgate.store import keys

HOUR_S = 3600


@dataclass(frozen=True, slots=True)
class UsageRate:
    """What one ready worker of an endpoint adds per second: GPUs of `gpu_type`, vCPUs."""

    gpu_type: str = ""
    gpus: int = 0
    vcpus: int = 0

    def args(self) -> list[object]:
        """history.lua's usage arguments (ARGV[6..10])."""
        return [self.gpu_type, self.gpus, self.vcpus, keys.USAGE_CHUNK_S, keys.USAGE_KEEP_S]


NO_USAGE = UsageRate()  # workers that count worker-seconds alone
UNSPECIFIED_GPU = "unspecified"  # the GPU type of an endpoint that lists none (any type)


def rate_of(entry: Mapping[str, Any] | None) -> UsageRate:
    """How a ready worker of the endpoint `entry` (its registry entry) counts: a CPU
    endpoint's its vCPUs, a GPU endpoint's its GPUs of the first of its `gpuTypeIds` (the
    type its workers are placed on first; see docs/usage.md)."""
    if not entry:
        return UsageRate()
    if entry.get("computeType") == "CPU":
        return UsageRate(vcpus=int(entry.get("vcpuCount") or 0))
    types = entry.get("gpuTypeIds") or [UNSPECIFIED_GPU]
    return UsageRate(gpu_type=str(types[0]), gpus=int(entry.get("gpuCount") or 1))


@dataclass(slots=True)
class HourUsage:
    """One endpoint's usage in one hour (seconds)."""

    worker_seconds: int = 0
    vcpu_seconds: int = 0
    gpu_seconds: dict[str, int] = field(default_factory=dict)  # GPU type id -> seconds


def parse_hours(fields: Mapping[bytes | str, bytes | str]) -> dict[int, HourUsage]:
    """A usage hash's fields ("<hour>:w", "<hour>:c", "<hour>:g:<type>") by hour."""
    hours: dict[int, HourUsage] = {}
    for raw_name, raw_value in fields.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        hour, _, what = name.partition(":")
        usage = hours.setdefault(int(hour), HourUsage())
        value = int(raw_value)
        if what == "w":
            usage.worker_seconds += value
        elif what == "c":
            usage.vcpu_seconds += value
        elif what.startswith("g:"):
            gpu_type = what[2:]
            usage.gpu_seconds[gpu_type] = usage.gpu_seconds.get(gpu_type, 0) + value
    return hours


NO_KEY = "-"  # the key id of jobs submitted without a key (auth off: dev mode, benchmarks)


@dataclass(slots=True)
class KeyUsage:
    """An API key's jobs' usage (ms): execution time, and GPU- and vCPU-time at their
    endpoints' rates."""

    execution_ms: int = 0
    vcpu_ms: int = 0
    gpu_ms: dict[str, int] = field(default_factory=dict)  # GPU type id -> ms

    def add(self, other: KeyUsage) -> None:
        self.execution_ms += other.execution_ms
        self.vcpu_ms += other.vcpu_ms
        for gpu_type, ms in other.gpu_ms.items():
            self.gpu_ms[gpu_type] = self.gpu_ms.get(gpu_type, 0) + ms


def parse_key_hours(
    fields: Mapping[bytes | str, bytes | str],
) -> dict[int, dict[str, KeyUsage]]:
    """A per-key usage hash's fields ("<hour>:<key>:x", "<hour>:<key>:c",
    "<hour>:<key>:g:<type>") by hour and key id."""
    hours: dict[int, dict[str, KeyUsage]] = {}
    for raw_name, raw_value in fields.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        hour, key, what = name.split(":", 2)
        usage = hours.setdefault(int(hour), {}).setdefault(key, KeyUsage())
        value = int(raw_value)
        if what == "x":
            usage.execution_ms += value
        elif what == "c":
            usage.vcpu_ms += value
        elif what.startswith("g:"):
            usage.gpu_ms[what[2:]] = usage.gpu_ms.get(what[2:], 0) + value
    return hours


def chunks(start_s: int, end_s: int) -> range:
    """The epoch seconds starting the usage hashes that hold hours in [start_s, end_s)."""
    first = start_s - start_s % keys.USAGE_CHUNK_S
    return range(first, max(end_s, first + 1), keys.USAGE_CHUNK_S)


class UsageLedger:
    """Reads the usage history.lua writes, and the index of endpoints that have some."""

    def __init__(self, redis: Redis, *, clock: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.clock = clock
        self._noted: dict[str, int] = {}  # endpoint -> newest hour put in the index

    async def note(self, endpoint_id: str, hour: int) -> None:
        """The endpoint has usage in `hour` (epoch s): keep it in the index (one write per
        endpoint and hour from this process; the index is trimmed then too)."""
        if self._noted.get(endpoint_id, -1) >= hour:
            return
        await self.redis.zadd(keys.USAGE_ENDPOINTS, {endpoint_id: hour})
        await self._forget_expired()
        self._noted[endpoint_id] = hour

    async def _forget_expired(self) -> None:
        """Endpoints whose usage has all expired leave the index."""
        oldest = int(self.clock()) - keys.USAGE_KEEP_S
        await self.redis.zremrangebyscore(keys.USAGE_ENDPOINTS, "-inf", f"({oldest}")

    async def endpoint_ids(self, since_s: int) -> list[str]:
        """Endpoints with usage in an hour from `since_s` on (deleted ones too)."""
        await self._forget_expired()
        found = await self.redis.zrangebyscore(keys.USAGE_ENDPOINTS, since_s - HOUR_S, "+inf")
        return sorted(raw.decode() if isinstance(raw, bytes) else str(raw) for raw in found)

    async def hours(
        self, endpoint_ids: Iterable[str], start_s: int, end_s: int
    ) -> dict[str, dict[int, HourUsage]]:
        """Each endpoint's usage by hour, for the hours starting in [start_s, end_s), read
        only within the retention (`USAGE_KEEP_S` before now)."""
        start_s = max(start_s, int(self.clock()) - keys.USAGE_KEEP_S - keys.USAGE_CHUNK_S)
        end_s = min(end_s, int(self.clock()) + HOUR_S)
        ids = list(endpoint_ids)
        if start_s >= end_s or not ids:
            return {endpoint_id: {} for endpoint_id in ids}
        spans = chunks(start_s, end_s)
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            for chunk in spans:
                pipe.hgetall(f"{keys.prefix(endpoint_id)}use:{chunk}")
        found = iter(await pipe.execute())
        out: dict[str, dict[int, HourUsage]] = {}
        for endpoint_id in ids:
            hours: dict[int, HourUsage] = {}
            for _ in spans:
                hours.update(parse_hours(next(found)))
            out[endpoint_id] = {h: u for h, u in hours.items() if start_s <= h < end_s}
        return out

    async def key_hours(
        self, endpoint_ids: Iterable[str], start_s: int, end_s: int
    ) -> dict[str, dict[int, KeyUsage]]:
        """Each API key's usage by hour over these endpoints (summed), for the hours
        starting in [start_s, end_s), read only within the retention; key id NO_KEY for
        the jobs submitted without one."""
        start_s = max(start_s, int(self.clock()) - keys.USAGE_KEEP_S - keys.USAGE_CHUNK_S)
        end_s = min(end_s, int(self.clock()) + HOUR_S)
        ids = list(endpoint_ids)
        out: dict[str, dict[int, KeyUsage]] = {}
        if start_s >= end_s or not ids:
            return out
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            for chunk in chunks(start_s, end_s):
                pipe.hgetall(f"{keys.prefix(endpoint_id)}uk:{chunk}")
        for found in await pipe.execute():
            for hour, by_key in parse_key_hours(found).items():
                if start_s <= hour < end_s:
                    for key, usage in by_key.items():
                        out.setdefault(key, {}).setdefault(hour, KeyUsage()).add(usage)
        return out
