"""The one error middleware: every failure becomes `{"error": ...}` with the right status,
and every refusal is logged with the caller's key name (never the key) and the reason."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Handler
from redis.exceptions import OutOfMemoryError as RedisOutOfMemoryError

from lockgate.gateway.auth import CALLER
from lockgate.gateway.errors import (
    CLIENT_CLOSED,
    ApiError,
    PayloadTooLarge,
    RequestTimeout,
    Unavailable,
    clip,
)
from lockgate.gateway.http import json_response
from lockgate.store import UNAVAILABLE, QueueFull

log = logging.getLogger("lockgate.gateway")

# Headers of aiohttp's own HTTP errors worth keeping on the JSON answer (e.g. 405's Allow,
# and the v2 management rate limits' headers set on it).
KEPT_HEADERS = ("Allow", "Retry-After", "RateLimit", "RateLimit-Policy")
# Redis at its maxmemory refuses every write (noeviction; the chart sets maxmemory from its
# memory limit): 503, retryable. A refused write changed nothing: a store script is refused
# at its first write, so a job is either accepted whole or not. Reads, cancel and purge
# keep working (their scripts free memory before they add any), so an operator can drain.
STORE_FULL = (
    "store full: Redis reached its maxmemory and refuses writes; nothing was changed, "
    "retry later (operators: docs/operations.md, Redis memory)"
)
STORE_FULL_RETRY_S = "5"


# How an app's errors look: `json_error` (`{"error": ...}`, the job API's and /v1's) unless
# the app sets another (v2 management's RFC 9457 problems, `manage.v2.problems`).
ErrorRenderer = Callable[..., web.Response]


def json_error(
    status: int,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    errors: Sequence[str] = (),
    reason: str | None = None,
) -> web.Response:
    """`{"error": message}` (`errors`, a validation failure's parts, are in the message),
    with `"reason"` when the error names one (the LB affinity errors)."""
    body = {"error": message} if reason is None else {"error": message, "reason": reason}
    return json_response(body, status=status, headers=headers)


ERROR_RENDERER: web.AppKey[ErrorRenderer] = web.AppKey("error_renderer")


def render_error(request: web.Request) -> ErrorRenderer:
    """The error format of the app that serves `request`."""
    return request.app.get(ERROR_RENDERER, json_error)


def queue_full(err: QueueFull) -> str:
    """The 429 message of a full queue quota."""
    if err.what == "jobs":
        amount, setting = f"{err.limit} jobs", "LOCKGATE_MAX_QUEUED_JOBS"
    else:
        amount, setting = f"{err.limit // (1024 * 1024)} MB of input", "LOCKGATE_MAX_QUEUED_BYTES"
    return (
        f"queue full: this endpoint already has {amount} queued, its quota ({setting}); "
        "retry once workers have taken some, or purge the queue"
    )


def log_refusal(request: web.Request, status: int, reason: str) -> None:
    """One line per refused request: who (key name), what, and why."""
    fields = {
        "status": status,
        "reason": clip(reason),
        "key": request.get(CALLER),
        "method": request.method,
        "path": clip(request.path),
        "endpoint": clip(request.match_info.get("endpoint") or "") or None,
    }
    log.info(
        "refused %s %s with %d for key %s: %s",
        request.method, fields["path"], status, fields["key"] or "-", fields["reason"],
        extra={"fields": fields},
    )  # fmt: skip


def client_closed(request: web.Request) -> web.Response:
    """The answer to a request whose client hung up: never sent, counted as 499."""
    log.info("client closed the connection during %s %s", request.method, clip(request.path))
    return web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every error as JSON; never leak a stack trace or internal detail."""
    try:
        return await handler(request)
    except ApiError as err:
        log_refusal(request, err.status, err.message)
        extra = {} if err.reason is None else {"reason": err.reason}
        response = render_error(request)(
            err.status, err.message, headers=err.headers, errors=err.errors, **extra
        )
        if isinstance(err, PayloadTooLarge | RequestTimeout | Unavailable):
            response.force_close()  # the rest of the body is not worth reading
        return response
    except web.HTTPException as err:
        if err.status < 400:
            raise
        log_refusal(request, err.status, err.reason)
        headers = {h: err.headers[h] for h in KEPT_HEADERS if h in err.headers}
        return render_error(request)(err.status, clip(err.reason.lower()), headers=headers)
    except ConnectionResetError:  # the client hung up mid-request: not our error
        return client_closed(request)
    except QueueFull as err:
        reason = queue_full(err)
        log_refusal(request, 429, reason)
        return render_error(request)(429, reason, headers={"Retry-After": "5"})
    except RedisOutOfMemoryError as err:
        log.error("store full on %s %s: %s", request.method, clip(request.path), err)
        headers = {"Retry-After": STORE_FULL_RETRY_S}
        return render_error(request)(503, STORE_FULL, headers=headers)
    except UNAVAILABLE as err:
        log.warning("store unavailable on %s %s: %s", request.method, clip(request.path), err)
        return render_error(request)(
            503, "job store unavailable, retry shortly", headers={"Retry-After": "1"}
        )
    except Exception:
        log.exception("internal error on %s %s", request.method, clip(request.path))
        return render_error(request)(500, "internal error")
