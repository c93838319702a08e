"""History for charts (`GET /v1/endpoints/{id}/metrics`) and dev mode's worker states in
`/health` with the cause in the endpoint's conditions, against a real dev-mode app
(gateway + `/v1` + local worker processes) and a real Redis."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.dev.controlplane import LocalControlPlane
from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.manage.history import SETTLE_S, HistorySampler
from lockgate.store import Registry
from lockgate.store.keys import HISTORY_INTERVAL_S, HISTORY_POINTS, INTERVAL_KEEP_MS, prefix
from tests.conftest import eventually
from tests.test_manage_api import ECHO, dev_app

CRASHING = "python -c \"print('boom: no model at /models/x'); raise SystemExit(1)\""
SLOW_START = 'python -c "import time; time.sleep(120)"'


@dataclass
class Dev:
    url: str
    key: str
    plane: LocalControlPlane
    http: aiohttp.ClientSession
    redis: Redis

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"authorization": f"Bearer {self.key}"}
        async with self.http.request(method, self.url + path, json=body, headers=headers) as r:
            return r.status, await r.json() if r.content_type == "application/json" else None

    async def create(self, template: str, **fields: Any) -> str:
        endpoint_id = f"h{secrets.token_hex(5)}"
        body = {"id": endpoint_id, "name": endpoint_id, "templateId": template, **fields}
        status, record = await self.call("POST", "/v1/endpoints", body)
        assert status == 200, record
        return endpoint_id

    def sampler(self, at: float) -> HistorySampler:
        """A sampler whose clock says the interval starting at `at` has just settled."""
        t = int(at // HISTORY_INTERVAL_S) * HISTORY_INTERVAL_S
        clock = lambda: t + HISTORY_INTERVAL_S + SETTLE_S + 0.5  # noqa: E731
        return HistorySampler(self.plane.gw.store, Registry(self.redis), clock=clock)


@pytest.fixture
async def dev(
    redis: Redis, redis_server: EmbeddedRedis, http: aiohttp.ClientSession
) -> AsyncIterator[Dev]:
    async with dev_app(redis_server) as (url, plane):
        key = f"lga_{secrets.token_hex(8)}"
        await Registry(redis).put_key(key, {"name": "admin", "scopes": ["jobs", "admin"]})
        yield Dev(url, key, plane, http, redis)


# -- history ---------------------------------------------------------------------------


async def test_history_counts_the_jobs_that_ended_once_however_many_samplers(dev: Dev) -> None:
    endpoint_id = await dev.create(ECHO, workersMin=1)
    start = dev.plane.gw.store.clock() / 1000
    jobs = 5
    for n in range(jobs):
        status, job = await dev.call("POST", f"/v2/{endpoint_id}/runsync", {"input": {"n": n}})
        assert status == 200 and job["status"] == "COMPLETED", job
    end = dev.plane.gw.store.clock() / 1000
    written = 0
    for at in range(int(start) // 10 * 10, int(end) + 1, HISTORY_INTERVAL_S):
        a, b = dev.sampler(at), dev.sampler(at)  # two replicas sampling the same interval
        written += sum(await asyncio.gather(a.sample(), b.sample()))
        status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics?since={at}")
        assert [p["t"] for p in body["points"]].count(at) == 1  # one point, whoever wrote it
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics")
    assert status == 200 and body["interval"] == HISTORY_INTERVAL_S
    points = body["points"]
    assert written <= len(points)  # the app's own sampler may have written some first
    assert [p["t"] for p in points] == sorted({p["t"] for p in points})
    assert sum(p["completed"] for p in points) == jobs
    assert sum(p["failed"] for p in points) == 0
    delays = [p["delayP95"] for p in points if p["delayP95"] is not None]
    assert delays and all(d >= 0 for d in delays)
    fields = {"inQueue", "inQueueLow", "inProgress", "workersRunning", "workersIdle"}
    assert fields | {"workersStarting", "delayP50", "t"} <= set(points[0])
    # Each interval's counts die on their own after INTERVAL_KEEP_MS.
    counted = [k async for k in dev.redis.scan_iter(match=prefix(endpoint_id) + "iv:*")]
    lives = [await dev.redis.pttl(k) for k in counted]
    assert counted and all(0 < ms <= INTERVAL_KEEP_MS for ms in lives), lives


async def test_history_is_bounded_to_an_hour_and_removed_with_the_endpoint(dev: Dev) -> None:
    endpoint_id = await dev.create(ECHO)
    store = dev.plane.gw.store
    base = int(store.clock() / 1000) // 10 * 10 - 400 * HISTORY_INTERVAL_S
    slots = [base + i * HISTORY_INTERVAL_S for i in range(400)]
    for i in range(0, 400, 3):  # as the sampler does: the newest interval and those before
        await store.record_history(endpoint_id, slots[i : i + 3])
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics")
    assert status == 200 and len(body["points"]) == HISTORY_POINTS
    assert body["points"][-1]["t"] == base + 399 * HISTORY_INTERVAL_S
    assert await dev.redis.zcard(prefix(endpoint_id) + "hist") == HISTORY_POINTS

    assert (await dev.call("DELETE", f"/v1/endpoints/{endpoint_id}"))[0] == 204
    assert not await dev.redis.exists(prefix(endpoint_id) + "hist", prefix(endpoint_id) + "ws")
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics")
    assert status == 404 and "not found" in body["error"]


async def test_metrics_refuses_a_bad_since_and_an_unknown_endpoint(dev: Dev) -> None:
    endpoint_id = await dev.create(ECHO)
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics?since=soon")
    assert status == 400 and "since" in body["error"]
    assert (await dev.call("GET", "/v1/endpoints/nope/metrics"))[0] == 404


# -- worker states in dev mode ---------------------------------------------------------


async def test_workers_that_exit_at_once_are_unhealthy_and_the_condition_says_why(
    dev: Dev,
) -> None:
    endpoint_id = await dev.create(CRASHING, workersMin=1)

    async def unhealthy() -> dict | None:
        status, health = await dev.call("GET", f"/v2/{endpoint_id}/health")
        assert status == 200, health
        return health if health["workers"]["unhealthy"] > 0 else None

    health = await eventually(unhealthy, "unhealthy workers in /health")
    assert set(health["workers"]) == {"idle", "running", "initializing", "throttled", "unhealthy"}
    _, record = await dev.call("GET", f"/v1/endpoints/{endpoint_id}")
    failing = [c for c in record["status"]["conditions"] if c["status"] == "False"]
    assert [c["reason"] for c in failing] == ["CrashLoop"]
    message = failing[0]["message"]
    assert "exit code 1" in message and "boom: no model at /models/x" in message
    assert "Fix the handler or image" in message


async def test_a_worker_not_yet_polling_is_initializing(dev: Dev) -> None:
    endpoint_id = await dev.create(SLOW_START, workersMin=1)

    async def initializing() -> dict | None:
        _, health = await dev.call("GET", f"/v2/{endpoint_id}/health")
        return health if health["workers"]["initializing"] == 1 else None

    health = await eventually(initializing, "an initializing worker in /health")
    assert health["workers"]["unhealthy"] == 0 and health["workers"]["idle"] == 0
    _, record = await dev.call("GET", f"/v1/endpoints/{endpoint_id}")
    assert all(c["status"] == "True" for c in record["status"]["conditions"])
