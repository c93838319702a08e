"""Connections a client or worker drops, holds open or multiplies, against a real gateway
and Redis: hang-ups are no errors (499), slow or silent connections are closed after their
timeouts, and many long-polls share Redis connections instead of exhausting them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest

from lockgate.apps.gateway import start
from lockgate.dev.redis_server import free_port
from tests.conftest import REPO, LiveGateway, eventually, make_settings, register
from tests.devproc import DevProcess
from tests.gateway_process import run_gateway

# Short timeouts for the tests (seconds); a connection must be closed well within CLOSED_S.
TIMEOUTS = {"header_timeout_s": 1.0, "body_timeout_s": 1.0, "idle_timeout_s": 1.0}
CLOSED_S = 15.0


@pytest.fixture
async def served(redis, redis_server) -> AsyncIterator[LiveGateway]:
    """The gateway as `lockgate gateway` serves it (main.start), with short timeouts."""
    client_key, worker_key = await register(redis, "echo")
    settings = make_settings(redis_server.url, port := free_port(), **TIMEOUTS)
    runners = await start(settings, shutdown_timeout=1)
    url = f"http://127.0.0.1:{port}"
    yield LiveGateway(url, "echo", client_key, worker_key, settings, runners[-1].app)
    for runner in runners:
        await runner.cleanup()


async def raw(gateway: LiveGateway) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain TCP connection to the gateway."""
    host, port = gateway.url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: gateway",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def requests_by_status(http: aiohttp.ClientSession, url: str) -> dict[tuple[str, str], float]:
    """lockgate_http_requests_total by (route, status)."""
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    pattern = r'lockgate_http_requests_total\{method="\w+",route="([^"]+)",status="(\d+)"\} (\S+)'
    return {(m[1], m[2]): float(m[3]) for m in re.finditer(pattern, text)}


async def hang_up(gateway: LiveGateway, sent: bytes) -> None:
    """Send `sent` on a new connection, let the gateway start on it, then close it."""
    _, writer = await raw(gateway)
    writer.write(sent)
    await writer.drain()
    await asyncio.sleep(0.3)
    writer.close()


async def test_a_client_hanging_up_mid_body_counts_as_499_and_logs_no_error(
    http, gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate")
    headers = {**gateway.client_headers(), "Content-Type": "application/json"}
    head = request_head("POST", "/v2/echo/run", {**headers, "Content-Length": "1000"})
    await hang_up(gateway, head + b'{"input": {"half": ')  # while the body is being read
    run = ("/v2/{endpoint}/run", "499")
    counts = await eventually(
        lambda: _with(requests_by_status(http, gateway.url), run),
        "a 499 counted for /run",
        timeout=10,
    )
    assert not any(status == "500" for _, status in counts), counts
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]


async def test_a_worker_hanging_up_its_long_poll_counts_as_499_and_logs_no_error(
    http, gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate")
    head = request_head("GET", "/v2/echo/job-take/w1", gateway.worker_headers())
    await hang_up(gateway, head)  # while the long-poll waits for a job
    take = ("/v2/{endpoint}/job-take/{worker}", "499")
    counts = await eventually(
        lambda: _with(requests_by_status(http, gateway.url), take),
        "a 499 counted for job-take",
        timeout=10,
    )
    assert not any(status in ("204", "500") for _, status in counts), counts
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]


async def _with(counts_coro, key: tuple[str, str]) -> dict | None:
    counts = await counts_coro
    return counts if key in counts else None


async def closed_by_gateway(reader: asyncio.StreamReader) -> bytes:
    """Everything the gateway sends until it closes the connection (fails after CLOSED_S).
    A reset is a close too: a socket closed with bytes it has not read (a client still
    trickling its headers) goes with a RST, as the kernel does, and what came before it
    may be lost with it."""
    chunks = []
    try:
        async with asyncio.timeout(CLOSED_S):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    served: LiveGateway,
) -> None:
    reader, writer = await raw(served)
    assert await closed_by_gateway(reader) == b""
    writer.close()


async def test_a_connection_trickling_its_headers_is_closed_after_the_header_timeout(
    served: LiveGateway,
) -> None:
    reader, writer = await raw(served)
    head = request_head("GET", "/v2/echo/health", {**served.client_headers(), "X-Pad": "p" * 500})

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError):
            for byte in head[:-2]:  # never the final CRLF
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.05)

    task = asyncio.create_task(trickle())
    try:
        assert await closed_by_gateway(reader) == b""
    finally:
        task.cancel()
        writer.close()


async def test_half_a_body_is_answered_408_and_closed_after_the_body_timeout(
    served: LiveGateway,
) -> None:
    reader, writer = await raw(served)
    headers = {**served.client_headers(), "Content-Type": "application/json"}
    writer.write(request_head("POST", "/v2/echo/run", {**headers, "Content-Length": "1000"}))
    writer.write(b'{"input": {"half": ')
    await writer.drain()
    answer = await closed_by_gateway(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"not received within 1 s" in answer, answer


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    served: LiveGateway,
) -> None:
    reader, writer = await raw(served)
    writer.write(request_head("GET", "/v2/echo/health", served.client_headers()))
    await writer.drain()
    answer = await closed_by_gateway(reader)  # answered, then kept alive until the timeout
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


async def test_500_concurrent_worker_long_polls_never_run_out_of_redis_connections(
    redis, redis_server, tmp_path
) -> None:
    env = {"LOCKGATE_TAKE_WAIT_S": "3", "LOCKGATE_REDIS_MAX_CONNECTIONS": "64"}
    async with run_gateway(redis, redis_server, tmp_path, env) as gw:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

            async def poll(worker: int) -> tuple[int, str]:
                url = f"{gw.url}/v2/echo/job-take/w{worker}"
                async with http.get(url, headers=gw.worker) as r:
                    return r.status, await r.text()

            # Redis stalls for 2 s (as during a slow fsync): every request waits for it at once.
            await redis.client_pause(2000)
            answers = await asyncio.gather(*(poll(n) for n in range(500)))
    refused = [text for status, text in answers if status != 204]
    assert not refused, f"{len(refused)} of 500 long-polls refused, e.g. {refused[0]}"


async def test_lockgate_dev_closes_silent_and_idle_connections_too(tmp_path) -> None:
    """`lockgate dev` serves through its own runner: the header and idle timeouts hold there
    as well (LOCKGATE_HEADER_TIMEOUT_S, LOCKGATE_IDLE_TIMEOUT_S)."""
    env = {"LOCKGATE_HEADER_TIMEOUT_S": "1", "LOCKGATE_IDLE_TIMEOUT_S": "1"}
    handler = str(REPO / "examples" / "echo" / "handler.py")
    dev = DevProcess(handler, data_dir=tmp_path / "dev", env=env)
    with await asyncio.to_thread(dev.start):
        host, port = "127.0.0.1", dev.port
        reader, writer = await asyncio.open_connection(host, port)  # sends nothing
        assert await closed_by_gateway(reader) == b""
        writer.close()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request_head("GET", f"/v2/{dev.endpoint}/health", dev.headers()))
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        assert (await closed_by_gateway(reader)).endswith(b"}")  # the rest, then closed idle
        writer.close()
