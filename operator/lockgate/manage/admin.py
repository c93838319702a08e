"""Admin-only access for the management APIs (v1, v2, GraphQL): the app's `Authenticator`
and the middleware that lets only admin keys through."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from lockgate.gateway.auth import ADMIN, Authenticator

AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
ALL_ENDPOINTS = "*"


@web.middleware
async def admin_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 unless the caller's key is an admin key."""
    await request.app[AUTHENTICATOR].require(request, ADMIN, ALL_ENDPOINTS)
    return await handler(request)
