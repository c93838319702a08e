"""The load-balancing proxy's HTTP/1.1 client to one worker: kept-alive connections, the
request's body streamed out as it arrives, the answer's body streamed back as it comes.

Each connection is an `asyncio.Protocol` whose answers llhttp parses (httptools, by the
makers of uvloop; `worker/http.py` is the worker runtime's smaller sibling). aiohttp's
client spent ~47 us of CPU per small request here against ~16 us for this one, on a
path where the whole proxied request costs the gateway ~140 us (docs/load-balancing.md,
"Proxy overhead"). tests/test_lb_upstream.py checks it against aiohttp's client on the
same requests and answers (differential, and fuzzed answers); WebSocket upgrades and
health polls stay with aiohttp.

What a proxy needs and no more: the caller's headers are sent as given (nothing added
but `Host` and the body's framing: a proxy must not add `Accept-Encoding` the client did
not send); a body of known length is sent with it, one of unknown length chunked; an
answer with a length, chunked, or ended by the connection closing; interim (1xx) answers
skipped; an answer to HEAD ends with its head (and its connection is not reused: the
parser cannot be told the method). Back-pressure both ways: writing waits while the
worker's socket buffer is full, reading pauses while the client has not taken
`READ_HIGH` bytes. A kept-alive connection found closed by the worker before any byte of
the answer came is retried once on a new one for an idempotent request without a body
(RFC 9112, 9.3.1.1), as aiohttp does; the retry's errors then say the request may have
reached the worker (`Resent`).

An answer's head keeps aiohttp's client's limits (`HeadScan`, checked on the bytes as they
arrive, before llhttp sees them: llhttp itself has none, and httptools joins a header's
pieces anew on each read, so a 100 MB value cost the square of its size). Past them,
or past `MAX_HEAD_SIZE` in all, the answer fails (`HeadTooLarge`: 502 to the client)
having read at most one socket read past the limit.
"""

from __future__ import annotations

import asyncio
import errno
import re
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import cast

import httptools
from multidict import CIMultiDict

IDLE_KEEP_S = 30.0  # an idle connection older than this is closed, not reused
MAX_IDLE = 256  # idle connections kept per worker
READ_HIGH = 256 * 1024  # answer bytes buffered for a slow client before reading pauses
READ_LOW = 64 * 1024  # ...and resumes below this
HOP_BY_HOP = frozenset(  # RFC 9110, 7.6.1: headers a proxy does not pass on
    (b"connection", b"proxy-connection", b"keep-alive", b"te", b"transfer-encoding",
     b"trailer", b"upgrade", b"proxy-authorization", b"proxy-authenticate"),
)  # fmt: skip
RETRYABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
NEEDS_LENGTH = frozenset({"POST", "PUT", "PATCH"})  # sent `Content-Length: 0` when empty
# An answer head's limits: aiohttp's client's (ClientSession's defaults in aiohttp 3.14,
# max_line_size=8190, max_field_size=8190, max_headers=128, as its C parser applies them:
# the reason phrase against max_line_size, a header's name and then name + value (the
# value without its leading whitespace, its trailing kept) against max_field_size, the
# 129th header refused; the same for each interim (1xx) head).
MAX_LINE_SIZE = 8190
MAX_FIELD_SIZE = 8190
MAX_HEADERS = 128
# Ours (aiohttp has none): a whole head, and a run of answer bytes that completes nothing
# the parser reports (a trailer, a chunk-size line). aiohttp's limits bound a head to
# ~1.06 MB unless it is padded with whitespace before values, which this refuses past 2 MiB.
MAX_HEAD_SIZE = 2 * 1024 * 1024
STATUS_PREFIX = len(b"HTTP/1.1 200 ")  # a status line's bytes before its reason phrase
_OWS = re.compile(rb"[ \t]*")


class ConnectFailed(Exception):
    """No connection to the worker: nothing of the request was sent. `reason`: refused,
    reset, timeout or unreachable."""

    def __init__(self, reason: str, cause: BaseException) -> None:
        super().__init__(f"{cause.__class__.__name__}: {cause}")
        self.reason, self.cause = reason, cause


class UpstreamError(Exception):
    """The connection failed, or the worker's answer could not be read, once the request
    began: the worker may have seen it."""


class HeadTooLarge(UpstreamError):
    """The answer's head is past a limit (aiohttp's client's, or `MAX_HEAD_SIZE`)."""


class HeadScan:
    """Where an answer's head ends, its limits checked as its bytes arrive, in pieces:
    each byte looked at once (by `bytes.find` and one regex match per piece of a line),
    so the cost is linear in what was read. One per connection; it starts over after
    each head (`feed` returned its end)."""

    __slots__ = ("code", "colon", "cr", "headers", "interim", "length", "ows", "padding", "size")

    def __init__(self) -> None:
        self.interim = False  # the head `feed` last ended was an interim (1xx) one
        self.restart()

    def restart(self) -> None:
        """Scan a new head."""
        self.size = 0  # bytes of this head so far
        self.headers = -1  # lines ended in it, less the status line
        self.code = 0  # its status code's first digit (a byte), once read
        self._line()

    def _line(self) -> None:
        self.length = 0  # bytes of the current line so far (without its LF)
        self.colon = -1  # a header line's name length once its colon came
        self.ows = 0  # whitespace before the value so far
        self.padding = True  # nothing but whitespace after the colon yet
        self.cr = False  # the line's last byte so far is CR (its end's, if LF follows)

    def feed(self, data: bytes, at: int = 0) -> int:
        """Scan `data[at:]`: the offset just past the head's end (the scan starts over
        for the next head), or -1 when the head goes on past it. HeadTooLarge past a
        limit (before the rest of the line was read)."""
        if self.size == 0:  # the common case: a small head whole in one read
            end = data.find(b"\r\n\r\n", at)
            small = end >= 0 and end + 4 - at <= MAX_FIELD_SIZE  # no line can be over
            if small and data.count(b"\n", at, end) <= MAX_HEADERS:
                self.interim = end - at > 9 and data[at + 9] == 0x31  # b"HTTP/1.1 1"
                return end + 4
        n = len(data)
        while at < n:
            nl = data.find(b"\n", at)
            end = n if nl < 0 else nl
            if end > at:
                self._take(data, at, end)
            if nl < 0:
                self._check()
                return -1
            self.size += 1
            self._check()
            at = nl + 1
            if self.length - self.cr == 0 and self.headers >= 0:  # the empty line
                self.interim = self.code == 0x31
                self.restart()
                return at
            if self.length - self.cr:  # (empty lines before a status line: llhttp's call)
                self.headers += 1
                if self.headers > MAX_HEADERS:
                    raise HeadTooLarge(f"more than {MAX_HEADERS} headers in the answer")
            self._line()
        return -1

    def _take(self, data: bytes, at: int, end: int) -> None:
        """Count the line's bytes `data[at:end]` (no LF among them)."""
        value = at
        if self.headers < 0 and self.length <= 9 < self.length + end - at:
            self.code = data[at + 9 - self.length]
        elif self.headers >= 0 and self.colon < 0:
            colon = data.find(b":", at, end)
            value = end if colon < 0 else colon + 1
            if colon >= 0:
                self.colon = self.length + colon - at
        if self.colon >= 0 and self.padding and value < end:
            spaces = _OWS.match(data, value, end)  # `*`: it always matches, maybe nothing
            skipped = (spaces.end() if spaces else value) - value
            self.ows += skipped
            self.padding = value + skipped == end
        self.length += end - at
        self.size += end - at
        self.cr = data[end - 1] == 13

    def _check(self) -> None:
        """HeadTooLarge when the head or the line so far is past a limit (a CR last is
        not counted: it may be the line's end)."""
        if self.size > MAX_HEAD_SIZE:
            raise HeadTooLarge(f"the answer's head is over {MAX_HEAD_SIZE} bytes")
        content = self.length - self.cr
        if self.headers < 0:
            if content - STATUS_PREFIX > MAX_LINE_SIZE:
                raise HeadTooLarge(f"the answer's status line is over {MAX_LINE_SIZE} bytes")
        elif (self.colon < 0 and content > MAX_FIELD_SIZE) or self.colon > MAX_FIELD_SIZE:
            raise HeadTooLarge(f"a header name of the answer is over {MAX_FIELD_SIZE} bytes")
        elif self.colon >= 0 and content - 1 - self.ows > MAX_FIELD_SIZE:
            raise HeadTooLarge(f"a header of the answer is over {MAX_FIELD_SIZE} bytes")


def connect_reason(err: BaseException) -> str:
    """`ConnectFailed.reason` of a failed connection attempt."""
    if isinstance(err, TimeoutError):
        return "timeout"
    code: int | None = getattr(err, "errno", None)
    reasons = {errno.ECONNREFUSED: "refused", errno.ECONNRESET: "reset"}
    return reasons.get(code, "unreachable") if code is not None else "unreachable"


class Answer:
    """The worker's answer: status, reason and headers, then its body as it comes."""

    __slots__ = ("_conn", "headers", "hop", "length", "reason", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = conn.status
        self.reason = conn.reason
        self.headers = conn.headers
        self.hop = conn.hop  # it has a hop-by-hop header
        self.length = conn.length

    async def read(self) -> bytes:
        """The whole body."""
        conn = self._conn
        if conn.complete and conn.error is None:  # all in already (a small answer)
            body, conn.body, conn.buffered = b"".join(conn.body), deque(), 0
            if conn.reading_paused:
                conn.resume_reading()
            return body
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (UpstreamError if the answer breaks off)."""
        conn = self._conn
        while True:
            while conn.body:
                chunk = conn.body.popleft()
                conn.buffered -= len(chunk)
                if conn.reading_paused and conn.buffered <= READ_LOW:
                    conn.resume_reading()
                yield chunk
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                return
            conn.waiter = asyncio.get_running_loop().create_future()
            await conn.waiter


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request on it at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.scan = HeadScan()
        self.closed = False
        self.idle_since = 0.0
        self.writable: asyncio.Future[None] | None = None  # set while writing is paused
        self.reading_paused = False
        self._reset(head_only=False)

    def _reset(self, *, head_only: bool) -> None:
        self.head_only = head_only  # the request was HEAD: no body follows the head
        self.received = False  # a byte of this request's answer came
        self.status, self.reason, self.reason_bytes = 0, "", b""
        self.length: int | None = None  # the answer's Content-Length, unless chunked
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.in_head = True  # headers seen are the answer's (not a chunked answer's trailers)
        self.scanning = True  # the heads' limits are checked until the final one's end
        self.scan.restart()
        self.heard = False  # the parser reported something in the body's last read
        self.quiet = 0  # body bytes read in a row that the parser reported nothing of
        self.framed = False  # it says where it ends (Content-Length or chunked)
        self.hop = False  # a hop-by-hop header came
        self.keep = False
        self.head: asyncio.Future[None] | None = None  # done when the final head is in
        self.body: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_connection's: a stream

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self.head is None or self.complete:  # nothing asked: not an answer of ours
            self._fail(UpstreamError("the worker sent bytes no request asked for"))
            return
        try:
            if not self.scanning:
                self._feed_body(data)
            else:
                self._feed_heads(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("the worker switched protocols unasked"))
        except HeadTooLarge as err:
            self._fail(err)
        except httptools.HttpParserError as err:
            self._fail(UpstreamError(f"the worker's answer could not be read: {err}"))

    def _feed_heads(self, data: bytes) -> None:
        """Feed the parser each head once its limits are checked, then the rest: the
        final head and its body's first bytes in one call."""
        at = 0
        while self.scanning:
            end = self.scan.feed(data, at)
            if end < 0 or not self.scan.interim:
                self.parser.feed_data(data[at:] if at else data)
                return
            self.parser.feed_data(data[at:end])  # an interim head: another one follows
            at = end
            if self.closed:
                return
        if at < len(data):
            self._feed_body(data[at:])

    def _feed_body(self, data: bytes) -> None:
        """Feed body bytes; refuse a run of `MAX_HEAD_SIZE` bytes that completes nothing
        (a trailer or chunk-size line: httptools joins a trailer's pieces as a head's)."""
        self.heard = False
        self.parser.feed_data(data)
        if self.heard:
            self.quiet = 0
            return
        self.quiet += len(data)
        if self.quiet > MAX_HEAD_SIZE:
            raise HeadTooLarge(f"over {MAX_HEAD_SIZE} bytes of a trailer or chunk line")

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost ends the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head is None:
            return  # idle
        if self.status and not self.complete and not self.framed and not self.in_head:
            self._done()  # an answer without a length ends when its connection does
        else:
            why = f"{exc.__class__.__name__}: {exc}" if exc else "EOF"
            self._fail(UpstreamError(f"the worker closed the connection ({why})"))
        self._wake_writer()

    def pause_writing(self) -> None:
        if self.writable is None:
            self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    # -- httptools callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.status:  # bytes after the final answer: not ours to read
            raise UpstreamError("the worker sent more than its answer")
        self.headers, self.in_head, self.framed, self.hop = CIMultiDict(), True, False, False
        self.reason_bytes = b""

    def on_status(self, reason: bytes) -> None:
        self.reason_bytes += reason  # in pieces when the status line came in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.in_head:
            self.heard = True
            return  # trailers are dropped, as aiohttp's client does
        key = name.decode("utf-8", "surrogateescape")
        # llhttp leaves a value's trailing whitespace in (RFC 9110, 5.5: not part of it)
        self.headers.add(key, value.rstrip(b" \t").decode("utf-8", "surrogateescape"))
        low = name.lower()
        if low == b"content-length" or low == b"transfer-encoding":
            self.framed = True
        if low in HOP_BY_HOP:
            self.hop = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.in_head = False
        if 100 <= status < 200:
            return  # interim: the final answer follows (its head scanned as this one)
        self.scanning = False
        self.status = status
        self.reason = self.reason_bytes.decode("utf-8", "surrogateescape")
        self.keep = self.parser.should_keep_alive() and not self.head_only
        length = self.headers.get("Content-Length")
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        self.length = int(length) if length and length.isdigit() and not chunked else None
        if self.head is not None and not self.head.done():
            self.head.set_result(None)
        if self.head_only:
            self._done()

    def on_body(self, body: bytes) -> None:
        self.heard = True
        if self.complete:
            return
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > READ_HIGH and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def on_message_complete(self) -> None:
        self.heard = True
        if self.status and not self.complete:  # not an interim answer's end
            self._done()

    # -- the request ---------------------------------------------------------------------

    def begin(self, *, head_only: bool) -> asyncio.Future[None]:
        self._reset(head_only=head_only)
        self.head = asyncio.get_running_loop().create_future()
        return self.head

    def resume_reading(self) -> None:
        self.reading_paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    async def drain(self) -> None:
        """Wait while the worker's socket buffer is full."""
        if self.writable is not None:
            await self.writable
        if self.closed:
            raise self.error or UpstreamError("the worker closed the connection")

    def _done(self) -> None:
        self.complete = True
        if not self.keep:
            self.close()
        self._wake_reader()

    def _fail(self, err: UpstreamError) -> None:
        if self.error is None and not self.complete:
            self.error = err
            if self.head is not None and not self.head.done():
                self.head.set_exception(err)
                self.head.exception()  # retrieved: a caller gone meanwhile is fine
        self.close()
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_writer(self) -> None:
        writable, self.writable = self.writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Exchange:
    """One request in progress on a connection: `answer` (its head; the body streams),
    then `release` (the connection kept for another request when the exchange ended
    cleanly, else closed)."""

    __slots__ = ("_conn", "_pool", "answer", "resent")

    def __init__(self, pool: WorkerPool, conn: _Connection, resent: bool) -> None:
        self._pool, self._conn = pool, conn
        self.answer: Answer | None = None
        self.resent = resent

    def release(self) -> None:
        conn = self._conn
        if conn.complete and conn.keep and not conn.closed and not conn.body:
            self._pool.keep(conn)
        else:
            conn.close()


class WorkerPool:
    """Kept-alive connections to one worker (`host`:`port`)."""

    def __init__(self, host: str, port: int, *, connect_timeout_s: float) -> None:
        self.host, self.port = host, port
        self.authority = f"Host: {host}:{port}\r\n".encode("latin-1")
        self.connect_timeout_s = connect_timeout_s
        self._idle: deque[_Connection] = deque()
        self._busy: set[_Connection] = set()

    async def send(
        self,
        method: str,
        target: str,
        headers: bytes,
        body: AsyncIterator[bytes] | None,
        length: int | None,
    ) -> Exchange:
        """Send a request (`target`: path and query, as sent; `headers`: its header lines,
        `Name: value\r\n` each, without `Host` and framing; `body`: its bytes as they
        come, `length` when known, else sent chunked) and wait for the answer's head.
        `release()` the exchange when done with its body. ConnectFailed before anything
        was sent; UpstreamError after."""
        lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self.authority, headers]
        if body is not None:
            lines.append(
                f"Content-Length: {length}\r\n\r\n".encode()
                if length is not None
                else b"Transfer-Encoding: chunked\r\n\r\n"
            )
        else:
            lines.append(b"Content-Length: 0\r\n\r\n" if method in NEEDS_LENGTH else b"\r\n")
        head = b"".join(lines)
        conn, reused = self._reuse(), True
        if conn is None:
            conn, reused = await self._connect(), False
        resent = False
        while True:
            exchange = Exchange(self, conn, resent)
            self._busy.add(conn)
            try:
                answered = conn.begin(head_only=method == "HEAD")
                if body is None:
                    assert conn.transport is not None  # connected: set, never unset
                    conn.transport.write(head)
                else:
                    await self._write_body(conn, head, body, length is None)
                await answered
                exchange.answer = Answer(conn)
                return exchange
            except UpstreamError:
                conn.close()
                retry = reused and not conn.received and body is None and method in RETRYABLE
                if not retry:
                    raise
                # Closed by the worker while idle, before it read the request: once more
                # on a new connection (the other idle ones may be as old).
                self._drop_idle()
                resent, reused = True, False
                try:
                    conn = await self._connect()
                except ConnectFailed as err:
                    raise UpstreamError(f"the retry's connection failed: {err}") from err
            except BaseException:  # a timeout or cancel: its answer may still come
                conn.close()
                raise
            finally:
                self._busy.discard(conn)

    async def _write_body(
        self, conn: _Connection, head: bytes, body: AsyncIterator[bytes], chunked: bool
    ) -> None:
        transport = conn.transport
        assert transport is not None
        transport.write(head)
        async for chunk in body:
            if not chunk:
                continue
            if conn.closed:
                raise conn.error or UpstreamError("the worker closed the connection")
            if chunked:
                transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
            else:
                transport.write(chunk)
            await conn.drain()
        if chunked:
            transport.write(b"0\r\n\r\n")

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()  # the most recently used: the least likely closed
            if not conn.closed and now - conn.idle_since < IDLE_KEEP_S:
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_Connection, self.host, self.port)
        except (OSError, TimeoutError) as err:
            raise ConnectFailed(connect_reason(err), err) from err
        return conn

    def keep(self, conn: _Connection) -> None:
        """Keep a connection whose exchange ended cleanly for the next request."""
        if len(self._idle) >= MAX_IDLE:
            self._idle.popleft().close()
        conn.head = None
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def _drop_idle(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def close(self) -> None:
        """Close every connection (requests in progress fail)."""
        self._drop_idle()
        for conn in list(self._busy):
            conn.close()
