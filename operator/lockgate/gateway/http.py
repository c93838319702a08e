"""Small HTTP helpers: orjson responses, bounded body reads, query parameters."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from lockgate.gateway.errors import BadRequest, NotFound, PayloadTooLarge, RequestTimeout
from lockgate.gateway.state import gateway_of
from lockgate.store.keys import JOB_ID_RE

JSON = "application/json"


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON response; `orjson.Fragment` values are embedded without re-parsing."""
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON, headers=headers)


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds: `2026-11-23T00:50:00.123Z`."""
    moment = datetime.fromtimestamp(ms // 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; 400 when it is not one."""
    try:
        body = await request.json()
    except ValueError as err:
        raise BadRequest("body: expected a JSON object") from err
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    return body


def no_content() -> web.Response:
    return web.Response(status=204)


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, refused with 413 when over `limit` bytes (before reading it whole
    when the client declares its length), with 503 when the gateway's body budget cannot
    hold it now, and with 408 when it does not arrive within the body timeout."""
    gw = gateway_of(request)
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(limit)
    if declared:
        gw.budget.take(request, declared)
        ready = request.content.read_nowait(declared)  # a small body came with the head
        if len(ready) == declared:
            return ready
    else:
        ready = b""
    body = bytearray(ready)
    try:
        async with asyncio.timeout(gw.settings.body_timeout_s):
            while chunk := await request.content.readany():
                body += chunk
                if len(body) > limit:
                    raise _too_large(limit)
                if declared is None:  # chunked: counted as it comes
                    gw.budget.take(request, len(chunk))
    except TimeoutError as err:
        raise RequestTimeout(
            f"request body not received within {gw.settings.body_timeout_s:g} s"
        ) from err
    return bytes(body)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds the {limit // (1024 * 1024)} MB limit")


def int_param(request: web.Request, name: str, *, default: int | None, lo: int, hi: int) -> int:
    """An integer query parameter within [lo, hi], or 400 naming it."""
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise BadRequest(f"query parameter {name!r} is required")
        return default
    try:
        value = int(raw)
    except ValueError as err:
        raise BadRequest(f"query parameter {name!r} must be an integer, got {raw!r}") from err
    if not lo <= value <= hi:
        raise BadRequest(f"query parameter {name!r} must be between {lo} and {hi}, got {value}")
    return value


FLAGS = {"1": True, "true": True, "0": False, "false": False}


def flag_param(request: web.Request, name: str) -> bool:
    """A yes/no query parameter (`1`/`true`, `0`/`false`; absent: no), or 400 naming it."""
    raw = request.query.get(name)
    if raw is None:
        return False
    if raw not in FLAGS:
        raise BadRequest(f"query parameter {name!r} must be 1 or 0 (true or false), got {raw!r}")
    return FLAGS[raw]


def job_id_param(request: web.Request) -> str:
    """The `{job}` path segment, or 404 when it cannot be a job id."""
    job_id = request.match_info["job"]
    if not JOB_ID_RE.fullmatch(job_id):
        raise NotFound(f"job {job_id!r} not found")
    return job_id
