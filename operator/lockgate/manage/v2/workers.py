"""`GET /v2/serverless/{id}/workers` and `GET /v2/serverless/{id}/workers/{workerId}/logs`:
an endpoint's workers with their status, and one worker's log as Server-Sent Events;
`POST /v2/serverless/{id}/workers/restart` clears a crash loop (docs/crash-loops.md);
`POST /v2/serverless/{id}/workers/{workerId}/stop` and `…/restart` stop one worker (dev mode:
the process; on a cluster the operator deletes the pod, asked through the job store).

The workers and their logs come from the process's `WorkerSource` (`Backends.workers`:
pods on a cluster, local processes in dev mode); the status rules are
`manage.workerstates`, the event ids `manage.workerlogs`. A log stream gives the backfill
(`tail`, `since` or `Last-Event-ID`), then stays live, reading the log store every
`POLL_S`, until the client leaves or the worker is gone and its log drained. It reads
`BATCH` events at a time and writes each before reading more: a client that does not read
holds the stream at its socket's buffer, and memory stays bounded.
docs/workers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web
from pydantic import BaseModel, Field

from lockgate.gateway.errors import ApiError, NotFound, Unprocessable
from lockgate.gateway.http import iso_ms, json_response
from lockgate.gateway.openapi_parts import param
from lockgate.manage.controlplane import ControlPlane, EndpointNotFound, TemplateNotFound
from lockgate.manage.logs import client_gone
from lockgate.manage.v2 import BACKENDS
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.workerlogs import (
    SOURCES,
    BadEventId,
    Cursor,
    LogEvent,
    before,
    parse_event_id,
    parse_rfc3339,
)
from lockgate.manage.workersource import (
    LogBatch,
    LogRead,
    WorkerFacts,
    WorkerNotFound,
    WorkerSource,
    WorkerStopper,
)
from lockgate.manage.workerstates import is_stale, summary, worker_status
from lockgate.models import EndpointRecord
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobStore

TAIL_DEFAULT, TAIL_MAX = 100, 5000  # RunPod's `tail`
BATCH = 500  # events read (and written) at a time
POLL_S = 1.0  # how often a live stream reads the log store
KEEP_ALIVE_S = 15.0  # a comment this often keeps proxies from closing a quiet stream
JOB_VIEW = web.AppKey("worker_job_view", JobStore)


class Worker(BaseModel):
    """RunPod's `Worker`."""

    id: str
    status: str = Field(description="RUNNING, IDLE, INITIALIZING, THROTTLED or UNHEALTHY")
    isStale: bool = Field(description="it runs an older version than the endpoint's")
    version: int | None = Field(description="the endpoint version it runs")
    gpuCount: int = Field(ge=0)
    image: str | None
    uptimeSeconds: int | None = Field(ge=0)
    gpuTypeId: str | None
    dataCenterId: str | None
    startedAt: str | None = Field(description="RFC 3339")
    unhealthyReason: str | None = Field(
        None,
        description="beyond RunPod's Worker: why it was marked unhealthy (a failed fitness "
        "check, no readiness within startupTimeout, a failed warm-up); null otherwise",
    )
    nodeName: str | None = Field(
        None,
        description="beyond RunPod's Worker: the node it runs on (its pod's node; in dev mode "
        "this machine's host name); null when not known yet",
    )


class WorkerSummary(BaseModel):
    """Workers by status; they add up to `total`, the list's length."""

    running: int = Field(ge=0)
    idle: int = Field(ge=0)
    initializing: int = Field(ge=0)
    throttled: int = Field(ge=0)
    unhealthy: int = Field(ge=0)
    total: int = Field(ge=0)


class WorkerList(BaseModel):
    """RunPod's `ListEndpointWorkersResponse`."""

    workers: list[Worker]
    summary: WorkerSummary
    endpointVersion: int | None


LOG_QUERY = (
    param("source", "query", {"type": "string", "enum": list(SOURCES)},
          "container (its output) or system (its lifecycle); omitted: both"),
    param("tail", "query", {"type": "integer", "minimum": 0, "maximum": TAIL_MAX,
                            "default": TAIL_DEFAULT},
          "backfill this many last lines first; 0: live lines only"),
    param("since", "query", {"type": "string", "format": "date-time"},
          "every line from this time on (inclusive), then live"),
    param("Last-Event-ID", "header", {"type": "string"},
          "resume after the event with this id (wins over since and tail)"),
)  # fmt: skip


class NoWorkerSource(ApiError):
    """This process keeps no workers to list."""

    status = 501


@dataclass(frozen=True)
class LogParams:
    """A valid logs query: the sources (in merge order), and where to start."""

    sources: tuple[str, ...]
    cursor: Cursor | None  # from `Last-Event-ID` or `since`; None: the last `tail`
    tail: int


def parse_log_params(query: Any, last_event_id: str | None) -> LogParams:
    """The query of `…/logs` (and its `Last-Event-ID`); 422 listing every bad one."""
    errors: list[str] = []
    sources: tuple[str, ...] = SOURCES
    tail, cursor = TAIL_DEFAULT, None
    if (source := query.get("source")) is not None:
        if source not in SOURCES:
            errors.append(f"source: expected one of {', '.join(SOURCES)} (omit it for both)")
        else:
            sources = (source,)
    text = query.get("tail")
    if text is not None:
        if not text.isdigit() or int(text) > TAIL_MAX:
            errors.append(f"tail: expected a whole number from 0 to {TAIL_MAX}")
        else:
            tail = int(text)
    if (since := query.get("since")) is not None:
        try:
            cursor = Cursor.since(parse_rfc3339(since), sources)
        except ValueError:
            errors.append("since: expected an RFC 3339 date-time, e.g. 2026-06-01T12:05:04Z")
    if last_event_id is not None:
        try:
            cursor = parse_event_id(last_event_id, sources)
        except BadEventId:
            errors.append("Last-Event-ID: not an event id of this stream, nor an RFC 3339 time")
    if errors:
        raise Unprocessable("Request validation failed: " + "; ".join(errors), errors=errors)
    return LogParams(sources, cursor, tail)


def worker_view(
    facts: WorkerFacts,
    jobs: dict[str, int] | None,
    endpoint: EndpointRecord,
    image: str | None,
    now_ms: int,
    why: UnhealthyWorker | None = None,
) -> Worker:
    """RunPod's `Worker` object of a worker; `why`: its mark, if it was marked unhealthy."""
    started = facts.started_ms
    return Worker(
        id=facts.id,
        status=worker_status(facts.lifecycle, jobs, facts.id, marked=why is not None),
        isStale=is_stale(facts.version, facts.image, endpoint.version, image),
        version=facts.version,
        gpuCount=facts.gpu_count,
        image=facts.image,
        uptimeSeconds=None if started is None else max(0, (now_ms - started) // 1000),
        gpuTypeId=facts.gpu_type,
        dataCenterId=facts.datacenter,
        startedAt=None if started is None else iso_ms(started),
        unhealthyReason=None if why is None else why.text(),
        nodeName=facts.node,
    )


def _source(request: web.Request) -> WorkerSource:
    source = request.app[BACKENDS].workers
    if source is None:
        raise NoWorkerSource("workers are not available from this control plane")
    return source


async def _endpoint(plane: ControlPlane, endpoint_id: str) -> EndpointRecord:
    try:
        return await plane.get(endpoint_id)
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err


async def _image(plane: ControlPlane, endpoint: EndpointRecord) -> str | None:
    """The image the endpoint's template names now (None: no template, as a dev-mode
    handler file)."""
    if not endpoint.templateId:
        return None
    try:
        return (await plane.get_template(endpoint.templateId)).image
    except TemplateNotFound:
        return None


async def _job_view(
    request: web.Request, endpoint_id: str
) -> tuple[dict[str, int] | None, dict[str, UnhealthyWorker]]:
    """Live workers and the jobs each holds, and the workers marked unhealthy; (None, {})
    when the job store cannot say (the statuses then come from the lifecycle alone, as
    RunPod degrades)."""
    store = request.app[JOB_VIEW]
    try:
        snap, marked = await asyncio.gather(
            store.snapshot(endpoint_id), store.unhealthy_workers(endpoint_id)
        )
    except Exception:  # Redis away: the same shape, from the lifecycle
        return None, {}
    return snap.worker_jobs, marked


@documented(
    Operation(
        "listEndpointWorkers",
        "The endpoint's workers, with their status and a summary",
        answer=WorkerList,
        errors=(404,),
        description="A worker is a pod on a cluster, a local process in dev mode "
        "(docs/workers.md).",
    )
)
async def list_workers(request: web.Request) -> web.Response:
    plane = request.app[BACKENDS].plane
    endpoint = await _endpoint(plane, request.match_info["id"])
    facts = await _source(request).workers(endpoint)
    jobs, marked = await _job_view(request, endpoint.id)
    image = await _image(plane, endpoint)
    now_ms = time.time_ns() // 1_000_000
    workers = [worker_view(f, jobs, endpoint, image, now_ms, marked.get(f.id)) for f in facts]
    counts = WorkerSummary(**summary(w.status for w in workers))
    answer = WorkerList(workers=workers, summary=counts, endpointVersion=endpoint.version)
    return json_response(answer.model_dump(mode="json"))


class WorkersRestart(BaseModel):
    """A restart asked: the endpoint's crash loop is cleared and its workers start again."""

    id: str
    requestedAt: str = Field(description="RFC 3339")


@documented(
    Operation(
        "restartEndpointWorkers",
        "Clear the endpoint's crash loop: its workers start again",
        answer=WorkersRestart,
        status=202,
        errors=(404,),
        description="lockgate's (RunPod has none). After `crashLoopThreshold` failed worker "
        "starts in a row the endpoint starts no worker (phase CrashLoop) and its queued jobs "
        "wait; a new release or this clears it, and failed starts are counted afresh. On a "
        "cluster the operator acts on it within a moment (docs/crash-loops.md).",
    )
)
async def restart_workers(request: web.Request) -> web.Response:
    plane = request.app[BACKENDS].plane
    endpoint_id = request.match_info["id"]
    try:
        await plane.restart_workers(endpoint_id)
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err
    answer = WorkersRestart(id=endpoint_id, requestedAt=iso_ms(time.time_ns() // 1_000_000))
    return json_response(answer.model_dump(mode="json"), status=202)


class WorkerStopped(BaseModel):
    """One worker asked to stop (or to restart)."""

    id: str = Field(description="the worker's id")
    endpointId: str
    action: str = Field(description="stop or restart")
    requestedAt: str = Field(description="RFC 3339")


def _stopper(request: web.Request) -> WorkerStopper:
    source = _source(request)
    if not hasattr(source, "stop"):
        raise NoWorkerSource(
            "stopping one worker is not available on this server: delete its pod "
            "(kubectl delete pod WORKER_ID); its Deployment starts another"
        )
    return source  # type: ignore[return-value]


async def _stop_worker(request: web.Request, *, restart: bool) -> web.Response:
    plane = request.app[BACKENDS].plane
    endpoint = await _endpoint(plane, request.match_info["id"])
    worker_id = request.match_info["workerId"]
    stopper = _stopper(request)
    try:
        await stopper.stop(endpoint.id, worker_id, restart=restart)
    except WorkerNotFound as err:
        raise NotFound(
            f"worker {worker_id!r} of endpoint {endpoint.id!r} not found "
            "(or it is stopping already)"
        ) from err
    answer = WorkerStopped(
        id=worker_id,
        endpointId=endpoint.id,
        action="restart" if restart else "stop",
        requestedAt=iso_ms(time.time_ns() // 1_000_000),
    )
    return json_response(answer.model_dump(mode="json"), status=202)


STOP_NOTE = (
    "lockgate's (RunPod's console has it; its API has none). The worker takes no new job; "
    "the job in hand finishes, then it exits (SIGTERM), as in a scale-down; it is not "
    "counted as a failed start. On a cluster the operator deletes the worker's pod at its "
    "next scaler tick (docs/workers.md)."
)


@documented(
    Operation(
        "stopEndpointWorker",
        "Stop one worker",
        answer=WorkerStopped,
        status=202,
        errors=(404, 501),
        description=STOP_NOTE + " The scaler starts another only if workers.min or the "
        "queue want one.",
    )
)
async def stop_worker(request: web.Request) -> web.Response:
    return await _stop_worker(request, restart=False)


@documented(
    Operation(
        "restartEndpointWorker",
        "Restart one worker: a fresh one starts in its place",
        answer=WorkerStopped,
        status=202,
        errors=(404, 501),
        description=STOP_NOTE + " A fresh worker of the endpoint's current version starts "
        "at once (none during a crash loop: clear it with …/workers/restart).",
    )
)
async def restart_worker(request: web.Request) -> web.Response:
    return await _stop_worker(request, restart=True)


def frame(event: LogEvent, cursor: Cursor, sources: tuple[str, ...]) -> bytes:
    """One event: its id (the cursor after it) and its JSON line."""
    data = orjson.dumps(event.data()).decode()
    return f"id: {cursor.event_id(sources)}\ndata: {data}\n\n".encode()


@documented(
    Operation(
        "getWorkerLogs",
        "One worker's log as Server-Sent Events",
        query=LOG_QUERY,
        errors=(404, 422),
        description="`text/event-stream`: each log line one event, an `id:` (resume with "
        "Last-Event-ID) and a JSON `data:` line {ts, source, line}; live until the worker is "
        "gone and its log drained (docs/workers.md).",
    )
)
async def stream_logs(request: web.Request) -> web.StreamResponse:
    plane = request.app[BACKENDS].plane
    endpoint = await _endpoint(plane, request.match_info["id"])
    worker_id = request.match_info["workerId"]
    missing = NotFound(f"worker {worker_id!r} of endpoint {endpoint.id!r} not found")
    return await serve_log_stream(
        request, _source(request), (endpoint.id, worker_id), (WorkerNotFound,), missing
    )


async def serve_log_stream(
    request: web.Request,
    source: LogReader,
    owner: tuple[str, str],
    gone: tuple[type[Exception], ...],
    missing: ApiError,
) -> web.StreamResponse:
    """The whole answer of a log route (a worker's, a build's): the query and Last-Event-ID
    read, `missing` raised when `source` raises one of `gone` at the first read, else the
    stream from the cursor until the log's owner is gone and drained or the client leaves."""
    params = parse_log_params(request.query, request.headers.get("Last-Event-ID"))
    first = LogRead(params.sources, params.cursor, params.tail, BATCH)
    try:
        batch = await source.read(*owner, first)
    except gone as err:
        raise missing from err
    response = await open_event_stream(request)
    stream = LogStream(request, response, source, params, owner, gone)
    with contextlib.suppress(ConnectionResetError):  # the client left
        await stream.run(batch, params.cursor or before(batch.events, batch.start))
    return response


async def open_event_stream(request: web.Request) -> web.StreamResponse:
    """A prepared Server-Sent Events answer (RunPod's headers)."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "Connection": "keep-alive",
            "X-Accel-Buffering": "no",  # nginx: pass events at once
        }
    )
    await response.prepare(request)
    return response


class LogReader(Protocol):
    """What a log stream reads: a worker's log (`WorkerSource`), a build's."""

    async def read(self, endpoint_id: str, owner_id: str, read: LogRead) -> LogBatch: ...


@dataclass
class LogStream:
    """One client's live log stream (of a worker, or a build: `gone` is what its reader
    raises once the log is gone)."""

    request: web.Request
    response: web.StreamResponse
    source: LogReader
    params: LogParams
    worker: tuple[str, str]  # endpoint id, worker (or build) id
    gone: tuple[type[Exception], ...] = (WorkerNotFound,)
    quiet_s: float = 0.0

    async def run(self, batch: LogBatch, cursor: Cursor) -> None:
        """Write `batch`, then what comes after, until the worker is gone and drained (or
        the client leaves)."""
        while True:
            for event in batch.events:
                cursor = cursor.moved(event)
                await self.response.write(frame(event, cursor, self.params.sources))
            if len(batch.events) < BATCH:  # else more is waiting: read on at once
                if not batch.alive:
                    return  # gone, and every line it wrote was given
                await self.wait(bool(batch.events))
            if client_gone(self.request):
                return
            try:
                batch = await self.source.read(
                    *self.worker, LogRead(self.params.sources, cursor, 0, BATCH)
                )
            except self.gone:
                return  # gone with its log (a pod's log goes with the pod)

    async def wait(self, wrote: bool) -> None:
        """Sleep until the next read; a comment keeps a quiet stream open."""
        self.quiet_s = 0.0 if wrote else self.quiet_s
        await asyncio.sleep(POLL_S)
        self.quiet_s += POLL_S
        if self.quiet_s >= KEEP_ALIVE_S:
            await self.response.write(b": keep-alive\n\n")
            self.quiet_s = 0.0


def add_worker_routes(app: web.Application) -> None:
    """`/{id}/workers` and `/{id}/workers/{workerId}/logs` on the `/v2/serverless`
    sub-application (`v2_app` holds the `Backends`)."""
    app[JOB_VIEW] = JobStore(app[BACKENDS].authenticator.registry.redis)
    app.router.add_get("/{id}/workers", list_workers)
    app.router.add_get("/{id}/workers/{workerId}/logs", stream_logs)
    app.router.add_post("/{id}/workers/restart", restart_workers)
    app.router.add_post("/{id}/workers/{workerId}/stop", stop_worker)
    app.router.add_post("/{id}/workers/{workerId}/restart", restart_worker)
