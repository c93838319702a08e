"""The fast path (gateway/fastpath.py): the job and worker API routes served from llhttp
without aiohttp's request handling, everything else handed to aiohttp with its bytes.

Real gateways on loopback, real Redis; raw sockets where the bytes on the wire matter
(pipelining, hand-over mid-connection, `Expect`, malformed heads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import orjson
import pytest
from aiohttp import web
from redis.asyncio import Redis

from conftest import make_settings, register, start_gateway
from lockgate.dev.redis_server import free_port
from lockgate.gateway.fastpath import FastSite, fast_routes
from lockgate.gateway.state import GATEWAY
from lockgate.store.connection import RedisSettings

pytestmark = pytest.mark.asyncio

AIOHTTP_SERVER = "aiohttp/"  # aiohttp's answers carry `Server: Python/x aiohttp/y`


@dataclass
class Served:
    """A gateway with its site, its endpoint `echo` and keys."""

    port: int
    runner: web.AppRunner
    client_key: str
    worker_key: str

    @property
    def site(self) -> web.BaseSite:
        return next(iter(self.runner.sites))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def head(self, method: str, path: str, body: bytes = b"", **headers: str) -> bytes:
        lines = [
            f"{method} {path} HTTP/1.1",
            "Host: 127.0.0.1",
            f"authorization: {self.client_key}",
        ]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def serve(redis: Redis, target: RedisSettings, **overrides) -> Served:
    client_key, worker_key = await register(redis, "echo")
    port = free_port()
    runner = await start_gateway(make_settings(target, port, **overrides))
    return Served(port, runner, client_key, worker_key)


@pytest.fixture
async def fast(redis: Redis, redis_target: RedisSettings) -> AsyncIterator[Served]:
    served = await serve(redis, redis_target, header_timeout_s=1.0, idle_timeout_s=1.5)
    yield served
    await served.runner.cleanup()


@pytest.fixture
async def plain(redis: Redis, redis_target: RedisSettings) -> AsyncIterator[Served]:
    served = await serve(redis, redis_target, fast_path=False)
    yield served
    await served.runner.cleanup()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer with a Content-Length (or none, for 1xx and 204)."""
    status_line = await asyncio.wait_for(reader.readline(), 10)
    assert status_line, "the connection closed before an answer"
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return status, headers, body


async def submit(http: aiohttp.ClientSession, served: Served) -> str:
    async with http.post(
        f"{served.url}/v2/echo/run",
        json={"input": {"n": 1}},
        headers={"authorization": served.client_key},
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert AIOHTTP_SERVER not in resp.headers.get("Server", "")
        return (await resp.json())["id"]


async def test_the_job_and_worker_routes_are_fast_and_the_others_are_not(fast: Served) -> None:
    table = fast_routes(fast.runner.app)
    ops = {(method.decode(), op.decode()) for method, op, _ in table}
    assert {
        ("POST", "run"), ("POST", "runsync"), ("GET", "status"), ("GET", "job-take"),
        ("POST", "job-done"), ("GET", "ping"), ("POST", "cancel"), ("GET", "health"),
    } <= ops  # fmt: skip
    canonical = {route.route.resource.canonical for route in table.values()}
    assert not [c for c in canonical if c.endswith("/") or "openai" in c]
    assert table[(b"GET", b"status", 1)].names == ("endpoint", "job")
    assert table[(b"POST", b"job-done", 2)].names == ("endpoint", "worker", "job")


async def test_a_jobs_life_is_served_on_the_fast_path(fast: Served, http) -> None:
    job_id = await submit(http, fast)
    worker = {"authorization": fast.worker_key}
    async with http.get(f"{fast.url}/v2/echo/job-take/w1", headers=worker) as resp:
        assert resp.status == 200 and (await resp.json())["id"] == job_id
        assert "Server" not in resp.headers and "Date" in resp.headers
    done = f"{fast.url}/v2/echo/job-done/w1/{job_id}"
    async with http.post(done, data=orjson.dumps({"output": 7}), headers=worker) as resp:
        assert resp.status == 200 and (await resp.json())["accepted"] is True
    status = f"{fast.url}/v2/echo/status/{job_id}"
    async with http.get(status, headers={"authorization": fast.client_key}) as resp:
        body = await resp.json()
        assert (body["status"], body["output"]) == ("COMPLETED", 7)
    assert isinstance(fast.site, FastSite) and fast.site.handed_off == 0


async def test_another_request_hands_the_connection_to_aiohttp_with_its_bytes(fast: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(fast.head("POST", "/v2/echo/run", b'{"input": {}}'))
    status, headers, body = await read_answer(reader)
    assert status == 200 and "server" not in headers
    job_id = orjson.loads(body)["id"]
    writer.write(fast.head("GET", "/livez"))  # not a fast route: aiohttp answers it...
    status, headers, body = await read_answer(reader)
    assert (status, orjson.loads(body)) == (200, {"status": "ok"})
    assert AIOHTTP_SERVER in headers["server"]
    writer.write(fast.head("GET", f"/v2/echo/status/{job_id}"))  # ...and the rest
    status, headers, body = await read_answer(reader)
    assert status == 200 and orjson.loads(body)["id"] == job_id
    assert AIOHTTP_SERVER in headers["server"]
    assert fast.site.handed_off == 1
    writer.close()


async def test_pipelined_fast_requests_are_answered_in_order(fast: Served, http) -> None:
    job_id = await submit(http, fast)
    missing = "0" * 8 + "-0000-4000-8000-" + "0" * 12
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(
        fast.head("GET", f"/v2/echo/status/{job_id}")
        + fast.head("GET", f"/v2/echo/status/{missing}")
        + fast.head("POST", "/v2/echo/run", b'{"input": {"k": 2}}')
    )
    answers = [await read_answer(reader) for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 404, 200]
    assert orjson.loads(answers[0][2])["id"] == job_id
    assert "not found" in orjson.loads(answers[1][2])["error"]
    assert fast.site.handed_off == 0
    writer.close()


async def test_a_request_for_aiohttp_pipelined_behind_fast_ones_closes_after_them(
    fast: Served, http
) -> None:
    """Its start in the bytes is not known: the fast requests are answered, then the
    connection closes and the client sends the rest again (RFC 9112, 9.3.2)."""
    job_id = await submit(http, fast)
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(fast.head("GET", f"/v2/echo/status/{job_id}") + fast.head("GET", "/livez"))
    status, _, body = await read_answer(reader)
    assert status == 200 and orjson.loads(body)["id"] == job_id
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


async def test_requests_pipelined_behind_one_for_aiohttp_are_all_aiohttps(fast: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(fast.head("GET", "/livez") + fast.head("POST", "/v2/echo/run", b'{"input": {}}'))
    first, second = await read_answer(reader), await read_answer(reader)
    assert (first[0], second[0]) == (200, 200)
    assert "id" in orjson.loads(second[2]) and AIOHTTP_SERVER in second[1]["server"]
    writer.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE / HTTP/1.1\r\n\r\n",
        b"POST /v2/echo/run HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"GET /v2/echo/status/x HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
    ],
    ids=["bad-method", "two-lengths", "huge-header"],
)
async def test_heads_the_fast_path_refuses_get_aiohttps_own_answer(
    fast: Served, plain: Served, raw: bytes
) -> None:
    answers = []
    for served in (fast, plain):
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(raw)
        answers.append(await read_answer(reader))
        writer.close()
    assert answers[0][0] == answers[1][0] and 400 <= answers[0][0] < 500
    assert answers[0][2] == answers[1][2]
    assert fast.site.handed_off == 1


async def test_expect_100_continue_is_answered_before_the_body(fast: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    body = b'{"input": {"big": true}}'
    writer.write(
        f"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nauthorization: {fast.client_key}\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    status, _, _ = await read_answer(reader)
    assert status == 100
    writer.write(body)
    status, headers, answer = await read_answer(reader)
    assert status == 200 and "id" in orjson.loads(answer) and "server" not in headers
    writer.close()


async def test_a_chunked_body_is_read_on_the_fast_path(fast: Served, http) -> None:
    async def chunks():
        yield b'{"input": '
        yield b'{"parts": 2}}'

    headers = {"authorization": fast.client_key, "Content-Type": "application/json"}
    async with http.post(f"{fast.url}/v2/echo/run", data=chunks(), headers=headers) as resp:
        assert resp.status == 200 and "Server" not in resp.headers
        job_id = (await resp.json())["id"]
    async with http.get(f"{fast.url}/v2/echo/status/{job_id}", headers=headers) as resp:
        assert (await resp.json())["status"] == "IN_QUEUE"


async def test_answers_are_the_same_on_the_fast_path_and_through_aiohttp(
    fast: Served, plain: Served
) -> None:
    """Refusals made by the gateway's middlewares and handlers: the same status and body
    either way (the fast path runs the same code)."""
    cases = [
        ("POST", "/v2/echo/run", b"not json", {}),
        ("POST", "/v2/echo/run", b'{"input": {}, "policy": {"ttl": "x"}}', {}),
        ("POST", "/v2/nope/run", b'{"input": {}}', {}),
        ("GET", "/v2/echo/status/not-a-job-id", b"", {}),
        ("GET", "/v2/echo/status/00000000-0000-4000-8000-000000000000?wait=x", b"", {}),
        ("POST", "/v2/echo/runsync?wait=5", b'{"input": {}}', {}),
        ("GET", "/v2/echo/job-take/w!", b"", {}),
        ("POST", "/v2/echo/run", b'{"input": {}}', {"authorization": "wrong"}),
    ]
    for method, path, body, headers in cases:
        answers = []
        for served in (fast, plain):
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            raw = served.head(method, path, body)
            if "authorization" in headers:
                raw = raw.replace(served.client_key.encode(), headers["authorization"].encode())
            writer.write(raw)
            status, _, answer = await read_answer(reader)
            answers.append((status, orjson.loads(answer)))
            writer.close()
        assert answers[0] == answers[1], (method, path)
        assert answers[0][0] >= 400, (method, path, answers[0])
    assert fast.site.handed_off == 0


async def test_a_percent_encoded_path_is_served_through_aiohttp(fast: Served, http) -> None:
    job_id = await submit(http, fast)
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(fast.head("GET", "/v2/echo/status/" + job_id.replace("-", "%2D", 1)))
    status, headers, body = await read_answer(reader)
    assert status == 200 and orjson.loads(body)["id"] == job_id
    assert AIOHTTP_SERVER in headers["server"] and fast.site.handed_off == 1
    writer.close()


async def test_a_body_over_the_limit_is_refused_and_the_client_reads_why(fast: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    head = fast.head("POST", "/v2/echo/run").replace(
        b"Content-Length: 0", f"Content-Length: {11 * 1024 * 1024}".encode()
    )
    writer.write(head + b"x" * 100_000)
    status, headers, body = await read_answer(reader)
    assert status == 413 and "10 MB" in orjson.loads(body)["error"]
    assert headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 15) == b""
    writer.close()


async def test_a_client_gone_mid_body_costs_no_job_and_no_error(fast: Served, http) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(fast.head("POST", "/v2/echo/run", b'{"input": {}}' + b" " * 100)[:-90])
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.2)
    gw = fast.runner.app[GATEWAY]
    assert (await gw.store.snapshot("echo")).in_queue == 0
    assert gw.budget.held == 0
    await submit(http, fast)  # and the gateway serves on


async def test_a_silent_connection_is_closed_after_the_header_timeout(fast: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    assert await asyncio.wait_for(reader.read(), 10) == b""  # header_timeout_s=1
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    fast: Served,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(fast.head("POST", "/v2/echo/run", b'{"input": {}}'))
    assert (await read_answer(reader))[0] == 200
    started = asyncio.get_running_loop().time()
    assert await asyncio.wait_for(reader.read(), 10) == b""  # idle_timeout_s=1.5
    assert asyncio.get_running_loop().time() - started >= 1.0
    writer.close()


async def test_shutdown_answers_a_request_in_progress(redis: Redis, redis_target) -> None:
    served = await serve(redis, redis_target, take_wait_s=30.0)
    gw = served.runner.app[GATEWAY]
    async with aiohttp.ClientSession() as http:
        take = asyncio.ensure_future(
            http.get(
                f"{served.url}/v2/echo/job-take/w1", headers={"authorization": served.worker_key}
            )
        )
        await asyncio.sleep(0.3)
        gw.drain()  # as `lockgate gateway` does on SIGTERM, before the cleanup
        await served.runner.cleanup()
        resp = await asyncio.wait_for(take, 5)
        assert resp.status == 204
        resp.release()


async def test_with_the_fast_path_off_aiohttp_answers_everything(plain: Served, http) -> None:
    async with http.post(
        f"{plain.url}/v2/echo/run", json={"input": {}}, headers={"authorization": plain.client_key}
    ) as resp:
        assert resp.status == 200 and AIOHTTP_SERVER in resp.headers["Server"]
    assert not isinstance(plain.site, FastSite)


async def test_a_large_answer_arrives_whole(fast: Served, http) -> None:
    """An answer body over 64 KiB is written after its head, not joined to it."""
    big = "x" * 300_000
    async with http.post(
        f"{fast.url}/v2/echo/run",
        json={"input": {"big": big}},
        headers={"authorization": fast.client_key},
    ) as resp:
        job_id = (await resp.json())["id"]
    worker = {"authorization": fast.worker_key}
    async with http.get(f"{fast.url}/v2/echo/job-take/w1", headers=worker) as resp:
        assert resp.status == 200 and "Server" not in resp.headers
        assert int(resp.headers["Content-Length"]) > 300_000
        job = await resp.json()
    assert (job["id"], job["input"]["big"]) == (job_id, big)
