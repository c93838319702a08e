"""job-done's `take=1`: the answer to a result hands the same worker the next queued job, one
request instead of a job-done and a job-take (lockgate's runtime asks for it whenever the
finished job's slot stays wanted). Raw HTTP on the worker side, then the runtime itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from lockgate.gateway.state import GATEWAY
from lockgate.store import JobStore
from tests.conftest import LiveGateway
from tests.test_connections import requests_by_status
from tests.test_job_api import get, submit, take_saying
from tests.test_lifecycle import eventually, status_of
from tests.test_worker_gateway import Worker
from tests.test_worker_stop import ping, running_job

GATEWAY_SETTINGS = {"sweep_interval_s": 0.1, "unlisted_grace_s": 0.3, "take_wait_s": 1.0}


async def done(http, gw: LiveGateway, worker: str, job_id: str, body: dict, query: str) -> dict:
    url = gw.job_url(f"job-done/{worker}/{job_id}{query}")
    async with http.post(url, json=body, headers=gw.worker_headers()) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def held_answer(http: aiohttp.ClientSession, gw: LiveGateway) -> asyncio.Task:
    """A running job's result sent with `take=1&wait=5000`: the result recorded, its answer
    still held (nothing is queued), as a task that ends with the answer."""
    first = await running_job(http, gw, "w-1", {})
    held = asyncio.create_task(done(http, gw, "w-1", first, {"output": 1}, "?take=1&wait=5000"))
    await eventually(lambda: _completed(http, gw, first))  # recorded at once; only the answer waits
    await asyncio.sleep(0.2)
    assert not held.done()
    return held


async def test_a_result_with_take_brings_the_next_queued_job_for_the_same_worker(http, gateway):
    first = await running_job(http, gateway, "w-1", {"n": 1})
    second = await submit(http, gateway, {"input": {"n": 2}})

    answer = await done(http, gateway, "w-1", first, {"output": 1}, "?isStream=false&take=1")

    assert answer == {"accepted": True, "job": {"id": second["id"], "input": {"n": 2}}}
    assert await status_of(http, gateway, second["id"]) == "IN_PROGRESS"
    _, body = await get(http, gateway, f"status/{first}")
    assert (body["status"], body["output"]) == ("COMPLETED", 1)
    # It is that worker's job now: its result is accepted from it.
    assert (await done(http, gateway, "w-1", second["id"], {"output": 2}, ""))["accepted"]


async def test_without_take_or_with_nothing_queued_the_answer_holds_no_job(http, gateway):
    first = await running_job(http, gateway, "w-1", {})
    answer = await done(http, gateway, "w-1", first, {"output": 1}, "?take=1")
    assert answer.keys() == {"accepted", "idle"} and answer["accepted"] is True

    second = await running_job(http, gateway, "w-1", {})
    queued = await submit(http, gateway, {"input": {}})
    assert await done(http, gateway, "w-1", second, {"output": 2}, "") == {"accepted": True}
    assert await status_of(http, gateway, queued["id"]) == "IN_QUEUE"


async def test_a_worker_replaced_after_its_job_gets_no_next_job(http, gateway):
    first = await running_job(http, gateway, "w-1", {})
    queued = await submit(http, gateway, {"input": {}})
    body = {"output": 1, "stopPod": True}
    assert await done(http, gateway, "w-1", first, body, "?take=1") == {"accepted": True}
    assert await status_of(http, gateway, queued["id"]) == "IN_QUEUE"


async def test_a_job_handed_out_in_a_lost_answer_runs_again(http, gateway):
    """As a lost job-take answer: the worker's next take says it holds no job
    (`job_in_progress=0`, what lockgate's runtime and the runpod SDK send when idle), and
    the job goes back to the queue first; a ping listing other jobs frees it too."""
    first = await running_job(http, gateway, "w-1", {})
    second = await submit(http, gateway, {"input": {}})
    answer = await done(http, gateway, "w-1", first, {"output": 1}, "?take=1")
    assert answer["job"]["id"] == second["id"]  # ...and the worker never saw this answer
    assert (await take_saying(http, gateway, "w-1", "0"))["id"] == second["id"]

    third = await submit(http, gateway, {"input": {}})
    answer = await done(http, gateway, "w-1", second["id"], {"output": 2}, "?take=1")
    assert answer["job"]["id"] == third["id"]  # lost again; the worker goes on with another
    other = await running_job(http, gateway, "w-1", {})

    async def requeued() -> bool:
        await ping(http, gateway, "w-1", other)
        return await status_of(http, gateway, third["id"]) == "IN_QUEUE"

    await eventually(requeued)


async def test_the_runtime_takes_its_next_jobs_from_its_results_answers(
    http: aiohttp.ClientSession, gateway: LiveGateway, tmp_path: Path
) -> None:
    worker = Worker(gateway, tmp_path)
    ids = [await worker.submit(http, sleep=0) for _ in range(30)]  # queued before it starts
    await worker.start("async")
    try:
        for job_id in ids:
            await eventually(lambda j=job_id: _completed(http, gateway, j))
        # The last result's answer is held up to the runtime's `wait=` for a next job.
        await eventually(lambda: _answered_results(http, gateway, len(ids)))
        counts = await requests_by_status(http, gateway.url)
    finally:
        assert worker.process is not None
        worker.process.kill()
        await worker.process.wait()
    takes = sum(n for (route, _), n in counts.items() if route.endswith("/job-take/{worker}"))
    results = counts[("/v2/{endpoint}/job-done/{worker}/{job}", "200")]
    assert results == len(ids)
    # One job-take found the first job; each result's answer brought the next. A take
    # long-poll or two may still be open or have timed out empty by now (1 s each).
    assert takes <= 4, counts
    for job_id in ids:
        assert worker.mark(job_id, "start") and worker.mark(job_id, "end")


async def _answered_results(http: aiohttp.ClientSession, gw: LiveGateway, count: int) -> bool:
    counts = await requests_by_status(http, gw.url)
    return counts[("/v2/{endpoint}/job-done/{worker}/{job}", "200")] >= count


async def _completed(http: aiohttp.ClientSession, gw: LiveGateway, job_id: str) -> bool:
    return await status_of(http, gw, job_id) == "COMPLETED"


async def test_a_runtime_told_to_stop_runs_the_job_it_was_handed_and_takes_no_more(
    http: aiohttp.ClientSession, gateway: LiveGateway, tmp_path: Path
) -> None:
    worker = Worker(gateway, tmp_path)
    first = await worker.submit(http, sleep=1.0)
    second = await worker.submit(http, sleep=0.2)
    third = await worker.submit(http, sleep=0)
    await worker.start("async")
    assert worker.process is not None
    await eventually(lambda: asyncio.sleep(0, result=worker.mark(first, "start") is not None))
    worker.process.terminate()  # SIGTERM while the first runs: it finishes and reports
    assert await asyncio.wait_for(worker.process.wait(), 30) == 0
    assert await status_of(http, gateway, first) == "COMPLETED"
    # Stopping, it asked its result's answer for no next job: the others stay queued.
    assert await status_of(http, gateway, second) == "IN_QUEUE"
    assert await status_of(http, gateway, third) == "IN_QUEUE"


# -- `wait=`: the answer waits for the next job (a worker kept busy one job at a time) ------


async def test_a_result_with_wait_holds_its_answer_until_a_job_is_queued(http, gateway):
    held = await held_answer(http, gateway)

    queued = await submit(http, gateway, {"input": {"n": 2}})

    answer = await asyncio.wait_for(held, 3)  # at once, not at the end of its 5 s
    assert answer == {"accepted": True, "job": {"id": queued["id"], "input": {"n": 2}}}
    assert await status_of(http, gateway, queued["id"]) == "IN_PROGRESS"
    assert (await done(http, gateway, "w-1", queued["id"], {"output": 2}, ""))["accepted"]


async def test_a_held_answer_with_nothing_queued_ends_at_its_wait_with_no_job(http, gateway):
    first = await running_job(http, gateway, "w-1", {})
    loop = asyncio.get_running_loop()
    began = loop.time()

    answer = await done(http, gateway, "w-1", first, {"output": 1}, "?take=1&wait=400")

    assert loop.time() - began >= 0.4
    # No idle token: the hold's own last take found the queue empty after the token was read.
    assert answer == {"accepted": True}
    queued = await submit(http, gateway, {"input": {}})
    assert await status_of(http, gateway, queued["id"]) == "IN_QUEUE"


async def test_a_held_answer_ends_when_its_worker_is_told_to_stop(http, gateway, redis):
    store = JobStore(redis)
    held = await held_answer(http, gateway)

    await store.stop_taking(gateway.endpoint, ["w-1"])  # as DeploymentPool.resize does

    assert await asyncio.wait_for(held, 3) == {"accepted": True}
    queued = await submit(http, gateway, {"input": {}})
    assert await status_of(http, gateway, queued["id"]) == "IN_QUEUE"


async def test_a_held_answer_ends_when_the_gateway_drains(http, gateway):
    held = await held_answer(http, gateway)

    gateway.app[GATEWAY].drain()  # as a SIGTERM does before the process stops

    assert await asyncio.wait_for(held, 3) == {"accepted": True}


async def test_a_late_result_is_answered_at_once_whatever_its_wait(http, gateway):
    """A result the store ignores (the job is no longer this worker's) takes no job."""
    first = await running_job(http, gateway, "w-1", {})
    assert (await done(http, gateway, "w-1", first, {"output": 1}, ""))["accepted"]
    answer = await asyncio.wait_for(
        done(http, gateway, "w-1", first, {"output": 2}, "?take=1&wait=5000"), 3
    )
    assert answer["accepted"] is False and "job" not in answer


@pytest.mark.parametrize("wait", ["-1", "5001", "soon"])
async def test_a_wait_out_of_range_is_a_400_and_the_result_is_not_recorded(http, gateway, wait):
    job_id = await running_job(http, gateway, "w-1", {})
    url = gateway.job_url(f"job-done/w-1/{job_id}?take=1&wait={wait}")
    async with http.post(url, json={"output": 1}, headers=gateway.worker_headers()) as resp:
        assert resp.status == 400
        assert "wait" in (await resp.json())["error"]
    assert await status_of(http, gateway, job_id) == "IN_PROGRESS"


async def test_a_take_other_than_0_or_1_is_a_400_and_the_result_is_not_recorded(http, gateway):
    job_id = await running_job(http, gateway, "w-1", {})
    url = gateway.job_url(f"job-done/w-1/{job_id}?take=2")
    async with http.post(url, json={"output": 1}, headers=gateway.worker_headers()) as resp:
        assert resp.status == 400
        assert "take" in (await resp.json())["error"]
    assert await status_of(http, gateway, job_id) == "IN_PROGRESS"
