"""The LB proxy's HTTP/1.1 client (lockgate/gateway/lb_upstream.py) against the library it
replaces, aiohttp's client, on loopback.

Differential: the same requests sent by both to a real aiohttp server reach it the same
(method, target, headers, body; aiohttp adds `Accept`, `Accept-Encoding` and `User-Agent`
of its own, which a proxy must not); the same answers (every framing, interim answers,
HEAD, trailers, broken ones), written by a raw server in random segments, are read the
same by both, or both fail. Fuzzed answers are generated (hypothesis, bounded by
`LOCKGATE_FUZZ_EXAMPLES`). Then what aiohttp's client did for the proxy and this one must
do too: keep-alive, the one retry of an idle connection found closed, back-pressure, and
the errors that tell "not sent" from "maybe sent"."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.dev.redis_server import free_port
from lockgate.gateway.lb_upstream import (
    MAX_FIELD_SIZE,
    MAX_HEAD_SIZE,
    MAX_HEADERS,
    MAX_LINE_SIZE,
    READ_HIGH,
    ConnectFailed,
    HeadScan,
    HeadTooLarge,
    UpstreamError,
    WorkerPool,
)

EXAMPLES = int(os.environ.get("LOCKGATE_FUZZ_EXAMPLES", "25"))
# aiohttp adds these unasked (Content-Type to a body that has none)
AIOHTTP_OWN = {"accept", "accept-encoding", "user-agent", "content-type"}
FRAMING = {"content-length", "transfer-encoding"}


# -- requests: what the worker receives ------------------------------------------------


async def record(request: web.Request) -> web.Response:
    body = await request.read()
    seen = {
        "method": request.method,
        "target": request.raw_path,
        "headers": [[k.lower(), v] for k, v in request.headers.items()],
        "body": body.hex(),
    }
    return web.Response(body=orjson.dumps(seen), content_type="application/json")


@pytest.fixture
async def recorder() -> AsyncIterator[int]:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


@dataclass(frozen=True)
class Req:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    known_length: bool = True


REQUESTS = [
    Req("GET", "/"),
    Req("GET", "/a%20b/c?x=1&y=%2F&z=%E2%82%AC"),
    Req("GET", "//double//slash/?"),
    Req("HEAD", "/head"),
    Req("DELETE", "/item/7"),
    Req("OPTIONS", "/opt"),
    Req("POST", "/empty"),
    Req("PUT", "/empty"),
    Req("POST", "/json", (("Content-Type", "application/json"),), b'{"a": 1}'),
    Req("POST", "/chunked", (("Content-Type", "text/plain"),), b"x" * 70_000, False),
    Req("PATCH", "/big", (), os.urandom(1_500_000)),
    Req("PUT", "/big-chunked", (), os.urandom(300_000), False),
    Req("POST", "/binary", (("Content-Type", "application/octet-stream"),), bytes(range(256))),
    Req(
        "GET",
        "/headers",
        (
            ("X-Twice", "one"),
            ("X-Twice", "two"),
            ("Cookie", "a=1; b=2"),
            ("Accept", "text/event-stream"),
            ("Accept-Encoding", "identity"),
            ("User-Agent", "client/1.0"),
            ("X-Unicode", "caf\u00e9"),
            ("X-Empty", ""),
        ),
    ),
]


def comparable(seen: dict, req: Req) -> dict:
    """What the worker saw, without framing headers (compared through the body) and
    without the headers aiohttp adds on its own (those the request did not have)."""
    unasked = AIOHTTP_OWN - {k.lower() for k, _ in req.headers}
    headers = [(k, v) for k, v in seen["headers"] if k not in FRAMING and k not in unasked]
    return {**seen, "headers": headers}


async def via_aiohttp(port: int, req: Req) -> dict:
    data = None
    if req.body is not None:
        data = req.body if req.known_length else chunks_of(req.body, 8192)
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.request(
            req.method,
            aiohttp.client.URL(f"http://127.0.0.1:{port}{req.target}", encoded=True),
            headers=aiohttp.client.CIMultiDict(req.headers),
            data=data,
            skip_auto_headers=AIOHTTP_OWN - {k.lower() for k, _ in req.headers},
        ) as answer,
    ):
        return orjson.loads(await answer.read()) if req.method != "HEAD" else {}


async def via_pool(pool: WorkerPool, req: Req) -> dict:
    body = None if req.body is None else chunks_of(req.body, 8192)
    length = len(req.body) if req.body is not None and req.known_length else None
    lines = b"".join(f"{k}: {v}\r\n".encode() for k, v in req.headers)
    exchange = await pool.send(req.method, req.target, lines, body, length)
    try:
        assert exchange.answer is not None
        return orjson.loads(await exchange.answer.read()) if req.method != "HEAD" else {}
    finally:
        exchange.release()


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: f"{r.method} {r.target[:20]}")
async def test_a_request_reaches_the_worker_as_aiohttps_client_sends_it(
    recorder: int, req: Req
) -> None:
    pool = WorkerPool("127.0.0.1", recorder, connect_timeout_s=5)
    try:
        ours, theirs = await via_pool(pool, req), await via_aiohttp(recorder, req)
    finally:
        pool.close()
    if req.method == "HEAD":
        return  # no body to compare: its own test below
    assert ours["target"] == req.target  # as sent: yarl drops an empty query ("?")
    theirs["target"] = ours["target"]
    assert comparable(ours, req) == comparable(theirs, req)
    assert {k for k, _ in ours["headers"]} & AIOHTTP_OWN <= {k.lower() for k, _ in req.headers}
    framing = dict(h for h in ours["headers"] if h[0] in FRAMING)
    if req.body is None:
        assert framing == ({"content-length": "0"} if req.method in ("POST", "PUT") else {})
    elif req.known_length:
        assert framing == {"content-length": str(len(req.body))}
    else:
        assert framing == {"transfer-encoding": "chunked"}


# -- answers: what the proxy reads -----------------------------------------------------

Outcome = tuple  # ("ok", status, reason, headers, body) or ("error",)


async def answering(
    reply: bytes, segments: list[int]
) -> tuple[int, asyncio.Server, list[asyncio.Task]]:
    """A raw server that reads one request head and writes `reply` in `segments`, then
    closes the connection once the client has (or after a second)."""
    handlers: list[asyncio.Task] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await reader.readuntil(b"\r\n\r\n")
            at = 0
            for size in [*segments, len(reply)]:
                if at >= len(reply):
                    break
                writer.write(reply[at : at + size])
                at += size
                await writer.drain()
                await asyncio.sleep(0)
            writer.write_eof()  # all sent: a client waiting for more sees the end
            await asyncio.wait_for(reader.read(), 1.0)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    return server.sockets[0].getsockname()[1], server, handlers


async def read_with_pool(port: int, method: str) -> Outcome:
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        exchange = await pool.send(method, "/", b"", None, None)
        try:
            answer = exchange.answer
            assert answer is not None
            body = await answer.read()
            return ("ok", answer.status, answer.reason, list(answer.headers.items()), body)
        finally:
            exchange.release()
    except UpstreamError:
        return ("error",)
    finally:
        pool.close()


async def read_with_aiohttp(port: int, method: str) -> Outcome:
    try:
        async with (
            aiohttp.ClientSession(auto_decompress=False) as session,
            session.request(method, f"http://127.0.0.1:{port}/") as answer,
        ):
            body = await answer.read()
            return ("ok", answer.status, answer.reason, list(answer.headers.items()), body)
    except aiohttp.ClientError:
        return ("error",)


async def both_read(reply: bytes, segments: list[int], method: str = "GET") -> tuple:
    port, server, handlers = await answering(reply, segments)
    try:
        return await read_with_pool(port, method), await read_with_aiohttp(port, method)
    finally:
        server.close()
        await asyncio.gather(*handlers)


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
ANSWERS = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello",
    "chunked": CHUNKED + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "chunk extensions": CHUNKED + b"5;name=value\r\nhello\r\n0\r\n\r\n",
    "trailers dropped": CHUNKED + b"5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
    "ended by close": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
    "HTTP/1.0": b"HTTP/1.0 200 OK\r\n\r\nold style",
    "204": b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
    "304 with a length": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
    "100 then 200": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "103 then 201": (
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
    ),
    "set-cookie twice": (
        b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n"
    ),
    "odd reason": b"HTTP/1.1 599 Something Odd Here\r\nContent-Length: 1\r\n\r\nx",
    "empty reason": b"HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx",
    "utf-8 header": "HTTP/1.1 200 OK\r\nX-U: café\r\nContent-Length: 0\r\n\r\n".encode(),
    "cut short": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    "cut mid-chunk": CHUNKED + b"a\r\nabc",
    "bad chunk size": CHUNKED + b"zz\r\nhello\r\n0\r\n\r\n",
    "bad status line": b"HTTP/1.1 abc OK\r\n\r\n",
    "not http": b"SSH-2.0-OpenSSH_9.6\r\n",
    "nothing": b"",
    "head only": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
}


@pytest.mark.parametrize("name", list(ANSWERS))
async def test_an_answer_is_read_as_aiohttps_client_reads_it(name: str) -> None:
    ours, theirs = await both_read(ANSWERS[name], [7, 1, 3])
    assert ours == theirs


async def test_an_answer_to_head_ends_with_its_head() -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    ours, theirs = await both_read(reply, [], method="HEAD")
    assert ours == theirs
    assert ours[0] == "ok" and ours[-1] == b""


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, list[int], str, int, str]:
    """A generated answer (mostly well formed, sometimes cut or broken) and the segments
    it is written in."""
    status = draw(st.sampled_from([200, 201, 202, 204, 206, 301, 304, 400, 404, 500, 503]))
    reason = draw(st.sampled_from(["OK", "", "Whatever It Is", "x"]))
    version = draw(st.sampled_from(["1.1", "1.1", "1.0"]))
    names = st.sampled_from(["X-A", "x-b", "Content-Type", "Set-Cookie", "Cache-Control"])
    values = st.text("abcdefghij0123456789 ;=/-", max_size=20).map(str.strip)
    headers = draw(st.lists(st.tuples(names, values), max_size=5))
    body = draw(st.binary(max_size=3000))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    interim = draw(st.booleans())
    head = "".join(f"{k}: {v}\r\n" for k, v in headers)
    if status in (204, 304):  # never a body (nor, for 204, a length)
        payload = b""
    elif framing == "length":
        head += f"Content-Length: {len(body)}\r\n"
        payload = body
    elif framing == "chunked":
        head += "Transfer-Encoding: chunked\r\n"
        sizes = draw(st.lists(st.integers(1, 700), max_size=8))
        parts, at = [], 0
        for size in [*sizes, len(body)]:
            part = body[at : at + size]
            if part:
                parts.append(b"%x\r\n%s\r\n" % (len(part), part))
            at += size
        payload = b"".join(parts) + b"0\r\n\r\n"
    else:
        payload = body
    reply = b""
    if interim and version == "1.1":
        reply = b"HTTP/1.1 100 Continue\r\n\r\n"
    reply += f"HTTP/{version} {status} {reason}\r\n{head}\r\n".encode() + payload
    damage = draw(st.sampled_from(["none", "none", "none", "truncate", "garbage"]))
    if damage == "truncate" and len(reply) > 1:
        reply = reply[: draw(st.integers(1, len(reply) - 1))]
    elif damage == "garbage":
        at = draw(st.integers(0, len(reply)))
        reply = reply[:at] + draw(st.binary(min_size=1, max_size=8)) + reply[at:]
    segments = draw(st.lists(st.integers(1, 400), max_size=6))
    return reply, segments, damage, status, framing


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("LOCKGATE_FUZZ_SEED") is None,  # `make fuzz`: fresh seeds
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=answers())
def test_fuzzed_answers_are_read_as_aiohttps_client_reads_them(
    case: tuple[bytes, list[int], str, int, str],
) -> None:
    reply, segments, damage, status, framing = case
    ours, theirs = asyncio.run(both_read(reply, segments))
    if damage == "none":
        assert ours[0] == "ok" and ours == theirs, reply
    elif theirs[0] == "ok" and ours[0] == "ok":
        assert ours == theirs, reply
    elif ours[0] == "ok":
        # Stray bytes after a whole answer whose end its framing said: this client takes
        # the answer and closes the connection; aiohttp fails the request. Never a cut
        # answer taken as whole.
        delimited = framing != "close" or status in (204, 304)
        assert damage == "garbage" and delimited, (reply, ours, theirs)
    else:
        # aiohttp's parser is lenient where llhttp's strict one is not: broken answers
        # may differ only by this client refusing what aiohttp let through.
        assert ours[0] == "error", (reply, ours, theirs)


# -- an answer's head: aiohttp's client's limits, just under and just over each ---------


def test_the_head_limits_are_aiohttps_clients_defaults() -> None:
    """The limits are the installed aiohttp's: a newer aiohttp that changed them fails here
    (and the docs' figures with it)."""
    import inspect

    defaults = inspect.signature(aiohttp.ClientSession).parameters
    assert defaults["max_line_size"].default == MAX_LINE_SIZE == 8190
    assert defaults["max_field_size"].default == MAX_FIELD_SIZE == 8190
    assert defaults["max_headers"].default == MAX_HEADERS == 128


def answer_with(*, reason: str = "OK", headers: list[str] = (), status: int = 200) -> bytes:
    """An answer with these header lines (`Name: value` each), then `Content-Length: 2`.

    A sized header comes first: aiohttp's C parser counts a header's name and value
    together against max_field_size for the first header only (its name size is reset
    once the previous header is stored; a name is then counted with the previous one's).
    This client applies the first header's rule to every header."""
    lines = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status} {reason}\r\n{lines}Content-Length: 2\r\n\r\nok".encode()


def sized(name: str, total: int, *, pad: str = " ", trail: str = "") -> str:
    """A header line whose name and value (as aiohttp counts them: the value without its
    leading whitespace, its trailing kept) are `total` bytes together."""
    return f"{name}:{pad}{'v' * (total - len(name) - len(trail))}{trail}"


def many(count: int, size: int = 20) -> list[str]:
    """Header lines for `count` headers in all (`Content-Length` is one), each `size`
    bytes counted."""
    return [sized(f"X-{i:05}", size) for i in range(count - 1)]


FIELD = MAX_FIELD_SIZE
# name: (answer, read by both); each limit just at it (read) and one byte over (refused)
LIMITS = {
    "reason at the line limit": (answer_with(reason="r" * MAX_LINE_SIZE), True),
    "reason over the line limit": (answer_with(reason="r" * (MAX_LINE_SIZE + 1)), False),
    "name over the field limit": (answer_with(headers=["n" * (FIELD + 1) + ": v"]), False),
    "name and value at the field limit": (answer_with(headers=[sized("X-Big", FIELD)]), True),
    "name and value over it": (answer_with(headers=[sized("X-Big", FIELD + 1)]), False),
    "leading whitespace not counted": (
        answer_with(headers=[sized("X-Big", FIELD, pad=" \t" * 500)]), True),
    "trailing whitespace counted": (
        answer_with(headers=[sized("X-Big", FIELD + 1, trail=" \t")]), False),
    "headers at the count limit": (answer_with(headers=many(MAX_HEADERS)), True),
    "headers over the count limit": (answer_with(headers=many(MAX_HEADERS + 1)), False),
    "the largest head": (
        answer_with(reason="r" * MAX_LINE_SIZE, headers=many(MAX_HEADERS, FIELD)), True),
    "the largest head and one header": (
        answer_with(reason="r" * MAX_LINE_SIZE, headers=many(MAX_HEADERS + 1, FIELD)), False),
    "an interim head over a limit": (
        b"HTTP/1.1 103 Early Hints\r\n" + sized("Link", FIELD + 1).encode()
        + b"\r\n\r\n" + answer_with(), False),
    "an interim head at the limits, then the answer": (
        b"HTTP/1.1 103 Early Hints\r\n" + "".join(f"{h}\r\n" for h in many(MAX_HEADERS + 1))
        .encode() + b"\r\n" + answer_with(headers=many(MAX_HEADERS)), True),
}  # fmt: skip


@pytest.mark.parametrize("segments", [[], [7, 1, 3], [MAX_LINE_SIZE, 13, 1, FIELD + 1]])
@pytest.mark.parametrize("name", list(LIMITS))
async def test_a_head_at_or_past_a_limit_is_read_or_refused_as_aiohttps_client_does(
    name: str, segments: list[int]
) -> None:
    reply, read = LIMITS[name]
    ours, theirs = await both_read(reply, segments)
    assert ours[0] == theirs[0] == ("ok" if read else "error"), (ours[0], theirs[0])
    assert ours == theirs


@st.composite
def heads_near_the_limits(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """An answer whose reason, header sizes and header count are drawn around the limits,
    written in drawn segments."""
    near = st.integers(-2, 2)
    reason = "r" * (MAX_LINE_SIZE + draw(near)) if draw(st.booleans()) else "OK"
    count = draw(st.sampled_from([2, 5, MAX_HEADERS - 1, MAX_HEADERS, MAX_HEADERS + 1]))
    headers = many(count)
    if draw(st.booleans()):
        pad = draw(st.sampled_from(["", " ", "\t  "]))
        trail = draw(st.sampled_from(["", " ", " \t"]))
        big = sized("X-Big", FIELD + draw(near), pad=pad, trail=trail)
        headers[0] = big  # first: see `answer_with`
    reply = answer_with(reason=reason, headers=headers)
    segments = draw(st.lists(st.integers(1, 3 * FIELD), max_size=8))
    return reply, segments


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("LOCKGATE_FUZZ_SEED") is None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=heads_near_the_limits())
def test_fuzzed_heads_near_the_limits_are_read_or_refused_as_aiohttps_client_does(
    case: tuple[bytes, list[int]],
) -> None:
    reply, segments = case
    ours, theirs = asyncio.run(both_read(reply, segments))
    assert ours == theirs, reply[:200]


@pytest.mark.parametrize(
    ("line", "read"),
    [(b"n" * FIELD + b":", True), (b"n" * (FIELD + 1) + b":", False),
     (b"X-A: " + b"v" * (FIELD - 3), True), (b"X-A: " + b"v" * (FIELD - 2), False),
     (b"X-A:\t \t" + b"v" * (FIELD - 3), True), (b"X-A: " + b"v" * (FIELD - 4) + b"  ", False)],
)  # fmt: skip
def test_every_header_counts_its_name_and_value_against_the_field_size(
    line: bytes, read: bool
) -> None:
    """Each header, not only the first, as aiohttp's C parser counts the first one (any
    header, in one piece or byte by byte)."""
    head = b"HTTP/1.1 200 OK\r\nX-First: 1\r\n" + line + b"\r\n\r\n"
    for pieces in ([head], [head[i : i + 1] for i in range(len(head))]):
        scan = HeadScan()
        try:
            ends = [scan.feed(piece) for piece in pieces]
        except HeadTooLarge:
            assert not read
            continue
        assert read and ends[-1] == len(pieces[-1])


def test_the_scan_finds_each_heads_end_whatever_the_pieces() -> None:
    """`HeadScan` fed an interim head, a final head and a body one byte at a time, or
    whole: the same ends, each just past its head's empty line, each told interim or
    not."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    final = b"HTTP/1.1 200 OK\r\nX-A:  1 \r\nContent-Length: 3\r\n\r\n"
    data = interim + final + b"abc"
    scan, ends, at = HeadScan(), [], 0
    while len(ends) < 2:
        at = scan.feed(data, at)
        ends.append((at, scan.interim))
    assert ends == [(len(interim), True), (len(interim) + len(final), False)]
    scan, ends = HeadScan(), []
    for i in range(len(interim) + len(final)):
        if scan.feed(data[i : i + 1]) == 1:
            ends.append((i + 1, scan.interim))
    assert ends == [(len(interim), True), (len(interim) + len(final), False)]


def test_whitespace_padding_past_the_head_size_is_refused_though_aiohttp_reads_it() -> None:
    """aiohttp counts no whitespace before a value, so its limits leave a padded head
    unbounded; this client refuses one over `MAX_HEAD_SIZE` (and reads one just under)."""
    scan = HeadScan()
    head = b"HTTP/1.1 200 OK\r\nX-Pad:" + b" " * (MAX_HEAD_SIZE - 28) + b"v\r\n\r\n"
    assert scan.feed(head) == len(head) == MAX_HEAD_SIZE
    with pytest.raises(HeadTooLarge):
        HeadScan().feed(head.replace(b"v\r\n", b"   v\r\n"))


@pytest.mark.parametrize(
    ("start", "error"),
    [(b"HTTP/1.1 200 OK\r\nX-Big: ", "over 8190 bytes"),
     (b"HTTP/1.1 200 " , "status line is over 8190"),
     (CHUNKED + b"2\r\nok\r\n0\r\nX-Trailer: ", "trailer or chunk line"),
     (CHUNKED + b"2;ext=", "trailer or chunk line")],
    ids=["header value", "reason", "trailer", "chunk extension"],
)  # fmt: skip
async def test_an_endless_line_fails_having_read_little_of_it(start: bytes, error: str) -> None:
    """A worker sending 100 MB of one header value, reason, trailer or chunk-size line
    (and never its end): the answer fails once the line is past its limit, long before
    the worker could write it all (the client closed the connection). (aiohttp's client,
    for comparison, waits for ever on a long trailer written in pieces.)"""
    written = 0

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        await reader.readuntil(b"\r\n\r\n")
        writer.write(start)
        piece = b"v" * 65536
        for _ in range(1600):
            writer.write(piece)
            await writer.drain()
            written += len(piece)

    port, server, _ = await raw(endless)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        with pytest.raises(UpstreamError, match=error):
            exchange = await pool.send("GET", "/", b"", None, None)
            try:
                assert exchange.answer is not None
                await exchange.answer.read()
            finally:
                exchange.release()
        await asyncio.sleep(0.2)  # the worker's writes fail on the closed connection
        assert written < MAX_HEAD_SIZE + 16 * 1024 * 1024  # of 100 MB: the kernel's buffers
    finally:
        pool.close()
        server.close()


async def test_a_hundred_thousand_headers_fail_at_the_129th() -> None:
    """100,000 headers: refused once the 129th is read, not passed on."""

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(100):
            writer.write(b"".join(b"X-%d: v\r\n" % (i * 1000 + j) for j in range(1000)))
            await writer.drain()
        writer.write(b"Content-Length: 0\r\n\r\n")

    port, server, _ = await raw(flood)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        with pytest.raises(HeadTooLarge, match="more than 128 headers"):
            await get(pool)
    finally:
        pool.close()
        server.close()


# -- the proxy's needs: keep-alive, retry, back-pressure, errors ------------------------


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def raw(handler: Handler) -> tuple[int, asyncio.Server, list[int]]:
    accepted: list[int] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    return server.sockets[0].getsockname()[1], server, accepted


async def get(pool: WorkerPool, method: str = "GET", body: bytes | None = None) -> bytes:
    chunks = None if body is None else chunks_of(body, 1024)
    length = None if body is None else len(body)
    exchange = await pool.send(method, "/", b"", chunks, length)
    try:
        assert exchange.answer is not None
        return await exchange.answer.read()
    finally:
        exchange.release()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def test_requests_in_turn_share_one_kept_alive_connection() -> None:
    async def serve_many(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(OK)

    port, server, accepted = await raw(serve_many)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        assert [await get(pool) for _ in range(5)] == [b"ok"] * 5
        assert len(accepted) == 1
    finally:
        pool.close()
        server.close()


async def closed_after_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer one request and read the next one, then close without answering (a worker
    closing an idle connection as the next request arrives)."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(OK)
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")


async def test_an_idle_connection_found_closed_is_retried_once_for_a_get() -> None:
    port, server, accepted = await raw(closed_after_one)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        assert await get(pool) == b"ok"
        exchange = await pool.send("GET", "/", b"", None, None)
        assert exchange.resent
        assert exchange.answer is not None and await exchange.answer.read() == b"ok"
        exchange.release()
        assert len(accepted) == 2
    finally:
        pool.close()
        server.close()


async def test_a_request_with_a_body_on_a_connection_found_closed_is_not_resent() -> None:
    port, server, accepted = await raw(closed_after_one)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        assert await get(pool) == b"ok"
        with pytest.raises(UpstreamError):
            await get(pool, "POST", b"payload")
        assert len(accepted) == 1
    finally:
        pool.close()
        server.close()


async def test_a_refused_connection_says_nothing_was_sent() -> None:
    pool = WorkerPool("127.0.0.1", free_port(), connect_timeout_s=5)
    with pytest.raises(ConnectFailed) as caught:
        await get(pool)
    assert caught.value.reason == "refused"


async def test_a_slow_reader_pauses_reading_from_the_worker() -> None:
    """An answer far larger than `READ_HIGH`, taken slowly: the bytes held here stay
    bounded (reading pauses), and every byte still arrives in order."""
    size = 8 * 1024 * 1024
    data = random.Random(7).randbytes(size)

    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        writer.write(data)
        await writer.drain()

    port, server, _ = await raw(big)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    try:
        exchange = await pool.send("GET", "/", b"", None, None)
        assert exchange.answer is not None
        got, most = [], 0
        async for chunk in exchange.answer.chunks():
            got.append(chunk)
            most = max(most, exchange._conn.buffered)
            if len(got) % 16 == 0:
                await asyncio.sleep(0.005)
        exchange.release()
        assert b"".join(got) == data
        assert most <= READ_HIGH + 256 * 1024  # one socket read past the mark at most
    finally:
        pool.close()
        server.close()


async def test_a_worker_that_stops_reading_holds_the_upload_not_memory() -> None:
    """A body sent to a worker that does not read it: writing waits (the transport's
    buffer stays near its high-water mark) instead of queueing the whole body."""
    stop = asyncio.Event()

    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stop.wait()

    port, server, _ = await raw(deaf)
    pool = WorkerPool("127.0.0.1", port, connect_timeout_s=5)
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(2000):  # 128 MB if nothing waited
            sent += 65536
            yield b"x" * 65536

    try:
        task = asyncio.ensure_future(pool.send("POST", "/", b"", body(), 2000 * 65536))
        await asyncio.sleep(1.0)
        assert not task.done()
        assert sent < 64 * 1024 * 1024  # the kernel's buffers and one high-water mark
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        stop.set()
        pool.close()
        server.close()
