"""The client job API of the spec: run, runsync, status, stream, cancel, retry, purge, health,
requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from lockgate.gateway import jsonbody, listing
from lockgate.gateway.auth import ADMIN, JOBS, JOBS_READ, Principal
from lockgate.gateway.endpoints import require_type
from lockgate.gateway.errors import BadRequest, Forbidden, NotFound
from lockgate.gateway.http import (
    flag_param,
    int_param,
    job_id_param,
    json_response,
    read_body,
)
from lockgate.gateway.idempotency import REPLAYED, SubmitUncertain, key_digest, store_unavailable
from lockgate.gateway.ssrf import private_destination
from lockgate.gateway.state import Gateway, gateway_of
from lockgate.gateway.views import job_body, job_details, stream_body, unhealthy_list
from lockgate.models import FINAL_STATES, JobRequest, describe_validation_error
from lockgate.models.endpoint import EndpointType
from lockgate.models.jobs import MAX_DURATION_MS, TTL_MIN_MS
from lockgate.models.limits import Operation
from lockgate.models.registry_entry import RegistryEntry
from lockgate.models.waiting import why_waiting
from lockgate.store import UNAVAILABLE, IneligibleState, JobNotFound, JobRecord, NewJob, Snapshot
from lockgate.store.keys import new_job_id

MB = 1024 * 1024
RUN_LIMIT = 10 * MB
RUNSYNC_LIMIT = 20 * MB
WAIT_DEFAULT_MS, WAIT_MIN_MS, WAIT_MAX_MS = 90_000, 1_000, 300_000

routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class Call:
    """An admitted client call: the gateway and the endpoint it names."""

    gw: Gateway
    endpoint_id: str
    entry: RegistryEntry
    principal: Principal


Handler = Callable[[web.Request, Call], Awaitable[web.Response]]
# Operations that only read: a `jobs:read` key may call them.
READS = frozenset({Operation.STATUS, Operation.STREAM, Operation.HEALTH, Operation.REQUESTS})
# Operations that submit a job: a store failure says whether the job may exist.
SUBMITS = frozenset({Operation.RUN, Operation.RUNSYNC})
# Operations on one job: their path ends in `/{job}`.
JOB_ROUTES = frozenset({Operation.STATUS, Operation.STREAM, Operation.CANCEL, Operation.RETRY})


def client_route(method: str, op: Operation) -> Callable[[Handler], Handler]:
    """Register a client route: 401 (key), then 404 (endpoint), then 429 (limits), then the
    handler, which holds an in-flight slot of its operation while it runs. The path answers
    with a trailing slash too (`jobApiUrl` ends in one, and clients join paths to it).
    A read waits for its turn first (`read_concurrency`), unless it is a long-poll."""
    path = f"/v2/{{endpoint}}/{op}" + ("/{job}" if op in JOB_ROUTES else "")
    scope = JOBS_READ if op in READS else JOBS

    def register(handler: Handler) -> Handler:
        async def route(request: web.Request) -> web.Response:
            gw = gateway_of(request)
            if op in READS and request.query.get("wait", "0") in ("", "0"):
                async with gw.reads:
                    return await admitted(request, gw)
            return await admitted(request, gw)

        async def admitted(request: web.Request, gw: Gateway) -> web.Response:
            endpoint_id = request.match_info["endpoint"]
            try:
                principal = await gw.auth.require(request, scope, endpoint_id)
                call = Call(gw, endpoint_id, await gw.endpoints.get(endpoint_id), principal)
                if op != Operation.HEALTH:  # /health answers for both types
                    require_type(call.entry, endpoint_id, EndpointType.QUEUE, f"/{op}")
                async with gw.limiter.hold(endpoint_id, op, principal.name):
                    return await handler(request, call)
            except SubmitUncertain as err:
                return store_unavailable(request, err.job_id)
            except UNAVAILABLE:
                if op not in SUBMITS:
                    raise
                return store_unavailable(request, None)  # failed before the submit

        route.__name__ = route.__qualname__ = handler.__name__
        routes.route(method, path)(route)
        routes.route(method, path + "/")(route)
        return handler

    return register


async def _new_job(
    request: web.Request, call: Call, limit: int, job_id: str, *, sync: bool, idempotency_key: str
) -> NewJob:
    """Read and validate a job request body into a job ready to queue (its usage counts
    for the caller's key)."""
    body = jsonbody.parse(await read_body(request, limit))
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object with an 'input' object")
    try:
        req = JobRequest.model_validate(body, strict=True)  # a boolean is not 0, an int not "5"
    except ValidationError as err:
        raise BadRequest(describe_validation_error(err)) from err
    private = not gateway_of(request).settings.webhook_allow_private
    if req.webhook and private and (where := await private_destination(req.webhook)):
        raise BadRequest(
            f"webhook: {req.webhook!r} reaches a private address ({where}); "
            "set LOCKGATE_WEBHOOK_ALLOW_PRIVATE=true to allow it"
        )
    policy = req.policy
    return NewJob(
        id=job_id,
        input=jsonbody.dumps(req.input, "input"),
        ttl_ms=policy.ttl,
        low_priority=policy.lowPriority,
        sync=sync,
        execution_timeout_ms=policy.executionTimeout,
        webhook=req.webhook,
        s3_config=orjson.dumps(req.s3Config.model_dump()) if req.s3Config else None,
        idempotency_key=idempotency_key,
        api_key=call.principal.key_id,
    )


async def _submit(call: Call, job: NewJob) -> tuple[str, str, dict[str, str]]:
    """Queue `job`: (id, status, headers) of it, or of the job first submitted with its
    idempotency key. SubmitUncertain when the store fails meanwhile."""
    try:
        job_id, status = await call.gw.submit(call.endpoint_id, job)
    except UNAVAILABLE as err:
        raise SubmitUncertain(job.id) from err
    return job_id, status, ({REPLAYED: "true"} if job_id != job.id else {})


@client_route("POST", Operation.RUN)
async def run(request: web.Request, call: Call) -> web.Response:
    key = key_digest(request, call.principal.name, Operation.RUN)
    job = await _new_job(request, call, RUN_LIMIT, new_job_id(), sync=False, idempotency_key=key)
    job_id, status, headers = await _submit(call, job)
    return json_response(_waiting({"id": job_id, "status": status}, call), headers=headers)


def _waiting(body: dict[str, Any], call: Call) -> dict[str, Any]:
    """A queued job's answer; while the endpoint is in a crash loop (its registry entry,
    read anyway, says so) with a `message` saying why it waits (beyond RunPod's shape)."""
    loop = call.entry.crashLoop
    if loop is not None and body["status"] == "IN_QUEUE":
        body["message"] = loop.job_message(call.endpoint_id)
    return body


@client_route("POST", Operation.RUNSYNC)
async def runsync(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    wait_ms = int_param(request, "wait", default=WAIT_DEFAULT_MS, lo=WAIT_MIN_MS, hi=WAIT_MAX_MS)
    key = key_digest(request, call.principal.name, Operation.RUNSYNC)
    job_id = f"sync-{new_job_id()}"
    job = await _new_job(request, call, RUNSYNC_LIMIT, job_id, sync=True, idempotency_key=key)
    submitted = asyncio.Event()
    # Wait from before the submit: the job may finish before `submit` even returns.
    done = asyncio.ensure_future(_wait_final(gw, endpoint_id, job_id, wait_ms / 1000, submitted))
    try:
        job_id, status, headers = await _submit(call, job)
        submitted.set()
        if job_id != job.id:  # the job first submitted with this idempotency key
            done.cancel()
            done = asyncio.ensure_future(
                _wait_final(gw, endpoint_id, job_id, wait_ms / 1000, submitted, status)
            )
        record = await done
    except JobNotFound as err:
        raise NotFound(_gone(job_id)) from err
    except UNAVAILABLE as err:  # after the submit: the job exists
        raise SubmitUncertain(job_id) from err
    finally:
        done.cancel()
    if record.status in FINAL_STATES:
        return json_response(job_body(record, gw.store.clock()), headers=headers)
    return json_response(_waiting({"id": job_id, "status": record.status}, call), headers=headers)


def _gone(job_id: str) -> str:
    return (
        f"job {job_id!r} not found: it was removed while /runsync waited for it "
        "(its ttl passed, or the queue was purged)"
    )


async def _wait_final(
    gw: Gateway,
    endpoint_id: str,
    job_id: str,
    wait_s: float,
    submitted: asyncio.Event,
    status: str | None = None,
) -> JobRecord:
    """Sleep until the job is final or `wait_s` passes, re-checking Redis now and then:
    its final record (most often carried by its `d:` event, so not read again), else its
    record as it is once the wait passed or the gateway drains (it wakes every waiter).
    JobNotFound once the job is gone after `submitted` (ttl, purge). `status`: the job's
    state already known (no wait when final)."""
    if status in FINAL_STATES:
        return await gw.store.get(endpoint_id, job_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while (left := deadline - loop.time()) > 0:
        if gw.draining and submitted.is_set():
            ended: JobRecord | bool = True  # the process is going: wait no more
        else:
            step_s = min(left, gw.settings.poll_fallback_s)
            ended = await gw.notifier.wait_done(endpoint_id, job_id, step_s)
        carried = ended if isinstance(ended, JobRecord) else None
        try:
            record = await gw.store.final_record(endpoint_id, job_id, carried)
        except JobNotFound:
            if submitted.is_set():
                raise
            continue  # not submitted yet: wait on
        if record.status in FINAL_STATES or gw.draining:
            return record  # final; or the process is going: answered as it is
    return await gw.store.get(endpoint_id, job_id)


@client_route("GET", Operation.STATUS)
async def status(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    job_id = job_id_param(request)
    ttl = request.query.get("ttl")
    if ttl is not None and not call.principal.allows(JOBS, endpoint_id):
        raise Forbidden(
            f"API key {call.principal.name!r} may read jobs but not set their ttl: "
            f"`?ttl=` changes the job (it can end its life), which needs the {JOBS!r} scope"
        )
    wait_ms = int_param(request, "wait", default=0, lo=0, hi=WAIT_MAX_MS)
    with_input = flag_param(request, "input")
    with_place = flag_param(request, "position")  # read first: a bad value is a 400 anyway
    if with_input and not may_read_input(call.principal, endpoint_id):
        raise Forbidden(
            f"API key {call.principal.name!r} may not read job inputs (they may hold "
            f"secrets): `?input=1` needs the {ADMIN!r} scope or the {JOBS!r} scope"
        )
    try:
        if ttl is not None:
            ttl_ms = int_param(request, "ttl", default=None, lo=TTL_MIN_MS, hi=MAX_DURATION_MS)
            await gw.store.set_ttl(endpoint_id, job_id, ttl_ms)
        if wait_ms:  # beyond the spec: held until the job is final, no busy polling
            record = await _held_status(gw, endpoint_id, job_id, wait_ms / 1000)
        else:
            record = await gw.store.get(endpoint_id, job_id)
        body = job_body(record, gw.store.clock())
        if with_input:
            raw = await gw.store.job_input(endpoint_id, job_id)
            if raw is not None:
                body["input"] = orjson.Fragment(raw)
        if flag_param(request, "details"):  # lockgate's own: the console's request inspector
            body.update(job_details(await gw.store.job_extras(endpoint_id, job_id)))
        if with_place and record.status == "IN_QUEUE":
            body.update(await _queue_place(call, job_id))
    except JobNotFound as err:
        raise NotFound(f"job {job_id!r} not found") from err
    return json_response(body)


def may_read_input(principal: Principal, endpoint_id: str) -> bool:
    """Inputs may hold secrets: an admin key, or a key that may submit this endpoint's jobs
    (`jobs`), reads them; a `jobs:read` key reads states and outputs only."""
    return ADMIN in principal.scopes or principal.allows(JOBS, endpoint_id)


async def _held_status(gw: Gateway, endpoint_id: str, job_id: str, wait_s: float) -> JobRecord:
    """`/status?wait=`: the job's record once it is final, or as it is when `wait_s` passed.
    The job is marked watched (its end publishes an event, as a /runsync job's does),
    with the waiter listening from before the mark: no end falls between."""
    seen = asyncio.Event()
    held = asyncio.ensure_future(_wait_final(gw, endpoint_id, job_id, wait_s, seen))
    try:
        record = await gw.store.watch(endpoint_id, job_id)
        seen.set()
        if record.status in FINAL_STATES:
            return record
        return await held
    finally:
        held.cancel()


@client_route("GET", Operation.STREAM)
async def stream(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    job_id = job_id_param(request)
    try:
        state, chunks = await gw.store.read_stream(endpoint_id, job_id)
    except JobNotFound as err:
        raise NotFound(f"job {job_id!r} not found") from err
    return json_response(stream_body(job_id, state, chunks))


@client_route("POST", Operation.CANCEL)
async def cancel(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    job_id = job_id_param(request)
    try:
        state = await gw.store.cancel(endpoint_id, job_id)
    except JobNotFound as err:
        raise NotFound(f"job {job_id!r} not found") from err
    except IneligibleState as err:
        raise BadRequest(
            f"job {job_id!r} is {err.state}; only IN_QUEUE or IN_PROGRESS jobs can be cancelled"
        ) from err
    return json_response({"id": job_id, "status": state})


@client_route("POST", Operation.RETRY)
async def retry(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    job_id = job_id_param(request)
    try:
        state = await gw.store.retry(endpoint_id, job_id)
    except JobNotFound as err:
        raise NotFound(f"job {job_id!r} not found (or its results expired)") from err
    except IneligibleState as err:
        raise BadRequest(
            f"job {job_id!r} is {err.state}; only FAILED or TIMED_OUT jobs can be retried"
        ) from err
    return json_response({"id": job_id, "status": state})


@client_route("POST", Operation.PURGE_QUEUE)
async def purge_queue(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    removed = await gw.store.purge(endpoint_id)
    return json_response({"removed": removed, "status": "completed"})


@client_route("GET", Operation.REQUESTS)
async def requests(request: web.Request, call: Call) -> web.Response:
    """The endpoint's recent jobs, newest first, a page at a time (docs/job-api.md)."""
    gw = call.gw
    limit = int_param(request, "limit", default=listing.LIMIT_DEFAULT, lo=1, hi=listing.LIMIT_MAX)
    query = listing.parse_query(request.query, limit)
    records, after = await gw.store.list_jobs(call.endpoint_id, query)
    return json_response(listing.page(records, after, gw.store.clock()))


@client_route("GET", Operation.HEALTH)
async def health(request: web.Request, call: Call) -> web.Response:
    gw, endpoint_id = call.gw, call.endpoint_id
    snap, marked, present = await asyncio.gather(
        gw.store.snapshot(endpoint_id),
        gw.store.unhealthy_workers(endpoint_id),
        gw.store.unhealthy_present(endpoint_id),
    )
    extra: dict[str, Any] = {"unhealthyWorkers": unhealthy_list(marked, present)} if marked else {}
    if call.entry.type == EndpointType.LB:
        extra |= await lb_health(gw, endpoint_id, snap.requests_held, snap.requests_in_flight)
    if call.entry.crashLoop is not None:  # beyond the spec: why no worker starts
        extra["crashLoop"] = call.entry.crashLoop.model_dump(mode="json")
    if call.entry.type != EndpointType.LB:  # beyond the spec: why queued jobs wait
        waiting = _why_waiting(call, snap)
        if waiting is not None:
            extra["waiting"] = waiting
    return json_response(
        {
            **extra,
            "jobs": {
                "completed": snap.completed,
                "failed": snap.failed,
                "inProgress": snap.in_progress,
                "inQueue": snap.in_queue + snap.in_queue_low,
                "retried": snap.retried,
            },
            "workers": {
                "idle": snap.workers_idle,
                "running": snap.workers_running,
                "initializing": snap.workers_initializing,
                "throttled": snap.workers_throttled,
                "unhealthy": snap.workers_unhealthy,
            },
        }
    )


def _why_waiting(call: Call, snap: Snapshot, position: int | None = None) -> str | None:
    """`/health`'s `waiting` (models/waiting.py), or one job's with its `position`."""
    return why_waiting(
        queued=snap.in_queue + snap.in_queue_low,
        idle=snap.workers_idle,
        running=snap.workers_running,
        starting=snap.workers_initializing,
        workers_max=call.entry.workersMax,
        crash_loop=call.entry.crashLoop,
        position=position,
    )


async def _queue_place(call: Call, job_id: str) -> dict[str, Any]:
    """`/status?position=1` of a queued job (beyond the spec; asked by a person: the
    console's runner, `lockgate jobs run --wait`, never the SDK's polls): its `position`
    in the queue (1: taken next) and `waiting`, why it waits, with that position."""
    gw, endpoint_id = call.gw, call.endpoint_id
    position, snap = await asyncio.gather(
        gw.store.queue_position(endpoint_id, job_id), gw.store.snapshot(endpoint_id)
    )
    if position is None:  # taken (or gone) since its record was read
        return {}
    waiting = _why_waiting(call, snap, position)
    return {"position": position} | ({"waiting": waiting} if waiting else {})


async def lb_health(gw: Gateway, endpoint_id: str, held: int, in_flight: int) -> dict[str, Any]:
    """A load-balancing endpoint's requests, and the status code each unhealthy worker's
    health check last answered (0: none) (beyond the spec, as the worker states are)."""
    polled = await gw.lb.store.health(endpoint_id)
    bad = {w: h.code for w, h in sorted(polled.items()) if h.state == "unhealthy"}
    return {"requests": {"held": held, "inFlight": in_flight}, "unhealthyCodes": bad}
