"""Warm-up (issue 47, item 3): each new worker runs its endpoint's `warmup` before it takes a
real job (queue endpoints: job inputs, handed as jobs no client sees) or is routable (LB
endpoints: one HTTP request, sent by one gateway process). A failing warm-up marks the
worker unhealthy. Real Redis, real gateways on loopback, the official runpod SDK worker
(tests/workers/runpod_trouble.py) as a process, dev mode's app with its own worker
processes, and an LB worker serving HTTP on loopback."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp import web
from pydantic import ValidationError
from redis.asyncio import Redis

from lockgate.dev.redis_server import free_port
from lockgate.kube.reconcile import validate
from lockgate.models import EndpointSpec
from lockgate.models.registry_entry import RegistryEntry
from lockgate.models.warmup import WARMUP_BYTES_MAX, WARMUP_INPUTS_MAX
from lockgate.store import WARMING, JobStore, NewJob, keys, now_ms
from lockgate.store.lb_workers import HEALTHY, UNHEALTHY, LbWorker, LbWorkers
from lockgate.store.registry import Registry
from lockgate.store.warmups import Step, mark_overdue, warmup_done
from lockgate.workerenv import WORKER_DEFAULTS, worker_env, worker_id_env
from tests.conftest import REPO, LiveGateway, eventually, make_settings, register, start_gateway
from tests.test_dev_workers import Dev, dev  # noqa: F401 (dev mode's app, a fixture)
from tests.test_job_api import get, submit

TROUBLE = REPO / "tests" / "workers" / "runpod_trouble.py"

# -- the setting: bounded, and of the endpoint's kind ---------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"warmup": {}}, "exactly one of inputs"),
        ({"warmup": {"inputs": [{}], "request": {}}}, "exactly one of inputs"),
        ({"warmup": {"inputs": []}}, "at least 1"),
        ({"warmup": {"inputs": [{}] * (WARMUP_INPUTS_MAX + 1)}}, f"at most {WARMUP_INPUTS_MAX}"),
        ({"warmup": {"inputs": [{"x": "y" * WARMUP_BYTES_MAX}]}}, f"at most {WARMUP_BYTES_MAX}"),
        ({"warmup": {"inputs": ["not an object"]}}, "valid dictionary"),
        ({"warmup": {"request": {"path": "/w"}}}, "a request is for LB endpoints"),
        ({"type": "LB", "scalerType": "REQUEST_COUNT", "warmup": {"inputs": [{}]}},
         "inputs are for queue endpoints"),
        ({"type": "LB", "scalerType": "REQUEST_COUNT",
          "warmup": {"request": {"path": "no-slash"}}}, "should match pattern"),
        ({"type": "LB", "scalerType": "REQUEST_COUNT",
          "warmup": {"request": {"headers": {"bad name": "x"}}}}, "not a header name"),
        ({"type": "LB", "scalerType": "REQUEST_COUNT",
          "warmup": {"request": {"method": "TRACE"}}}, "'GET', 'POST'"),
    ],
)  # fmt: skip
def test_a_warmup_out_of_bounds_or_of_the_other_kind_is_refused(spec: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        EndpointSpec.model_validate(spec)


def test_a_warmup_of_the_endpoints_kind_is_accepted() -> None:
    queue = EndpointSpec.model_validate({"warmup": {"inputs": [{"prompt": "hi"}, {}]}})
    assert queue.warmup is not None and queue.warmup.inputs == [{"prompt": "hi"}, {}]
    lb = EndpointSpec.model_validate(
        {"type": "LB", "scalerType": "REQUEST_COUNT",
         "warmup": {"request": {"path": "/warm?x=1", "body": [1, "two"]}}}
    )  # fmt: skip
    assert lb.warmup is not None and lb.warmup.request is not None
    assert (lb.warmup.request.method, lb.warmup.request.body) == ("POST", [1, "two"])
    assert EndpointSpec().warmup is None


# -- the store: warm-up jobs in turn, initializing, the cold start ends with the warm-up ----


async def test_a_new_worker_is_handed_each_warmup_input_then_real_jobs(redis: Redis) -> None:
    now = [now_ms()]  # records expire at real times: the clock starts now
    store = JobStore(redis, clock=lambda: now[0])
    ep = "wu-store"
    await register(redis, ep, warmup={"inputs": [{"a": 1}, {"b": 2}]}, executionTimeoutMs=60_000)
    await store.note_worker_starts(ep, {"w1": now[0] - 2_000})
    await store.heartbeat(ep, "w1")  # its first call: warming, its start still waits
    assert await redis.hget(keys.prefix(ep) + "wst", "w1") is not None
    real, _ = await store.submit(ep, _job(b'{"real": 1}'))

    [first], left = await store.take(ep, "w1", 1, 60_000)
    assert (left, first.warmup) == (WARMING, 0)
    assert await store.take(ep, "w1", 5, 60_000) == ([], WARMING)  # one at a time
    snap = await store.snapshot(ep)
    assert snap.workers_warming == {"w1"} and "w1" not in snap.worker_jobs
    assert (snap.workers_initializing, snap.workers_idle) == (1, 0)

    assert await warmup_done(store, ep, "w1", "warmup-9-1", None) == Step.IGNORED
    assert await warmup_done(store, ep, "w1", first.id, None) == Step.NEXT
    [second], _ = await store.take(ep, "w1", 1, 60_000)
    assert second.warmup == 1
    now[0] += 3_000
    assert await warmup_done(store, ep, "w1", second.id, None) == Step.WARM

    assert await redis.hget(keys.prefix(ep) + "wst", "w1") is None  # its cold start counted
    buckets = await _cold_start_buckets(redis, ep)
    assert buckets == [math.floor(math.log(5_000 + 1) / math.log(1.1))]  # start to warm: 5 s
    [job], _ = await store.take(ep, "w1", 1, 60_000)
    assert job.id == real and job.warmup is None
    snap = await store.snapshot(ep)
    assert snap.worker_jobs == {"w1": 1} and not snap.workers_warming
    assert (snap.completed, snap.failed) == (0, 0)


async def test_a_warmup_past_the_execution_timeout_marks_its_worker_unhealthy(
    redis: Redis,
) -> None:
    now = [1_000_000]
    store = JobStore(redis, clock=lambda: now[0])
    ep = "wu-late"
    await register(redis, ep, warmup={"inputs": [{}]}, executionTimeoutMs=5_000)
    [warm], _ = await store.take(ep, "slow", 1, 5_000)
    assert await mark_overdue(store, ep, 5_000) == []
    now[0] += 5_001
    assert await mark_overdue(store, ep, 5_000) == ["slow"]
    why = (await store.unhealthy_workers(ep))["slow"]
    assert why.kind == "warmup" and "did not finish within 5 s" in why.reason
    assert await store.take(ep, "slow", 1, 5_000) == ([], -1)  # released for good
    assert await warmup_done(store, ep, "slow", warm.id, None) == Step.IGNORED


async def test_a_worker_restarted_mid_warmup_is_handed_its_input_again(redis: Redis) -> None:
    store = JobStore(redis)
    ep = "wu-again"
    await register(redis, ep, warmup={"inputs": [{}]})
    [warm], _ = await store.take(ep, "w", 1, 60_000)
    assert await store.take(ep, "w", 1, 60_000) == ([], WARMING)
    [again], _ = await store.take(ep, "w", 1, 60_000, holds_none=True)  # job_in_progress=0
    assert again.warmup == 0 and again.id != warm.id
    assert await warmup_done(store, ep, "w", warm.id, None) == Step.IGNORED


async def test_the_registry_keeps_the_count_of_warmup_inputs_beside_the_endpoint(
    redis: Redis,
) -> None:
    registry = Registry(redis)
    await registry.put_endpoint("wu-r", RegistryEntry(id="wu-r", warmup={"inputs": [{}, {}]}))
    assert await redis.get(keys.warmup_count("wu-r")) == b"2"
    await registry.put_endpoint("wu-r", RegistryEntry(id="wu-r"))
    assert await redis.get(keys.warmup_count("wu-r")) is None
    lb = RegistryEntry(id="wu-r", type="LB", warmup={"request": {"path": "/w"}})
    await registry.put_endpoint("wu-r", lb)
    assert await redis.get(keys.warmup_count("wu-r")) is None


def _job(raw: bytes) -> NewJob:
    return NewJob(id=keys.new_job_id(), input=raw, ttl_ms=600_000)


async def _cold_start_buckets(redis: Redis, ep: str) -> list[int]:
    found = []
    async for k in redis.scan_iter(match=keys.prefix(ep) + "iv:*"):
        found += [int(f[1:]) for f in (await redis.hkeys(k)) if f.startswith(b"b")]
    return found


# -- the runpod SDK worker against a gateway on loopback --------------------------------------


class SdkWorker:
    """runpod_trouble.py as a worker process of `endpoint` on the gateway."""

    def __init__(self, gw: LiveGateway, endpoint: str, worker_key: str, worker_id: str) -> None:
        env = {**os.environ, **WORKER_DEFAULTS, **worker_env(gw.url, endpoint, worker_key)}
        env.update(worker_id_env(worker_id), RUNPOD_PING_INTERVAL="1000")
        self.proc = subprocess.Popen([sys.executable, str(TROUBLE)], env=env, cwd=REPO)

    def stop(self) -> None:
        """Kill it and the heartbeat process the runpod SDK starts."""
        with contextlib.suppress(psutil.NoSuchProcess):
            tree = [psutil.Process(self.proc.pid)]
            tree += tree[0].children(recursive=True)
            for p in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            psutil.wait_procs(tree, timeout=30)
        self.proc.wait(30)


@pytest.fixture
def sdk_workers() -> Iterator[list[SdkWorker]]:
    started: list[SdkWorker] = []
    yield started
    for w in started:
        w.stop()


async def test_a_runpod_sdk_worker_warms_up_first_and_no_client_sees_its_warmup_job(
    http: aiohttp.ClientSession,
    gateway: LiveGateway,
    redis: Redis,
    sdk_workers: list[SdkWorker],
    tmp_path: Path,
) -> None:
    touched = tmp_path / "warmed"
    ep = "wu-sdk"
    warmup = {"inputs": [{"touch": str(touched), "sleep": 4}]}
    client_key, worker_key = await register(redis, ep, warmup=warmup)
    gw = LiveGateway(gateway.url, ep, client_key, worker_key, gateway.settings, gateway.app)
    job = await submit(http, gw, {"input": {"exists": str(touched)}})
    sdk_workers.append(SdkWorker(gw, ep, worker_key, "sdk-1"))

    async def warming() -> bool:  # /health shows it initializing while its warm-up runs
        health = (await get(http, gw, "health"))[1]
        return health["workers"]["initializing"] == 1 and health["workers"]["idle"] == 0

    await eventually(warming, "the worker initializing while it warms up")
    assert (await get(http, gw, f"status/{job['id']}"))[1]["status"] == "IN_QUEUE"

    async def completed() -> dict | None:
        body = (await get(http, gw, f"status/{job['id']}"))[1]
        return body if body["status"] == "COMPLETED" else None

    done = await eventually(completed, "the real job completed", timeout=60)
    assert done["output"] == {"worker": "sdk-1", "exists": True}
    listed = (await get(http, gw, "requests"))[1]
    assert [item["id"] for item in listed["items"]] == [job["id"]]
    health = (await get(http, gw, "health"))[1]
    assert (health["jobs"]["completed"], health["jobs"]["failed"]) == (1, 0)
    assert health["jobs"]["inProgress"] == 0


async def test_a_failing_warmup_marks_the_sdk_worker_unhealthy_and_it_gets_no_real_job(
    http: aiohttp.ClientSession,
    gateway: LiveGateway,
    redis: Redis,
    sdk_workers: list[SdkWorker],
) -> None:
    ep = "wu-boom"
    client_key, worker_key = await register(redis, ep, warmup={"inputs": [{"fail": "boom"}]})
    gw = LiveGateway(gateway.url, ep, client_key, worker_key, gateway.settings, gateway.app)
    job = await submit(http, gw, {"input": {}})
    sdk_workers.append(SdkWorker(gw, ep, worker_key, "sdk-boom"))
    store = JobStore(redis)

    async def marked() -> dict:
        return await store.unhealthy_workers(ep)

    why = (await eventually(marked, "the worker marked unhealthy", timeout=60))["sdk-boom"]
    assert why.kind == "warmup" and "boom" in why.reason
    assert why.text().startswith("warm-up failed: ")
    status = (await get(http, gw, f"status/{job['id']}"))[1]
    assert status["status"] == "IN_QUEUE" and "workerId" not in status
    health = (await get(http, gw, "health"))[1]
    assert (health["jobs"]["failed"], health["jobs"]["inQueue"]) == (0, 1)
    assert [item["id"] for item in (await get(http, gw, "requests"))[1]["items"]] == [job["id"]]


# -- dev mode: its own runpod SDK worker process -----------------------------------------------


LOCKGATE_TOUCH = """
import os

import lockgate.worker


def handler(job):
    args = job["input"]
    if "touch" in args:
        open(args["touch"], "a").close()
    return {"exists": os.path.exists(args["exists"])} if "exists" in args else {}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
"""


@pytest.mark.parametrize("runtime", ["runpod", "lockgate"])
async def test_in_dev_mode_the_first_job_finds_the_warmups_side_effect(
    dev: Dev,  # noqa: F811
    tmp_path: Path,
    runtime: str,
) -> None:
    """The runpod SDK and lockgate's own runtime, both unchanged: the gateway does it."""
    handler = "tests/workers/runpod_trouble.py"
    if runtime == "lockgate":
        (tmp_path / "touch.py").write_text(LOCKGATE_TOUCH)
        handler = str(tmp_path / "touch.py")
    touched = tmp_path / "dev-warmed"
    ep = f"wu-dev-{runtime}"
    warm = {"touch": str(touched), **({"sleep": 4} if runtime == "runpod" else {})}
    await dev.create(ep, handler, workersMin=1, warmup={"inputs": [warm]})
    if runtime == "runpod":  # while it warms: INITIALIZING in the v2 and v1 workers lists

        async def listed_initializing() -> bool:
            v2 = (await _admin_get(dev, f"/v2/serverless/{ep}/workers"))["workers"]
            v1 = (await dev.call("GET", f"/v1/endpoints/{ep}?includeWorkers=true"))[1]
            return [w["status"] for w in v2] == ["INITIALIZING"] and [
                w["status"] for w in v1["workers"]
            ] == ["INITIALIZING"]

        await eventually(listed_initializing, "the warming worker listed INITIALIZING")
    job_id = await dev.run(ep, {"exists": str(touched)})
    done = await dev.until_status(ep, job_id, "COMPLETED")
    assert done["output"]["exists"] is True


async def _admin_get(dev: Dev, path: str) -> dict:  # noqa: F811
    headers = {"authorization": f"Bearer {dev.admin}"}
    async with dev.http.get(dev.url + path, headers=headers) as answer:
        assert answer.status == 200, await answer.text()
        return await answer.json()


async def test_the_management_api_refuses_a_bad_warmup_with_a_4xx(dev: Dev) -> None:  # noqa: F811
    body = {"id": "wu-bad", "name": "wu-bad", "templateId": "tests/workers/runpod_trouble.py"}
    status, got = await dev.call("POST", "/v1/endpoints", {**body, "warmup": {"inputs": []}})
    assert 400 <= status < 500 and "warmup" in str(got), got
    lb = {"type": "LB", "scalerType": "REQUEST_COUNT", "warmup": {"inputs": [{}]}}
    status, got = await dev.call("POST", "/v1/endpoints", {**body, **lb})
    assert 400 <= status < 500 and "inputs are for queue endpoints" in str(got), got


# -- load-balancing endpoints: one warm-up request, from one of many gateway processes -------


class LbWorkerApp:
    """An LB worker on loopback: `/ping` 200; `POST /warm` records its body (the warm-up's
    side effect), `/warm-fail` answers 500; `/seen` answers what `/warm` got."""

    def __init__(self) -> None:
        self.warmups: list[dict] = []
        self.port = free_port()
        app = web.Application()
        app.router.add_get("/ping", lambda _: web.Response(text="ok"))
        app.router.add_post("/warm", self._warm)
        app.router.add_post("/warm-fail", lambda _: web.Response(status=500, text="no GPU"))
        app.router.add_get("/seen", lambda _: web.json_response({"warmups": self.warmups}))
        self.runner = web.AppRunner(app)

    async def _warm(self, request: web.Request) -> web.Response:
        self.warmups.append({"body": await request.json(), "header": request.headers.get("X-Warm")})
        return web.Response(status=204)

    async def start(self) -> LbWorkerApp:
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    @property
    def record(self) -> LbWorker:
        return LbWorker(f"127.0.0.1:{self.port}", f"127.0.0.1:{self.port}")


@pytest.fixture
async def lb_worker() -> AsyncIterator[LbWorkerApp]:
    worker = await LbWorkerApp().start()
    yield worker
    await worker.runner.cleanup()


@pytest.fixture
async def second_gateway(gateway: LiveGateway, redis_target) -> AsyncIterator[str]:
    port = free_port()
    runner = await start_gateway(make_settings(redis_target, port))
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


LB = {"type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1}


async def test_an_lb_worker_is_warmed_once_by_one_of_two_gateways_before_its_first_request(
    gateway: LiveGateway, second_gateway: str, redis: Redis, lb_worker: LbWorkerApp
) -> None:
    warm = {"path": "/warm", "headers": {"X-Warm": "yes"}, "body": {"model": "m"}}
    client_key, _ = await register(redis, "wu-lb", warmup={"request": warm}, **LB)
    await LbWorkers(redis).register("wu-lb", "lb-1", lb_worker.record)
    headers = {"authorization": client_key}
    async with aiohttp.ClientSession() as http:
        for url in (gateway.url, second_gateway):  # both hold it until the worker is warm
            async with http.get(f"{url}/lb/wu-lb/seen", headers=headers) as answer:
                assert answer.status == 200, await answer.text()
                assert (await answer.json())["warmups"] == [
                    {"body": {"model": "m"}, "header": "yes"}
                ]
    assert (await LbWorkers(redis).health("wu-lb"))["lb-1"].state == HEALTHY
    assert await LbWorkers(redis).warmup_state("wu-lb", "lb-1") == "done"


async def test_a_failing_lb_warmup_marks_the_worker_unhealthy_and_never_routable(
    gateway: LiveGateway, redis: Redis, lb_worker: LbWorkerApp
) -> None:
    warm = {"path": "/warm-fail"}
    client_key, _ = await register(redis, "wu-lbx", warmup={"request": warm}, lbHoldS=2, **LB)
    await LbWorkers(redis).register("wu-lbx", "lb-x", lb_worker.record)
    async with aiohttp.ClientSession() as http:
        url = f"{gateway.url}/lb/wu-lbx/seen"
        async with http.get(url, headers={"authorization": client_key}) as answer:
            assert answer.status == 503  # held its lbHoldS, no routable worker

        store = JobStore(redis)

        async def marked() -> dict:
            return await store.unhealthy_workers("wu-lbx")

        why = (await eventually(marked, "the worker marked unhealthy"))["lb-x"]
        assert why.kind == "warmup" and "answered 500" in why.reason
        polled = await LbWorkers(redis).health("wu-lbx")
        assert polled["lb-x"].state == UNHEALTHY
        async with http.get(url, headers={"authorization": client_key}) as answer:
            assert answer.status == 503


def test_an_endpoint_resource_with_a_bad_warmup_is_not_spec_valid() -> None:
    spec, check = validate("wu-crd", {"type": "LB", "scalerType": "REQUEST_COUNT",
                                      "warmup": {"inputs": [{}]}})  # fmt: skip
    assert spec is None and (check.status, check.reason) == ("False", "InvalidSpec")
    assert check.message == (
        "spec.warmup: inputs are for queue endpoints, an LB endpoint's is a request"
    )
