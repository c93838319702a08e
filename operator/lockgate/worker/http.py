"""A small HTTP/1.1 client for the worker's calls to the gateway.

Keep-alive connections, each an `asyncio.Protocol` whose answers llhttp parses (httptools,
the parser uvloop's makers wrap). The worker makes one call per job (its result, which
brings the next job back), so the client's own cost is the runtime's: aiohttp's request
and response machinery spent more CPU per call than the no-op job it carried.

What the worker needs and no more: plain or TLS (`https://`, the system's CA store)
connections; answers with a length, chunked, or ended by the connection closing; a
connection found closed by the gateway while idle is retried once on a new one, before any
byte of its answer came. No proxies, redirects, cookies or compression.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Mapping
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from urllib.parse import quote, urlencode, urlsplit

import httptools

# An idle connection older than this is closed rather than reused: below the gateway's
# keep-alive timeout (75 s by default), so a reused one is rarely found closed.
IDLE_KEEP_S = 30.0
MAX_IDLE = 8  # idle connections kept per gateway address
COPY_LIMIT = 64 * 1024  # a larger body is written after its head, not joined to it
# What a path may hold as it is (RFC 3986 pchar and "/"); the rest is percent-encoded.
PATH_SAFE = "/:@!$&'()*+,;=-._~%"
FRAMING = (b"content-length", b"transfer-encoding")  # headers that say where an answer ends


def _user_agent() -> str:
    try:
        return f"lockgate-worker/{version('lockgate')}"
    except PackageNotFoundError:  # run from a source tree
        return "lockgate-worker"


USER_AGENT = _user_agent()


class HttpError(Exception):
    """The connection failed, or its answer could not be read."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one call on it at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.received = False  # a byte of the current call's answer came
        self.closed = False
        self.idle_since = 0.0
        self._status = 0
        self._keep = False
        self._framed = False  # the answer says its length (Content-Length or chunked)
        self._complete = False
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._fail(HttpError(f"the gateway's answer could not be read: {err}"))

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost ends the call

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._status and not self._complete and not self._framed:
            self._finish()  # an answer without a length ends when its connection does
        else:
            self._fail(HttpError(f"the gateway closed the connection ({exc or 'EOF'})"))

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._status, self._framed, self._complete, self._body = 0, False, False, []

    def on_header(self, name: bytes, _value: bytes) -> None:
        if name.lower() in FRAMING:
            self._framed = True

    def on_headers_complete(self) -> None:
        self._status = self.parser.get_status_code()
        self._keep = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        self._finish()

    # the call

    def _finish(self) -> None:
        answer, self.answer = self.answer, None
        body, self._body = b"".join(self._body), []
        if not self._keep:
            self.close()
        if answer is not None and not answer.done():
            answer.set_result((self._status, body))

    def _fail(self, err: HttpError) -> None:
        self.close()
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(err)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


@lru_cache(maxsize=256)
def _split(url: str) -> tuple[bool, str, int, str, str]:
    """(TLS, host, port, Host header, path with its query) of an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"not an http(s) URL: {url!r}")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as err:
        raise HttpError(f"{url!r}: {err}") from None
    target = quote(parts.path or "/", safe=PATH_SAFE)
    if parts.query:
        target += "?" + parts.query
    return tls, parts.hostname, port, parts.netloc.rpartition("@")[2], target


Address = tuple[bool, str, int]  # (TLS, host, port)


class HttpClient:
    """Calls over kept-alive connections; `close()` ends them."""

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self._head_lines = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._idle: dict[Address, deque[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        url: str,
        *,
        timeout_s: float,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of one call. HttpError or OSError when the connection fails;
        TimeoutError after `timeout_s`."""
        tls, host, port, authority, target = _split(url)
        if params:
            target += ("&" if "?" in target else "?") + urlencode(params, safe=",:")
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\n", self._head_lines]
        lines.extend(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        lines.append(f"User-Agent: {USER_AGENT}\r\nContent-Length: {len(data or b'')}\r\n\r\n")
        head = "".join(lines).encode("latin-1")
        async with asyncio.timeout(timeout_s):
            return await self._call((tls, host, port), head, data or b"")

    async def _call(self, key: Address, head: bytes, body: bytes) -> tuple[int, bytes]:
        conn, reused = self._reuse(key), True
        if conn is None:
            conn, reused = await self._connect(key), False
        while True:
            self._busy.add(conn)
            try:
                answer = await self._send(conn, head, body)
            except HttpError:
                if not reused or conn.received:
                    raise
                # Closed by the gateway while it was idle (before it read the call): once
                # more on a new connection; the other idle ones may be as old.
                self._drop_idle(key)
                conn, reused = await self._connect(key), False
                continue
            except BaseException:  # a timeout or cancel: its answer may still come
                conn.close()
                raise
            finally:
                self._busy.discard(conn)
            self._release(key, conn)
            return answer

    async def _send(self, conn: _Connection, head: bytes, body: bytes) -> tuple[int, bytes]:
        assert conn.transport is not None
        conn.answer = asyncio.get_running_loop().create_future()
        conn.received = False
        if len(body) > COPY_LIMIT:
            conn.transport.write(head)
            conn.transport.write(body)
        else:
            conn.transport.write(head + body)
        return await conn.answer

    def _reuse(self, key: Address) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed
            if not conn.closed and now - conn.idle_since < IDLE_KEEP_S:
                return conn
            conn.close()
        return None

    async def _connect(self, key: Address) -> _Connection:
        tls, host, port = key
        loop = asyncio.get_running_loop()
        if tls and self._tls is None:
            self._tls = ssl.create_default_context()
        _, conn = await loop.create_connection(
            _Connection, host, port, ssl=self._tls if tls else None
        )
        return conn

    def _release(self, key: Address, conn: _Connection) -> None:
        if conn.closed:
            return
        idle = self._idle.setdefault(key, deque())
        if len(idle) >= MAX_IDLE:
            idle.popleft().close()
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def _drop_idle(self, key: Address) -> None:
        for conn in self._idle.pop(key, ()):
            conn.close()

    async def close(self) -> None:
        """Close every connection (calls in progress fail)."""
        for key in list(self._idle):
            self._drop_idle(key)
        for conn in list(self._busy):
            conn.close()
        await asyncio.sleep(0)  # let the transports close
