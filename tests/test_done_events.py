"""The `d:` event of a job that ended carries its final record when small, so a /runsync
or a `/status?wait=` answers without reading the job again; a job a held `/status` watches
gets the event too (before, only /runsync jobs did, and a held `/status` of a /run job
was answered at its next re-check). The gateways here re-check Redis only every 30 s."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis

from lockgate.store import JobRecord, JobStore, NewJob, keys
from tests.test_job_api import done, get, post, submit, take

GATEWAY_SETTINGS = {"poll_fallback_s": 30.0}
PROMPTLY_S = 10.0  # well under poll_fallback_s: only the event answers by then
EP = "ev"


async def events_of(redis: Redis) -> tuple[asyncio.Queue[bytes], asyncio.Task]:
    """The messages published on the events channel from now on."""
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.EVENTS_CHANNEL)
    seen: asyncio.Queue[bytes] = asyncio.Queue()

    async def pump() -> None:
        async for msg in pubsub.listen():
            if msg["type"] == "message":
                await seen.put(msg["data"])

    return seen, asyncio.create_task(pump())


async def ended(seen: asyncio.Queue[bytes], job_id: str) -> bytes:
    """The `d:` event of `job_id`."""
    while True:
        msg = await asyncio.wait_for(seen.get(), PROMPTLY_S)
        if msg.split(b"\n", 1)[0] == f"d:{EP}:{job_id}".encode():
            return msg


async def finished_sync_job(store: JobStore, *, output: bytes | None, error: str | None) -> str:
    job_id = f"sync-{uuid.uuid4()}"
    await store.submit(EP, NewJob(id=job_id, input=b"{}", ttl_ms=60_000, sync=True))
    [job], _ = await store.take(EP, "w1", 1, 60_000)
    assert job.id == job_id
    assert await store.finish(EP, "w1", job_id, output=output, error=error) is not None
    return job_id


@pytest.mark.parametrize(
    ("output", "error"),
    [
        (b'{"text":"h\\u00e9llo","n":[1,2.5,null]}', None),
        (None, "Traceback (most recent call last):\n  KeyError: 'caf\u00e9'\n"),
        (None, ""),
        (b'"two words"', "an error beside an output"),
        (None, None),
    ],
)
async def test_the_event_carries_the_record_that_a_read_gives(redis, output, error):
    store = JobStore(redis)
    seen, pump = await events_of(redis)
    try:
        job_id = await finished_sync_job(store, output=output, error=error)
        event = await ended(seen, job_id)
    finally:
        pump.cancel()
    _, _, payload = event.partition(b"\n")
    carried = JobRecord.from_event(job_id, payload)
    assert carried == await store.get(EP, job_id)
    assert carried.output == output and carried.error == error


async def test_a_large_result_is_not_carried_and_a_waiter_reads_it(redis):
    store = JobStore(redis)
    seen, pump = await events_of(redis)
    try:
        job_id = await finished_sync_job(store, output=b'"' + b"x" * 9000 + b'"', error=None)
        event = await ended(seen, job_id)
    finally:
        pump.cancel()
    assert event == f"d:{EP}:{job_id}".encode()


@pytest.mark.parametrize("payload", [b"", b"garbage", b"COMPLETED 1 2 3 - 5 x 0\n", b"A 1\n"])
def test_a_payload_that_is_not_a_record_is_none(payload):
    assert JobRecord.from_event("j", payload) is None


async def test_a_held_status_of_a_run_job_answers_when_it_completes(http, gateway):
    """Without its event this waits for the gateway's 30 s re-check."""
    job = await submit(http, gateway, {"input": {"x": 1}})
    held = asyncio.create_task(get(http, gateway, f"status/{job['id']}?wait=60000"))
    assert (await take(http, gateway))["id"] == job["id"]
    await asyncio.sleep(0.3)
    assert not held.done()
    await done(http, gateway, job["id"], {"output": {"y": "\u00e9"}})
    status, body = await asyncio.wait_for(held, PROMPTLY_S)
    assert status == 200 and body["status"] == "COMPLETED" and body["output"] == {"y": "\u00e9"}
    assert body["executionTime"] >= 0 and body["delayTime"] >= 0


async def test_held_statuses_of_a_failed_and_a_large_job_answer_in_full(http, gateway):
    small = await submit(http, gateway, {"input": {"n": 1}})
    large = await submit(http, gateway, {"input": {"n": 2}})
    held = [
        asyncio.create_task(get(http, gateway, f"status/{job['id']}?wait=60000"))
        for job in (small, large)
    ]
    await asyncio.sleep(0.3)
    for _ in range(2):
        job = await take(http, gateway)
        result = {"error": "boom\nline 2"} if job["id"] == small["id"] else {"output": "x" * 20000}
        await done(http, gateway, job["id"], result)
    (s1, failed), (s2, completed) = await asyncio.wait_for(asyncio.gather(*held), PROMPTLY_S)
    assert (s1, failed["status"], failed["error"]) == (200, "FAILED", "boom\nline 2")
    assert (s2, completed["status"], completed["output"]) == (200, "COMPLETED", "x" * 20000)


async def test_a_held_status_of_a_cancelled_job_answers_cancelled(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    held = asyncio.create_task(get(http, gateway, f"status/{job['id']}?wait=60000"))
    await asyncio.sleep(0.3)
    status, _ = await post(http, gateway, f"cancel/{job['id']}")
    assert status == 200
    status, body = await asyncio.wait_for(held, PROMPTLY_S)
    assert (status, body["status"]) == (200, "CANCELLED")


async def test_a_held_status_of_a_final_job_answers_at_once(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"output": 1})
    status, body = await asyncio.wait_for(
        get(http, gateway, f"status/{job['id']}?wait=60000"), PROMPTLY_S
    )
    assert (status, body["status"], body["output"]) == (200, "COMPLETED", 1)


async def test_a_held_status_of_an_unknown_job_is_a_404(http, gateway):
    status, body = await get(http, gateway, "status/no-such-job?wait=60000")
    assert status == 404 and "not found" in body["error"]


async def test_a_runsync_answers_a_large_output_in_full(http, gateway):
    async def worker() -> None:
        job = None
        while job is None:
            job = await take(http, gateway)
        await done(http, gateway, job["id"], {"output": "y" * 30000})

    working = asyncio.create_task(worker())
    status, body = await post(http, gateway, "runsync?wait=60000", json={"input": {}})
    await working
    assert (status, body["status"], body["output"]) == (200, "COMPLETED", "y" * 30000)
