"""Registry entries of endpoints, cached in-process and dropped when the registry changes."""

from __future__ import annotations

import time

from lockgate.gateway.errors import NotFound
from lockgate.models.jobs import EXECUTION_TIMEOUT_DEFAULT_MS
from lockgate.store import Registry
from lockgate.store.keys import ENDPOINT_ID_RE


class EndpointCache:
    """`get` answers from memory for `cache_s`; a registry change event drops the entry."""

    def __init__(self, registry: Registry, *, cache_s: float) -> None:
        self.registry = registry
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, dict | None]] = {}

    async def get(self, endpoint_id: str) -> dict:
        """The endpoint's entry, or 404 when no such endpoint is registered."""
        if not ENDPOINT_ID_RE.match(endpoint_id):
            raise NotFound(f"endpoint {endpoint_id!r} not found")
        hit = self._cache.get(endpoint_id)
        if hit is None or hit[0] < time.monotonic():
            entry = await self.registry.get_endpoint(endpoint_id)
            if len(self._cache) > 10_000:
                self._cache.clear()
            hit = (time.monotonic() + self.cache_s, entry)
            self._cache[endpoint_id] = hit
        if hit[1] is None:
            raise NotFound(f"endpoint {endpoint_id!r} not found")
        return hit[1]

    def invalidate(self, endpoint_id: str) -> None:
        self._cache.pop(endpoint_id, None)


def execution_timeout_ms(entry: dict) -> int:
    """The endpoint's default execution timeout (ms)."""
    return int(entry.get("executionTimeoutMs") or EXECUTION_TIMEOUT_DEFAULT_MS)
