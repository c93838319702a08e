"""The load-balancing route: `/lb/{endpoint}/{path}` proxied to a routable worker; with
`LOCKGATE_LB_DOMAIN` set, also any request whose Host is `{endpoint}.{domain}`, its path
untouched (`lb_host_middleware`).

Any method; the request body is forwarded as it arrives and the answer's chunks as the
worker sends them (Server-Sent Events are never buffered); WebSocket upgrades are relayed,
uncompressed and within time limits (`_websocket`).
An answer with a `Content-Length` up to 64 KB is read whole and sent in one write (headers
and body: one syscall fewer on the hot path).
Hop-by-hop headers (RFC 9110, 7.6.1) stay here, `X-Forwarded-For/-Proto/-Host` are added
and the caller's `authorization` never reaches the worker. Every proxied answer carries
`X-Runpod-Worker-Id`. Limits: a body over 30 MB is 413, a request running past the
endpoint's `requestTimeoutS` 504. A chosen worker that cannot be reached before any byte
of the request was sent (connection refused, reset while connecting, or not made within
`CONNECT_TIMEOUT_S`) is out of routing and the request goes to another routable worker, or
is held as a request that finds none (each worker tried once per request; the hold counts
from the request's arrival). A worker that fails once the connection was made, before
answering, is 502 (never retried: the worker may have seen the request), and out of
routing too, until a health poll begun after the failure says 200. Rate and concurrency
limits are the job API's (`Operation.LB`: 429 past them); a request holds its slot from
before the hold for a worker until its answer (or WebSocket) ends. A client that goes away
cancels the upstream request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping
from yarl import URL

from lockgate.gateway import lb_upstream
from lockgate.gateway.auth import JOBS
from lockgate.gateway.endpoints import (
    lb_hold_s,
    lb_websocket_max_s,
    request_timeout_s,
    require_type,
)
from lockgate.gateway.errors import CLIENT_CLOSED, ApiError, PayloadTooLarge
from lockgate.gateway.lb_upstream import (
    Answer,
    ConnectFailed,
    Exchange,
    UpstreamError,
    connect_reason,
)
from lockgate.gateway.lb_workers import LbRouter, Refusal, Target, track_attempts
from lockgate.gateway.metrics import ROUTE_KEY
from lockgate.gateway.state import gateway_of
from lockgate.models.endpoint import EndpointType
from lockgate.models.limits import Operation
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store.keys import ENDPOINT_ID_RE
from lockgate.store.lb_workers import LbWorker

log = logging.getLogger("lockgate.gateway")

# Requests only (RunPod's load balancer caps request and response bodies at 30 MB): an
# answer is streamed with back-pressure, so its size costs no memory, and an endless
# Server-Sent Events answer is a feature; `requestTimeoutS` bounds it.
MAX_BODY = 30 * 1024 * 1024
WORKER_ID = "X-Runpod-Worker-Id"
WHOLE_MAX = 64 * 1024  # answers of a known length up to this are sent in one write
HOST_ROUTE = "{endpoint}.<LOCKGATE_LB_DOMAIN>"  # the host form's route label in /metrics
CLIENT_WATCH_S = 0.1  # how often a waiting request looks whether its client left
HOP_BY_HOP = frozenset(h.decode() for h in lb_upstream.HOP_BY_HOP)  # RFC 9110, 7.6.1
# Not forwarded either: the caller's key, the Host (the worker's own is sent), Expect (this
# gateway already answered it) and Content-Length (the client sending it frames the body).
NOT_FORWARDED = lb_upstream.HOP_BY_HOP | {b"authorization", b"host", b"expect", b"content-length"}
# ...nor, on a WebSocket upgrade, aiohttp's client's own handshake headers
WS_OWN = {b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions"}
NOT_FORWARDED_WS = NOT_FORWARDED | WS_OWN | {b"sec-websocket-protocol"}

routes = web.RouteTableDef()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadGateway(ApiError):
    """The worker refused the connection or failed before its answer began."""

    status = 502


# aiohttp's connect errors (the WebSocket path): nothing was sent on a first attempt
CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class GatewayTimeout(ApiError):
    """The request ran past the endpoint's `requestTimeoutS`."""

    status = 504


def _forwarded(request: web.Request, drop: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """The request's headers as the worker gets them (see the module docstring), straight
    from the bytes the client sent (no decoding, no multidict: this is on every request's
    path): without those in `drop` and those `Connection` names; several
    `X-Forwarded-For` joined in one, the client's address last."""
    kept: list[tuple[bytes, bytes, bytes]] = []
    named: set[bytes] = set()
    forwarded: list[bytes] = []
    host = b""
    proto = forwarded_host = False
    for name, value in request.raw_headers:
        low = name.lower()
        if low in drop:
            if low == b"connection":
                named.update(h.strip().lower() for h in value.split(b","))
            elif low == b"host":
                host = value
            continue
        if low == b"x-forwarded-for":
            forwarded.append(value)
            continue
        proto = proto or low == b"x-forwarded-proto"
        forwarded_host = forwarded_host or low == b"x-forwarded-host"
        kept.append((low, name, value))
    out = [(name, value) for low, name, value in kept if low not in named]
    forwarded.append((request.remote or "").encode())
    out.append((b"X-Forwarded-For", b", ".join(forwarded)))
    if not proto:
        out.append((b"X-Forwarded-Proto", request.scheme.encode()))
    if not forwarded_host:
        out.append((b"X-Forwarded-Host", host or request.host.encode("utf-8", "surrogateescape")))
    return out


def upstream_lines(request: web.Request) -> bytes:
    """The header lines of a request proxied by the upstream client."""
    return b"".join(b"%s: %s\r\n" % pair for pair in _forwarded(request, NOT_FORWARDED))


def websocket_headers(request: web.Request) -> CIMultiDict[str]:
    """The headers of a WebSocket upgrade relayed by aiohttp's client (its own handshake
    headers are its own)."""
    return CIMultiDict(
        (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
        for name, value in _forwarded(request, NOT_FORWARDED_WS)
    )


def downstream_headers(headers: MultiMapping[str], worker_id: str) -> CIMultiDict[str]:
    """The worker's answer headers as the client gets them: without the hop-by-hop ones
    and those `Connection` names (copied whole, then pruned: both in C)."""
    out = CIMultiDict(headers)
    named = headers.getall("Connection", ())
    for name in (*HOP_BY_HOP, *(h.strip() for v in named for h in v.split(",") if h.strip())):
        out.popall(name, None)
    out[WORKER_ID] = worker_id
    return out


def routed_target(request: web.Request, *, strip: int = 0) -> str:
    """The path and query aiohttp routed, as sent (percent-encoding kept; an absolute-form
    target's scheme and authority dropped, never a `#fragment`), less its first `strip`
    path segments, cut at the slashes aiohttp routed on (an encoded `%2F` is no slash)."""
    url = request.rel_url
    path = url.raw_path
    if strip:
        parts = path.split("/", strip + 1)  # "" before the first slash, then the segments
        path = "/" + parts[-1] if len(parts) > strip + 1 else "/"
    query = url.raw_query_string
    return f"{path}?{query}" if query else path


def worker_path(request: web.Request) -> str:
    """The path and query the worker sees: the routed target after `/lb/{endpoint}`."""
    return routed_target(request, strip=2)


def host_endpoint(host: str | None, domain: str) -> str | None:
    """The endpoint a Host header `{endpoint_id}.{domain}` (any case, port ignored) names;
    None when `domain` is unset or the host is not one label under it."""
    if not domain or not host:
        return None
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name, suffix = name.lower().rstrip("."), "." + domain.lower().strip(".")
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    return label if ENDPOINT_ID_RE.fullmatch(label) else None


def lb_host_middleware(domain: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Requests to `{endpoint_id}.{domain}` go to the endpoint's workers whatever their
    path (RunPod's `https://{endpoint_id}.api.runpod.ai/<path>`); others route as usual."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        endpoint_id = host_endpoint(request.host, domain)
        if endpoint_id is None:
            return await handler(request)
        request[ROUTE_KEY] = HOST_ROUTE  # counted as one route, not as the path it carries
        return await serve(request, endpoint_id, routed_target(request), route="the host form")

    return middleware


class _Body:
    """The request body as it arrives, refused past `MAX_BODY` (a chunked one has no
    length to check first)."""

    def __init__(self, request: web.Request) -> None:
        self.request = request

    async def chunks(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.request.content.iter_any():
            seen += len(chunk)
            if seen > MAX_BODY:  # raised through the upstream client as it is
                raise PayloadTooLarge(_too_large())
            yield chunk


def _too_large() -> str:
    return f"request body over {MAX_BODY} bytes (30 MB, the load balancer's limit)"


@routes.route("*", "/lb/{endpoint}")
@routes.route("*", "/lb/{endpoint}/{path:.*}")
async def lb_route(request: web.Request) -> web.StreamResponse:
    """Authenticate like the job API, hold for a worker if need be, then proxy."""
    endpoint_id = request.match_info["endpoint"]
    return await serve(request, endpoint_id, worker_path(request))


async def serve(
    request: web.Request, endpoint_id: str, path: str, *, route: str = "/lb/"
) -> web.StreamResponse:
    """Proxy `request` to a routable worker of the endpoint as `path` (path and query, as
    sent); `route` names the form used in a wrong-type error."""
    gw = gateway_of(request)
    principal = await gw.auth.require(request, JOBS, endpoint_id)
    entry = await gw.endpoints.get(endpoint_id)
    require_type(entry, endpoint_id, EndpointType.LB, route)
    try:
        async with gw.limiter.hold(endpoint_id, Operation.LB, principal.name):
            response = await _route(request, gw.lb, endpoint_id, entry, path)
    except ApiError as err:
        gw.metrics.count_lb(endpoint_id, err.status)
        raise
    except (asyncio.CancelledError, aiohttp.ClientError, OSError):
        gw.metrics.count_lb(endpoint_id, CLIENT_CLOSED)  # our client left mid-way
        raise
    except Exception:
        gw.metrics.count_lb(endpoint_id, 500)
        raise
    gw.metrics.count_lb(endpoint_id, response.status)  # the status the client was sent
    return response


async def _route(
    request: web.Request, router: LbRouter, endpoint_id: str, entry: RegistryEntry, path: str
) -> web.StreamResponse:
    """Hold for a worker if need be and proxy as `path`; a client that leaves meanwhile
    (held or proxied) cancels both."""
    if (request.content_length or 0) > MAX_BODY:
        raise PayloadTooLarge(_too_large())
    watch = ClientWatch(request)
    try:
        return await _held_then_sent(request, router, endpoint_id, entry, path)
    finally:
        watch.stop()


async def _held_then_sent(
    request: web.Request, router: LbRouter, endpoint_id: str, entry: RegistryEntry, path: str
) -> web.StreamResponse:
    """A worker (held for one if need be), the exchange with it, then the worker released.
    A worker not reached is out of routing and another one is chosen (or waited for)."""
    affinity = request.headers.get(WORKER_ID)
    hold_s, since = lb_hold_s(entry), asyncio.get_running_loop().time()
    tried: set[str] = set()
    while True:
        target = await router.acquire(
            endpoint_id, affinity, hold_s=hold_s, exclude=tried, since=since
        )
        try:
            return await _exchange(request, router, endpoint_id, target, entry, path)
        except ConnectFailed as err:
            tried.add(target.id)
            _unreached(request, router, endpoint_id, target, err)
        finally:
            router.release(endpoint_id, target)


def _unreached(
    request: web.Request, router: LbRouter, endpoint_id: str, target: Target, err: ConnectFailed
) -> None:
    """Take a worker that was not reached out of routing; count it and log it."""
    cause = f"{err.cause.__class__.__name__}: {err.cause}"
    router.out_of_routing(target)
    gateway_of(request).metrics.count_lb_connect_failure(endpoint_id, err.reason)
    fields = {
        "endpoint": endpoint_id, "worker": target.id, "address": target.worker.address,
        "reason": err.reason, "error": cause, "method": request.method,
    }  # fmt: skip
    log.warning(
        "endpoint %s: worker %s not reached (%s: %s), no byte sent: out of routing, "
        "request sent to another worker",
        endpoint_id, target.id, err.reason, cause, extra={"fields": fields},
    )  # fmt: skip


class ClientWatch:
    """aiohttp does not cancel a handler whose client hung up: every `CLIENT_WATCH_S` a
    timer (not a task: this is on every request's path) looks at the client's connection
    and cancels the handler's task once it is closed, and with it the upstream request."""

    __slots__ = ("request", "task", "timer")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.task = asyncio.current_task()
        self.timer = asyncio.get_running_loop().call_later(CLIENT_WATCH_S, self._look)

    def _look(self) -> None:
        transport = self.request.transport
        if transport is None or transport.is_closing():
            if self.task is not None:
                self.task.cancel()
            return
        self.timer = asyncio.get_running_loop().call_later(CLIENT_WATCH_S, self._look)

    def stop(self) -> None:
        self.timer.cancel()


async def _exchange(
    request: web.Request,
    router: LbRouter,
    endpoint_id: str,
    target: Target,
    entry: RegistryEntry,
    path: str,
) -> web.StreamResponse:
    limit_s = request_timeout_s(entry)
    if request.headers.get("Upgrade", "").lower() == "websocket":
        url = URL(f"http://{target.worker.address}{path}", encoded=True)
        return await _websocket(request, router, endpoint_id, target, url, entry)
    body = _Body(request)
    response: web.StreamResponse | None = None
    exchange: Exchange | None = None
    try:
        async with asyncio.timeout(limit_s):
            sent = time.perf_counter()
            exchange = await target.upstream.send(
                request.method,
                path,
                upstream_lines(request),
                body.chunks() if request.body_exists else None,
                request.content_length,
            )
            upstream = exchange.answer
            assert upstream is not None
            gateway_of(request).metrics.observe_lb_upstream(endpoint_id, time.perf_counter() - sent)
            # Copied by the answer as they are when there is no hop-by-hop header to drop
            out = downstream_headers(upstream.headers, target.id) if upstream.hop else None
            if _small(request, upstream):  # headers and body in one write, not two
                data = await upstream.read()  # its Content-Length's worth, as the head said
                response = web.Response(
                    status=upstream.status,
                    reason=upstream.reason,
                    headers=upstream.headers if out is None else out,
                    body=data,
                )
                response.headers[WORKER_ID] = target.id
                return response
            response = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers=upstream.headers if out is None else out,
            )
            response.headers[WORKER_ID] = target.id
            await response.prepare(request)
            async for chunk in upstream.chunks():
                await response.write(chunk)
            await response.write_eof()
            return response
    except TimeoutError as err:
        if response is not None:
            return _cut(request, response)  # the answer began: the client sees it end early
        raise GatewayTimeout(
            f"the request ran past the endpoint's requestTimeoutS ({limit_s:g} s)",
            headers={WORKER_ID: target.id},
        ) from err
    except (UpstreamError, OSError) as err:
        return _failed(request, router, endpoint_id, target, response, err)
    finally:
        if exchange is not None:
            exchange.release()


def _failed(
    request: web.Request,
    router: LbRouter,
    endpoint_id: str,
    target: Target,
    response: web.StreamResponse | None,
    err: UpstreamError | OSError,
) -> web.StreamResponse:
    """A connection to the worker failed once made (the request may have reached it):
    the begun answer cut, or 502 (never retried)."""
    if response is not None:  # mid-answer: too late for a status; the connection ends
        router.failed(endpoint_id, target, f"failed mid-answer: {described(err)}")
        return _cut(request, response)
    if request.transport is None or request.transport.is_closing():
        # our client left (its body stopped): nothing to answer, counted as 499
        raise ConnectionResetError(f"the client left: {err}") from err
    router.failed(endpoint_id, target, described(err))
    raise BadGateway(
        f"worker {target.id!r} did not answer: {public_error(err, target.worker)}; "
        "it is out of routing until its health check answers 200",
        headers={WORKER_ID: target.id},
    ) from err


def described(err: BaseException) -> str:
    """`err` for a log line: its class and message (never its repr: aiohttp's errors
    carry the request's headers there, the caller's cookies among them; nor, for an
    answer aiohttp refused, the URL, whose query is the caller's)."""
    if isinstance(err, aiohttp.ClientResponseError):
        return f"{err.__class__.__name__}: {err.status}, {err.message}"
    text = str(err)
    return f"{err.__class__.__name__}: {text}" if text else err.__class__.__name__


def public_error(err: BaseException, worker: LbWorker) -> str:
    """`err` as the caller may read it: `described`, without the worker's address (a pod
    IP on a cluster; its host, bracketed or not, wherever the message names it)."""
    text = described(err)
    for address in (worker.address, worker.health):
        host = address.rpartition(":")[0]
        for secret in (address, host, host.strip("[]")):
            if secret:
                text = text.replace(secret, "<worker>")
    return text


def _small(request: web.Request, upstream: Answer) -> bool:
    """An answer of known length up to `WHOLE_MAX` bytes: read whole, then sent at once
    (a stream or a chunked answer never is)."""
    length = upstream.length
    return (
        length is not None
        and length <= WHOLE_MAX
        and request.method != "HEAD"
        and upstream.status >= 200
        and upstream.status not in (204, 304)
    )


def _cut(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """End a begun answer by closing the connection (its length or last chunk never came)."""
    if request.transport is not None:
        request.transport.close()
    return response


@dataclass(frozen=True, slots=True)
class WsLimits:
    """A relayed WebSocket's time limits (s): the worker's answer to the upgrade within
    `handshake`; closed after `idle` without a message either way, and after `lifetime`
    open; the client pinged every `heartbeat` (dropped without its pong within half)."""

    handshake: float
    idle: float
    lifetime: float
    heartbeat: float


def ws_limits(entry: RegistryEntry, heartbeat_s: float) -> WsLimits:
    """The endpoint's WebSocket limits: the handshake and the idle time are its
    `requestTimeoutS`, the lifetime its `lbWebSocketMaxS`, the pings the gateway's."""
    timeout = request_timeout_s(entry)
    return WsLimits(timeout, timeout, lb_websocket_max_s(entry), heartbeat_s)


def ws_expiry(limits: WsLimits, *, now: float, opened: float, last: float) -> str | None:
    """Why a relay open since `opened`, its last message at `last`, ends at `now`; None
    while it may go on. The lifetime is named first."""
    if now - opened >= limits.lifetime:
        return f"open {limits.lifetime:g} s (the endpoint's lbWebSocketMaxS)"
    if now - last >= limits.idle:
        return f"idle {limits.idle:g} s (the endpoint's requestTimeoutS)"
    return None


async def _websocket(
    request: web.Request,
    router: LbRouter,
    endpoint_id: str,
    target: Target,
    url: URL,
    entry: RegistryEntry,
) -> web.StreamResponse:
    """Relay a WebSocket: the worker's connection first, then the client's, then messages
    both ways until either side closes or a limit (`WsLimits`) ends it. The worker's
    refusal of the upgrade is passed back as it is; its failure is 502, no answer within
    the handshake time 504. Compression is negotiated on neither side: a message's size
    on the wire is its size in memory (`MAX_BODY` at most)."""
    limits = ws_limits(entry, gateway_of(request).settings.lb_ws_heartbeat_s)
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    protocols = [p for p in offered if p]
    headers = websocket_headers(request)  # the protocols offered go as `protocols`
    attempts = track_attempts()
    deadline = asyncio.timeout(limits.handshake)
    try:
        async with deadline:
            upstream = await target.session.ws_connect(
                url, headers=headers, protocols=protocols, autoping=True,
                max_msg_size=MAX_BODY, compress=0,
            )  # fmt: skip
    except (aiohttp.ClientError, OSError) as err:  # TimeoutError is an OSError
        if attempts.refusal is not None:  # the worker's own answer: not a failure
            return _refused(attempts.refusal, target)
        if deadline.expired():
            raise GatewayTimeout(
                f"the worker did not answer the WebSocket upgrade within the endpoint's "
                f"requestTimeoutS ({limits.handshake:g} s)",
                headers={WORKER_ID: target.id},
            ) from err
        if isinstance(err, CONNECT_ERRORS) and not attempts.resent:
            raise ConnectFailed(connect_reason(err), err) from err
        router.failed(endpoint_id, target, f"WebSocket upgrade failed: {described(err)}")
        raise BadGateway(
            f"worker {target.id!r} failed the WebSocket upgrade: "
            f"{public_error(err, target.worker)}; it is out of routing until its health "
            "check answers 200",
            headers={WORKER_ID: target.id},
        ) from err
    chosen = [upstream.protocol] if upstream.protocol else []
    client = web.WebSocketResponse(
        protocols=chosen, max_msg_size=MAX_BODY, compress=False, heartbeat=limits.heartbeat
    )
    client.headers[WORKER_ID] = target.id
    async with upstream:
        await client.prepare(request)
        await _relay(client, upstream, limits)
    return client


def _refused(refusal: Refusal, target: Target) -> web.Response:
    """The worker's answer to an upgrade it refused, as the caller gets it."""
    headers = downstream_headers(refusal.headers, target.id)
    headers.popall("Content-Length", None)  # the body may be cut at REFUSAL_MAX
    return web.Response(
        status=refusal.status, reason=refusal.reason, headers=headers, body=refusal.body
    )


class _Activity:
    """When the relay last carried a message (loop time)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = asyncio.get_running_loop().time()


async def _relay(
    client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse, limits: WsLimits
) -> None:
    """Messages both ways until either side closes, or `ws_expiry` says so (then both
    are closed with 1001 and the reason)."""
    loop = asyncio.get_running_loop()
    activity = _Activity()
    opened = activity.last
    pumps = [
        asyncio.ensure_future(_pump(client, upstream, activity)),
        asyncio.ensure_future(_pump(upstream, client, activity)),
    ]
    try:
        while True:
            now = loop.time()
            why = ws_expiry(limits, now=now, opened=opened, last=activity.last)
            if why is not None:
                message = f"the gateway closed the WebSocket: {why}".encode()
                for ws in (client, upstream):
                    with contextlib.suppress(Exception):
                        await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=message)
                return
            wake = min(opened + limits.lifetime, activity.last + limits.idle) - now
            done, _ = await asyncio.wait(pumps, timeout=wake, return_when=FIRST_COMPLETED)
            if done:
                return
    finally:
        for p in pumps:
            p.cancel()
        with contextlib.suppress(Exception):
            await client.close()


async def _pump(
    source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    activity: _Activity,
) -> None:
    """Messages from one WebSocket to the other until `source` closes (or fails: a
    message over `MAX_BODY` closes it with 1009), then `sink` closed with its code."""
    async for msg in source:
        activity.last = asyncio.get_running_loop().time()
        if msg.type == aiohttp.WSMsgType.TEXT:
            await sink.send_str(msg.data)
        elif msg.type == aiohttp.WSMsgType.BINARY:
            await sink.send_bytes(msg.data)
        else:
            break
    await sink.close(code=relayed_code(source.close_code))


def relayed_code(code: int | None) -> int:
    """The close code one side's end is passed on with: its own, unless none came or it
    is one that must never be sent (RFC 6455, 7.4.1: 1005, 1006, 1015): then 1000."""
    if code is None or code in (1005, 1006, 1015) or not 1000 <= code <= 4999:
        return aiohttp.WSCloseCode.OK
    return code
