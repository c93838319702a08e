"""Rate and concurrency counts of the job API, shared by every gateway replica through Redis.

Windows are fixed and aligned to the clock (`now - now % window`), as the spec counts
"per 10-second window": one counter per window, one script call per request, and a
`Retry-After` that is exactly the time left in the window. In-flight requests are members
of a sorted set scored by the end of their lease, so a replica that dies holding slots
gives them back when the lease ends instead of leaking them.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass
from enum import IntEnum

from redis.asyncio import Redis

from lockgate.store import keys
from lockgate.store.scripts import Scripts


class Verdict(IntEnum):
    RATE = 0  # refused: the window's count reached the rate
    CONCURRENCY = 1  # refused: as many requests are in flight as allowed
    ADMITTED = 2


@dataclass(frozen=True, slots=True)
class Admission:
    """The limit script's answer; `token` must be released when `holds` is true."""

    verdict: Verdict
    retry_after_ms: int
    token: str
    holds: bool


class RateLimits:
    """Counts per endpoint, operation and key owner (keys `lg:{ep}:rl:…` and `lg:{ep}:rc:…`)."""

    def __init__(self, redis: Redis, scripts: Scripts | None = None) -> None:
        self.redis = redis
        self.script = (scripts or Scripts.register(redis)).limit
        self._tokens = (f"{secrets.token_hex(4)}:{n}" for n in itertools.count())

    async def admit(
        self,
        endpoint_id: str,
        operation: str,
        owner: str,
        *,
        now: int,
        window_ms: int,
        rate: int | None,
        concurrency: int | None,
        lease_ms: int,
    ) -> Admission:
        """Count one request against the rate and take an in-flight slot, or refuse it."""
        token = next(self._tokens)
        args = [operation, owner, now, window_ms, _or_none(rate), _or_none(concurrency)]
        verdict, retry_ms = await self.script(
            keys=[keys.prefix(endpoint_id)], args=[*args, token, lease_ms]
        )
        verdict = Verdict(int(verdict))
        holds = verdict is Verdict.ADMITTED and concurrency is not None
        return Admission(verdict, int(retry_ms), token, holds)

    async def release(self, endpoint_id: str, operation: str, owner: str, token: str) -> None:
        """Give back the in-flight slot an admitted request held."""
        await self.redis.zrem(keys.in_flight(endpoint_id, operation, owner), token)


def _or_none(limit: int | None) -> int:
    return -1 if limit is None else limit
