"""CORS for browser clients of the job API: allowed origins from a setting, pre-flights
answered before any key is asked for (browsers send them without the authorization header).

Only `/v2/` paths (the job API) take part; the probes, metrics and worker API never do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from lockgate.gateway.http import json_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

JOB_API_PREFIX = "/v2/"
ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "authorization, content-type, idempotency-key"
EXPOSE_HEADERS = "retry-after"
MAX_AGE_S = "600"  # how long a browser may cache a pre-flight answer
ALLOW = web.RequestKey("lockgate_cors_allow", str)  # the Allow-Origin value for the request


def allowed_origin(origin: str | None, allowed: Collection[str]) -> str | None:
    """The `Access-Control-Allow-Origin` value for `origin`, or None when it is not allowed.
    `"*"` in `allowed` admits every origin (and is answered as `*`)."""
    if not origin or not allowed:
        return None
    if "*" in allowed:
        return "*"
    return origin if origin.rstrip("/") in allowed else None


def _cors_headers(allow: str) -> dict[str, str]:
    headers = {
        "Access-Control-Allow-Origin": allow,
        "Access-Control-Expose-Headers": EXPOSE_HEADERS,
    }
    if allow != "*":
        headers["Vary"] = "Origin"
    return headers


def cors_middleware(origins: Collection[str]) -> Callable[[web.Request, Handler], Awaitable]:
    """A middleware that answers pre-flights and marks requests from `origins` for
    `add_cors_headers`."""
    allowed = frozenset(o.rstrip("/") for o in origins)

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(JOB_API_PREFIX):
            return await handler(request)
        allow = allowed_origin(request.headers.get("Origin"), allowed)
        preflight = (
            request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
        )
        if preflight:
            if allow is None:
                return json_response(
                    {"error": "cross-origin requests from this origin are not allowed "
                     "(LOCKGATE_CORS_ALLOW_ORIGINS)"},
                    status=403,
                )  # fmt: skip
            headers = _cors_headers(allow) | {
                "Access-Control-Allow-Methods": ALLOW_METHODS,
                "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": MAX_AGE_S,
            }
            return web.Response(status=204, headers=headers)
        if allow is not None:
            request[ALLOW] = allow
        return await handler(request)

    return cors


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the CORS headers go on every answer to an allowed origin,
    errors and answers sent early (see gateway/resources.py) included."""
    if (allow := request.get(ALLOW)) is not None:
        response.headers.update(_cors_headers(allow))
