"""The worker API on its own port (`LOCKGATE_WORKER_PORT`), so that a NetworkPolicy can
admit only worker pods to it: a real gateway started as `lockgate gateway` starts it
(`apps.gateway.start`), driven over real HTTP. With the port set, worker routes answer
there and 404 on the client port, and client routes the other way round; without it, one
port serves both, as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web
from pydantic import ValidationError
from redis.asyncio import Redis

from lockgate.apps.gateway import start
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.gateway import batch_api, client_api, openai_api, worker_api
from lockgate.gateway.app import create_app, create_worker_app
from lockgate.gateway.state import GATEWAY
from lockgate.settings import Settings
from tests.conftest import LiveGateway, make_settings, register

WORKER = "w1"
JOB = "00000000-0000-0000-0000-000000000000"


@dataclass
class SplitGateway:
    """A gateway whose client and worker APIs listen on two ports."""

    client_url: str
    worker_url: str
    client_key: str
    worker_key: str


@pytest.fixture
async def split(redis: Redis, redis_server: EmbeddedRedis) -> AsyncIterator[SplitGateway]:
    client_key, worker_key = await register(redis, "echo")
    port, worker_port = free_port(), free_port()
    settings = make_settings(redis_server.url, port, worker_port=worker_port)
    runners = await start(settings, handle_signals=False, shutdown_timeout=1)
    yield SplitGateway(
        f"http://127.0.0.1:{port}/v2/echo",
        f"http://127.0.0.1:{worker_port}/v2/echo",
        client_key,
        worker_key,
    )
    for runner in runners:
        await runner.cleanup()


# Every worker route of worker_api.py, with a path the route accepts.
WORKER_ROUTES = [
    ("GET", f"job-take/{WORKER}"),
    ("GET", f"job-take-batch/{WORKER}?batch_size=2"),
    ("POST", f"job-done/{WORKER}/{JOB}"),
    ("POST", f"job-stream/{WORKER}/{JOB}"),
    ("GET", f"ping/{WORKER}"),
    ("GET", f"job-stop/{WORKER}"),
]


@pytest.mark.parametrize(("method", "path"), WORKER_ROUTES, ids=[p for _, p in WORKER_ROUTES])
async def test_worker_routes_are_not_found_on_the_client_port(
    split: SplitGateway, http: aiohttp.ClientSession, method: str, path: str
) -> None:
    headers = {"authorization": split.worker_key}
    async with http.request(
        method, f"{split.client_url}/{path}", headers=headers, json={"output": 1}
    ) as response:
        assert response.status == 404
        assert "error" in await response.json()


async def test_a_job_goes_from_the_client_port_through_the_worker_port_and_back(
    split: SplitGateway, http: aiohttp.ClientSession
) -> None:
    client, worker = {"authorization": split.client_key}, {"authorization": split.worker_key}
    async with http.post(f"{split.client_url}/run", headers=client, json={"input": {"n": 7}}) as r:
        assert r.status == 200
        job_id = (await r.json())["id"]
    async with http.get(f"{split.worker_url}/ping/{WORKER}", headers=worker) as r:
        assert r.status == 200
    async with http.get(f"{split.worker_url}/job-take/{WORKER}", headers=worker) as r:
        assert r.status == 200
        assert (await r.json())["id"] == job_id
    done = f"{split.worker_url}/job-done/{WORKER}/{job_id}"
    async with http.post(done, headers=worker, json={"output": {"doubled": 14}}) as r:
        assert r.status == 200
    async with http.get(f"{split.client_url}/status/{job_id}", headers=client) as r:
        body = await r.json()
    assert (body["status"], body["output"]) == ("COMPLETED", {"doubled": 14})


async def test_the_worker_port_serves_neither_the_job_api_nor_metrics(
    split: SplitGateway, http: aiohttp.ClientSession
) -> None:
    client = {"authorization": split.client_key}
    async with http.post(f"{split.worker_url}/run", headers=client, json={"input": 1}) as r:
        assert r.status == 404
    root = split.worker_url.removesuffix("/v2/echo")
    async with http.get(f"{root}/metrics") as r:
        assert r.status == 404
    async with http.get(f"{root}/readyz") as r:  # probes may target either port
        assert r.status == 200


async def test_without_a_worker_port_the_client_port_serves_workers_as_before(
    gateway: LiveGateway, http: aiohttp.ClientSession
) -> None:
    assert gateway.settings.worker_port == 0
    async with http.get(gateway.job_url(f"ping/{WORKER}"), headers=gateway.worker_headers()) as r:
        assert r.status == 200


def test_a_worker_port_equal_to_the_client_port_is_refused() -> None:
    with pytest.raises(ValidationError, match="worker_port must differ from port"):
        Settings(port=8080, worker_port=8080)


def _paths(app: web.Application) -> list[str]:
    return [r.canonical for r in app.router.resources() if r.canonical.startswith("/v2/")]


def test_both_ports_try_the_routes_of_a_jobs_life_first(redis: Redis) -> None:
    """aiohttp tries routes in the order they were added: a job's submit, its worker's take
    and result, and its polls are found first; every route is still served, each
    trailing-slash variant after all the routes without one."""
    one = create_app(make_settings("redis://unused", 1), redis=redis)
    assert _paths(one)[:5] == [
        "/v2/{endpoint}/run",
        "/v2/{endpoint}/runsync",
        "/v2/{endpoint}/job-done/{worker}/{job}",
        "/v2/{endpoint}/job-take/{worker}",
        "/v2/{endpoint}/status/{job}",
    ]
    slashed = [p.endswith("/") for p in _paths(one)]
    assert slashed == sorted(slashed) and any(slashed)
    declared = [*client_api.routes, *batch_api.routes, *openai_api.routes, *worker_api.routes]
    assert len(set(_paths(one))) == len({r.path for r in declared})  # none lost
    split = create_app(make_settings("redis://unused", 1, worker_port=2), redis=redis)
    workers = create_worker_app(split[GATEWAY])
    assert _paths(workers)[:2] == [
        "/v2/{endpoint}/job-done/{worker}/{job}",
        "/v2/{endpoint}/job-take/{worker}",
    ]
    assert len(_paths(workers)) == len({r.path for r in worker_api.routes})
    assert not set(_paths(workers)) & set(_paths(split))
