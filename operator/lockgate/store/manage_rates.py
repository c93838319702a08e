"""How many management requests a caller made in each of its rate-limit windows, counted
in Redis so that every `lockgate manage` replica (and dev mode) shares one count.

Windows are fixed and aligned to the clock (`now - now % seconds`), as the job API's are:
one counter per caller and window, which dies with its window.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from lockgate.store import keys


async def count_request(
    redis: Redis, caller: str, windows: Sequence[tuple[str, int]], now_s: int
) -> list[int]:
    """Count one request of `caller` in each `(name, seconds)` window; the counts so far,
    this request included. One round trip (the keys share the caller's slot)."""
    async with redis.pipeline(transaction=True) as pipe:
        for name, seconds in windows:
            key = keys.manage_rate(caller, name, now_s - now_s % seconds)
            pipe.incr(key)
            pipe.expire(key, seconds + 1, nx=True)
        replies = await pipe.execute()
    return [int(count) for count in replies[::2]]
