"""The gateway's HTTP server under hostile or odd bytes: issue 30's reproductions (a security
review of the hand-written fast path the gateway had until then), each sent on a real
socket to a real gateway, and the connection limits of docs/operations.md ("Connection
limits"), one test per bound.

Each asserts what aiohttp's server does or what RFC 9110/9112 require; none depends on
how TCP splits the bytes (the hostile streams are sent in many writes)."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from redis.asyncio import Redis

from conftest import make_settings, register, start_gateway
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.gateway.state import GATEWAY
from lockgate.store.connection import RedisSettings
from tests.gateway_process import GatewayProcess, run_gateway

pytestmark = pytest.mark.asyncio

MB = 1024 * 1024
HEAD_LIMIT = 8190  # aiohttp: bytes of a request line, and of each header field
HEADERS_LIMIT = 128  # aiohttp: header fields per head
QUEUE_LIMIT = 32  # aiohttp: parsed pipelined requests held per connection
LINGER_S = 2.0  # the gateways below: body_timeout_s=2 -> lingering time 2 s
MISSING_JOB = "00000000-0000-4000-8000-000000000000"


@dataclass
class Served:
    """An in-process gateway with its endpoint `echo` and keys."""

    port: int
    runner: web.AppRunner
    client_key: str
    worker_key: str

    def head(self, method: str, path: str, body: bytes = b"", **headers: str) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        lines.append(f"authorization: {self.client_key}")
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    async def queued(self) -> int:
        return (await self.runner.app[GATEWAY].store.snapshot("echo")).in_queue


@pytest.fixture
async def served(redis: Redis, redis_target: RedisSettings) -> AsyncIterator[Served]:
    client_key, worker_key = await register(redis, "echo")
    port = free_port()
    settings = make_settings(
        redis_target, port, header_timeout_s=1.0, idle_timeout_s=1.5, body_timeout_s=LINGER_S
    )
    runner = await start_gateway(settings)
    yield Served(port, runner, client_key, worker_key)
    await runner.cleanup()


@pytest.fixture
async def process(
    redis: Redis, redis_server: EmbeddedRedis, tmp_path: Path
) -> AsyncIterator[GatewayProcess]:
    """A `lockgate gateway` process, whose memory and CPU the test reads."""
    async with run_gateway(redis, redis_server, tmp_path, {}) as gateway:
        yield gateway


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer with a Content-Length (or none: 1xx, 204)."""
    status_line = await asyncio.wait_for(reader.readline(), 10)
    assert status_line, "the connection closed before an answer"
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return status, headers, body


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """The server closed (or reset) the connection within `seconds`; what it sent first is
    read and dropped."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def read_all(reader: asyncio.StreamReader, seconds: float = 10) -> bytes:
    """What the server sends until it closes or resets the connection (or `seconds`)."""
    got = b""
    try:
        async with asyncio.timeout(seconds):
            while chunk := await reader.read(65536):
                got += chunk
    except (ConnectionError, TimeoutError):
        pass
    return got


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client that vanishes does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def flood(writer: asyncio.StreamWriter, piece: bytes, limit: int, seconds: float) -> int:
    """Send `piece` again and again until the server stops taking bytes (a write does not
    drain within 2 s, or the connection fails), `limit` bytes are sent, or `seconds` pass.
    Returns the bytes sent."""
    sent = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    try:
        while sent < limit and loop.time() < end:
            writer.write(piece)
            sent += len(piece)
            await asyncio.wait_for(writer.drain(), 2)
    except (TimeoutError, ConnectionError):
        pass
    return sent


def health(process: GatewayProcess) -> bytes:
    key = process.client["authorization"]
    return f"GET /v2/echo/health HTTP/1.1\r\nHost: x\r\nauthorization: {key}\r\n\r\n".encode()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# Defect 1: a head pipelined behind a served request had no size limit.


@pytest.mark.parametrize("tail", [b"X-A: ", b"GET /v2/echo/health?q="], ids=["field", "target"])
async def test_a_head_pipelined_behind_a_request_is_refused_past_its_limit(
    process: GatewayProcess, tail: bytes
) -> None:
    reader, writer = await connect(process.port)
    first = health(process)
    second = b"GET /v2/echo/health HTTP/1.1\r\nHost: x\r\n" + tail
    if tail.startswith(b"GET"):
        second = tail
    before = rss(process.pid)
    writer.write(first + second)
    sent = await flood(writer, b"a" * 65536, 64 * MB, 20)
    # The first request is answered; the second is refused with 400 (aiohttp: "Got more
    # than 8190 bytes") and the connection closed, or reset (the client may then lose the
    # answers it had not read): either way long before 64 MB are taken.
    answers = await read_all(reader)
    assert answers == b"" or answers.startswith(b"HTTP/1.1 200"), answers[:200]
    assert b"HTTP/1.1 200" not in answers[10:], "the second head was served"
    assert sent < 32 * MB, f"the gateway took {sent / MB:.0f} MB of one head"
    assert rss(process.pid) - before < 32 * MB
    writer.close()


# Defect 2: pipelined requests were queued without limit, and ran after the client left.


async def test_pipelined_requests_unread_answers_stop_the_reading(process: GatewayProcess) -> None:
    reader, writer = await connect(process.port)
    one = health(process)
    before = rss(process.pid)
    sent = await flood(writer, one * 2000, 300_000 * len(one), 30)
    # The answers are never read: the server must stop reading (the client's writes
    # block) long before it took all 300,000 requests, and hold little memory meanwhile.
    assert sent < 300_000 * len(one), "the gateway read every pipelined request"
    assert rss(process.pid) - before < 48 * MB
    reset(writer)
    del reader


async def test_pipelined_runs_stop_when_the_client_resets(
    process: GatewayProcess, http: aiohttp.ClientSession
) -> None:
    _, writer = await connect(process.port)
    body = b'{"input": {}}'
    one = (
        f"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nauthorization: "
        f"{process.client['authorization']}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    writer.write(one * 3000)
    await writer.drain()  # in the kernel's buffers: the server may read it all at once
    await asyncio.sleep(0.05)
    reset(writer)
    await asyncio.sleep(1.5)
    queued = await jobs_made(http, process)
    await asyncio.sleep(0.5)
    assert await jobs_made(http, process) == queued, "requests still ran after the reset"
    assert queued < 500, f"{queued} of 3,000 pipelined /run requests ran after a reset"


async def jobs_made(http: aiohttp.ClientSession, process: GatewayProcess) -> int:
    async with http.get(f"{process.url}/v2/echo/health", headers=process.client) as resp:
        jobs = (await resp.json())["jobs"]
    return jobs["inQueue"] + jobs["inProgress"] + jobs["completed"]


# Defect 3: a connection whose answered request declared a body that never came stayed open.


async def test_a_declared_body_that_never_comes_closes_after_the_lingering_time(
    served: Served,
) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n")
    status, _, body = await read_answer(reader)
    assert status == 401 and "error" in orjson.loads(body)
    assert await closed_within(reader, LINGER_S + 5), "the connection was kept open"
    writer.close()


# Defect 4: `Connection: close` was not honoured when the next request came in a later read.


async def test_connection_close_is_honoured_whatever_arrives_after_it(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(
        served.head("POST", "/v2/echo/runsync?wait=1000", b'{"input": {}}', Connection="close")
    )
    await writer.drain()
    await asyncio.sleep(0.2)  # the first answer is still pending (no worker)
    writer.write(served.head("POST", "/v2/echo/run", b'{"input": {"second": 1}}'))
    await writer.drain()
    status, headers, body = await read_answer(reader)
    assert status == 200 and headers.get("connection") == "close", body
    assert await closed_within(reader, 5)
    writer.close()
    await asyncio.sleep(0.2)
    assert await served.queued() == 1  # the /runsync's job only: the /run was not served


# Defect 5: an invalid Transfer-Encoding was acted on before the error.


async def test_an_invalid_transfer_encoding_is_refused_before_anything_runs(
    served: Served, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        f"http://127.0.0.1:{served.port}/v2/echo/run",
        json={"input": {}},
        headers={"authorization": served.client_key},
    ) as resp:
        job_id = (await resp.json())["id"]
    reader, writer = await connect(served.port)
    writer.write(
        f"POST /v2/echo/cancel/{job_id} HTTP/1.1\r\nHost: x\r\nauthorization: "
        f"{served.client_key}\r\nTransfer-Encoding: xchunked\r\n\r\n".encode()
    )
    status, _, _ = await read_answer(reader)
    assert status == 400
    writer.close()
    async with http.get(
        f"http://127.0.0.1:{served.port}/v2/echo/status/{job_id}",
        headers={"authorization": served.client_key},
    ) as resp:
        assert (await resp.json())["status"] == "IN_QUEUE"


# Defect 6: trailing whitespace was kept in header values (RFC 9110, 5.5).


async def test_header_values_are_trimmed(served: Served) -> None:
    reader, writer = await connect(served.port)
    ids = []
    for key in ("k1 ", "k1", "\tk1 \t"):
        writer.write(served.head("POST", "/v2/echo/run", b'{"input": {}}', Idempotency_Key=key))
        status, _, body = await read_answer(reader)
        assert status == 200, body
        ids.append(orjson.loads(body)["id"])
    assert len(set(ids)) == 1  # one job: the same key each time
    writer.close()


# Defect 7: HTTP/1.1 without Host, or with two, was served (RFC 9112, 3.2).


@pytest.mark.parametrize("hosts", [0, 2])
async def test_http11_needs_exactly_one_host(served: Served, hosts: int) -> None:
    reader, writer = await connect(served.port)
    host_lines = "".join(f"Host: h{n}\r\n" for n in range(hosts))
    writer.write(
        f"POST /v2/echo/run HTTP/1.1\r\n{host_lines}authorization: {served.client_key}\r\n"
        'Content-Length: 13\r\n\r\n{"input": {}}'.encode()
    )
    status, _, _ = await read_answer(reader)
    assert status == 400
    writer.close()
    assert await served.queued() == 0


# Defect 8: `100 Continue` was sent to an HTTP/1.0 request.


async def test_no_100_continue_for_http10(served: Served) -> None:
    reader, writer = await connect(served.port)
    body = b'{"input": {}}'
    writer.write(
        f"POST /v2/echo/run HTTP/1.0\r\nauthorization: {served.client_key}\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    await asyncio.sleep(0.3)
    writer.write(body)
    status, _, answer = await read_answer(reader)
    assert status == 200 and "id" in orjson.loads(answer)
    writer.close()


async def test_100_continue_for_http11_comes_before_the_body(served: Served) -> None:
    reader, writer = await connect(served.port)
    body = b'{"input": {}}'
    writer.write(
        served.head("POST", "/v2/echo/run", Expect="100-continue").replace(
            b"Content-Length: 0", f"Content-Length: {len(body)}".encode()
        )
    )
    assert (await read_answer(reader))[0] == 100
    writer.write(body)
    assert (await read_answer(reader))[0] == 200
    writer.close()


# Defect 9 and the head bounds: header count and sizes.


@pytest.mark.parametrize(
    ("fields", "served_ok"), [(HEADERS_LIMIT - 8, True), (HEADERS_LIMIT + 1, False)]
)
async def test_a_head_has_at_most_128_fields(served: Served, fields: int, served_ok: bool) -> None:
    reader, writer = await connect(served.port)
    extra = {f"X_F{n}": "v" for n in range(fields - 3)}  # + Host, authorization, length
    writer.write(served.head("POST", "/v2/echo/run", b'{"input": {}}', **extra))
    status, _, body = await read_answer(reader)
    assert (status == 200) is served_ok, (status, body)
    if not served_ok:
        assert status in (400, 431)
    writer.close()


@pytest.mark.parametrize("where", ["target", "field"])
async def test_a_request_line_or_field_over_8190_bytes_is_refused(
    served: Served, where: str
) -> None:
    for size, refused in ((HEAD_LIMIT - 200, False), (HEAD_LIMIT + 10, True)):
        reader, writer = await connect(served.port)
        if where == "target":
            path = f"/v2/echo/status/{MISSING_JOB}?q=" + "a" * size
            writer.write(served.head("GET", path[: size + 30]))
        else:
            writer.write(served.head("GET", f"/v2/echo/status/{MISSING_JOB}", X_Big="a" * size))
        status, _, _ = await read_answer(reader)
        assert (status == 400) is refused or (not refused and status == 404), (size, status)
        writer.close()


# Defect 10: an upgrade arriving while a body is discarded broke the connection handling.


async def test_an_upgrade_behind_an_unread_body_is_answered_without_error(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    reader, writer = await connect(served.port)
    writer.write(
        b"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Length: 10\r\n\r\n01234"
    )
    assert (await read_answer(reader))[0] == 401
    writer.write(
        b"56789GET /v2/echo/health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\n\r\n"
    )
    await closed_within(reader, LINGER_S + 5)
    writer.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    # and the gateway serves on
    reader, writer = await connect(served.port)
    writer.write(served.head("GET", "/v2/echo/health"))
    assert (await read_answer(reader))[0] == 200
    writer.close()


# The other connection bounds: header timeout, idle keep-alive timeout.


async def test_a_silent_connection_is_closed_after_the_header_timeout(served: Served) -> None:
    reader, writer = await connect(served.port)
    assert await closed_within(reader, 10)  # header_timeout_s=1
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    served: Served,
) -> None:
    reader, writer = await connect(served.port)
    writer.write(served.head("POST", "/v2/echo/run", b'{"input": {}}'))
    assert (await read_answer(reader))[0] == 200
    started = asyncio.get_running_loop().time()
    assert await closed_within(reader, 10)  # idle_timeout_s=1.5
    assert asyncio.get_running_loop().time() - started >= 1.0
    writer.close()


async def test_pipelined_requests_are_answered_in_order(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(
        served.head("POST", "/v2/echo/run", b'{"input": {"k": 1}}')
        + served.head("GET", f"/v2/echo/status/{MISSING_JOB}")
        + served.head("GET", "/livez")
        + served.head("POST", "/v2/echo/run", b'{"input": {"k": 2}}')
    )
    answers = [await read_answer(reader) for _ in range(4)]
    assert [status for status, _, _ in answers] == [200, 404, 200, 200]
    assert "not found" in orjson.loads(answers[1][2])["error"]
    writer.close()
    assert await served.queued() == 2


async def test_a_client_gone_mid_body_costs_no_job(served: Served) -> None:
    _, writer = await connect(served.port)
    writer.write(served.head("POST", "/v2/echo/run", b'{"input": {}}' + b" " * 100)[:-90])
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.3)
    gw = served.runner.app[GATEWAY]
    assert await served.queued() == 0
    assert gw.budget.held == 0


async def test_a_body_over_the_limit_is_refused_and_the_client_reads_why(served: Served) -> None:
    reader, writer = await connect(served.port)
    head = served.head("POST", "/v2/echo/run").replace(
        b"Content-Length: 0", f"Content-Length: {11 * MB}".encode()
    )
    writer.write(head + b"x" * 100_000)
    status, headers, body = await read_answer(reader)
    assert status == 413 and "10 MB" in orjson.loads(body)["error"]
    assert headers["connection"] == "close"
    assert await closed_within(reader, 15)
    writer.close()


async def test_a_chunked_body_is_read(served: Served, http: aiohttp.ClientSession) -> None:
    async def chunks():
        yield b'{"input": '
        yield b'{"parts": 2}}'

    headers = {"authorization": served.client_key, "Content-Type": "application/json"}
    url = f"http://127.0.0.1:{served.port}/v2/echo"
    async with http.post(f"{url}/run", data=chunks(), headers=headers) as resp:
        job_id = (await resp.json())["id"]
    async with http.get(f"{url}/status/{job_id}", headers=headers) as resp:
        assert (await resp.json())["status"] == "IN_QUEUE"


async def test_shutdown_answers_a_request_in_progress(redis: Redis, redis_target) -> None:
    _, worker_key = await register(redis, "echo")
    port = free_port()
    runner = await start_gateway(make_settings(redis_target, port, take_wait_s=30.0))
    async with aiohttp.ClientSession() as http:
        take = asyncio.ensure_future(
            http.get(
                f"http://127.0.0.1:{port}/v2/echo/job-take/w1",
                headers={"authorization": worker_key},
            )
        )
        await asyncio.sleep(0.3)
        runner.app[GATEWAY].drain()  # as `lockgate gateway` does on SIGTERM
        await runner.cleanup()
        resp = await asyncio.wait_for(take, 5)
        assert resp.status == 204
        resp.release()
