"""Worker identity for shared worker keys: a worker id acts from one network address.

Every worker of an endpoint holds the endpoint's worker key, so the key alone cannot say
which worker calls. The first address to present a worker id (its pod's IP: the pod calls
as soon as it starts) is bound to it; the same id from another address is refused (403),
so a holder of the key cannot finish, stream to or requeue another live worker's jobs.
Keys bound to one worker (dev mode's per-process keys) need no address check.
"""

from __future__ import annotations

import ipaddress
import time

from lockgate.gateway.errors import Forbidden
from lockgate.store.addresses import WorkerAddresses


def peer_address(remote: str) -> str:
    """One spelling per peer: IPv4-mapped IPv6 as IPv4, IPv6 loopback as 127.0.0.1."""
    try:
        ip = ipaddress.ip_address(remote.split("%")[0])
    except ValueError:
        return remote
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if ip.is_loopback:
            return "127.0.0.1"
    return str(ip)


class WorkerBinding:
    """Checks (and on first sight records) the address a worker id calls from."""

    def __init__(self, addresses: WorkerAddresses, *, enabled: bool, cache_s: float) -> None:
        self.addresses = addresses
        self.enabled = enabled
        self.cache_s = cache_s
        self._seen: dict[tuple[str, str, str], float] = {}

    async def check(self, endpoint_id: str, worker_id: str, remote: str | None) -> None:
        """Raise Forbidden when `worker_id` is bound to another address than `remote`."""
        if not self.enabled or not remote:
            return
        address = peer_address(remote)
        seen = (endpoint_id, worker_id, address)
        if self._seen.get(seen, 0.0) > time.monotonic():
            return  # matched a moment ago (each match also renews the binding's ttl)
        bound = await self.addresses.bind(endpoint_id, worker_id, address)
        if bound != address:
            raise Forbidden(
                f"worker id {worker_id!r} is bound to another address; a worker key may "
                "act only as the worker calling from it"
            )
        if len(self._seen) > 10_000:  # bounded: one entry per live worker
            self._seen.clear()
        self._seen[seen] = time.monotonic() + self.cache_s
