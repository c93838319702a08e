"""WebSockets through the load-balancing proxy (issue 45, items 3 to 5): a worker's refusal
of an upgrade passed back (not a worker failure, logged without headers), no address of a
worker in an error, compression negotiated on neither side, and the time limits (the
handshake within `requestTimeoutS`, idle, lifetime, pings). A real gateway on loopback,
real Redis, and a real aiohttp worker on loopback (in this process, so each test gives
it the behaviour it needs)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import struct
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from redis.asyncio import Redis
from yarl import URL

from lockgate.dev.redis_server import free_port
from lockgate.gateway.lb_proxy import (
    described,
    public_error,
    relayed_code,
    ws_expiry,
    ws_limits,
)
from lockgate.gateway.state import GATEWAY
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store.lb_workers import LbWorker
from tests.conftest import LiveGateway, eventually
from tests.test_lb_retry import lb_endpoint, lb_url

GATEWAY_SETTINGS = {"lb_ws_heartbeat_s": 2.0}  # pings every 2 s, pong due within 1 s
WORKER_ID = "X-Runpod-Worker-Id"
COOKIE, API_KEY = "session=cookie-3c1f9e", "key-8d2a77"  # must never reach a log line
REFUSAL = "no WebSocket on this route"
_DEFLATE = zlib.compressobj(wbits=-15)
BOMB = (_DEFLATE.compress(bytes(1 << 20)) + _DEFLATE.flush(zlib.Z_SYNC_FLUSH))[:-4]  # 1 MB


@dataclass
class Worker:
    """An aiohttp worker on loopback, in this process: `/ping` 200, `/hello` 200, `/deny`
    403 (an upgrade too), `/ws` echo, `/silent` never answers, `/bad101` answers 101
    without the WebSocket handshake, `/deflated` sends a compressed frame (1 MB of zeros
    deflated) though no compression was agreed. `sockets` holds its WebSockets, open or closed."""

    id: str
    port: int = field(default_factory=free_port)
    sockets: list[web.WebSocketResponse] = field(default_factory=list)

    @property
    def record(self) -> LbWorker:
        return LbWorker(f"127.0.0.1:{self.port}", f"127.0.0.1:{self.port}")

    def app(self) -> web.Application:
        app = web.Application()
        for path, handler in (
            ("/ping", self.ok), ("/hello", self.ok), ("/deny", self.deny), ("/ws", self.echo),
            ("/silent", self.silent), ("/bad101", self.bad101), ("/deflated", self.deflated),
        ):  # fmt: skip
            app.router.add_get(path, handler)
        return app

    async def ok(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def deny(self, _request: web.Request) -> web.Response:
        return web.Response(status=403, text=REFUSAL, headers={"X-Why": "http-only"})

    async def echo(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=True)  # would deflate, were it offered
        self.sockets.append(ws)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
        return ws

    async def deflated(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        self.sockets.append(ws)
        await ws.prepare(request)
        assert request.transport is not None  # a compressed frame, though none was agreed
        request.transport.write(b"\xc2\x7e" + struct.pack("!H", len(BOMB)) + BOMB)  # RSV1
        async for _ in ws:
            pass
        return ws

    async def silent(self, _request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def bad101(self, _request: web.Request) -> web.Response:
        return web.Response(status=101, headers={"Upgrade": "websocket"})


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    w = Worker("w-ws")
    runner = web.AppRunner(w.app(), handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", w.port).start()
    yield w
    await runner.cleanup()


async def endpoint(
    redis: Redis, gateway: LiveGateway, worker: Worker, name: str, **entry
) -> dict[str, str]:
    """An LB endpoint of `worker` (routable in the gateway); its client's headers."""
    return await lb_endpoint(redis, gateway, name, [worker], lbHoldS=0, **entry)


def target(gateway: LiveGateway, endpoint_id: str, worker: Worker):
    """The gateway's routing state of `worker`."""
    return gateway.app[GATEWAY].lb.endpoints[endpoint_id].targets[worker.id]


def upgrade_headers(headers: dict[str, str]) -> dict[str, str]:
    """`headers` with a WebSocket upgrade's own (sent by a plain request, to read the
    answer's body), the caller's cookie and an API key header."""
    key = base64.b64encode(os.urandom(16)).decode()
    return {
        **headers, "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key,
        "Cookie": COOKIE, "X-Api-Key": API_KEY,
    }  # fmt: skip


# -- item 3: a refused upgrade -------------------------------------------------------------


async def test_a_refused_upgrade_is_passed_back_and_the_worker_stays_routable(
    redis: Redis, gateway: LiveGateway, worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    headers = await endpoint(redis, gateway, worker, "wsdeny")
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as http:
        url = lb_url(gateway, "wsdeny", "deny")
        async with http.get(url, headers=upgrade_headers(headers)) as answer:
            assert answer.status == 403
            assert await answer.text() == REFUSAL
            assert answer.headers["X-Why"] == "http-only"
            assert answer.headers[WORKER_ID] == worker.id
        t = target(gateway, "wsdeny", worker)
        assert t.routable and t.failed_at == float("-inf")  # not taken for a failure
        # routable at once: strict, and no hold (lbHoldS 0) to wait for a health poll
        strict = {**headers, WORKER_ID: f"strict {worker.id}"}
        async with http.get(lb_url(gateway, "wsdeny", "hello"), headers=strict) as answer:
            assert answer.status == 200
    for secret in (COOKIE, API_KEY, headers["authorization"]):
        assert secret not in caplog.text


async def test_a_failed_upgrade_is_502_without_the_workers_address(
    redis: Redis, gateway: LiveGateway, worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    """A 101 without the handshake is the worker's failure: 502, out of routing, and
    neither the answer nor the log line holds the caller's headers; the answer names no
    address of the worker."""
    headers = await endpoint(redis, gateway, worker, "wsbad")
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as http:
        url = lb_url(gateway, "wsbad", "bad101")
        async with http.get(url, headers=upgrade_headers(headers)) as answer:
            assert answer.status == 502
            error = (await answer.json())["error"]
    assert "127.0.0.1" not in error and str(worker.port) not in error, error
    assert not target(gateway, "wsbad", worker).routable
    assert "out of routing" in caplog.text
    for secret in (COOKIE, API_KEY, headers["authorization"]):
        assert secret not in caplog.text


@pytest.mark.parametrize(
    "address",
    ["10.1.2.3:8000", "[fd00::7]:8000", "worker-0.svc:8000"],
)
def test_a_public_error_names_no_address_of_the_worker(address: str) -> None:
    host = address.rpartition(":")[0].strip("[]")
    err = ConnectionRefusedError(111, f"Connect call failed ('{host}', 8000)")
    text = public_error(err, LbWorker(address, address.replace("8000", "8001")))
    assert host not in text and "ConnectionRefusedError" in text
    url = aiohttp.ClientConnectionError(f"Cannot connect to host {address} ssl:default")
    assert address not in public_error(url, LbWorker(address, address))


def test_a_refused_answer_is_described_without_its_url_or_headers() -> None:
    info = aiohttp.RequestInfo(
        URL("http://10.1.2.3:8000/ws?token=t0k3n"), "GET",
        CIMultiDictProxy(CIMultiDict({"Cookie": COOKIE})), URL("http://10.1.2.3:8000/ws"),
    )  # fmt: skip
    err = aiohttp.WSServerHandshakeError(info, (), status=101, message="Invalid upgrade header")
    assert described(err) == "WSServerHandshakeError: 101, Invalid upgrade header"


# -- item 4: compression --------------------------------------------------------------------


async def test_compression_is_negotiated_with_neither_the_client_nor_the_worker(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    headers = await endpoint(redis, gateway, worker, "wsflate")
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(lb_url(gateway, "wsflate", "ws"), headers=headers, compress=15) as ws,
    ):
        assert ws.compress == 0  # the client's offer was declined
        await ws.send_bytes(bytes(1000))
        msg = await ws.receive(timeout=10)
        assert msg.data == bytes(1000)
    assert worker.sockets[0].compress == 0  # the gateway offered the worker nothing


async def test_a_compressed_frame_from_a_client_is_refused_not_inflated(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    """A client sending a deflated frame anyway (4 MB of zeros in ~4 KB) is closed with
    1002 (RFC 6455, 5.2: a reserved bit no extension defines), and the worker never
    receives the message."""
    headers = await endpoint(redis, gateway, worker, "wsraw")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.settings.port)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        head = (
            f"GET /lb/wsraw/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Extensions: permessage-deflate\r\n"
            f"authorization: {headers['authorization']}\r\n\r\n"
        )
        writer.write(head.encode())
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert answer.startswith(b"HTTP/1.1 101")
        assert b"sec-websocket-extensions" not in answer.lower()
        deflate = zlib.compressobj(wbits=-15)
        payload = (deflate.compress(bytes(4 * 1024 * 1024)) + deflate.flush(zlib.Z_SYNC_FLUSH))[:-4]
        writer.write(_frame(0x80 | 0x40 | 0x2, payload))  # FIN, RSV1 (compressed), binary
        close = await asyncio.wait_for(reader.readexactly(4), 10)
        assert close[0] & 0x0F == 0x8  # a close frame
        assert struct.unpack("!H", close[2:4])[0] == 1002
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    assert len(worker.sockets) == 1
    await eventually(lambda: _closed(worker.sockets[0]), "the worker's socket closed", 10)


async def test_a_compressed_frame_from_a_worker_is_refused_not_inflated(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    """The worker->client direction: the gateway offered the worker no compression, so a
    compressed frame from it is a protocol error (1002), passed on to the client."""
    headers = await endpoint(redis, gateway, worker, "wsraw2")
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(lb_url(gateway, "wsraw2", "deflated"), headers=headers) as ws,
    ):
        msg = await ws.receive(timeout=10)
        assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1002)
    await eventually(lambda: _closed(worker.sockets[0]), "the worker's socket closed", 10)


def _frame(first: int, payload: bytes) -> bytes:
    """A masked client frame (RFC 6455, 5.2)."""
    size = len(payload)
    mask = os.urandom(4)
    if size < 126:
        head = struct.pack("!BB", first, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", first, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, size)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


async def _closed(ws: web.WebSocketResponse) -> bool:
    return ws.closed


async def _released(gateway: LiveGateway, endpoint_id: str, worker: Worker) -> bool:
    """The worker has no request in flight in the gateway."""
    return target(gateway, endpoint_id, worker).in_flight == 0


# -- item 5: time limits --------------------------------------------------------------------


async def test_an_upgrade_the_worker_never_answers_is_504_at_the_request_timeout(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    headers = await endpoint(redis, gateway, worker, "wsslow", requestTimeoutS=1)
    async with aiohttp.ClientSession() as http, asyncio.timeout(15):
        url = lb_url(gateway, "wsslow", "silent")
        async with http.get(url, headers=upgrade_headers(headers)) as answer:
            assert answer.status == 504
            assert "requestTimeoutS (1 s)" in (await answer.json())["error"]
    assert target(gateway, "wsslow", worker).routable


async def test_a_relay_idle_past_the_request_timeout_is_closed(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    headers = await endpoint(redis, gateway, worker, "wsidle", requestTimeoutS=1)
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(lb_url(gateway, "wsidle", "ws"), headers=headers) as ws,
    ):
        msg = await ws.receive(timeout=15)
        assert msg.type == aiohttp.WSMsgType.CLOSE
        assert (msg.data, msg.extra) == (1001, "the gateway closed the WebSocket: idle 1 s "
                                               "(the endpoint's requestTimeoutS)")  # fmt: skip
    await eventually(lambda: _closed(worker.sockets[0]), "the worker's socket closed", 10)
    await eventually(lambda: _released(gateway, "wsidle", worker), "the relay released", 10)


async def test_a_relay_is_closed_at_its_maximum_lifetime_though_busy(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    headers = await endpoint(
        redis, gateway, worker, "wslife", requestTimeoutS=60, lbWebSocketMaxS=1
    )
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(lb_url(gateway, "wslife", "ws"), headers=headers) as ws,
        asyncio.timeout(15),
    ):
        sender = asyncio.create_task(_keep_busy(ws))  # never idle: a message every 0.1 s
        try:
            while (msg := await ws.receive()).type == aiohttp.WSMsgType.BINARY:
                pass  # the echoes
        finally:
            sender.cancel()
    assert msg.type == aiohttp.WSMsgType.CLOSE
    assert msg.data == 1001 and "lbWebSocketMaxS" in msg.extra


async def _keep_busy(ws: aiohttp.ClientWebSocketResponse) -> None:
    with contextlib.suppress(aiohttp.ClientConnectionResetError):
        while not ws.closed:
            await ws.send_bytes(b"x")
            await asyncio.sleep(0.1)


async def test_a_client_that_stops_answering_pings_is_dropped_and_released(
    redis: Redis, gateway: LiveGateway, worker: Worker
) -> None:
    """The client neither reads nor answers pings (`autoping=False`); the gateway's
    heartbeat (2 s here) drops it: the worker's socket closes and the request leaves
    the in-flight count. The idle limit (60 s) is not what closes it."""
    headers = await endpoint(redis, gateway, worker, "wsgone", requestTimeoutS=60)
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(lb_url(gateway, "wsgone", "ws"), headers=headers, autoping=False),
    ):
        assert target(gateway, "wsgone", worker).in_flight == 1

        await eventually(lambda: _released(gateway, "wsgone", worker), "the relay released", 15)
        await eventually(lambda: _closed(worker.sockets[0]), "the worker's socket closed", 10)


# -- the decisions ------------------------------------------------------------------------


def test_the_limits_are_the_endpoints_and_the_lifetime_is_named_first() -> None:
    limits = ws_limits(RegistryEntry(id="ws", requestTimeoutS=5, lbWebSocketMaxS=60), 30.0)
    assert (limits.handshake, limits.idle, limits.lifetime, limits.heartbeat) == (5, 5, 60, 30)
    assert ws_limits(RegistryEntry(id="ws"), 30.0).lifetime == 3600  # entries before the field
    assert ws_expiry(limits, now=4.0, opened=0.0, last=0.0) is None
    assert "requestTimeoutS" in (ws_expiry(limits, now=5.0, opened=0.0, last=0.0) or "")
    assert "lbWebSocketMaxS" in (ws_expiry(limits, now=60.0, opened=0.0, last=59.0) or "")


@pytest.mark.parametrize(
    ("code", "relayed"), [(None, 1000), (1000, 1000), (1009, 1009), (4001, 4001),
                          (1005, 1000), (1006, 1000), (1015, 1000), (999, 1000)],
)  # fmt: skip
def test_a_close_code_is_relayed_unless_it_must_not_be_sent(code, relayed) -> None:
    assert relayed_code(code) == relayed
