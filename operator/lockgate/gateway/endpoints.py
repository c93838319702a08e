"""Registry entries of endpoints, cached in-process and dropped when the registry changes.
An entry's settings come with the spec's defaults (`models.registry_entry`)."""

from __future__ import annotations

import time

from lockgate.gateway.errors import BadRequest, NotFound
from lockgate.models.endpoint import EndpointType
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry
from lockgate.store.keys import ENDPOINT_ID_RE


class EndpointCache:
    """`get` answers from memory for `cache_s`; a registry change event drops the entry."""

    def __init__(self, registry: Registry, *, cache_s: float) -> None:
        self.registry = registry
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, RegistryEntry | None]] = {}

    async def get(self, endpoint_id: str) -> RegistryEntry:
        """The endpoint's entry, or 404 when no such endpoint is registered."""
        if not ENDPOINT_ID_RE.fullmatch(endpoint_id):
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


def request_timeout_s(entry: RegistryEntry) -> float:
    """How long one proxied request of a load-balancing endpoint may run (s)."""
    return float(entry.requestTimeoutS)


def lb_hold_s(entry: RegistryEntry) -> float | None:
    """How long a request of a load-balancing endpoint is held for a routable worker (s):
    the endpoint's `lbHoldS`; None when unset (the gateway's `LOCKGATE_LB_HOLD_S`)."""
    return None if entry.lbHoldS is None else float(entry.lbHoldS)


def lb_websocket_max_s(entry: RegistryEntry) -> float:
    """How long a relayed WebSocket of a load-balancing endpoint may stay open (s)."""
    return float(entry.lbWebSocketMaxS)


def require_type(entry: RegistryEntry, endpoint_id: str, wanted: EndpointType, route: str) -> None:
    """400 naming the endpoint's type when `route` serves only endpoints of type `wanted`."""
    actual = entry.type
    if actual == wanted:
        return
    if actual == EndpointType.LB:
        raise BadRequest(
            f"endpoint {endpoint_id!r} is a load-balancing endpoint (type LB): {route} serves "
            f"queue endpoints only; send requests to /lb/{endpoint_id}/<path>"
        )
    raise BadRequest(
        f"endpoint {endpoint_id!r} is a queue endpoint (type QUEUE): {route} serves "
        f"load-balancing endpoints only; use the job API at /v2/{endpoint_id}/run"
    )
