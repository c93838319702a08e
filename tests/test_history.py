"""History for charts (`GET /v1/endpoints/{id}/metrics`) and dev mode's worker states in
`/health` with the cause in the endpoint's conditions, against a real dev-mode app
(gateway + `/v1` + local worker processes) and a real Redis."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from redis.asyncio import Redis

from lockgate.dev.controlplane import LocalControlPlane
from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.gateway.notify import Notifier
from lockgate.manage.history import (
    CATCH_UP,
    SETTLE_S,
    HistorySampler,
    add_history_routes,
    fill,
    interval_to_sample,
)
from lockgate.store import Registry
from lockgate.store.args_workers import WorkerStates
from lockgate.store.keys import HISTORY_INTERVAL_S, HISTORY_POINTS, INTERVAL_KEEP_MS, prefix
from tests.conftest import eventually
from tests.test_manage_api import ECHO, dev_app

CRASHING = "python -c \"print('boom: no model at /models/x'); raise SystemExit(1)\""
SLOW_START = 'python -c "import time; time.sleep(120)"'
ENDED = ("completed", "failed", "timedOut", "cancelled")  # jobs ended, by final state


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

    async def sample_since(self, start: float) -> None:
        """Every 10 s point from `start` until now, and the minute points they complete."""
        end = self.plane.gw.store.clock() / 1000
        for at in range(int(start) // 10 * 10, int(end) + 1, HISTORY_INTERVAL_S):
            await self.sampler(at).sample()
        for m in range(int(start) // 60 * 60, int(end) // 60 * 60 + 1, 60):
            await self.sampler(m + 50).sample()  # the minute's last interval: its minute point

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


async def test_history_has_the_execution_time_of_the_jobs_that_ended(dev: Dev) -> None:
    endpoint_id = await dev.create("python tests/handlers/sleeper.py async", workersMin=1)
    status, job = await dev.call("POST", f"/v2/{endpoint_id}/runsync", {"input": {"sleep": 1.2}})
    assert status == 200 and job["status"] == "COMPLETED", job
    ended = dev.plane.gw.store.clock() / 1000
    await dev.sampler(ended).sample()
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics")
    timed = [p for p in body["points"] if p["executionP50"] is not None]
    assert len(timed) == 1 and timed[0]["completed"] == 1, body["points"]
    # The middle of a 10 %-wide bucket: within 5 % of the job's own executionTime.
    for field in ("executionP50", "executionP95"):
        assert abs(timed[0][field] - job["executionTime"]) <= 0.05 * job["executionTime"] + 1
    assert all(p["executionP95"] is None for p in body["points"] if p not in timed)


async def test_minute_points_sum_the_minute_and_are_written_once(dev: Dev) -> None:
    endpoint_id = await dev.create(ECHO, workersMin=1)
    start = dev.plane.gw.store.clock() / 1000
    for n in range(3):
        status, job = await dev.call("POST", f"/v2/{endpoint_id}/runsync", {"input": {"n": n}})
        assert status == 200 and job["status"] == "COMPLETED", job
    end = dev.plane.gw.store.clock() / 1000
    minutes = range(int(start) // 60 * 60, int(end) // 60 * 60 + 1, 60)
    for m in minutes:  # the minute's last interval settled, sampled by two replicas
        a, b = dev.sampler(m + 50), dev.sampler(m + 50)
        await asyncio.gather(a.sample(), b.sample())
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics?interval=60")
    assert status == 200 and body["interval"] == 60
    points = [p for p in body["points"] if p["t"] in minutes]
    assert [p["t"] for p in points] == list(minutes)  # one point a minute, on the minute
    assert sum(p["completed"] for p in points) == 3
    assert any(p["executionP50"] is not None and p["delayP95"] is not None for p in points)
    assert all(p["workersIdle"] + p["workersRunning"] >= 1 for p in points)


async def test_cold_starts_count_each_worker_new_to_the_endpoint_once(dev: Dev) -> None:
    start = dev.plane.gw.store.clock() / 1000
    endpoint_id = await dev.create(ECHO, workersMin=2)

    async def both_idle() -> bool:
        _, health = await dev.call("GET", f"/v2/{endpoint_id}/health")
        return health["workers"]["idle"] == 2

    await eventually(both_idle, "two idle workers in /health")
    await asyncio.sleep(2)  # more heartbeats from the same workers: not counted again
    await dev.sample_since(start)
    for interval in (HISTORY_INTERVAL_S, 60):
        _, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics?interval={interval}")
        assert sum(p["coldStarts"] for p in body["points"]) == 2, body["points"]
        # Timed from the pool's spawning each process to its first call (a Python process
        # importing the runtime: more than a few ms, less than the wait above).
        timed = [p for p in body["points"] if p["coldStartP50"] is not None]
        assert timed and all(p["coldStarts"] for p in timed), body["points"]
        assert all(10 < p["coldStartP50"] <= p["coldStartP95"] < 60_000 for p in timed), timed
    assert not await dev.redis.exists(prefix(endpoint_id) + "wst")  # both matched


async def test_a_start_reported_after_the_first_call_is_timed_from_it(dev: Dev) -> None:
    """The operator may see a new pod after its first call: whichever of the two comes
    second counts the cold-start time; a worker already heard from is not timed again."""
    endpoint_id = await dev.create(ECHO, workersMax=0)
    store = dev.plane.gw.store
    now = store.clock()
    await store.heartbeat(endpoint_id, "pod-a")
    await store.heartbeat(endpoint_id, "pod-b")
    assert await store.note_worker_starts(endpoint_id, {"pod-a": now - 4000}) == 1
    # pod-b's first call is matched by no start (an operator restart): never timed
    assert await store.note_worker_starts(endpoint_id, {"pod-a": now - 9000}) == 0
    await store.note_worker_starts(endpoint_id, {"pod-c": now - 2000})  # not heard from yet
    assert await dev.redis.hkeys(prefix(endpoint_id) + "wst") == [b"pod-c"]
    await store.release_worker(endpoint_id, "pod-b")  # gone: its first call is forgotten
    assert await dev.redis.hkeys(prefix(endpoint_id) + "wfc") == []
    for at in (now / 1000, store.clock() / 1000):  # the note may fall in the next interval
        await dev.sampler(at).sample()
    points = await store.history(endpoint_id, int(now / 1000) - 20)
    timed = [p for p in points if p["coldStartP50"] is not None]
    assert len(timed) == 1 and abs(timed[0]["coldStartP50"] - 4000) <= 0.05 * 4000 + 1, points


async def test_history_counts_jobs_by_final_state_and_workers_throttled_or_unhealthy(
    dev: Dev,
) -> None:
    endpoint_id = await dev.create("python tests/handlers/sleeper.py async", workersMin=1)
    start = dev.plane.gw.store.clock() / 1000
    base = f"/v2/{endpoint_id}"
    _, done = await dev.call("POST", f"{base}/runsync", {"input": {}})
    _, failed = await dev.call("POST", f"{base}/runsync", {"input": {"fail": "bad input"}})
    assert (done["status"], failed["status"]) == ("COMPLETED", "FAILED"), failed
    slow = {"input": {"sleep": 60}, "policy": {"executionTimeout": 5000}}
    _, timing_out = await dev.call("POST", f"{base}/run", slow)
    _, queued = await dev.call("POST", f"{base}/run", {"input": {"sleep": 60}})
    _, cancelled = await dev.call("POST", f"{base}/cancel/{queued['id']}")
    assert cancelled["status"] == "CANCELLED", cancelled

    async def timed_out() -> bool:
        _, job = await dev.call("GET", f"{base}/status/{timing_out['id']}")
        return job["status"] == "TIMED_OUT"

    await eventually(timed_out, "the job past its executionTimeout TIMED_OUT")
    # What the operator reports of pods (dev mode never throttles): as it last saw them.
    await dev.plane.gw.store.scripts.run(WorkerStates(endpoint_id, 0, 2, 1, 60_000))
    await dev.sample_since(start)
    for interval in (HISTORY_INTERVAL_S, 60):
        _, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics?interval={interval}")
        points = [p for p in body["points"] if p["t"] >= int(start) // 60 * 60]
        ended = {k: sum(p[k] for p in points) for k in ENDED}
        assert ended == dict.fromkeys(ENDED, 1), points
    _, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics")
    newest = body["points"][-1]
    assert (newest["workersThrottled"], newest["workersUnhealthy"]) == (2, 1), newest


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
        # this endpoint's points alone (dev mode also registers its batch pool `batch-<id>`)
        written += sum(await asyncio.gather(a.catch_up(endpoint_id), b.catch_up(endpoint_id)))
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
    assert {"executionP50", "executionP95"} <= set(points[0])
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
    status, body = await dev.call("GET", f"/v1/endpoints/{endpoint_id}/metrics?interval=30")
    assert status == 400 and "interval" in body["error"]
    assert (await dev.call("GET", "/v1/endpoints/nope/metrics"))[0] == 404


async def test_a_quiet_endpoint_is_sampled_once_a_pass_and_its_points_have_no_gap(
    dev: Dev, http: aiohttp.ClientSession
) -> None:
    """Issue 32: an idle endpoint costs a call a full pass, not one an interval; the points
    it was skipped for are written (zero) at the next pass or at a read of its history."""
    endpoint_id = await dev.create(ECHO, workersMax=0)  # a queued job stays queued
    hist = prefix(endpoint_id) + "hist"
    now = [time.time() + 10**6]  # intervals the app's own sampler never writes
    sampler = HistorySampler(
        dev.plane.gw.store, Registry(dev.redis), clock=lambda: now[0], full_pass_s=60
    )
    first = interval_to_sample(now[0])
    assert await sampler.sample() >= CATCH_UP  # this endpoint's and others'
    assert sampler.quiet[endpoint_id] == first

    now[0] += 2 * HISTORY_INTERVAL_S  # not a full pass: skipped
    await sampler.sample()
    assert await dev.redis.zrangebyscore(hist, first + 1, "+inf") == []

    app = web.Application()  # the route, over real HTTP, reads through the same sampler
    add_history_routes(app, sampler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with http.get(server.make_url(f"/endpoints/{endpoint_id}/metrics")) as r:
            assert r.status == 200
            body = await r.json()
    finally:
        await server.close()
    ts = [p["t"] for p in body["points"]]
    newest = interval_to_sample(now[0])
    assert ts[-1] == newest and ts == list(range(ts[0], newest + 1, HISTORY_INTERVAL_S))
    assert all(p["inQueue"] == 0 and p["workersIdle"] == 0 for p in body["points"])

    now[0] += 5 * HISTORY_INTERVAL_S  # the full pass: every interval since, zero
    await sampler.sample()
    ts = [int(t) for _, t in await dev.redis.zrangebyscore(hist, first, "+inf", withscores=True)]
    assert ts == list(range(first, interval_to_sample(now[0]) + 1, HISTORY_INTERVAL_S))


async def test_a_queued_job_ends_the_quiet_through_the_store_events(dev: Dev) -> None:
    endpoint_id = await dev.create(ECHO, workersMax=0)
    now = [time.time() + 2 * 10**6]
    sampler = HistorySampler(
        dev.plane.gw.store, Registry(dev.redis), clock=lambda: now[0], full_pass_s=3600
    )
    events = Notifier(dev.redis)
    events.on_activity = sampler.mark
    events.start()
    try:
        await sampler.sample()
        quiet_at = sampler.quiet[endpoint_id]
        await asyncio.wait_for(events.connected.wait(), 10)
        now[0] += 2 * HISTORY_INTERVAL_S
        status, job = await dev.call("POST", f"/v2/{endpoint_id}/run", {"input": {}})
        assert status == 200, job

        async def marked() -> bool:
            return endpoint_id in sampler.marked

        await eventually(marked, "the q: event")
        now[0] += HISTORY_INTERVAL_S
        await sampler.sample()
    finally:
        await events.close()
    assert endpoint_id not in sampler.quiet
    points = await dev.plane.gw.store.history(endpoint_id, quiet_at + 1)
    newest = interval_to_sample(now[0])
    assert [p["t"] for p in points] == list(
        range(quiet_at + HISTORY_INTERVAL_S, newest + 1, HISTORY_INTERVAL_S)
    )
    assert [p["inQueue"] for p in points] == [0] * (len(points) - 1) + [1]


@pytest.mark.parametrize(
    ("quiet_since", "marked_at", "slots", "quiet"),
    [
        (None, None, [80, 90, 100], 0),  # never sampled: the newest and two before
        (100, None, [80, 90, 100], 0),  # found quiet in this very interval
        (60, None, [70, 80, 90, 100], 3),  # a full pass: all but the newest known quiet
        (60, 85.0, [70, 80, 90, 100], 1),  # a sign in the interval of 80: 70 was quiet
        (60, 60.5, [70, 80, 90, 100], 0),
        (60, 1e9, [70, 80, 90, 100], 3),  # never more than all but the newest
    ],
)
def test_fill_writes_every_interval_since_quiet_and_zeroes_those_before_a_sign(
    quiet_since: int | None, marked_at: float | None, slots: list[int], quiet: int
) -> None:
    assert fill(100, quiet_since, marked_at) == (slots, quiet)


def test_fill_goes_back_an_hour_at_most() -> None:
    slots, quiet = fill(100_000, 0, None)
    assert len(slots) == HISTORY_POINTS and slots[-1] == 100_000 and quiet == HISTORY_POINTS - 1


# -- worker states in dev mode ---------------------------------------------------------


def wrong(condition: dict) -> bool:
    """A condition that says something is wrong: False, but True for `CrashLoop`."""
    return (condition["status"] == "True") == (condition["type"] == "CrashLoop")


async def test_workers_that_exit_at_once_are_unhealthy_and_the_condition_says_why(
    dev: Dev,
) -> None:
    # No crash-loop hold (crashLoopThreshold 0): the workers keep starting and crashing,
    # which is what WorkersHealthy reports (the hold itself: tests/test_dev_crashloop.py).
    endpoint_id = await dev.create(CRASHING, workersMin=1, crashLoopThreshold=0)

    async def unhealthy() -> dict | None:
        status, health = await dev.call("GET", f"/v2/{endpoint_id}/health")
        assert status == 200, health
        return health if health["workers"]["unhealthy"] > 0 else None

    health = await eventually(unhealthy, "unhealthy workers in /health")
    assert set(health["workers"]) == {"idle", "running", "initializing", "throttled", "unhealthy"}
    _, record = await dev.call("GET", f"/v1/endpoints/{endpoint_id}")
    failing = [c for c in record["status"]["conditions"] if wrong(c)]
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
    assert not [c for c in record["status"]["conditions"] if wrong(c)]
