"""RunPod's Batch Jobs API on the job API host (issue 49; docs/batch-jobs.md): a batch of
requests uploaded as a DRAFT, finalized, run on the endpoint's batch pool
(`gateway.batch_runner` queues them there) and read back a page at a time.

    POST   /v2/{id}/batch                        create (a JSON array of {input}); ?webhook=
    GET    /v2/{id}/batch                        the list, newest first (?offset&limit)
    GET    /v2/{id}/batch/{bid}                  the summary
    PUT    /v2/{id}/batch/{bid}                  {"name": …}: the display name
    POST   /v2/{id}/batch/{bid}/requests         {"requests": [{input}, …]} (DRAFT only)
    GET    /v2/{id}/batch/{bid}/requests         the requests and results (?offset&limit)
    DELETE /v2/{id}/batch/{bid}/requests/{rid}   remove one request (DRAFT only)
    POST   /v2/{id}/batch/{bid}/finalize         DRAFT → FINALIZED: it runs
    POST   /v2/{id}/batch/{bid}/cancel           queued requests cancelled, running ones end

A `jobs:read` key reads; writing needs `jobs`. Rate limits: a read counts as `/status`,
a write as `/run` (per call, however many requests it carries).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from lockgate.gateway import jsonbody
from lockgate.gateway.auth import JOBS, JOBS_READ
from lockgate.gateway.endpoints import require_type
from lockgate.gateway.errors import (
    ApiError,
    BadRequest,
    NotFound,
    PayloadTooLarge,
    TooManyRequests,
)
from lockgate.gateway.http import int_param, iso_ms, json_response, read_body
from lockgate.gateway.ssrf import private_destination
from lockgate.gateway.state import Gateway, gateway_of
from lockgate.models import describe_validation_error
from lockgate.models.batch import (
    BATCH_ID_PREFIX,
    DRAFT_REQUEST,
    BatchLimits,
    BatchRename,
    BatchStatus,
    batch_pool_id,
    summary,
)
from lockgate.models.batch_api import BatchItem
from lockgate.models.endpoint import EndpointType
from lockgate.models.jobs import JobStatus, webhook_problem
from lockgate.models.limits import Operation
from lockgate.store import JobNotFound
from lockgate.store.batches import Refused
from lockgate.store.keys import JOB_ID_RE, B, new_job_id

MB = 1024 * 1024
# A 429 past the active or queued limit: when to look again (a batch's requests end at the
# pace of its pool; seconds).
LIMIT_RETRY_S = "10"
CALL_LIMIT = 10 * MB  # RunPod's: ≤ 10 MiB of body per call (create or add)
SMALL_LIMIT = 64 * 1024  # a rename's body
PAGE_DEFAULT, PAGE_MAX = 50, 500
OFFSET_MAX = 10_000_000
BATCH_ID_RE = re.compile(r"^batch_[A-Za-z0-9_-]{1,64}$")
# The result a request gets when its batch is cancelled before it was queued.
CANCELLED_BEFORE_QUEUED = orjson.dumps({"status": JobStatus.CANCELLED, "error": "batch cancelled"})

routes = web.RouteTableDef()
Handler = Callable[[web.Request, Gateway, str], Awaitable[web.Response]]


def limits_of(gw: Gateway) -> BatchLimits:
    """The batch limits of the gateway's settings."""
    s = gw.settings
    return BatchLimits(
        active=s.batch_max_active,
        requests=s.batch_max_requests,
        queued=s.batch_max_queued,
        bytes=s.batch_max_bytes,
    )


def batch_route(method: str, path: str, *, write: bool) -> Callable[[Handler], Handler]:
    """Register a batch route under `/v2/{endpoint}/batch`: 401 (key, `jobs` to write,
    `jobs:read` to read), 404 (endpoint), 400 (a load-balancing one), 429 (limits); with
    and without a trailing slash."""
    full = f"/v2/{{endpoint}}/batch{path}"
    op = Operation.RUN if write else Operation.STATUS

    def register(handler: Handler) -> Handler:
        async def route(request: web.Request) -> web.Response:
            gw = gateway_of(request)
            endpoint_id = request.match_info["endpoint"]
            principal = await gw.auth.require(request, JOBS if write else JOBS_READ, endpoint_id)
            entry = await gw.endpoints.get(endpoint_id)
            require_type(entry, endpoint_id, EndpointType.QUEUE, "/batch")
            async with gw.limiter.hold(endpoint_id, op, principal.name):
                return await handler(request, gw, endpoint_id)

        route.__name__ = route.__qualname__ = f"batch_{handler.__name__}"
        routes.route(method, full)(route)
        routes.route(method, full + "/")(route)
        return handler

    return register


def _batch_id(request: web.Request) -> str:
    batch_id = request.match_info["batch"]
    if not BATCH_ID_RE.fullmatch(batch_id):
        raise NotFound(f"batch {batch_id!r} not found")
    return batch_id


def _refusal(err: Refused, batch_id: str, limits: BatchLimits) -> ApiError:
    """The client's answer to a refused change."""
    match err.why:
        case "gone":
            return NotFound(f"batch {batch_id!r} not found")
        case "state":
            return BadRequest(f"batch {batch_id!r} is {err.detail}; this needs a DRAFT batch")
        case "missing":
            return NotFound(f"request not found in batch {batch_id!r}")
        case "active":
            return TooManyRequests(
                f"the endpoint has {limits.active} batches not yet done (DRAFT or running), "
                "its limit (LOCKGATE_BATCH_MAX_ACTIVE): finalize and wait for one, or "
                "cancel one",
                headers={"Retry-After": LIMIT_RETRY_S},
            )
        case "requests":
            return BadRequest(
                f"a batch holds at most {limits.requests} requests (LOCKGATE_BATCH_MAX_REQUESTS)"
            )
        case "bytes":
            return PayloadTooLarge(
                f"a batch holds at most {limits.bytes / MB:g} MiB ({limits.bytes} bytes) of "
                "request JSON (LOCKGATE_BATCH_MAX_BYTES)"
            )
        case "queued":
            return TooManyRequests(
                f"the endpoint's finalized batches would hold more than {limits.queued} "
                "requests not yet ended, its limit (LOCKGATE_BATCH_MAX_QUEUED): finalize "
                "once some have ended",
                headers={"Retry-After": LIMIT_RETRY_S},
            )
    return BadRequest(f"batch {batch_id!r}: {err.why} {err.detail}")


def _requests_of(items: Any, where: str) -> list[tuple[str, bytes]]:
    """Validate a list of `{input}` requests (the shape of /run, without a webhook of its
    own); each with a new request id and its JSON as stored."""
    if not isinstance(items, list):
        raise BadRequest(f'{where} must be a JSON array of {{"input": {{…}}}} objects')
    out = []
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(f"{where}[{n}] must be an object with an 'input' object")
        if item.get("webhook") is not None:
            raise BadRequest(
                f"{where}[{n}].webhook: a batch's requests have no webhook of their own; "
                "the batch's is given at create (POST …/batch?webhook=…)"
            )
        try:
            req = BatchItem.model_validate(item, strict=True)
        except ValidationError as err:
            raise BadRequest(f"{where}[{n}]: {describe_validation_error(err)}") from err
        kept: dict[str, Any] = {"input": req.input}
        if req.policy.model_fields_set:
            kept["policy"] = req.policy.model_dump(include=req.policy.model_fields_set)
        if req.s3Config is not None:
            kept["s3Config"] = req.s3Config.model_dump()
        out.append((new_job_id(), jsonbody.dumps(kept, f"{where}[{n}]")))
    return out


async def _webhook(request: web.Request, gw: Gateway) -> str | None:
    url = request.query.get("webhook")
    if url is None:
        return None
    if problem := webhook_problem(url):
        raise BadRequest(f"query parameter 'webhook' {problem}")
    if not gw.settings.webhook_allow_private and (where := await private_destination(url)):
        raise BadRequest(
            f"webhook: {url!r} reaches a private address ({where}); "
            "set LOCKGATE_WEBHOOK_ALLOW_PRIVATE=true to allow it"
        )
    return url


@batch_route("POST", "", write=True)
async def create(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    webhook = await _webhook(request, gw)
    requests = _requests_of(jsonbody.parse(await read_body(request, CALL_LIMIT)), "body")
    limits = limits_of(gw)
    batch_id = BATCH_ID_PREFIX + secrets.token_urlsafe(16)
    try:
        await gw.batches.create(endpoint_id, batch_id, gw.store.clock(), requests, webhook, limits)
    except Refused as err:
        raise _refusal(err, batch_id, limits) from err
    return json_response({"id": batch_id, "status": BatchStatus.DRAFT})


@batch_route("GET", "", write=False)
async def listing(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    offset = int_param(request, "offset", default=0, lo=0, hi=OFFSET_MAX)
    limit = int_param(request, "limit", default=PAGE_DEFAULT, lo=1, hi=PAGE_MAX)
    rows, total = await gw.batches.page(endpoint_id, offset, limit)
    return json_response(
        {"batches": [summary(b, endpoint_id, fields) for b, fields in rows], "total": total,
         "offset": offset, "limit": limit, "hasMore": offset + len(rows) < total}
    )  # fmt: skip


async def _fields(gw: Gateway, endpoint_id: str, batch_id: str) -> dict[str, str]:
    fields = await gw.batches.get(endpoint_id, batch_id)
    if fields is None:
        raise NotFound(f"batch {batch_id!r} not found")
    return fields


@batch_route("GET", "/{batch}", write=False)
async def get(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    return json_response(summary(batch_id, endpoint_id, await _fields(gw, endpoint_id, batch_id)))


@batch_route("PUT", "/{batch}", write=True)
async def rename(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    body = jsonbody.parse(await read_body(request, SMALL_LIMIT))
    try:
        name = BatchRename.model_validate(body, strict=True).name
    except ValidationError as err:
        raise BadRequest(f"body: {describe_validation_error(err)}") from err
    if not await gw.batches.rename(endpoint_id, batch_id, name):
        raise NotFound(f"batch {batch_id!r} not found")
    return json_response(summary(batch_id, endpoint_id, await _fields(gw, endpoint_id, batch_id)))


@batch_route("POST", "/{batch}/requests", write=True)
async def add(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    body = jsonbody.parse(await read_body(request, CALL_LIMIT))
    if not isinstance(body, dict) or set(body) != {"requests"}:
        raise BadRequest('body must be {"requests": [{"input": {…}}, …]}')
    requests = _requests_of(body["requests"], "requests")
    limits = limits_of(gw)
    try:
        total = await gw.batches.add(endpoint_id, batch_id, requests, limits)
    except Refused as err:
        raise _refusal(err, batch_id, limits) from err
    return json_response(
        {"id": batch_id, "status": BatchStatus.DRAFT, "requestTotal": total,
         "requestIds": [rid for rid, _ in requests]}
    )  # fmt: skip


@batch_route("DELETE", "/{batch}/requests/{request}", write=True)
async def delete_request(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    request_id = request.match_info["request"]
    if not JOB_ID_RE.fullmatch(request_id):
        raise NotFound(f"request {request_id!r} not found in batch {batch_id!r}")
    try:
        await gw.batches.delete_request(endpoint_id, batch_id, request_id)
    except Refused as err:
        raise _refusal(err, batch_id, limits_of(gw)) from err
    return json_response(summary(batch_id, endpoint_id, await _fields(gw, endpoint_id, batch_id)))


@batch_route("POST", "/{batch}/finalize", write=True)
async def finalize(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    limits = limits_of(gw)
    try:
        total = await gw.batches.finalize(endpoint_id, batch_id, gw.store.clock(), limits.queued)
    except Refused as err:
        raise _refusal(err, batch_id, limits) from err
    if total == 0:  # nothing to run: done at once (its webhook is sent by the runner)
        await _conclude(gw, endpoint_id, batch_id, BatchStatus.FINALIZED)
    return json_response(summary(batch_id, endpoint_id, await _fields(gw, endpoint_id, batch_id)))


@batch_route("POST", "/{batch}/cancel", write=True)
async def cancel(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    try:
        how = await gw.batches.cancel(endpoint_id, batch_id, CANCELLED_BEFORE_QUEUED)
    except Refused as err:
        if err.why == "state":
            raise BadRequest(
                f"batch {batch_id!r} is {err.detail} and done; only a DRAFT or a running "
                "FINALIZED batch can be cancelled"
            ) from err
        raise _refusal(err, batch_id, limits_of(gw)) from err
    if how == "draft":
        await _conclude(gw, endpoint_id, batch_id, BatchStatus.CANCELLED)
    return json_response(summary(batch_id, endpoint_id, await _fields(gw, endpoint_id, batch_id)))


async def _conclude(gw: Gateway, endpoint_id: str, batch_id: str, status: BatchStatus) -> None:
    retention_ms = int(gw.settings.batch_retention_s * 1000)
    now = gw.store.clock()
    await gw.batches.conclude(endpoint_id, batch_id, status, now, retention_ms)


@batch_route("GET", "/{batch}/requests", write=False)
async def results(request: web.Request, gw: Gateway, endpoint_id: str) -> web.Response:
    batch_id = _batch_id(request)
    offset = int_param(request, "offset", default=0, lo=0, hi=OFFSET_MAX)
    limit = int_param(request, "limit", default=PAGE_DEFAULT, lo=1, hi=PAGE_MAX)
    fields = await _fields(gw, endpoint_id, batch_id)
    ids, total = await gw.batches.request_ids(endpoint_id, batch_id, offset, limit)
    done, waiting = await gw.batches.results(endpoint_id, batch_id, ids)
    draft = fields.get(B.STATUS) == BatchStatus.DRAFT
    pool = batch_pool_id(endpoint_id)
    rows = await asyncio.gather(
        *(
            _child(gw, pool, rid, raw, draft=draft, waiting=wait)
            for rid, raw, wait in zip(ids, done, waiting, strict=True)
        )
    )
    return json_response(
        {"requests": rows, "total": total, "offset": offset, "limit": limit,
         "hasMore": offset + len(rows) < total, "poolEndpointId": pool}
    )  # fmt: skip


def child_view(request_id: str, result: dict[str, Any]) -> dict[str, Any]:
    """A child request as RunPod shows it: id, status, output or error, and its start
    and end as ISO strings (null when none)."""
    row: dict[str, Any] = {"id": request_id, "status": result["status"]}
    if "output" in result:
        row["output"] = result["output"]
    if result.get("error") is not None:
        row["error"] = result["error"]
    started, completed = result.get("startedAt"), result.get("completedAt")
    row["startedAt"] = iso_ms(started) if started else None
    row["completedAt"] = iso_ms(completed) if completed else None
    return row


async def _child(
    gw: Gateway, pool: str, request_id: str, raw: bytes | None, *, draft: bool, waiting: bool
) -> dict[str, Any]:
    """One request: its recorded result, else how its job stands now."""
    if raw is not None:
        return child_view(request_id, orjson.loads(raw))
    if draft:
        return child_view(request_id, {"status": DRAFT_REQUEST})
    if waiting:
        return child_view(request_id, {"status": JobStatus.IN_QUEUE})
    try:
        record = await gw.store.get(pool, request_id)
    except JobNotFound:
        return child_view(request_id, {"status": JobStatus.IN_QUEUE})
    return child_view(request_id, {"status": record.status, "startedAt": record.started})
