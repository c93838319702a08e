"""CORS for browser clients of the job API and the load-balancing route: allowed origins
from one setting, pre-flights answered before any key is asked for (browsers send them
without the authorization header).

`/v2/` paths (the job API) and the load-balancing route (`/lb/{endpoint}/...`, and any
path of the host form `{endpoint}.{LOCKGATE_LB_DOMAIN}`) take part; the probes, metrics and worker
API never do. On `/lb/` only requests from an allowed origin are the gateway's: a pre-flight
from any other origin (or an `OPTIONS` without `Access-Control-Request-Method`) goes to the
worker as any request does, so a worker doing its own CORS keeps serving everyone else.
On an answer to an allowed origin the gateway's `Access-Control-Allow-Origin` replaces the
worker's (the gateway answered the pre-flight), and `Expose-Headers` and `Vary` are merged
with the worker's into one header each.
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from lockgate.gateway.http import json_response
from lockgate.gateway.lb_proxy import host_endpoint

JOB_API_PREFIX = "/v2/"
LB_PREFIX = "/lb/"
ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "authorization, content-type, idempotency-key"
LB_ALLOW_HEADERS = ("authorization", "content-type", "x-runpod-worker-id")
EXPOSE_HEADERS = "retry-after"
LB_EXPOSE_HEADERS = "retry-after, x-runpod-worker-id"
MAX_AGE_S = "600"  # how long a browser may cache a pre-flight answer
ALLOW = web.RequestKey("lockgate_cors_allow", str)  # the Allow-Origin value for the request
EXPOSE = web.RequestKey("lockgate_cors_expose", str)  # the Expose-Headers value for it


def allowed_origin(origin: str | None, allowed: Collection[str]) -> str | None:
    """The `Access-Control-Allow-Origin` value for `origin`, or None when it is not allowed.
    `"*"` in `allowed` admits every origin (and is answered as `*`)."""
    if not origin or not allowed:
        return None
    if "*" in allowed:
        return "*"
    return origin if origin.rstrip("/") in allowed else None


def merged_list(*values: str) -> str:
    """Comma-separated header lists as one, each name once (first spelling kept, any case)."""
    seen: dict[str, str] = {}
    for value in values:
        for name in (n.strip() for n in value.split(",")):
            if name:
                seen.setdefault(name.lower(), name)
    return ", ".join(seen.values())


def _cors_headers(allow: str, expose: str = EXPOSE_HEADERS) -> dict[str, str]:
    headers = {
        "Access-Control-Allow-Origin": allow,
        "Access-Control-Expose-Headers": expose,
    }
    if allow != "*":
        headers["Vary"] = "Origin"
    return headers


def lb_preflight_headers(allow: str, method: str, requested: str) -> dict[str, str]:
    """The answer to a pre-flight on `/lb/`: the requested method and headers allowed (the
    worker's routes are its own), the key and affinity headers always."""
    headers = _cors_headers(allow, LB_EXPOSE_HEADERS) | {
        "Access-Control-Allow-Methods": method,
        "Access-Control-Allow-Headers": merged_list(requested, *LB_ALLOW_HEADERS),
        "Access-Control-Max-Age": MAX_AGE_S,
    }
    headers["Vary"] = merged_list(
        headers.get("Vary", ""), "Access-Control-Request-Method, Access-Control-Request-Headers"
    )
    return headers


def cors_middleware(origins: Collection[str], lb_domain: str = "") -> Middleware:
    """A middleware that answers pre-flights and marks requests from `origins` for
    `add_cors_headers`; `lb_domain`: the load-balancing host form's domain, if any."""
    allowed = frozenset(o.rstrip("/") for o in origins)

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        lb = request.path.startswith(LB_PREFIX) or (
            host_endpoint(request.host, lb_domain) is not None
        )
        if not lb and not request.path.startswith(JOB_API_PREFIX):
            return await handler(request)
        allow = allowed_origin(request.headers.get("Origin"), allowed)
        method = request.headers.get("Access-Control-Request-Method")
        preflight = request.method == "OPTIONS" and method is not None
        if lb and allow is None:
            return await handler(request)  # the worker's to answer, CORS or not
        if lb and preflight and allow is not None and method is not None:
            requested = request.headers.get("Access-Control-Request-Headers", "")
            return web.Response(status=204, headers=lb_preflight_headers(allow, method, requested))
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
            request[EXPOSE] = LB_EXPOSE_HEADERS if lb else EXPOSE_HEADERS
        return await handler(request)

    return cors


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the CORS headers go on every answer to an allowed origin,
    errors and answers sent early (see gateway/resources.py) included; a proxied worker's
    own CORS headers are replaced (Allow-Origin) or merged (Expose-Headers, Vary), never
    repeated."""
    if (allow := request.get(ALLOW)) is None:
        return
    for name, value in _cors_headers(allow, request[EXPOSE]).items():
        if name != "Access-Control-Allow-Origin":
            value = merged_list(*response.headers.getall(name, ()), value)
        response.headers.popall(name, None)
        response.headers[name] = value
