"""Workers being stopped, gone, or still busy, at the worker API (issue 13, items 1-3, 5):
the real gateway and store on loopback, called as the runpod SDK calls them, and
`JobStore.stop_taking` called as the Kubernetes scaler (`DeploymentPool`) calls it."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.store import JobStore
from tests.conftest import LiveGateway, eventually
from tests.test_job_api import submit

GATEWAY_SETTINGS = {"take_wait_s": 60.0}  # a long-poll ends early only for a reason


@pytest.fixture
def store(redis: Redis) -> JobStore:
    return JobStore(redis)


async def take(http: aiohttp.ClientSession, gw: LiveGateway, worker: str) -> tuple[int, dict]:
    """One job-take long-poll: (status, job or {})."""
    async with http.get(gw.job_url(f"job-take/{worker}"), headers=gw.worker_headers()) as resp:
        return resp.status, (await resp.json() if resp.status == 200 else {})


async def ping(http: aiohttp.ClientSession, gw: LiveGateway, worker: str, *jobs: str) -> None:
    params = {"job_id": ",".join(jobs)} if jobs else None
    url = gw.job_url(f"ping/{worker}")
    async with http.get(url, params=params, headers=gw.worker_headers()) as resp:
        assert resp.status == 200


async def done(http, gw: LiveGateway, worker: str, job_id: str, body: dict) -> dict:
    url = gw.job_url(f"job-done/{worker}/{job_id}")
    async with http.post(url, json=body, headers=gw.worker_headers()) as resp:
        assert resp.status == 200
        return await resp.json()


async def running_job(http, gw: LiveGateway, worker: str, job_input: dict) -> str:
    """Submit a job and have `worker` take it."""
    job = await submit(http, gw, {"input": job_input})
    status, taken = await take(http, gw, worker)
    assert (status, taken["id"]) == (200, job["id"])
    return job["id"]


async def load(store: JobStore, gw: LiveGateway, worker: str) -> int | None:
    """The jobs the scaler counts for `worker`; None when it is not a live worker."""
    return (await store.snapshot(gw.endpoint)).worker_jobs.get(worker)


# -- item 2 on Kubernetes: the scaler's stop_taking answers the pod's open long-poll ---------


async def test_stop_taking_answers_the_workers_open_long_poll_empty_at_once(
    http, gateway, store, redis
):
    poll = asyncio.create_task(take(http, gateway, "pod-a"))
    await eventually(lambda: redis.zscore(f"lg:{{{gateway.endpoint}}}:w", "pod-a"), "the poll")

    await store.stop_taking(gateway.endpoint, ["pod-a"])  # as DeploymentPool.resize does

    # answered because it was told to stop, not at the end of its 60 s
    assert await asyncio.wait_for(poll, 30) == (204, {})
    job = await submit(http, gateway, {"input": {"n": 1}})
    assert (await take(http, gateway, "pod-b"))[1]["id"] == job["id"]


# -- item 1: a released worker id vouches for nothing --------------------------------------


async def test_a_released_workers_late_pings_neither_register_it_nor_keep_its_job(
    http, gateway, store, redis
):
    job_id = await running_job(http, gateway, "w-old", {"x": 1})
    assert await store.release_worker(gateway.endpoint, "w-old") == (1, 0)

    await ping(http, gateway, "w-old", job_id)  # an orphaned heartbeat process
    await ping(http, gateway, "w-old")

    assert await redis.zscore(f"lg:{{{gateway.endpoint}}}:w", "w-old") is None
    assert (await take(http, gateway, "w-new"))[1]["id"] == job_id  # back in the queue


# -- item 2: a clean exit gives the job back without using an attempt ----------------------


async def test_a_clean_release_requeues_without_an_attempt_and_a_lost_worker_uses_one(
    http, gateway, store, redis
):
    first = await running_job(http, gateway, "w-1", {})
    await store.release_worker(gateway.endpoint, "w-1", clean=True)
    assert await redis.hget(f"lg:{{{gateway.endpoint}}}:j:{first}", "at") == b"0"
    assert (await store.snapshot(gateway.endpoint)).retried == 0

    assert (await take(http, gateway, "w-2"))[1]["id"] == first
    await store.release_worker(gateway.endpoint, "w-2")
    assert await redis.hget(f"lg:{{{gateway.endpoint}}}:j:{first}", "at") == b"1"
    assert (await store.snapshot(gateway.endpoint)).retried == 1


# -- item 3: a job told to stop keeps its worker busy while its handler runs ---------------


async def test_a_cancelled_job_keeps_its_worker_busy_until_its_ping_no_longer_lists_it(
    http, gateway, store
):
    job_id = await running_job(http, gateway, "w-1", {"sleep": 60})
    async with http.post(
        gateway.job_url(f"cancel/{job_id}"), headers=gateway.client_headers()
    ) as resp:
        assert (await resp.json())["status"] == "CANCELLED"

    assert await load(store, gateway, "w-1") == 1  # a sync handler cannot be interrupted
    await ping(http, gateway, "w-1", job_id)  # the runpod SDK's heartbeat still lists it
    assert await load(store, gateway, "w-1") == 1
    assert (await store.snapshot(gateway.endpoint)).workers_running == 1

    await ping(http, gateway, "w-1")  # the handler returned
    assert await load(store, gateway, "w-1") == 0


async def test_a_cancelled_job_the_worker_lists_again_makes_it_busy_again(http, gateway, store):
    """The runpod SDK takes a job into a queue of its own: a cancel that comes before the
    handler starts finds no job in progress there, the next ping lists none, and then the
    handler runs it anyway (seen in CI, `test_dev_workers`): the worker is busy again."""
    job_id = await running_job(http, gateway, "w-1", {"sleep": 60})
    async with http.post(
        gateway.job_url(f"cancel/{job_id}"), headers=gateway.client_headers()
    ) as resp:
        assert (await resp.json())["status"] == "CANCELLED"
    await ping(http, gateway, "w-1")  # the job still in the SDK's own queue
    assert await load(store, gateway, "w-1") == 0
    await ping(http, gateway, "w-1", job_id)  # its handler started after all
    assert await load(store, gateway, "w-1") == 1
    assert (await store.snapshot(gateway.endpoint)).workers_running == 1
    await ping(http, gateway, "w-1", "another-workers-job", "no-such-job")
    assert await load(store, gateway, "w-1") == 0  # only jobs it was told to stop count

    assert await done(http, gateway, "w-1", job_id, {"output": "late"}) == {"accepted": False}
    assert await load(store, gateway, "w-1") == 0


async def test_the_late_result_of_a_cancelled_job_frees_its_worker(http, gateway, store):
    job_id = await running_job(http, gateway, "w-1", {})
    async with http.post(
        gateway.job_url(f"cancel/{job_id}"), headers=gateway.client_headers()
    ) as resp:
        assert resp.status == 200
    assert await load(store, gateway, "w-1") == 1

    assert await done(http, gateway, "w-1", job_id, {"output": "late"}) == {"accepted": False}
    assert await load(store, gateway, "w-1") == 0


# -- item 5: `stopPod` with a result (refresh_worker) -------------------------------------


@pytest.mark.parametrize("gateway_settings", [{"take_wait_s": 1.0}], indirect=True)
async def test_a_result_with_stop_pod_gives_the_worker_no_further_job(http, gateway, store):
    job_id = await running_job(http, gateway, "w-1", {})
    body = {"output": {"ok": True}, "stopPod": True}  # what the runpod SDK posts
    assert await done(http, gateway, "w-1", job_id, body) == {"accepted": True}

    following = await submit(http, gateway, {"input": {}})
    assert await take(http, gateway, "w-1") == (204, {})
    assert (await take(http, gateway, "w-2"))[1]["id"] == following["id"]
    assert await store.refreshing(gateway.endpoint) == ["w-1"]  # for its pool to replace
