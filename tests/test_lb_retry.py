"""A load-balancing worker that dies without the worker list knowing (a pod deleted by
someone else, a dev worker that crashed): a request that cannot reach it before any byte
was sent goes to another worker, or is held until one is routable; a request whose bytes
reached it is never sent again. A real gateway on loopback, real Redis, real worker
processes (the FastAPI example), killed with SIGKILL; health polls of a healthy worker are
slow here (`lb_health_calm_s`), so only the failed connection tells the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import psutil
import pytest
from aiohttp.client_reqrep import ConnectionKey
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from lockgate.dev.redis_server import free_port
from lockgate.gateway.lb_upstream import connect_reason
from lockgate.store.lb_workers import HEALTHY, LbWorker, LbWorkers
from tests.conftest import REPO, LiveGateway, eventually, register

WORKER = REPO / "examples" / "loadbalancer" / "worker.py"
GATEWAY_SETTINGS = {"lb_health_calm_s": 300.0}  # a dead worker is not seen by a poll here
WORKER_ID = "X-Runpod-Worker-Id"


@dataclass
class Worker:
    """One example worker process on loopback."""

    id: str
    proc: subprocess.Popen
    port: int

    @property
    def record(self) -> LbWorker:
        return LbWorker(f"127.0.0.1:{self.port}", f"127.0.0.1:{self.port}")

    def kill(self) -> None:
        """SIGKILL: its sockets close, nobody tells the worker list."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def peers(self) -> set[tuple[str, int]]:
        """The remote ends of its established TCP connections."""
        conns = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        return {tuple(c.raddr) for c in conns if c.status == psutil.CONN_ESTABLISHED and c.raddr}


@pytest.fixture
async def workers() -> AsyncIterator[dict[str, Worker]]:
    """Two example workers, `w-a` and `w-b`, answering `/ping` 200 from the start."""
    started = {}
    for worker_id in ("w-a", "w-b"):
        port = free_port()
        env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "LOAD_SECONDS": "0",
               "RUNPOD_POD_ID": worker_id}  # fmt: skip
        proc = subprocess.Popen([sys.executable, str(WORKER)], env=env)
        started[worker_id] = Worker(worker_id, proc, port)
    try:
        async with aiohttp.ClientSession() as http:
            for w in started.values():
                await eventually(lambda w=w: _pings(http, w), f"{w.id} listening", timeout=60)
        yield started
    finally:
        for w in started.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(30)


async def _pings(http: aiohttp.ClientSession, w: Worker) -> bool:
    try:
        async with http.get(f"http://127.0.0.1:{w.port}/ping") as answer:
            return answer.status == 200
    except aiohttp.ClientError:
        return False


async def lb_endpoint(
    redis: Redis, gateway: LiveGateway, endpoint_id: str, members: list[Worker], **entry
) -> dict[str, str]:
    """An LB endpoint whose workers are `members`, each routable in the gateway (found
    healthy by its poll); the headers of a client of it."""
    client_key, _ = await register(
        redis, endpoint_id, type="LB", scalerType="REQUEST_COUNT", scalerValue=1, **entry
    )
    store = LbWorkers(redis)
    for w in members:
        await store.register(endpoint_id, w.id, w.record)
    headers = {"authorization": client_key}
    # The gateway watches an endpoint from its first request: one held for a worker that
    # does not exist, given up by its client.
    async with aiohttp.ClientSession() as http:
        ask = {**headers, WORKER_ID: "strict none"}
        with contextlib.suppress(TimeoutError):
            url = lb_url(gateway, endpoint_id, "echo/x")
            await http.get(url, headers=ask, timeout=aiohttp.ClientTimeout(total=0.5))

        async def healthy() -> bool:
            polled = await store.health(endpoint_id)
            return all(w.id in polled and polled[w.id].state == HEALTHY for w in members)

        await eventually(healthy, "every worker polled healthy", timeout=30)
    return headers


def lb_url(gateway: LiveGateway, endpoint_id: str, path: str) -> str:
    return f"{gateway.url}/lb/{endpoint_id}/{path}"


async def connect_failures(http: aiohttp.ClientSession, gateway: LiveGateway) -> dict:
    """`lockgate_lb_connect_failures_total` by (endpoint, reason)."""
    async with http.get(f"{gateway.url}/metrics") as answer:
        text = await answer.text()
    return {
        (s.labels["endpoint"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "lockgate_lb_connect_failures_total"
    }


async def test_a_request_to_a_killed_worker_goes_to_the_other_one(
    redis: Redis,
    gateway: LiveGateway,
    workers: dict[str, Worker],
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = workers["w-a"], workers["w-b"]
    headers = await lb_endpoint(redis, gateway, "lbr", [a, b], lbHoldS=5)
    async with http.get(
        lb_url(gateway, "lbr", "echo/warm"), headers={**headers, WORKER_ID: a.id}
    ) as r:
        assert r.status == 200 and r.headers[WORKER_ID] == a.id  # a kept-alive connection to a
    a.kill()
    await asyncio.sleep(0.2)  # the gateway's loop sees its kept-alive connection end
    caplog.set_level(logging.WARNING, "lockgate.gateway")
    for n in range(5):  # the first one asks for the dead worker; none may be 502
        ask = {**headers, WORKER_ID: a.id}
        async with http.post(lb_url(gateway, "lbr", f"echo/{n}"), data=b"body", headers=ask) as r:
            assert r.status == 200, await r.text()
            assert r.headers[WORKER_ID] == b.id
            assert (await r.json())["bytes"] == 4  # the body arrived whole
    assert await connect_failures(http, gateway) == {("lbr", "refused"): 1.0}  # then out
    logged = [r for r in caplog.records if "not reached" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].fields["worker"] == a.id and logged[0].fields["reason"] == "refused"


async def test_a_websocket_to_a_killed_worker_goes_to_the_other_one(
    redis: Redis, gateway: LiveGateway, workers: dict[str, Worker], http: aiohttp.ClientSession
) -> None:
    a, b = workers["w-a"], workers["w-b"]
    headers = await lb_endpoint(redis, gateway, "lbws", [a, b], lbHoldS=5)
    a.kill()
    ask = {**headers, WORKER_ID: a.id}
    async with http.ws_connect(lb_url(gateway, "lbws", "ws"), headers=ask) as ws:
        await ws.send_str("still here")
        assert (await ws.receive_str()) == "echo: still here"
    assert await connect_failures(http, gateway) == {("lbws", "refused"): 1.0}


async def test_with_no_other_worker_the_request_is_held_until_one_is_routable(
    redis: Redis, gateway: LiveGateway, workers: dict[str, Worker], http: aiohttp.ClientSession
) -> None:
    a, b = workers["w-a"], workers["w-b"]
    headers = await lb_endpoint(redis, gateway, "solo", [a], lbHoldS=60)
    a.kill()
    sent = asyncio.ensure_future(http.get(lb_url(gateway, "solo", "echo/held"), headers=headers))

    async def held() -> bool:
        if sent.done():  # answered without waiting (a 502 before this change)
            return True
        async with http.get(f"{gateway.url}/v2/solo/health", headers=headers) as answer:
            return (await answer.json())["requests"]["held"] >= 1

    await eventually(held, "the request held after a refused connection", timeout=30)
    assert not sent.done(), (await sent).status
    await LbWorkers(redis).register("solo", b.id, b.record)  # a worker started meanwhile
    answer = await sent
    assert answer.status == 200, await answer.text()
    assert answer.headers[WORKER_ID] == b.id
    answer.release()


async def test_a_request_whose_bytes_reached_the_worker_is_not_sent_again(
    redis: Redis, gateway: LiveGateway, workers: dict[str, Worker]
) -> None:
    """Headers and part of a body reach worker a, which then dies: 502 naming it, though
    worker b is routable (the request is not idempotent)."""
    a, b = workers["w-a"], workers["w-b"]
    headers = await lb_endpoint(redis, gateway, "lbp", [a, b], lbHoldS=5)
    before = a.peers()
    reader, writer = await asyncio.open_connection("127.0.0.1", int(gateway.url.rsplit(":", 1)[1]))
    writer.write(
        f"POST /lb/lbp/echo/partial HTTP/1.1\r\nHost: x\r\n"
        f"authorization: {headers['authorization']}\r\n{WORKER_ID}: {a.id}\r\n"
        f"Content-Length: 100000\r\n\r\n".encode()
        + b"x" * 1000
    )
    await writer.drain()

    async def reached() -> bool:
        return bool(a.peers() - before)

    await eventually(reached, "the gateway connected to worker a", timeout=30)
    await asyncio.sleep(0.2)  # the headers and the first bytes are on their way
    a.kill()
    try:
        writer.write(b"y" * 99000)
        await writer.drain()
    except OSError:
        pass  # the gateway answered and closed first
    head = (await asyncio.wait_for(reader.read(65536), 60)).decode(errors="replace")
    writer.close()
    assert head.startswith("HTTP/1.1 502"), head
    assert f"{WORKER_ID}: {a.id}" in head
    assert "did not answer" in head


def _connector_error(os_error: OSError) -> aiohttp.ClientConnectorError:
    key = ConnectionKey(*[None] * len(ConnectionKey._fields))
    return aiohttp.ClientConnectorError(key, os_error)


@pytest.mark.parametrize(
    ("err", "reason"),
    [
        (
            lambda: _connector_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
            "refused",
        ),
        (lambda: _connector_error(ConnectionResetError(errno.ECONNRESET, "reset")), "reset"),
        (lambda: _connector_error(OSError(errno.EHOSTUNREACH, "no route")), "unreachable"),
        (lambda: aiohttp.ConnectionTimeoutError("connect timeout"), "timeout"),
    ],
)
def test_a_connect_error_is_labelled_by_its_cause(err, reason) -> None:
    assert connect_reason(err()) == reason
