"""The worker's HTTP client (lockgate/worker/http.py) against real servers on loopback:
aiohttp's server for what a gateway answers, and raw asyncio servers for what it should
not (a connection closed before, during or instead of an answer, a broken head)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from lockgate.dev.redis_server import free_port
from lockgate.worker.http import HttpClient, HttpError
from tests.test_redis_auth_modes import make_tls

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Echo:
    """An aiohttp server that answers each call with what it received, and counts the
    connections its calls came on."""

    def __init__(self) -> None:
        self.peers: list[object] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.peers.append(peer)
        if request.path == "/slow":
            await asyncio.sleep(1)
        body = await request.read()
        answer = {
            "method": request.method,
            "target": request.raw_path,
            "body": body.decode(),
            "headers": {k: request.headers.get(k) for k in ("Authorization", "Content-Type")},
            "agent": request.headers.get("User-Agent", ""),
        }
        if request.path == "/chunked":
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            for part in (b"one,", b"two,", b"three"):
                await response.write(part)
            await response.write_eof()
            return response
        return web.json_response(answer)

    @property
    def connections(self) -> int:
        return len(set(self.peers))


async def serve_echo(ssl_context: ssl.SSLContext | None = None, **runner: float):
    echo = Echo()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo.handle)
    app_runner = web.AppRunner(app, **runner)
    await app_runner.setup()
    port = free_port()
    await web.TCPSite(app_runner, "127.0.0.1", port, ssl_context=ssl_context).start()
    echo.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    return echo, app_runner


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    served, runner = await serve_echo()
    yield served
    await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = HttpClient({"Authorization": "Bearer k"})
    yield http
    await http.close()


async def raw_server(answer: Answer) -> tuple[str, asyncio.Server, list[int]]:
    """A server that runs `answer` on each connection; the list counts connections."""
    accepted: list[int] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await answer(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server, accepted


async def test_calls_reuse_one_connection_and_carry_the_body_and_headers(
    echo: Echo, client: HttpClient
) -> None:
    for i in range(20):
        status, body = await client.request(
            "POST", f"{echo.url}/v2/ep/job-done/w1/j{i}", params={"take": "1", "ids": "a,b"},
            data=b'{"output": 1}', headers={"Content-Type": "application/json"}, timeout_s=5,
        )  # fmt: skip
        assert status == 200
    got = orjson.loads(body)
    assert got["method"] == "POST"
    assert got["target"] == "/v2/ep/job-done/w1/j19?take=1&ids=a,b"  # "," kept: the fast path
    assert got["body"] == '{"output": 1}'
    assert got["headers"] == {"Authorization": "Bearer k", "Content-Type": "application/json"}
    assert got["agent"].startswith("lockgate-worker")
    assert echo.connections == 1


async def test_a_path_is_percent_encoded_and_a_query_in_the_url_kept(
    echo: Echo, client: HttpClient
) -> None:
    _, body = await client.request("GET", f"{echo.url}/a b/ü?x=1", params={"y": "2"}, timeout_s=5)
    assert orjson.loads(body)["target"] == "/a%20b/%C3%BC?x=1&y=2"


async def test_concurrent_calls_each_get_their_own_connection_then_share_them(
    echo: Echo, client: HttpClient
) -> None:
    calls = [client.request("GET", f"{echo.url}/x{i}", timeout_s=5) for i in range(4)]
    assert [status for status, _ in await asyncio.gather(*calls)] == [200] * 4
    assert echo.connections == 4
    for _ in range(4):
        await client.request("GET", f"{echo.url}/again", timeout_s=5)
    assert echo.connections == 4  # the idle ones were reused


async def test_a_chunked_answer_is_read_whole(echo: Echo, client: HttpClient) -> None:
    assert await client.request("GET", f"{echo.url}/chunked", timeout_s=5) == (
        200,
        b"one,two,three",
    )


async def test_an_answer_ended_by_closing_the_connection(client: HttpClient) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()

    url, server, accepted = await raw_server(answer)
    async with server:
        assert await client.request("GET", url, timeout_s=5) == (200, b"all of it")
        assert await client.request("GET", url, timeout_s=5) == (200, b"all of it")
    assert len(accepted) == 2  # not reused: it was closed


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",  # cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # cut mid-chunk
        b"this is not http\r\n\r\n",
        b"",  # closed without a byte
    ],
    ids=["short", "chunk", "garbage", "nothing"],
)
async def test_a_broken_answer_is_an_error(client: HttpClient, reply: bytes) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()

    url, server, accepted = await raw_server(answer)
    async with server:
        with pytest.raises(HttpError):
            await client.request("POST", url, data=b"{}", timeout_s=5)
    assert len(accepted) == 1  # a fresh connection's failure is not retried


async def test_a_kept_connection_found_closed_is_retried_once_on_a_new_one(
    client: HttpClient,
) -> None:
    """The server answers one call per connection although it says keep-alive, then
    closes when the next call comes (as a gateway that timed the connection out while it
    was idle): the call goes again on a new connection, not as an error."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next call: closed unanswered

    url, server, accepted = await raw_server(answer)
    async with server:
        for _ in range(3):
            assert await client.request("GET", url, timeout_s=5) == (200, b"ok")
    assert len(accepted) == 3


async def test_a_call_that_fails_again_on_its_retry_is_an_error(client: HttpClient) -> None:
    calls = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        await reader.readuntil(b"\r\n\r\n")
        calls += 1
        if calls == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # the second call, on the kept connection

    url, server, accepted = await raw_server(answer)
    async with server:
        await client.request("GET", url, timeout_s=5)
        with pytest.raises(HttpError):
            await client.request("GET", url, timeout_s=5)
    assert len(accepted) == 2  # the kept one, then one retry


async def test_a_timed_out_call_leaves_no_connection_to_reuse(
    echo: Echo, client: HttpClient
) -> None:
    with pytest.raises(TimeoutError):
        await client.request("GET", f"{echo.url}/slow", timeout_s=0.3)
    assert await client.request("GET", f"{echo.url}/fast", timeout_s=5)
    assert echo.connections == 2  # its late answer cannot be taken for the next call's


async def test_a_refused_connection_is_an_os_error(client: HttpClient) -> None:
    with pytest.raises(OSError):
        await client.request("GET", f"http://127.0.0.1:{free_port()}/", timeout_s=5)


async def test_not_an_http_url(client: HttpClient) -> None:
    with pytest.raises(HttpError, match="not an http"):
        await client.request("GET", "ftp://127.0.0.1/x", timeout_s=5)


async def test_https_with_the_systems_ca_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`https://` gateway URLs: verified against the CA store OpenSSL is pointed at (here
    SSL_CERT_FILE, as a worker image with a private CA would set it)."""
    tls = make_tls(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    served, runner = await serve_echo(context)
    try:
        untrusted = HttpClient()
        with pytest.raises(ssl.SSLCertVerificationError):
            await untrusted.request("GET", f"{served.url}/x", timeout_s=5)
        await untrusted.close()
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
        trusted = HttpClient()
        status, _ = await trusted.request("GET", f"{served.url}/x", timeout_s=5)
        await trusted.close()
        assert status == 200
    finally:
        await runner.cleanup()
