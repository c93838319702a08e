"""Shared fixtures: a real Redis (session), a real gateway on loopback (per test)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from aiohttp import web
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.gateway import create_app
from lockgate.gateway.serving import app_runner, serve_runner
from lockgate.gateway.state import GATEWAY
from lockgate.models.registry_entry import RegistryEntry
from lockgate.settings import Settings
from lockgate.store import Registry, connect
from lockgate.store.connection import RedisSettings

# The suite's upkeep: time per module, no process left behind (tests/run_report.py).
from tests.run_report import (  # noqa: F401
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the real-node tests first, in their modules' order. They must live in
    `test_node*.py` modules: that is how the xdist scheduler below tells them apart."""
    items.sort(key=lambda item: item.get_closest_marker("node") is None)
    for item in items:
        if item.get_closest_marker("node") is not None and not on_node(item.nodeid):
            raise pytest.UsageError(f"{item.nodeid}: a real-node test outside test_node*.py")


NODE_GROUP = "real-node"


def on_node(nodeid: str) -> bool:
    """Whether a test id is of a real-node module (`tests/test_node*.py`)."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].startswith("test_node")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under `make test` (pytest-xdist, `--dist loadscope`) each module runs whole on one
    worker (its fixtures set up once), and every real-node module is one scope: they share
    one node (tests/node_fixtures.py), first, on one worker, while the other worker takes
    the remaining modules one by one."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class NodeTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return NODE_GROUP if on_node(nodeid) else nodeid.split("::", 1)[0]

    return NodeTogether(config, log)  # type: ignore[arg-type]


async def eventually(
    check: Callable[[], Awaitable[T]],
    what: str = "the condition",
    timeout: float = 30.0,
    interval: float = 0.2,
) -> T:
    """Await `check` every `interval` seconds until it returns something truthy; its value
    is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], T], what: str = "the condition", timeout: float = 30.0, every: float = 0.2
) -> T:
    """Call `check` every `every` seconds until it returns something truthy; its value is
    returned (the blocking twin of `eventually`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_target(redis_server: EmbeddedRedis) -> RedisSettings:
    """Where the tests' Redis is: the embedded standalone one. A module overrides this
    fixture to run its tests (or tests it imports) on a Redis Cluster or Sentinel set
    (tests/redis_topologies.py); `redis` and `gateway` follow it."""
    return redis_settings(redis_url=redis_server.url)


redis_settings = RedisSettings.of  # RedisSettings from the fields given alone


@pytest.fixture
async def redis(redis_target: RedisSettings) -> AsyncIterator[Redis]:
    client = connect(redis_target)
    await client.flushall()
    yield client
    await client.aclose()


@dataclass
class LiveGateway:
    """A gateway serving on loopback, with one endpoint and a client and a worker key."""

    url: str
    endpoint: str
    client_key: str
    worker_key: str
    settings: Settings
    app: web.Application

    def client_headers(self) -> dict[str, str]:
        return {"authorization": self.client_key}

    def worker_headers(self) -> dict[str, str]:
        return {"authorization": self.worker_key}

    def job_url(self, path: str) -> str:
        return f"{self.url}/v2/{self.endpoint}/{path}"


async def register(redis: Redis, endpoint: str, **entry) -> tuple[str, str]:
    """Register an endpoint, a client key and a worker key for it."""
    registry = Registry(redis)
    client_key, worker_key = f"lg_{secrets.token_hex(8)}", f"lgw_{secrets.token_hex(8)}"
    await registry.put_endpoint(endpoint, RegistryEntry(id=endpoint, **entry))
    await registry.put_key(client_key, {"name": "test-client", "scopes": ["jobs"]})
    await registry.put_key(
        worker_key, {"name": f"worker:{endpoint}", "scopes": ["workers"], "endpoints": [endpoint]}
    )
    return client_key, worker_key


def make_settings(redis: str | RedisSettings, port: int, **overrides) -> Settings:
    """Settings with test-sized timings, on `redis` (a standalone URL, or any mode)."""
    target = redis_settings(redis_url=redis) if isinstance(redis, str) else redis
    values = dict(
        target.model_dump(), port=port, take_wait_s=2.0, stop_wait_s=2.0, poll_fallback_s=0.5
    )
    values.update(overrides)
    return Settings(**values)


async def start_gateway(settings: Settings) -> web.AppRunner:
    """The gateway of `settings`, set up as `lockgate gateway` sets it up, in this process."""
    app = create_app(settings)
    runner = app_runner(app, settings, handle_signals=False, shutdown_timeout=1)
    await serve_runner(runner, settings, settings.port, app[GATEWAY].header_timeout)
    return runner


@pytest.fixture
def gateway_settings(request: pytest.FixtureRequest) -> dict:
    """The gateway's settings: the test module's `GATEWAY_SETTINGS`, with what a test gives
    by indirect parametrization on top."""
    return {**getattr(request.module, "GATEWAY_SETTINGS", {}), **getattr(request, "param", {})}


@pytest.fixture
async def gateway(
    redis: Redis, redis_target: RedisSettings, gateway_settings: dict
) -> AsyncIterator[LiveGateway]:
    client_key, worker_key = await register(redis, "echo")
    port = free_port()
    settings = make_settings(redis_target, port, **gateway_settings)
    runner = await start_gateway(settings)
    yield LiveGateway(
        f"http://127.0.0.1:{port}", "echo", client_key, worker_key, settings, runner.app
    )
    await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
