"""Rate and concurrency counts of the job API, shared by every gateway replica through Redis.

Windows are fixed and aligned to the clock (`now - now % window`), as the spec counts
"per 10-second window": one counter per window, and a `Retry-After` that is exactly the
time left in it. A replica does not ask Redis for every request: it reserves a batch of the
window's rate (and of the concurrency) at once and spends it locally; the script never
grants past the limit, so the limit holds across replicas as a ceiling. Concurrency
reservations carry a lease that the replica renews, so a replica that dies gives its slots
back when the lease ends instead of leaking them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from redis.asyncio import Redis

from lockgate.store.args_workers import Limit
from lockgate.store.scripts import Scripts


@dataclass(frozen=True, slots=True)
class Grant:
    """What Redis granted: rate units, time left in the window, slots now held."""

    units: int
    window_left_ms: int
    slots: int


class RateLimits:
    """Reservations per endpoint, operation and key owner (`lg:{ep}:rl:…`, `lg:{ep}:rc:…`)."""

    def __init__(self, redis: Redis, scripts: Scripts | None = None) -> None:
        self.redis = redis
        self.scripts = scripts or Scripts.register(redis)
        self.replica = secrets.token_hex(6)  # this process, as a holder of slots

    async def reserve(
        self,
        endpoint_id: str,
        operation: str,
        owner: str,
        *,
        now: int,
        window_ms: int,
        rate: int | None,
        units: int,
        concurrency: int | None,
        slots: int | None,
        lease_ms: int,
    ) -> Grant:
        """Take up to `units` of the window's rate, and set this replica's slots to `slots`
        (or as many as the other replicas leave); None leaves that part alone."""
        args = Limit(
            endpoint_id, operation, owner, now, window_ms, _or_none(rate), units,
            _or_none(concurrency), self.replica, -1 if slots is None else slots, lease_ms,
        )  # fmt: skip
        reply = await self.scripts.run(args)
        return Grant(*(int(v) for v in reply))


def _or_none(limit: int | None) -> int:
    return -1 if limit is None else limit
