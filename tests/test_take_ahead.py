"""Taking ahead (issue 51): lockgate's runtime, while its jobs are short, holds a few jobs
beyond its concurrency, each starting the moment a slot frees; one that waits too long for
a slot goes back to the front of the queue unstarted (`job-return`, give_back.lua), no
attempt used. The slots themselves (worker/jobs.py `Slots`) on a bare event loop; the route
on the real gateway over loopback; the runtime as a real worker process (tests/handlers/
sleeper.py) against it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import pytest

from lockgate.store import JobStore
from lockgate.worker.jobs import Slots
from tests.conftest import LiveGateway, register
from tests.test_connections import requests_by_status
from tests.test_job_api import get, submit
from tests.test_lifecycle import eventually, status_of
from tests.test_worker_local import HANDLERS, worker_env
from tests.test_worker_stop import done, running_job, take

# -- the slots ---------------------------------------------------------------------------


async def test_waiting_jobs_get_freed_slots_in_turn() -> None:
    slots = Slots()
    assert await slots.enter(1, None)
    second = asyncio.create_task(slots.enter(1, None))
    third = asyncio.create_task(slots.enter(1, None))
    await asyncio.sleep(0)
    assert (slots.busy, slots.waiting) == (1, 2) and not second.done()
    slots.leave(1)
    assert await second and not third.done()
    slots.leave(1)
    assert await third and (slots.busy, slots.waiting) == (1, 0)


async def test_a_wait_past_its_time_or_sent_away_takes_no_slot() -> None:
    slots = Slots()
    assert await slots.enter(1, None)
    assert not await slots.enter(1, 0.01)
    waiting = asyncio.create_task(slots.enter(1, None))
    await asyncio.sleep(0)
    slots.send_away()
    assert not await waiting
    assert (slots.busy, slots.waiting) == (1, 0)
    slots.leave(1)
    assert slots.busy == 0


async def test_a_waiter_cancelled_after_its_turn_came_passes_the_slot_on() -> None:
    slots = Slots()
    assert await slots.enter(1, None)
    granted = asyncio.create_task(slots.enter(1, None))
    after = asyncio.create_task(slots.enter(1, None))
    await asyncio.sleep(0)
    slots.leave(1)  # the turn is `granted`'s, but it is cancelled before it resumes
    granted.cancel()
    with pytest.raises(asyncio.CancelledError):
        await granted
    assert await after and slots.busy == 1
    slots.leave(1)
    assert (slots.busy, slots.waiting) == (0, 0)


async def test_a_larger_limit_admits_waiters_at_once() -> None:
    slots = Slots()
    assert await slots.enter(1, None)
    waiting = asyncio.create_task(slots.enter(1, None))
    await asyncio.sleep(0)
    slots.admit(2)
    assert await waiting and slots.busy == 2


# -- job-return ----------------------------------------------------------------------------


async def give_back(http: aiohttp.ClientSession, gw: LiveGateway, worker: str, job_id: str):
    async with http.post(gw.job_url(f"job-return/{worker}/{job_id}"),
                         headers=gw.worker_headers()) as r:  # fmt: skip
        return r.status, await r.json()


async def test_a_job_given_back_is_first_in_its_queue_again_with_no_attempt_used(
    http, gateway, redis
):
    first = await running_job(http, gateway, "w1", {"n": 1})
    later = await submit(http, gateway, {"input": {"n": 2}})

    assert await give_back(http, gateway, "w1", first) == (200, {"accepted": True})

    assert await status_of(http, gateway, first) == "IN_QUEUE"
    extras = await JobStore(redis).job_extras(gateway.endpoint, first)
    assert extras.attempts == 0
    assert [(a.worker, a.how) for a in extras.history] == [("w1", "GIVEN_BACK")]
    _, health = await get(http, gateway, "health")
    assert health["jobs"]["retried"] == 0
    status, taken = await take(http, gateway, "w2")  # before the job queued after it
    assert (status, taken["id"]) == (200, first)
    assert await status_of(http, gateway, later["id"]) == "IN_QUEUE"
    # w1 holds it no more: its give-back changes nothing; w2's result counts.
    assert await give_back(http, gateway, "w1", first) == (200, {"accepted": False})
    assert await status_of(http, gateway, first) == "IN_PROGRESS"
    assert (await done(http, gateway, "w2", first, {"output": 1}))["accepted"]
    assert await give_back(http, gateway, "w2", first) == (200, {"accepted": False})
    assert await status_of(http, gateway, first) == "COMPLETED"


async def test_a_give_back_naming_no_job_is_a_404_as_on_every_job_route(http, gateway):
    status, body = await give_back(http, gateway, "w1", "not%20an%20id")
    assert status == 404 and "not found" in body["error"], body


async def test_a_results_answer_says_when_more_jobs_wait_behind_the_one_it_hands_out(http, gateway):
    first = await running_job(http, gateway, "w1", {})
    queued = [(await submit(http, gateway, {"input": {"n": n}}))["id"] for n in range(2)]
    url = gateway.job_url(f"job-done/w1/{first}?take=1")
    async with http.post(url, json={"output": 1}, headers=gateway.worker_headers()) as r:
        answer = await r.json()
    assert (answer["job"]["id"], answer.get("more")) == (queued[0], True)
    url = gateway.job_url(f"job-done/w1/{queued[0]}?take=1")
    async with http.post(url, json={"output": 2}, headers=gateway.worker_headers()) as r:
        answer = await r.json()
    assert answer["job"]["id"] == queued[1] and "more" not in answer, answer


async def test_no_job_is_taken_ahead_where_a_lost_workers_jobs_fail(http, gateway, redis):
    """onWorkerLost fail: a job a worker held ahead would fail with it though it never ran,
    so the answer never invites taking ahead."""
    client_key, worker_key = await register(redis, "strict", onWorkerLost="fail")
    base = f"{gateway.url}/v2/strict"
    ids = []
    for n in range(3):
        async with http.post(f"{base}/run", json={"input": {"n": n}},
                             headers={"authorization": client_key}) as r:  # fmt: skip
            ids.append((await r.json())["id"])
    worker = {"authorization": worker_key}
    async with http.get(f"{base}/job-take/w1", headers=worker) as r:
        assert (await r.json())["id"] == ids[0]
    async with http.post(f"{base}/job-done/w1/{ids[0]}?take=1", json={"output": 1},
                         headers=worker) as r:  # fmt: skip
        answer = await r.json()
    assert answer["job"]["id"] == ids[1] and "more" not in answer, answer


# -- the runtime -------------------------------------------------------------------------


async def start_worker(gw: LiveGateway, worker_id: str, log: Path) -> asyncio.subprocess.Process:
    """tests/handlers/sleeper.py (async, concurrency 1) as `worker_id`, logging to `log`."""
    env = worker_env(
        LOCKGATE_GATEWAY_URL=gw.url,
        LOCKGATE_ENDPOINT_ID=gw.endpoint,
        LOCKGATE_WORKER_ID=worker_id,
        LOCKGATE_WORKER_KEY=gw.worker_key,
        LOCKGATE_PING_INTERVAL_MS="200",
        LOCKGATE_LOG_LEVEL="DEBUG",
    )
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, str(HANDLERS / "sleeper.py"), "async", "1", env=env, stderr=out
        )


async def stop(*processes: asyncio.subprocess.Process) -> None:
    for process in processes:
        if process.returncode is None:
            process.kill()
        await process.wait()


def job_lines(log: Path) -> list[tuple[str, str]]:
    """(job id, started | completed) in the order the worker logged them."""
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        words = line.split()
        if "job" in words:
            at = words.index("job")
            if at + 2 < len(words) and words[at + 2] in ("started", "completed"):
                lines.append((words[at + 1], words[at + 2]))
    return lines


async def test_short_jobs_are_taken_ahead_and_still_run_one_at_a_time(
    http: aiohttp.ClientSession, gateway: LiveGateway, tmp_path: Path
) -> None:
    ids = [(await submit(http, gateway, {"input": {"n": n}}))["id"] for n in range(40)]
    log = tmp_path / "w1.log"
    worker = await start_worker(gateway, "w1", log)
    try:
        for job_id in ids:
            await eventually(lambda j=job_id: _is(http, gateway, j, "COMPLETED"))
        counts = await requests_by_status(http, gateway.url)
    finally:
        await stop(worker)
    # Past the first short jobs it asked for more than its one slot at a time...
    ahead = counts.get(("/v2/{endpoint}/job-take-batch/{worker}", "200"), 0)
    assert ahead >= 1, counts
    # ...yet ran them one at a time, each once, none given back.
    lines = job_lines(log)
    assert [what for _, what in lines] == ["started", "completed"] * len(ids)
    assert sorted(job for job, what in lines if what == "started") == sorted(ids)
    assert all(a == b for (a, _), (b, _) in zip(lines[::2], lines[1::2], strict=True))
    assert "given back" not in log.read_text()


async def test_jobs_taken_ahead_of_a_long_one_go_back_and_another_worker_runs_them(
    http: aiohttp.ClientSession, gateway: LiveGateway, redis, tmp_path: Path
) -> None:
    """w1, warmed by 20 short jobs, takes jobs ahead behind a long one: they wait a quarter
    of a second for its slot and go back to the queue unstarted; w2 runs them while the long
    job still runs, each once."""
    marks = tmp_path / "marks"
    marks.mkdir()

    async def queue(**job_input) -> str:
        job = await submit(http, gateway, {"input": {"marks": str(marks), **job_input}})
        return job["id"]

    shorts = [await queue() for _ in range(20)]
    long = await queue(sleep=6)
    behind = [await queue() for _ in range(3)]
    w1 = await start_worker(gateway, "w1", tmp_path / "w1.log")
    w2 = None
    try:
        await eventually(lambda: asyncio.sleep(0, result=(marks / f"{long}.start").exists()))
        await eventually(lambda: asyncio.sleep(0, result="given back" in _text(tmp_path)))
        w2 = await start_worker(gateway, "w2", tmp_path / "w2.log")
        for job_id in (*shorts, *behind):
            await eventually(lambda j=job_id: _is(http, gateway, j, "COMPLETED"))
        assert await status_of(http, gateway, long) == "IN_PROGRESS"
    finally:
        await stop(w1, *([w2] if w2 else []))
    store = JobStore(redis)
    given = []
    for job_id in behind:
        history = [
            (a.worker, a.how) for a in (await store.job_extras(gateway.endpoint, job_id)).history
        ]
        assert history[-1] == ("w2", "COMPLETED"), history
        assert set(history[:-1]) <= {("w1", "GIVEN_BACK")}, history
        given += history[:-1]
    assert given, "no job was taken ahead of the long one"
    w1_started = {job for job, what in job_lines(tmp_path / "w1.log") if what == "started"}
    assert not w1_started & set(behind)


def _text(tmp_path: Path) -> str:
    return (tmp_path / "w1.log").read_text(errors="replace")


async def _is(http: aiohttp.ClientSession, gw: LiveGateway, job_id: str, state: str) -> bool:
    return await status_of(http, gw, job_id) == state
