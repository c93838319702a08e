"""Worker ids bound to network addresses: the first address to present an id keeps it."""

from __future__ import annotations

from redis.asyncio import Redis

from lockgate.store import keys


class WorkerAddresses:
    """`bind` records the address a worker id first came from and answers the one it is
    bound to; each use keeps the binding `ttl_ms` longer."""

    def __init__(self, redis: Redis, *, ttl_ms: int) -> None:
        self.redis = redis
        self.ttl_ms = ttl_ms

    async def bind(self, endpoint_id: str, worker_id: str, address: str) -> str:
        """Bind `worker_id` to `address` unless it is bound already; the bound address."""
        key = keys.worker_address(endpoint_id, worker_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(key, address, nx=True, px=self.ttl_ms)
            pipe.get(key)
            pipe.pexpire(key, self.ttl_ms)
            _, bound, _ = await pipe.execute()
        return bound.decode() if bound is not None else address
