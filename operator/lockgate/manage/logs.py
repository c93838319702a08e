"""`GET /v1/endpoints/{id}/logs`: recent worker log lines, or (`follow=true`) a live tail as
Server-Sent Events. Admin scope (the management app's middleware).

The lines come from the control plane's `logs` source: dev mode's buffers of local
workers (`manage.logbook`), or the worker pods' logs through the Kubernetes API
(`kube.podlogs`). Query and line shapes: `manage.loglines`; contract: docs/console.md.
"""

from __future__ import annotations

import asyncio
import json
from typing import Protocol

from aiohttp import web

from lockgate.gateway.errors import ApiError, NotFound
from lockgate.gateway.http import json_response
from lockgate.manage.controlplane import CONTROL_PLANE, ControlPlane, EndpointNotFound
from lockgate.manage.logbook import Follower
from lockgate.manage.loglines import LogLine, LogQuery, parse_query

KEEP_ALIVE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream
CHECK_S = 1.0  # how often a quiet stream checks that its client is still there


class LogSource(Protocol):
    """Where an endpoint's worker log lines come from."""

    async def lines(self, endpoint_id: str, query: LogQuery) -> list[LogLine]:
        """The last `query.tail` matching lines, oldest first."""
        ...

    async def follow(self, endpoint_id: str, query: LogQuery) -> tuple[list[LogLine], Follower]:
        """The same tail, and a `Follower` that receives the lines written after it."""
        ...

    async def unfollow(self, endpoint_id: str, follower: Follower) -> None:
        """Stop feeding `follower` (the client left)."""
        ...


class NoLogs(ApiError):
    """This control plane keeps no worker logs."""

    status = 501


def _source(control_plane: ControlPlane) -> LogSource:
    source: LogSource | None = getattr(control_plane, "logs", None)
    if source is None:
        raise NoLogs("worker logs are not available from this control plane")
    return source


def sse(line: LogLine) -> bytes:
    return f"data: {json.dumps(line.to_json())}\n\n".encode()


def client_gone(request: web.Request) -> bool:
    """The client closed the connection (aiohttp does not cancel the handler for it)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def _stream(
    request: web.Request, source: LogSource, endpoint_id: str, query: LogQuery
) -> web.StreamResponse:
    """The tail, then each new line as one event, until the client leaves."""
    tail, follower = await source.follow(endpoint_id, query)
    response = web.StreamResponse(
        headers={
            "content-type": "text/event-stream",
            "cache-control": "no-cache",
            "x-accel-buffering": "no",  # nginx: pass events at once
        }
    )
    try:
        await response.prepare(request)
        for line in tail:
            await response.write(sse(line))
        quiet_s = 0.0
        while not client_gone(request):
            try:
                line = await asyncio.wait_for(follower.queue.get(), CHECK_S)
            except TimeoutError:
                quiet_s += CHECK_S
                if quiet_s >= KEEP_ALIVE_S:
                    await response.write(b": keep-alive\n\n")
                    quiet_s = 0.0
                continue
            quiet_s = 0.0
            if dropped := follower.take_dropped():
                note = {"dropped": dropped, "why": "the reader was slower than the workers"}
                await response.write(f"event: dropped\ndata: {json.dumps(note)}\n\n".encode())
            await response.write(sse(line))
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the client left
    finally:
        await source.unfollow(endpoint_id, follower)
    return response


async def get_logs(request: web.Request) -> web.StreamResponse:
    endpoint_id = request.match_info["endpoint_id"]
    query = parse_query(request.query)
    control_plane = request.app[CONTROL_PLANE]
    try:
        await control_plane.get(endpoint_id)
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err
    source = _source(control_plane)
    if query.follow:
        return await _stream(request, source, endpoint_id, query)
    lines = await source.lines(endpoint_id, query)
    return json_response({"lines": [line.to_json() for line in lines]})


def add_logs_routes(app: web.Application, *, prefix: str = "/v1") -> None:
    """`{prefix}/endpoints/{id}/logs` on the management app, reading the `logs` of its
    control plane (`app[CONTROL_PLANE]`, set by `create_manage_app`)."""
    app.router.add_get(f"{prefix}/endpoints/{{endpoint_id}}/logs", get_logs)
