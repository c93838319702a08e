"""The one error middleware: every failure becomes `{"error": ...}` with the right status."""

from __future__ import annotations

import logging

from aiohttp import web
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockgate.gateway.errors import ApiError, PayloadTooLarge
from lockgate.gateway.http import json_response

log = logging.getLogger("lockgate.gateway")


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Answer every error as JSON; never leak a stack trace or internal detail."""
    try:
        return await handler(request)
    except ApiError as err:
        response = json_response({"error": err.message}, status=err.status, headers=err.headers)
        if isinstance(err, PayloadTooLarge):
            response.force_close()  # the rest of the body is not worth reading
        return response
    except web.HTTPException as err:
        if err.status < 400:
            raise
        return json_response({"error": err.reason.lower()}, status=err.status)
    except (RedisConnectionError, RedisTimeoutError, ConnectionRefusedError) as err:
        log.warning("store unavailable on %s %s: %s", request.method, request.path, err)
        return json_response(
            {"error": "job store unavailable, retry shortly"},
            status=503,
            headers={"Retry-After": "1"},
        )
    except Exception:
        log.exception("internal error on %s %s", request.method, request.path)
        return json_response({"error": "internal error"}, status=500)
