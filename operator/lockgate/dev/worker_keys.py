"""Each dev-mode worker process gets its own API key, bound to its worker id.

The endpoint's shared worker key lets its holder act as any worker id of the endpoint
(finish, stream to or requeue another worker's jobs). Dev mode gives no process that key:
each gets a key whose record names its worker id, so the gateway refuses it for any other
id (403), and the key is revoked when the process is gone. The runpod SDK and lockgate's
runtime read it from `RUNPOD_AI_API_KEY` / `LOCKGATE_WORKER_KEY` as before.
"""

from __future__ import annotations

import secrets

from lockgate.store import Registry, key_digest


def worker_key_env(key: str) -> dict[str, str]:
    """The worker's key under both names a worker reads it from."""
    return {"RUNPOD_AI_API_KEY": key, "LOCKGATE_WORKER_KEY": key}


class WorkerKeys:
    """Issues and revokes the per-worker keys of one endpoint."""

    def __init__(self, registry: Registry, endpoint_id: str) -> None:
        self.registry = registry
        self.endpoint_id = endpoint_id
        self.digests: dict[str, str] = {}

    async def issue(self, worker_id: str) -> dict[str, str]:
        """A new key for `worker_id`, registered before the process starts; its env."""
        key = f"lgw_{secrets.token_urlsafe(24)}"
        record = {
            "name": f"dev-worker:{worker_id}",  # the worker id carries the endpoint id
            "scopes": ["workers"],
            "endpoints": [self.endpoint_id],
            "worker": worker_id,
        }
        await self.registry.put_key(key, record)
        self.digests[worker_id] = key_digest(key)
        return worker_key_env(key)

    async def revoke(self, worker_id: str) -> None:
        """The worker is gone: its key (which a leftover child may hold) stops working."""
        if (digest := self.digests.pop(worker_id, None)) is not None:
            await self.registry.delete_key(digest)

    async def revoke_all(self) -> None:
        for worker_id in list(self.digests):
            await self.revoke(worker_id)
