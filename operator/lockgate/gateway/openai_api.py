"""The OpenAI-compatible route: `/v2/{endpoint}/openai/v1/*`, each request a job on the
endpoint's queue (docs/openai.md). `openai_wire` holds the translations; this module waits,
streams and cancels.

A request is a `sync` job (it wakes its waiter when it ends, and is kept a minute after);
a streaming one is `live` too (each chunk wakes its reader). Either way the job is visible
to /status, /requests, /health, metrics and the scaler like any other. A client that goes
away before the answer cancels its job.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from aiohttp import web

from lockgate.gateway import jsonbody
from lockgate.gateway.auth import JOBS
from lockgate.gateway.client_api import RUNSYNC_LIMIT
from lockgate.gateway.endpoints import require_type
from lockgate.gateway.errors import BadRequest, NotFound, clip
from lockgate.gateway.http import JSON, json_response, read_body
from lockgate.gateway.idempotency import store_unavailable
from lockgate.gateway.middleware import error_middleware
from lockgate.gateway.notify import Listener
from lockgate.gateway.openai_wire import (
    KEEP_ALIVE,
    Answer,
    LiveChunks,
    StreamFramer,
    answer,
    ending,
    error_body,
    error_type,
    job_input,
    route_of,
    sse,
    unwrap,
    waited_too_long,
    wants_stream,
    worker_answer,
    worker_error,
)
from lockgate.gateway.state import Gateway, gateway_of
from lockgate.models import FINAL_STATES
from lockgate.models.endpoint import EndpointType
from lockgate.models.jobs import TTL_DEFAULT_MS
from lockgate.models.limits import Operation
from lockgate.store import UNAVAILABLE, IneligibleState, JobNotFound, JobRecord, NewJob
from lockgate.store.keys import new_job_id

PATH = r"/v2/{endpoint}/openai/{path:[\s\S]*}"  # any character: a newline too
JOB_HEADER = "X-Lockgate-Job-Id"
REQUEST_ID = "X-Request-Id"  # the job id again: OpenAI SDKs expose it (`_request_id`)
CLIENT_CHECK_S = 1.0  # how often a waiting request looks whether its client is still there
EVENT_STREAM = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx (ingress) would hold events back otherwise
}

DROPPED_HEADERS = {"Content-Type", "Content-Length"}

routes = web.RouteTableDef()


class ClientGone(ConnectionResetError):
    """The client closed its connection while its job ran."""


async def openai(request: web.Request) -> web.StreamResponse:
    """Any `v1/*` OpenAI call; every refusal in OpenAI's error shape."""
    return _openai_shaped(await error_middleware(request, _serve))


routes.get(PATH, allow_head=False)(openai)
routes.post(PATH)(openai)


async def _serve(request: web.Request) -> web.StreamResponse:
    gw = gateway_of(request)
    endpoint_id = request.match_info["endpoint"]
    principal = await gw.auth.require(request, JOBS, endpoint_id)
    route = route_of(request.match_info["path"])
    if route is None:
        raise NotFound(
            f"no OpenAI route {request.match_info['path']!r}: paths under /openai/ start "
            "with v1/, e.g. /openai/v1/chat/completions"
        )
    if request.query_string:  # e.g. GET /v1/files?purpose=batch: the worker's to read
        route += "?" + request.query_string
    entry = await gw.endpoints.get(endpoint_id)
    require_type(entry, endpoint_id, EndpointType.QUEUE, "/openai/")
    async with gw.limiter.hold(endpoint_id, Operation.OPENAI, principal.name):
        body = await _body(request)
        stream = wants_stream(body)
        job = NewJob(
            id=f"sync-{new_job_id()}",
            input=jsonbody.dumps(job_input(route, body), "input"),
            ttl_ms=TTL_DEFAULT_MS,
            sync=True,
            live=stream,
            api_key=principal.key_id,
        )
        with gw.notifier.listen(endpoint_id, job.id) as listener:
            try:
                await gw.submit(endpoint_id, job)
            except UNAVAILABLE:
                return store_unavailable(request, job.id)
            follow = _Follow(request, gw, endpoint_id, job.id, listener)
            try:
                if stream:
                    return await follow.stream()
                return _respond(await follow.answer(), job.id)
            except ClientGone:
                await follow.cancel()
                raise
            except JobNotFound as err:
                raise NotFound(f"job {job.id!r} was removed before it ended (purged)") from err


async def _body(request: web.Request) -> dict[str, Any] | None:
    """The request's JSON object (a POST), or None (a GET)."""
    if request.method != "POST":
        return None
    body = jsonbody.parse(await read_body(request, RUNSYNC_LIMIT))
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object (an OpenAI request)")
    if not isinstance(body.get("stream", False), bool):
        raise BadRequest(f"stream: expected a boolean, got {clip(repr(body['stream']), 64)}")
    return body


def _respond(reply: Answer, job_id: str) -> web.Response:
    return json_response(reply.body, status=reply.status, headers={**_ids(job_id), **reply.headers})


def _ids(job_id: str) -> dict[str, str]:
    return {JOB_HEADER: job_id, REQUEST_ID: job_id}


class _Follow:
    """Waits on one submitted job for its client: until it ends, or chunk by chunk."""

    def __init__(
        self,
        request: web.Request,
        gw: Gateway,
        endpoint_id: str,
        job_id: str,
        listener: Listener,
    ) -> None:
        self.request, self.gw, self.endpoint_id, self.job_id = request, gw, endpoint_id, job_id
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        self.reader = LiveChunks(read_every_s=gw.settings.poll_fallback_s, now=self.loop.time())

    async def answer(self) -> Answer:
        """The job's answer once it ends; 504 (and the job cancelled) past the longest wait.
        The job was just queued: wait before the first read (the listener was there first)."""
        wait_s = self.gw.settings.openai_wait_s
        deadline = self.loop.time() + wait_s
        while await self._wait(deadline):
            self.listener.take()
            record = await self._record()
            if record.status in FINAL_STATES:
                return answer(record)
        await self.cancel()
        return waited_too_long(wait_s)

    async def stream(self) -> web.StreamResponse:
        """Server-Sent Events of the job's chunks as they come. Headers wait for the first
        chunk or keep-alive, so a job that fails at once still gets an HTTP error status."""
        settings = self.gw.settings
        framer, response = StreamFramer(), None
        deadline = self.loop.time() + settings.openai_wait_s
        keep_alive = self.loop.time() + settings.openai_keepalive_s
        while True:
            if not await self._wait(min(deadline, keep_alive)):
                if self.loop.time() >= deadline:
                    await self.cancel()
                    reply = waited_too_long(settings.openai_wait_s)
                    if response is None:
                        return _respond(reply, self.job_id)
                    await self._send(response, sse(reply.body) + framer.finish())
                    await response.write_eof()
                    return response
                response = await self._send(response, KEEP_ALIVE)
                keep_alive = self.loop.time() + settings.openai_keepalive_s
                continue
            listener, reader, now = self.listener, self.reader, self.loop.time()
            chunks, status = reader.carried_chunks(listener.take()), None
            if reader.read_due(now, ended=listener.ended or listener.stale):
                listener.stale = False
                status, stored, first = await self.gw.store.read_live(self.endpoint_id, self.job_id)
                chunks += reader.stored_chunks(stored, first, now)
            if chunks:
                if response is None and (error := _first_error(chunks[0])) is not None:
                    return _respond(worker_answer(*error), self.job_id)
                deadline = self.loop.time() + settings.openai_wait_s
                data = b"".join(map(framer.feed, chunks))
                if framer.done:  # the worker's own [DONE]: end now, clients close at it
                    response = await self._send(response, data + framer.finish())
                    await response.write_eof()
                    return response
                response = await self._send(response, data)
            if status in FINAL_STATES:
                return await self._end(response, framer)

    async def _end(
        self, response: web.StreamResponse | None, framer: StreamFramer
    ) -> web.StreamResponse:
        """The stream's last events once the job ended: its error, or its output if it
        streamed nothing (a handler that returns), then `[DONE]`."""
        record = await self._record()
        tail = b""
        if record.status != "COMPLETED":
            reply = ending(record)
            if response is None:
                return _respond(reply, self.job_id)
            tail = sse(reply.body)
        elif framer.sent == 0 and record.output:
            output = unwrap(orjson.loads(record.output))
            if response is None and (error := worker_error(output)) is not None:
                return _respond(worker_answer(*error), self.job_id)
            tail = framer.frame(output)
        response = await self._send(response, tail + framer.finish())
        await response.write_eof()
        return response

    async def _record(self) -> JobRecord:
        """The job's record: the final one its end event carried, or read."""
        return await self.gw.store.final_record(self.endpoint_id, self.job_id, self.listener.final)

    async def _send(self, response: web.StreamResponse | None, data: bytes) -> web.StreamResponse:
        """Write `data` to the event stream, opening it first if need be."""
        try:
            if response is None:
                response = web.StreamResponse(headers={**EVENT_STREAM, **_ids(self.job_id)})
                await response.prepare(self.request)
            if data:
                await response.write(data)
        except ConnectionResetError as err:
            raise ClientGone() from err
        return response

    async def _wait(self, until: float) -> bool:
        """Sleep until the job changes (True) or `until` (False), looking every second
        whether the client left (ClientGone); a missed wake-up costs one poll interval."""
        poll_at = self.loop.time() + self.gw.settings.poll_fallback_s
        while (left := min(until, poll_at) - self.loop.time()) > 0:
            try:
                async with asyncio.timeout(min(left, CLIENT_CHECK_S)):
                    await self.listener.changed.wait()
                return True
            except TimeoutError:
                transport = self.request.transport
                if transport is None or transport.is_closing():
                    raise ClientGone() from None
        return self.loop.time() < until  # the fallback re-read is due

    async def cancel(self) -> None:
        """Cancel the job (its client is gone or gave up); nothing if it already ended."""
        with contextlib.suppress(JobNotFound, IneligibleState):
            await self.gw.store.cancel(self.endpoint_id, self.job_id)


def _first_error(stored: bytes) -> tuple[int, dict[str, Any]] | None:
    """The worker's OpenAI error when the stream's first chunk is one."""
    chunk = orjson.loads(stored)
    return None if chunk.get("split") else worker_error(chunk.get("output"))


def _openai_shaped(response: web.StreamResponse) -> web.StreamResponse:
    """A gateway refusal (`{"error": "..."}`) in OpenAI's shape; other answers unchanged."""
    if not isinstance(response, web.Response) or response.status < 400:
        return response
    if response.content_type != JSON or not isinstance(response.body, bytes):
        return response
    body = orjson.loads(response.body)
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return response
    shaped = error_body(body.pop("error"), error_type(response.status))
    shaped["error"].update(body)  # e.g. jobMayExist and id of a 503 after a submit
    headers = {k: v for k, v in response.headers.items() if k not in DROPPED_HEADERS}
    return json_response(shaped, status=response.status, headers=headers)
