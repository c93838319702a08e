"""API keys: the `authorization` header (raw key or `Bearer key`) checked against Redis."""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from lockgate.gateway.errors import Unauthorized
from lockgate.store import Registry, key_digest

# Scopes a key may hold. Client routes need `jobs`; worker routes need `workers`.
JOBS = "jobs"
WORKERS = "workers"
ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's name (never the key), its scopes and endpoints."""

    name: str
    scopes: frozenset[str]
    endpoints: frozenset[str] | None  # None: every endpoint

    def allows(self, scope: str, endpoint_id: str) -> bool:
        in_scope = scope in self.scopes
        return in_scope and (self.endpoints is None or endpoint_id in self.endpoints)


def bearer_token(header: str | None) -> str | None:
    """The key in an `authorization` header: `<key>` or `Bearer <key>`."""
    if not header:
        return None
    scheme, _, rest = header.strip().partition(" ")
    token = rest.strip() if scheme.lower() == "bearer" else header.strip()
    return token or None


class Authenticator:
    """Resolves keys to principals, caching lookups briefly so auth costs no round trip."""

    def __init__(self, registry: Registry, *, cache_s: float) -> None:
        self.registry = registry
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    async def principal(self, header: str | None) -> Principal | None:
        token = bearer_token(header)
        if token is None:
            return None
        digest = key_digest(token)
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        record = await self.registry.get_key(digest)
        principal = _principal(record) if record is not None else None
        if len(self._cache) > 10_000:  # unknown keys must not grow memory without bound
            self._cache.clear()
        self._cache[digest] = (time.monotonic() + self.cache_s, principal)
        return principal

    async def require(self, request: web.Request, scope: str, endpoint_id: str) -> Principal:
        """The caller's principal, or 401 when the key is missing, unknown or not allowed."""
        principal = await self.principal(request.headers.get("authorization"))
        if principal is None:
            raise Unauthorized("missing or unknown API key in the authorization header")
        if not principal.allows(scope, endpoint_id):
            raise Unauthorized(f"API key {principal.name!r} may not use {scope} on {endpoint_id!r}")
        return principal


def _principal(record: dict) -> Principal:
    endpoints = record.get("endpoints")
    return Principal(
        name=record.get("name", "?"),
        scopes=frozenset(record.get("scopes", ())),
        endpoints=frozenset(endpoints) if endpoints is not None else None,
    )
