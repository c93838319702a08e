"""The worker API, wire-compatible with the runpod SDK: take, done, stream, ping, stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import orjson
from aiohttp import web

from lockgate.gateway import jsonbody
from lockgate.gateway.auth import WORKERS
from lockgate.gateway.chunks import CHUNK_LIMIT, stream_chunks
from lockgate.gateway.client_api import RUNSYNC_LIMIT
from lockgate.gateway.endpoints import require_type
from lockgate.gateway.errors import BadRequest, Forbidden, PayloadTooLarge, clip
from lockgate.gateway.fitness_report import unhealthy_report
from lockgate.gateway.http import (
    int_param,
    job_id_param,
    json_response,
    no_content,
    read_body,
)
from lockgate.gateway.state import Gateway, gateway_of
from lockgate.gateway.warmup import warmup_input
from lockgate.models.endpoint import EndpointType, WorkerLostPolicy
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import STOPPING, WARMING, Finished, StreamFull, TakenJob
from lockgate.store.keys import JOB_ID_RE, WORKER_ID_RE
from lockgate.store.usage import rate_of
from lockgate.store.warmups import Step, is_warmup_job, warmup_done

BATCH_MAX = 100
PROGRESS_LIMIT = CHUNK_LIMIT  # bytes of one progress report's JSON, as one stream chunk
MAX_JOB_BYTES = RUNSYNC_LIMIT  # the largest input a job can have
# The body budget's bytes takes leave to clients' requests (`take_room`); the smallest
# budget (settings.MIN_BODY_BUDGET) still holds it beside the largest job
CLIENT_ROOM = 1024 * 1024
DONE_HOLD_MAX_MS = 5_000  # the longest `wait=` a job-done with `take=1` may hold its answer
NOT_TRIED = -2  # `_take_within_budget`'s count of jobs left when it found no room to take

routes = web.RouteTableDef()
log = logging.getLogger("lockgate.gateway")


async def _worker(request: web.Request) -> tuple[Gateway, str, str, RegistryEntry]:
    """Authenticate a worker call; resolve its endpoint and worker id."""
    gw = gateway_of(request)
    endpoint_id = request.match_info["endpoint"]
    principal = await gw.auth.require(request, WORKERS, endpoint_id)
    entry = await gw.endpoints.get(endpoint_id)
    require_type(entry, endpoint_id, EndpointType.QUEUE, "the worker API")
    worker_id = request.match_info["worker"]
    if not WORKER_ID_RE.fullmatch(worker_id):
        raise BadRequest(f"invalid worker id {worker_id!r}")
    if principal.worker is None:  # a shared worker key: the id keeps its first address
        await gw.binding.check(endpoint_id, worker_id, request.remote)
    elif principal.worker != worker_id:
        raise Forbidden(
            f"API key {principal.name!r} belongs to worker {principal.worker!r}; "
            "it may not act as another worker"
        )
    gw.activity.mark(endpoint_id)  # its sweeps and snapshots, until a sweep finds it quiet
    return gw, endpoint_id, worker_id, entry


def _job_payload(job: TakenJob, entry: RegistryEntry) -> dict[str, Any]:
    raw = job.input if job.warmup is None else warmup_input(entry, job)
    payload: dict[str, Any] = {"id": job.id, "input": orjson.Fragment(raw)}
    if job.s3_config is not None:
        payload["s3Config"] = orjson.Fragment(job.s3_config)
    return payload


def _listening(request: web.Request) -> bool:
    """The worker is still connected (a job handed to a closed connection would be lost)."""
    return request.transport is not None and not request.transport.is_closing()


async def _take(request: web.Request, count: int) -> list[dict[str, Any]]:
    """Long-poll: take jobs as soon as any is queued, or give up after `take_wait_s`.

    A submit wakes one waiter per replica, and only when the queue was empty: a taker that
    leaves jobs behind wakes the next waiter, and a waiter woken for nothing (its worker
    hung up, or was told to stop) passes its wake-up on, so the chain of wake-ups never
    breaks. A worker told to stop while it waits is answered empty at once."""
    gw, _, _, entry = await _worker(request)
    deadline = asyncio.get_running_loop().time() + gw.settings.take_wait_s
    # RunPod's protocol: `job_in_progress=0` says the worker holds no job (see JobStore.take).
    holds_none = request.query.get("job_in_progress") == "0"
    # lockgate's runtime: the token of its job-done's take that found the queue empty.
    idle = request.query.get("idle")
    jobs = await _poll(request, gw, entry, count, deadline, holds_none=holds_none, idle=idle)
    return [_job_payload(job, entry) for job in jobs]


async def _poll(
    request: web.Request,
    gw: Gateway,
    entry: RegistryEntry,
    count: int,
    deadline: float,
    *,
    holds_none: bool,
    idle: str | None,
) -> list[TakenJob]:
    """`_take`'s long-poll until `deadline`. With `idle` still current (nothing was queued
    since that token was read), the first take is skipped: the wait starts at once."""
    endpoint_id, worker_id = request.match_info["endpoint"], request.match_info["worker"]
    timeout_ms = entry.executionTimeoutMs
    loop = asyncio.get_running_loop()
    woken, first = False, True
    skip = idle is not None and idle == gw.notifier.idle_token(endpoint_id)
    while _listening(request) and not gw.draining:
        generation = gw.notifier.generation(endpoint_id)
        if skip:
            skip, left = False, 0
            jobs: list[TakenJob] = []
        else:
            jobs, left = await _take_within_budget(
                gw, request, endpoint_id, worker_id, count, timeout_ms, deadline,
                holds_none=holds_none,
            )  # fmt: skip
            holds_none = False  # said once per request is enough
        if left == STOPPING:  # going: no job for it
            if first:  # it polls again after being told: hold the poll as an empty one
                await asyncio.sleep(max(0.0, deadline - loop.time()))
            else:  # told while waiting: answer now, passing on a wake-up it may have had
                woken = True
            break
        warming, was_woken = left == WARMING, woken
        first = woken = False
        if jobs:
            if left > 0:
                gw.notifier.kick(endpoint_id)
            return jobs
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        if warming or gw.notifier.generation(endpoint_id) == generation:
            wait_s = min(remaining, gw.settings.poll_fallback_s)
            woken = await _wait_for_work(
                gw, endpoint_id, worker_id, wait_s, warming=warming, woken=was_woken
            )
    if woken:
        gw.notifier.kick(endpoint_id)
    return []


async def _wait_for_work(
    gw: Gateway, endpoint_id: str, worker_id: str, wait_s: float, *, warming: bool, woken: bool
) -> bool:
    """Wait up to `wait_s` for a job to be queued (True: woken for one). A worker whose
    warm-up job runs waits the time out instead, and passes on a wake-up it had: a job
    queued meanwhile is another worker's to take."""
    if not warming:
        return await gw.notifier.wait_for_job(endpoint_id, worker_id, wait_s)
    if woken:
        gw.notifier.kick(endpoint_id)
    await asyncio.sleep(wait_s)
    return False


def take_room(free: int, wanted: int) -> int | None:
    """The bytes a take reserves of the body budget's `free` bytes (it asks for `wanted`):
    at least the largest job, never the last CLIENT_ROOM bytes, which clients' requests
    keep (workers taking at once, as a batch pool's do, must not make a small `/runsync`
    answer 503); None: not that much is free now."""
    room = min(free - CLIENT_ROOM, wanted)
    return room if room >= MAX_JOB_BYTES else None


async def _take_within_budget(
    gw: Gateway,
    request: web.Request,
    endpoint_id: str,
    worker_id: str,
    count: int,
    timeout_ms: int,
    deadline: float,
    *,
    holds_none: bool,
) -> tuple[list[TakenJob], int]:
    """`store.take` within the gateway's body budget. It reserves room for the largest job
    (more for a batch, up to `batch_take_bytes`) before taking, waits (until `deadline`)
    while the budget has not that much, and keeps what the inputs taken hold counted until
    the answer is made: takes cannot push the gateway past its budget."""
    loop = asyncio.get_running_loop()
    wanted = max(MAX_JOB_BYTES, gw.settings.batch_take_bytes if count > 1 else 0)
    while (room := take_room(gw.budget.free(), wanted)) is None:
        if loop.time() >= deadline or not _listening(request) or gw.draining:
            return [], NOT_TRIED
        await gw.budget.wait_for_room(min(deadline - loop.time(), 1.0))
    gw.budget.charge(request, room)
    try:
        jobs, left = await gw.store.take(
            endpoint_id, worker_id, count, timeout_ms, holds_none=holds_none, max_bytes=room
        )
    finally:
        gw.budget.charge(request, -room)
    gw.budget.charge(request, sum(len(job.input) for job in jobs))
    return jobs, left


@routes.get("/v2/{endpoint}/job-take/{worker}")
async def job_take(request: web.Request) -> web.Response:
    jobs = await _take(request, 1)
    return json_response(jobs[0]) if jobs else no_content()


@routes.get("/v2/{endpoint}/job-take-batch/{worker}")
async def job_take_batch(request: web.Request) -> web.Response:
    count = int_param(request, "batch_size", default=1, lo=1, hi=BATCH_MAX)
    jobs = await _take(request, count)
    return json_response(jobs) if jobs else no_content()


async def _read_result(request: web.Request, cap: int) -> Any:
    """A job-done's body; one too large or too deep to store is an error result (the job
    ends now rather than run to its timeout)."""
    try:
        return jsonbody.parse(await read_body(request, cap))
    except PayloadTooLarge:
        return {"error": f"the worker's result exceeds the {cap} byte limit"}
    except jsonbody.TooDeep as err:
        return {"error": f"the worker's result could not be stored: {err.message}"}


def _result(body: Any) -> tuple[bytes | None, str | None]:
    """Split a job-done body into (output JSON, error message). An output that cannot be
    stored (nested deeper than orjson writes) is an error: the job must not stay running."""
    if not isinstance(body, dict):
        raise BadRequest('job result must be a JSON object with "output" or "error"')
    error = body.get("error")
    try:
        output = jsonbody.dumps(body["output"], "its output") if "output" in body else None
        if error is not None and not isinstance(error, str):
            error = jsonbody.dumps(error, "its error").decode()
    except jsonbody.TooDeep as err:
        return None, f"the worker's result could not be stored: {err.message}"
    return output, error


@routes.post("/v2/{endpoint}/job-done/{worker}/{job}")
async def job_done(request: web.Request) -> web.Response:
    # The runpod SDK posts JSON with a form content type: the body is read raw, never as a form.
    gw, endpoint_id, worker_id, entry = await _worker(request)
    job_id = job_id_param(request)
    take_next = int_param(request, "take", default=0, lo=0, hi=1) == 1
    hold_ms = int_param(request, "wait", default=0, lo=0, hi=DONE_HOLD_MAX_MS)
    body = await _read_result(request, gw.settings.max_result_bytes)
    if isinstance(body, dict) and body.get("status") == "IN_PROGRESS":
        # runpod's progress_update() posts here too: a progress report, not a result.
        return await _progress(gw, endpoint_id, worker_id, job_id, body.get("output"))
    output, error = _result(body)
    if is_warmup_job(job_id):
        return await _warmup_done(request, gw, entry, error, take_next=take_next)
    refresh = body.get("stopPod") is True  # refresh_worker: replace this worker after its job
    # The endpoint's settings are the entry's extra fields: read as they are, no copy.
    rate = rate_of(entry.model_extra)
    finish = gw.store.finish(endpoint_id, worker_id, job_id, output=output, error=error, rate=rate)
    jobs: list[TakenJob] = []
    idle, more = None, False
    if take_next and not refresh:
        done, jobs, idle, more = await _finish_and_take(request, gw, entry, finish)
    else:
        done = await finish
    if done is not None:
        gw.metrics.observe_finished(endpoint_id, done)
    if refresh:
        await gw.store.refresh_worker(endpoint_id, worker_id)
    if idle is not None and hold_ms and done is not None:
        # `wait=`: the answer waits (as a job-take would) for the next job, up to hold_ms.
        deadline = asyncio.get_running_loop().time() + hold_ms / 1000
        jobs = await _poll(request, gw, entry, 1, deadline, holds_none=False, idle=idle)
        idle = None  # the hold's last take is not the one the token was read before
    answer: dict[str, Any] = {"accepted": done is not None}
    if jobs:
        answer["job"] = _job_payload(jobs[0], entry)
        if more and entry.onWorkerLost == WorkerLostPolicy.REQUEUE:
            # Jobs still queued behind it: lockgate's runtime may take ahead. Not where a
            # lost worker's jobs fail: a job taken ahead would fail with it, unstarted.
            answer["more"] = True
    elif idle:
        answer["idle"] = idle
    return json_response(answer)


@routes.post("/v2/{endpoint}/job-return/{worker}/{job}")
async def job_return(request: web.Request) -> web.Response:
    """Beyond RunPod's protocol: lockgate's runtime gives back a job it took ahead of a free
    slot and never started (worker/runtime.py): it goes back to the front of its queue, no
    attempt used. `accepted` false: the worker did not hold it (any more)."""
    gw, endpoint_id, worker_id, _ = await _worker(request)
    job_id = job_id_param(request)
    given = await gw.store.give_back(endpoint_id, worker_id, [job_id])
    return json_response({"accepted": given == 1})


async def _warmup_done(
    request: web.Request, gw: Gateway, entry: RegistryEntry, error: str | None, *, take_next: bool
) -> web.Response:
    """A warm-up job's result (store/warmups.py): no job record, stats or history of
    jobs. A failure marks the worker unhealthy; after the last one, real jobs come (and a
    waiter is woken: jobs may have queued while it warmed)."""
    endpoint_id, worker_id = request.match_info["endpoint"], request.match_info["worker"]
    job_id = request.match_info["job"]
    step = await warmup_done(gw.store, endpoint_id, worker_id, job_id, error)
    if step == Step.FAILED:
        log.warning("endpoint %s: worker %s unhealthy: warm-up failed: %s", endpoint_id,
                    worker_id, error)  # fmt: skip
    answer: dict[str, Any] = {"accepted": step != Step.IGNORED}
    if step in (Step.NEXT, Step.WARM) and take_next:
        now = asyncio.get_running_loop().time()
        jobs, _ = await _take_within_budget(
            gw, request, endpoint_id, worker_id, 1, entry.executionTimeoutMs, now,
            holds_none=False,
        )  # fmt: skip
        if jobs:
            answer["job"] = _job_payload(jobs[0], entry)
    if step == Step.WARM:
        gw.notifier.kick(endpoint_id)
    return json_response(answer)


async def _finish_and_take(
    request: web.Request, gw: Gateway, entry: RegistryEntry, finish: Awaitable[Finished | None]
) -> tuple[Finished | None, list[TakenJob], str | None, bool]:
    """A job-done's `take=1` (beyond RunPod's protocol; lockgate's runtime sends it when the
    finished job's slot is free for another): the result recorded and the next queued job,
    if one is queued now, handed out in the same answer instead of a job-take request of
    its own. The take goes to Redis with the finish, in one pipeline (the store batches a
    loop tick's script calls), so it costs no round trip of its own. Never waits (the
    job-done's `wait=` hold comes after).

    A take that finds the queue empty comes back with an idle token (`Notifier.idle_token`,
    read before the take): a hold, or the worker's next job-take sending it as `?idle=`,
    waits at once while no job was queued since, instead of taking first.

    `more`: jobs were still queued after the one taken.

    A take that fails leaves the answer without a job. A finish that fails is the
    request's error (the worker sends its result again, without `take`); a job taken
    meanwhile goes back to the queue when the worker's pings do not list it."""
    endpoint_id, worker_id = request.match_info["endpoint"], request.match_info["worker"]
    if not _listening(request) or gw.draining:
        return await finish, [], None, False
    token = gw.notifier.idle_token(endpoint_id)
    deadline = asyncio.get_running_loop().time()  # the budget is not waited for either
    take = _take_within_budget(
        gw, request, endpoint_id, worker_id, 1, entry.executionTimeoutMs, deadline,
        holds_none=False,
    )  # fmt: skip
    done, taken = await asyncio.gather(finish, take, return_exceptions=True)
    if isinstance(done, BaseException):
        raise done
    if isinstance(taken, BaseException):
        log.warning("job-done of %s on %s: its take failed: %r", worker_id, endpoint_id, taken)
        return done, [], None, False
    jobs, left = taken
    if jobs and left > 0:
        gw.notifier.kick(endpoint_id)
    return done, jobs, (token if not jobs and left == 0 else None), bool(jobs) and left > 0


async def _progress(
    gw: Gateway, endpoint_id: str, worker_id: str, job_id: str, progress: Any
) -> web.Response:
    """Keep the latest progress report of a running job (its `/status` output meanwhile)."""
    raw = jsonbody.dumps(progress, "the progress report")
    if len(raw) > PROGRESS_LIMIT:
        raise PayloadTooLarge(
            f"progress report of {len(raw)} bytes refused: at most {PROGRESS_LIMIT} bytes "
            "(the job goes on; send large data as its output)"
        )
    return json_response({"accepted": await gw.store.progress(endpoint_id, worker_id, job_id, raw)})


@routes.post("/v2/{endpoint}/job-stream/{worker}/{job}")
async def job_stream(request: web.Request) -> web.Response:
    gw, endpoint_id, worker_id, _ = await _worker(request)
    job_id = job_id_param(request)
    body = jsonbody.parse(await read_body(request, gw.settings.max_result_bytes))
    cap = gw.settings.max_stream_bytes
    try:
        accepted = await gw.store.push_stream(
            endpoint_id, worker_id, job_id, stream_chunks(body), max_unread_bytes=cap
        )
    except StreamFull as err:
        raise PayloadTooLarge(
            f"stream chunk refused: job {job_id} would hold more than {cap} bytes of stream "
            "data not yet read with /stream (the job goes on; LOCKGATE_MAX_STREAM_BYTES)"
        ) from err
    return json_response({"accepted": accepted})


@routes.get("/v2/{endpoint}/ping/{worker}")
async def ping(request: web.Request) -> web.Response:
    """The worker's heartbeat (`job_id=` lists the jobs it runs), or with `status=unhealthy`
    its failed fitness check: it is marked unhealthy for good (`JobStore.mark_unhealthy`: no
    job again, what it held requeued) and its control plane replaces it."""
    gw, endpoint_id, worker_id, _ = await _worker(request)
    why = unhealthy_report(worker_id, request.query, gw.store.clock())
    if why is not None:
        requeued, _failed = await gw.store.mark_unhealthy(endpoint_id, why)
        log.warning(
            "worker %s of %s is unhealthy (%s; %d job(s) requeued)",
            worker_id, endpoint_id, clip(why.text(), 300), requeued,
        )  # fmt: skip
        return json_response({})
    listed = request.query.get("job_id")
    if listed is None:
        await gw.store.heartbeat(endpoint_id, worker_id)
    else:
        running = [i for i in listed.split(",") if JOB_ID_RE.fullmatch(i)]
        await gw.store.reconcile_worker(endpoint_id, worker_id, running)
    return json_response({})


@routes.get("/v2/{endpoint}/job-stop/{worker}")
async def job_stop(request: web.Request) -> web.Response:
    """Long-poll: the ids of jobs this worker must stop (cancelled or timed out). Woken
    with none, the worker itself was told to stop (`stop_taking`): answered at once, so a
    worker that checks for its own shutdown between polls (the runpod SDK) exits soon."""
    gw, endpoint_id, worker_id, _ = await _worker(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + gw.settings.stop_wait_s
    woken = False
    while _listening(request) and not gw.draining:
        waiter = asyncio.ensure_future(
            gw.notifier.wait_stop(endpoint_id, worker_id, gw.settings.poll_fallback_s)
        )
        try:
            if ids := await gw.store.take_stop_signals(endpoint_id, worker_id):
                return json_response({"jobsToStop": ids})
            if woken or deadline - loop.time() <= 0:
                break
            woken = await waiter
        finally:
            waiter.cancel()
    return no_content()
