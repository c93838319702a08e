"""The fast path: the job and worker API routes served without aiohttp's per-request
machinery; every other request is served by aiohttp, as before.

Why: aiohttp spends about five times the CPU of a request parsed by llhttp (`httptools`)
and answered from an `asyncio.Protocol` (bench machine: ~160 µs against ~30 µs for a bare
echo), and a job's life is three or four requests (its submit, its worker's take and result,
a poll or two): the HTTP layer was most of the gateway's CPU per job (issue 17).

How: every connection starts on `FastConnection`. A request whose method and path name a
fast route (`fast_routes`: the application's `/v2/{endpoint}/<op>/{var}...` routes, found by
their segments, not by a regular expression per route) with a plain path and query runs the
application's own middlewares and handler with a `FastRequest` (the part of `web.Request`
they use); the answer (a `web.Response`) is written straight to the transport. Anything
else (another path, OPTIONS, a percent-encoded path, an upgrade, a head llhttp refuses or
too large) hands the connection over to aiohttp's protocol handler with the bytes of that
request exactly as received: aiohttp answers it, and the rest of the connection, as it
would have. A client that pipelines such a request behind one the fast path serves (none
of the usual clients pipeline) has the first answered and the connection closed: HTTP/1.1
clients retry unanswered pipelined requests (RFC 9112, 9.3.2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any
from urllib.parse import parse_qsl

import httptools
from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time  # the Date aiohttp sends, made once a second
from aiohttp.tcp_helpers import tcp_keepalive
from multidict import CIMultiDict, MultiDict

from lockgate.gateway.errors import BadRequest
from lockgate.settings import Settings

log = logging.getLogger("lockgate.gateway")

HEAD_LIMIT = 16 * 1024  # bytes read of a head not yet whole: past it, aiohttp's to refuse
FIELDS_LIMIT = 8190  # a target or header fields longer in all are aiohttp's (its own limit
# is 8190 bytes for the request line and for each field)
HIGH_WATER = 256 * 1024  # body bytes buffered, not yet read, before reading pauses
COPY_LIMIT = 64 * 1024  # a larger answer body is written after its head, not joined to it
Call = Callable[["FastRequest"], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class FastRoute:
    """A route of the application the fast path serves: aiohttp's route (its resource names
    the route in metrics), the names of its variable segments after the operation, and its
    handler wrapped in the application's middlewares, as aiohttp wraps it."""

    route: web.AbstractRoute
    names: tuple[str, ...]
    call: Call


def fast_routes(app: web.Application) -> dict[tuple[bytes, bytes, int], FastRoute]:
    """The fast routes of a frozen `app` by (method, operation, variable segments after it):
    every GET or POST route `/v2/{endpoint}/<op>` followed by plain `{var}` segments only.
    Trailing-slash variants, HEAD, OPTIONS and longer static paths stay aiohttp's."""
    table: dict[tuple[bytes, bytes, int], FastRoute] = {}
    for route in app.router.routes():
        resource = route.resource
        if route.method not in ("GET", "POST") or resource is None:
            continue
        parts = resource.canonical.split("/")
        if len(parts) < 4 or parts[:3] != ["", "v2", "{endpoint}"] or not _static(parts[3]):
            continue
        rest = parts[4:]
        if not all(len(p) > 2 and p[0] == "{" and p[-1] == "}" for p in rest):
            continue
        if not _default_patterns(resource):
            continue
        key = (route.method.encode(), parts[3].encode(), len(rest))
        if key in table:
            raise ValueError(f"two routes for {route.method} {resource.canonical}")
        call: Any = route.handler
        for middleware in reversed(app.middlewares):
            call = partial(middleware, handler=call)
        table[key] = FastRoute(route, ("endpoint", *(p[1:-1] for p in rest)), call)
    return table


def _default_patterns(resource: web.AbstractResource) -> bool:
    """Every variable of `resource` matches one whole segment (`{name}`, not `{name:regex}`)."""
    if not isinstance(resource, web.DynamicResource):
        return False
    default = web.DynamicResource(resource.canonical).get_info()["pattern"]
    return resource.get_info()["pattern"].pattern == default.pattern


def _static(segment: str) -> bool:
    return bool(segment) and "{" not in segment and "}" not in segment


class FastBody:
    """A fast request's body as it arrives: what `gateway.http.read_body` uses of aiohttp's
    `StreamReader` (`read_nowait`, `readany`)."""

    __slots__ = ("_chunks", "_conn", "_dropped", "_eof", "_error", "_size", "_waiter")

    def __init__(self, conn: FastConnection) -> None:
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._dropped = False

    def feed(self, data: bytes) -> None:
        if self._dropped:
            return
        self._chunks.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER:
            self._conn.pause_reading()
        self._wake()

    def end(self, error: BaseException | None = None) -> None:
        """The body is whole, or (`error`) will never be: a read raises it."""
        self._eof = True
        self._error = error
        self._wake()

    def drop(self) -> None:
        """The handler is done with the request: what is left of the body is discarded."""
        self._dropped = True
        self._chunks.clear()
        self._size = 0
        self._conn.resume_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self, n: int) -> bytes:
        if n < 0 or n >= self._size:
            data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
            self._chunks.clear()
        else:
            data = b"".join(self._chunks)
            data, rest = data[:n], data[n:]
            self._chunks.clear()
            self._chunks.append(rest)
        self._size -= len(data)
        if self._size <= HIGH_WATER:
            self._conn.resume_reading()
        return data

    def read_nowait(self, n: int = -1) -> bytes:
        """Up to `n` bytes (all with -1) of what has arrived, without waiting."""
        return self._take(n) if self._size else b""

    async def readany(self) -> bytes:
        """The next bytes to arrive; b"" at the end of the body."""
        while not self._size and not self._eof:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._size:
            return self._take(-1)
        if self._error is not None:
            raise self._error
        return b""


class FastRequest(dict):
    """What the gateway's middlewares and handlers use of `web.Request`, for a request on the
    fast path. Its per-request state is the dict itself, as `web.Request`'s is."""

    __slots__ = (
        "_conn",
        "_query",
        "_route",
        "app",
        "content",
        "expects_continue",
        "headers",
        "keep_alive",
        "match_info",
        "method",
        "path",
        "query_string",
        "sent",
        "version",
    )  # fmt: skip

    def __init__(self, conn: FastConnection, route: FastRoute, target: tuple, head: tuple):
        path, query_string, values = target
        method, version, headers, keep_alive, self.expects_continue = head
        self._conn = conn
        self._route = route
        self._query: MultiDict[str] | None = None
        self.app = conn.site.app
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers
        self.match_info = _Match(route.route, zip(route.names, values, strict=True))
        self.content = FastBody(conn)
        self.keep_alive = keep_alive
        self.version = version
        self.sent = False

    @property
    def query(self) -> MultiDict[str]:
        if self._query is None:
            self._query = MultiDict(parse_qsl(self.query_string, keep_blank_values=True))
        return self._query

    @property
    def content_length(self) -> int | None:
        declared = self.headers.get("Content-Length")
        return int(declared) if declared is not None else None

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._conn.transport

    @property
    def protocol(self) -> None:
        """No aiohttp protocol: `HeaderTimeout` watches aiohttp's connections only (a fast
        connection's header timeout is `FastSite`'s)."""
        return None

    @property
    def remote(self) -> str | None:
        peer = self._conn.peer
        return peer[0] if isinstance(peer, tuple) else peer

    async def send(self, response: web.StreamResponse) -> None:
        """Write `response` now (see `resources.send_now`): it is the request's answer."""
        self.sent = True
        await self._conn.write(self, response)


class _Match(dict):
    """`match_info`: the path's variables, and the aiohttp route they matched."""

    __slots__ = ("route",)

    def __init__(self, route: web.AbstractRoute, values: Any) -> None:
        super().__init__(values)
        self.route = route


class _HandOff(Exception):
    """Raised from a parser callback: this request is aiohttp's."""


class FastConnection(asyncio.Protocol):
    """One client connection, served on the fast path until a request is not for it."""

    def __init__(self, site: FastSite) -> None:
        self.site = site
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self._parser = httptools.HttpRequestParser(self)
        # The bytes received since the parser was last between requests at the end of a
        # read: the request now parsed starts at their first byte while `_begun` is 1.
        self._raw: list[bytes] | None = []
        self._raw_size = 0
        self._begun = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._receiving: FastRequest | None = None  # the request whose body is arriving
        self._in_message = False
        self._queue: deque[FastRequest] = deque()
        self._task: asyncio.Task | None = None
        self._handoff: bytes | None = None  # bytes for aiohttp once the answers are written
        self._stopped = False  # no more requests are read: closing after the answers
        self._discarding = False  # closing once the current request's body is in
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self.heads = 0
        self.active_at = time.monotonic()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        tcp_keepalive(transport)  # type: ignore[arg-type]
        self.site.connections.add(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.site.forget(self)
        if self._receiving is not None:
            self._receiving.content.end(ConnectionResetError("the client closed the connection"))
            self._receiving = None
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self.transport = None

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def data_received(self, data: bytes) -> None:
        if self._handoff is not None:
            self._handoff += data
            return
        if self._stopped and not self._discarding:
            return
        if self._raw is not None:
            self._raw.append(data)
            self._raw_size += len(data)
        if self._feed(data):
            self._read()

    def _feed(self, data: bytes) -> bool:
        """Parse `data`; False when the connection was handed over or stops reading."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            if not isinstance(err.__context__, _HandOff):
                log.error("fast path: %r", err.__context__, exc_info=err.__context__)
                self.shutdown()
            elif self._stopped:  # a request for aiohttp pipelined behind fast ones
                self.shutdown()
            else:
                self._hand_off()
            return False
        except httptools.HttpParserError as err:
            self._refused(err)
            return False
        return True

    def _read(self) -> None:
        """A read was parsed: between requests, the next starts at the next read's first
        byte; a head that goes on too long is aiohttp's to refuse."""
        if not self._in_message:
            self._raw, self._raw_size, self._begun = [], 0, 0
        elif self._raw is not None and (self._begun > 1 or self._raw_size > HEAD_LIMIT):
            if self._begun == 1:
                self._hand_off()
            else:
                self._raw = None

    def eof_received(self) -> bool | None:
        """The client sent its last byte: closed, as aiohttp does (a long-poll then sees
        its client gone and ends, counted as 499)."""
        self._stop()
        return None

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._begun += 1
        self._in_message = True
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._discarding:
            return
        self.heads += 1
        self.active_at = time.monotonic()
        route, target = self._route()
        head = self._head() if route is not None else None
        if route is None or head is None:
            if self._begun != 1 or self._raw is None:
                self._stop()  # pipelined behind fast requests: answer them, then close
            raise _HandOff
        request = FastRequest(self, route, target, head)
        self._raw = None  # what follows is this request's body
        self._receiving = request
        self._queue.append(request)
        if self._task is None:
            self._next()

    def on_body(self, body: bytes) -> None:
        if self._receiving is not None:
            self._receiving.content.feed(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        if self._receiving is not None:
            self._receiving.content.end()
            self._receiving = None
        if self._discarding:
            self._close()

    # parsing a request's head

    def _route(self) -> tuple[FastRoute | None, Any]:
        """The fast route of the request just parsed, and its (path, query, values); None
        for a request aiohttp must answer."""
        url = self._url
        if url[:4] != b"/v2/" or not url.isascii() or self._parser.should_upgrade():
            return None, None
        if len(url) > FIELDS_LIMIT or self._long_fields():
            return None, None
        if b"%" in url or b"#" in url or b"{" in url or b"}" in url:
            return None, None
        path, _, query = url.partition(b"?")
        if b"+" in query or b";" in query:
            return None, None
        parts = path.split(b"/")
        if len(parts) < 4 or b"" in parts[2:]:
            return None, None
        route = self.site.routes.get((self._parser.get_method(), parts[3], len(parts) - 4))
        if route is None:
            return None, None
        values = [p.decode() for p in parts[2:3] + parts[4:]]
        return route, (path.decode(), query.decode(), values)

    def _long_fields(self) -> bool:
        """The header fields are longer than aiohttp takes (counted only when the bytes
        read for this request could hold that much)."""
        if self._raw is not None and self._raw_size <= FIELDS_LIMIT:
            return False
        return sum(map(len, chain.from_iterable(self._headers))) > FIELDS_LIMIT

    def _head(self) -> tuple | None:
        """(method, version, headers, keep-alive, expects 100-continue) of the request just
        parsed; None when it expects what only aiohttp answers (an `Expect` other than
        100-continue)."""
        headers: CIMultiDict[str] = CIMultiDict(
            [(n.decode("latin-1"), v.decode("utf-8", "surrogateescape")) for n, v in self._headers]
        )
        expect = headers.get("Expect")
        if expect is not None and expect.lower() != "100-continue":
            return None
        parser = self._parser
        method = parser.get_method().decode()
        keep_alive = parser.should_keep_alive()
        return method, parser.get_http_version(), headers, keep_alive, expect is not None

    # answering

    def _next(self) -> None:
        request = self._queue.popleft()
        self._task = asyncio.get_running_loop().create_task(self._serve(request))

    async def _serve(self, request: FastRequest) -> None:
        try:
            if request.expects_continue and self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                response = await request._route.call(request)
            except web.HTTPException as err:  # not made JSON by the error middleware (< 400)
                response = err
            if not request.sent:
                await self.write(request, response)
        except Exception:
            log.exception("internal error on %s %s", request.method, request.path)
            self._stop()
            self._queue.clear()
        finally:
            self._done(request)

    def _done(self, request: FastRequest) -> None:
        """The request is answered: the next one, a hand-over, or the end."""
        self._task = None
        self.active_at = time.monotonic()
        if not request.keep_alive:
            self._stop()
            self._queue.clear()
        if self._receiving is request:  # the handler left (part of) the body unread
            request.content.drop()
            if self._stopped and not self._queue:  # read the rest, then close (so the
                # client is not reset before it reads the answer)
                self._discarding = True
                self._receiving = None
                loop = asyncio.get_running_loop()
                loop.call_later(self.site.linger_s, self._close)
                return
        if self._queue:
            self._next()
        elif self._handoff is not None:
            self._give(self._handoff)
        elif self._stopped:
            self._close()

    async def write(self, request: FastRequest, response: web.StreamResponse) -> None:
        """Write `response` as the answer to `request` (after `on_response_prepare`)."""
        for hook in request.app.on_response_prepare:
            await hook(request, response)  # type: ignore[arg-type]
        if response.keep_alive is False:  # force_close(): the rest of the body is not read
            request.keep_alive = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        body = getattr(response, "body", None) or b""
        if not isinstance(body, bytes):
            raise TypeError(f"the fast path answers with bytes bodies, not {type(body)}")
        head = [f"HTTP/1.1 {response.status} {response.reason}\r\n"]
        head.extend(f"{name}: {value}\r\n" for name, value in response.headers.items())
        if response.status != 204 and response.status >= 200:
            head.append(f"Content-Length: {len(body)}\r\n")
        if not request.keep_alive:
            head.append("Connection: close\r\n")
        elif request.version == "1.0":
            head.append("Connection: keep-alive\r\n")
        head.append(f"Date: {rfc822_formatted_time()}\r\n\r\n")
        if len(body) > COPY_LIMIT:  # not copied into one buffer with the head
            transport.write("".join(head).encode("latin-1"))
            transport.write(body)
        else:
            transport.write("".join(head).encode("latin-1") + body)
        if self._writable is not None:
            await self._writable

    # hand-over and closing

    def _hand_off(self) -> None:
        """Give the connection to aiohttp, with the bytes of the request it must answer
        first, once the answers in progress are written."""
        raw = b"".join(self._raw or ())
        self._raw = None
        if self._task is None and not self._queue:
            self._give(raw)
        else:
            self._handoff = raw
            self.pause_reading()

    def _give(self, raw: bytes) -> None:
        transport = self.transport
        self._handoff = None
        if transport is None or transport.is_closing():
            return
        self.site.forget(self)
        self.site.handed_off += 1
        protocol = self.site.aiohttp()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if raw:
            protocol.data_received(raw)
        self.transport = None
        if self._paused:
            transport.resume_reading()

    def _refused(self, err: httptools.HttpParserError) -> None:
        """llhttp refused the input: aiohttp answers a refused head its own way; a broken
        body fails its request (400) and closes the connection after the answer."""
        if self._receiving is not None:
            self._receiving.content.end(BadRequest(f"malformed request body: {err}"))
            self._receiving = None
            self._stop()
        elif self._begun <= 1 and self._raw is not None:
            self._hand_off()
        else:
            self.shutdown()

    def _stop(self) -> None:
        """Read no more requests: close once those read are answered."""
        self._stopped = True

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def pause_reading(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and self.transport is not None and self._handoff is None:
            self._paused = False
            self.transport.resume_reading()

    # timeouts and shutdown (FastSite)

    def expired(self, now: float) -> bool:
        """Idle past the keep-alive timeout, or no request head within the header timeout."""
        if self._task is not None or self._receiving is not None or self._discarding:
            return False
        limit = self.site.idle_s if self.heads else self.site.header_s
        return now - self.active_at > limit

    def shutdown(self) -> None:
        """Answer what is in progress, then close."""
        self._stop()
        if self._task is None:
            self._close()

    def abort(self) -> None:
        self._stop()
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
        if self.transport is not None:
            self.transport.abort()


def connection_options(settings: Settings) -> dict[str, float]:
    """`web.AppRunner` options for the idle keep-alive timeout and the lingering time (the
    header timeout is `Gateway.header_timeout`, watching the runner's server); a `FastSite`
    keeps the same two for the connections it serves."""
    return {
        "keepalive_timeout": settings.idle_timeout_s,
        # After an answer that left a body unread (413, 408), aiohttp reads on for this long
        # (its default: 10 s) so the client sees the answer: no longer than a body may take.
        "lingering_time": min(10.0, settings.body_timeout_s),
    }


def serving_site(
    runner: web.AppRunner,
    settings: Settings,
    port: int,
    *,
    shutdown_timeout: float = 5.0,
    reuse_port: bool | None = None,
) -> web.BaseSite:
    """The site to serve `runner` on `port`: a `FastSite`, or aiohttp's own `TCPSite` with
    `settings.fast_path` off."""
    if not settings.fast_path:
        return web.TCPSite(runner, settings.host, port, reuse_port=reuse_port)
    options = connection_options(settings)
    return FastSite(
        runner,
        settings.host,
        port,
        header_timeout_s=settings.header_timeout_s,
        idle_timeout_s=options["keepalive_timeout"],
        linger_s=options["lingering_time"],
        shutdown_timeout=shutdown_timeout,
        reuse_port=reuse_port,
    )


class FastSite(web.BaseSite):
    """A TCP site of `runner` whose connections start on the fast path (see the module);
    connections handed to aiohttp are served by the runner's own server."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str | None,
        port: int,
        *,
        header_timeout_s: float,
        idle_timeout_s: float,
        linger_s: float,
        shutdown_timeout: float = 5.0,
        reuse_port: bool | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self._reuse_port = reuse_port
        self._shutdown_timeout = shutdown_timeout
        self._sweeper: asyncio.Task | None = None
        self.header_s = header_timeout_s
        self.idle_s = idle_timeout_s
        self.linger_s = linger_s
        self.connections: set[FastConnection] = set()
        self._none_left: asyncio.Event | None = None  # set by `stop`: the last one went
        self.handed_off = 0  # connections given to aiohttp
        self.routes: dict[tuple[bytes, bytes, int], FastRoute] = {}
        self.app: web.Application = runner.app

    @property
    def name(self) -> str:
        return f"http://{self._host or '0.0.0.0'}:{self._port}"

    def aiohttp(self) -> asyncio.Protocol:
        """A connection handler of aiohttp's, for a connection handed over."""
        server = self._runner.server
        assert server is not None
        return server()

    def forget(self, conn: FastConnection) -> None:
        """`conn` is no longer the fast path's (closed, or handed to aiohttp)."""
        self.connections.discard(conn)
        if not self.connections and self._none_left is not None:
            self._none_left.set()

    async def start(self) -> None:
        await super().start()
        self.routes = fast_routes(self.app)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: FastConnection(self),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_port=self._reuse_port,
        )
        self._sweeper = loop.create_task(self._sweep(), name="lockgate-fastpath-timeouts")

    async def _sweep(self) -> None:
        """Close connections past their header or keep-alive timeout (checked each second,
        or each quarter of the header timeout when that is shorter)."""
        every = min(1.0, self.header_s / 4, self.idle_s / 4)
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for conn in [c for c in self.connections if c.expired(now)]:
                conn._close()

    async def stop(self) -> None:
        """Stop accepting; answer the requests in progress (up to the shutdown timeout),
        then close every fast connection. Handed-over ones are the runner's to close."""
        await super().stop()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._none_left = asyncio.Event()
        for conn in list(self.connections):
            conn.shutdown()
        if self.connections:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._none_left.wait(), self._shutdown_timeout)
        for conn in list(self.connections):
            conn.abort()
