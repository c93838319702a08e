"""API keys: the `authorization` header (raw key or `Bearer key`) checked against Redis and
the mounted key file.

A key is never compared: its SHA-256 is the lookup key (in the file's table, the cache and
Redis), so lookup timing can say something about a digest at most, which tells nothing
about any key. Records are cached for `auth_cache_s`; a revocation publishes an event that
drops the cached entry at once, and the cache time bounds it when the event is missed.
A key's expiry (`expires`, epoch ms) travels in the cached principal and is compared with
the clock on every request, so an expired key is refused at its expiry time exactly, with
no extra Redis read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from lockgate.gateway.errors import Unauthorized
from lockgate.gateway.keyfile import KeyFile
from lockgate.models.keys import Scope, effective_scopes, is_expired, rfc3339
from lockgate.store import Registry, key_digest, key_id, now_ms

log = logging.getLogger("lockgate.gateway")

# Scopes a key may hold (see models/keys.py). `jobs` implies `jobs:read`.
JOBS = str(Scope.JOBS)
JOBS_READ = str(Scope.JOBS_READ)
WORKERS = str(Scope.WORKERS)
ADMIN = str(Scope.ADMIN)
_SCOPES = frozenset(str(s) for s in Scope)
# Where the middleware finds who called, to log a refusal with the key's name.
CALLER = web.RequestKey("caller", str)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's name (never the key), its scopes and endpoints, and for a
    worker's own key, the one worker id it may act as."""

    name: str
    scopes: frozenset[str]
    endpoints: frozenset[str] | None  # None: every endpoint
    worker: str | None = None  # None: any worker id (an endpoint's shared worker key)
    expires: int | None = None  # epoch ms after which the key is refused; None: never
    key_id: str | None = None  # the key's id as the keys API lists it; None: no key

    def allows(self, scope: str, endpoint_id: str) -> bool:
        in_scope = scope in self.scopes
        return in_scope and (self.endpoints is None or endpoint_id in self.endpoints)


# With `LOCKGATE_AUTH=false` every request is this caller (benchmarks, trusted networks).
ANONYMOUS = Principal("anonymous", frozenset(str(s) for s in Scope), None)


def bearer_token(header: str | None) -> str | None:
    """The key in an `authorization` header: `<key>` or `Bearer <key>`."""
    if not header:
        return None
    scheme, _, rest = header.strip().partition(" ")
    token = rest.strip() if scheme.lower() == "bearer" else header.strip()
    return token or None


def principal_of(record: dict[str, Any]) -> Principal:
    """A key record (stored or from the key file) as a principal; unknown scopes are ignored."""
    scopes = [Scope(s) for s in record.get("scopes", ()) if s in _SCOPES]
    endpoints = record.get("endpoints")
    return Principal(
        name=str(record.get("name", "?")),
        scopes=effective_scopes(scopes),
        endpoints=frozenset(endpoints) if endpoints is not None else None,
        worker=str(record["worker"]) if record.get("worker") is not None else None,
        expires=record["expires"] if isinstance(record.get("expires"), int) else None,
    )


class Authenticator:
    """Resolves keys to principals: the key file first, then Redis, cached briefly."""

    def __init__(
        self,
        registry: Registry,
        *,
        cache_s: float,
        key_file: KeyFile | None = None,
        enabled: bool = True,
    ) -> None:
        self.registry = registry
        self.cache_s = cache_s
        self.key_file = key_file
        self.enabled = enabled
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._file: dict[str, Principal] = {}
        if key_file is not None:
            key_file.on_change = self._load_file

    def _load_file(self) -> None:
        assert self.key_file is not None
        self._file = {d: principal_of(e.model_dump()) for d, e in self.key_file.entries.items()}

    def forget(self, digest: str) -> None:
        """Drop a cached lookup (the key changed or was revoked)."""
        self._cache.pop(digest, None)

    async def principal(self, header: str | None) -> Principal | None:
        token = bearer_token(header)
        if token is None:
            return None
        digest = key_digest(token)
        if (found := self._file.get(digest)) is not None:
            return replace(found, key_id=key_id(digest))
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        record = await self.registry.get_key(digest)
        principal = None
        if record is not None:
            principal = replace(principal_of(record), key_id=key_id(digest))
        if len(self._cache) > 10_000:  # unknown keys must not grow memory without bound
            self._cache.clear()
        self._cache[digest] = (time.monotonic() + self.cache_s, principal)
        return principal

    async def require(self, request: web.Request, scope: str, endpoint_id: str) -> Principal:
        """The caller's principal, or 401 when the key is missing, unknown, expired or not
        allowed."""
        if not self.enabled:
            request[CALLER] = ANONYMOUS.name
            return ANONYMOUS
        header = request.headers.get("authorization")
        principal = await self.principal(header)
        if principal is None:
            missing = bearer_token(header) is None
            raise Unauthorized(
                "missing API key in the authorization header"
                if missing
                else "unknown or revoked API key"
            )
        request[CALLER] = principal.name
        if is_expired(principal.expires, now_ms()):
            assert principal.expires is not None
            raise Unauthorized(f"API key expired at {rfc3339(principal.expires)}")
        if not principal.allows(scope, endpoint_id):
            raise Unauthorized(f"API key {principal.name!r} may not use {scope} on {endpoint_id!r}")
        return principal
