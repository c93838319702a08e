"""One Redis client per process, resilient to Redis restarting."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError

# What a command raises when Redis cannot be reached (after the client's retries).
UNAVAILABLE: tuple[type[Exception], ...] = (ConnectionError, TimeoutError, ConnectionRefusedError)


def connect(url: str, *, max_connections: int = 256, pool_timeout_s: float = 10.0) -> Redis:
    """A client that retries a command a few times across a reconnect before failing.

    Its pool holds at most `max_connections`; a command finding them all busy (e.g. while
    Redis stalls under a burst) waits up to `pool_timeout_s` for one instead of failing
    at once with "Too many connections"."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout_s,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.01), retries=3),
        retry_on_error=[ConnectionError, TimeoutError],
        socket_connect_timeout=2,
        health_check_interval=30,
    )
    return Redis.from_pool(pool)
