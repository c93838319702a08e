"""One Redis client per process, resilient to Redis restarting."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError

# What a command raises when Redis cannot be reached (after the client's retries).
UNAVAILABLE: tuple[type[Exception], ...] = (ConnectionError, TimeoutError, ConnectionRefusedError)


def connect(url: str, *, max_connections: int = 256) -> Redis:
    """A client that retries a command a few times across a reconnect before failing."""
    return Redis.from_url(
        url,
        max_connections=max_connections,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.01), retries=3),
        retry_on_error=[ConnectionError, TimeoutError],
        socket_connect_timeout=2,
        health_check_interval=30,
    )
