"""`/stream` against a real gateway and Redis: 1 MB chunks, the per-job cap on unread
stream data, and stream data dying with its job. The worker side speaks raw HTTP."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from lockgate.gateway.chunks import CHUNK_LIMIT
from lockgate.store import JobStore, keys
from tests.conftest import LiveGateway
from tests.test_job_api import done, get, post, submit, take

CAP = 3 * 1024 * 1024  # bytes of unread stream data per job, for these tests
ACCEPTED = (200, {"accepted": True})


GATEWAY_SETTINGS = {"max_stream_bytes": CAP, "retention_run_s": 1.0}


async def push(http, gw: LiveGateway, job_id: str, body: dict, worker: str = "w1"):
    url = gw.job_url(f"job-stream/{worker}/{job_id}")
    async with http.post(url, data=orjson.dumps(body), headers=gw.worker_headers()) as r:
        return r.status, await r.json()


async def running_job(http, gw: LiveGateway) -> str:
    job = await submit(http, gw, {"input": {}})
    assert (await take(http, gw))["id"] == job["id"]
    return job["id"]


async def read(http, gw: LiveGateway, job_id: str) -> list[dict]:
    status, body = await get(http, gw, f"stream/{job_id}")
    assert status == 200, body
    return body["stream"]


async def test_a_long_string_chunk_is_read_as_chunks_of_at_most_1_mb(http, gateway):
    job_id = await running_job(http, gateway)
    text = "token é🚀 " * 300_000  # 3.9 MB of UTF-8
    assert await push(http, gateway, job_id, {"output": "start"}) == ACCEPTED
    metrics = {"output_tokens": 300_000}
    assert (await push(http, gateway, job_id, {"output": text[:2_000_000], "metrics": metrics}))[0]
    stream = await read(http, gateway, job_id)
    assert all(len(orjson.dumps(chunk)) <= CHUNK_LIMIT for chunk in stream)
    assert len(stream) == 1 + 3
    assert "".join(c["output"] for c in stream) == "start" + text[:2_000_000]
    assert [c.get("metrics") for c in stream] == [None, None, None, metrics]
    await push(http, gateway, job_id, {"output": text[2_000_000:]})
    assert "".join(c["output"] for c in await read(http, gateway, job_id)) == text[2_000_000:]


async def test_a_large_output_that_is_not_a_string_is_split_as_its_json_text(http, gateway):
    job_id = await running_job(http, gateway)
    image = {"image": "x" * (CHUNK_LIMIT + 10), "format": "png"}
    assert await push(http, gateway, job_id, {"output": image}) == ACCEPTED
    stream = await read(http, gateway, job_id)
    assert all(len(orjson.dumps(chunk)) <= CHUNK_LIMIT for chunk in stream)
    assert [c["split"] for c in stream] == [
        {"index": 0, "count": 2, "format": "json"},
        {"index": 1, "count": 2, "format": "json"},
    ]
    assert orjson.loads("".join(c["output"] for c in stream)) == image


async def test_stream_data_past_the_cap_is_refused_with_413_and_the_job_goes_on(http, gateway):
    job_id = await running_job(http, gateway)
    mb = "m" * (1024 * 1024 - 20)
    for n in range(3):
        assert await push(http, gateway, job_id, {"output": mb + str(n)}) == ACCEPTED
    status, body = await push(http, gateway, job_id, {"output": "one more"})
    assert status == 413 and "LOCKGATE_MAX_STREAM_BYTES" in body["error"]
    assert [c["output"][-1] for c in await read(http, gateway, job_id)] == ["0", "1", "2"]
    # Read, the stream has room again; the refused chunk never appears.
    assert await push(http, gateway, job_id, {"output": "after"}) == ACCEPTED
    assert await read(http, gateway, job_id) == [{"output": "after"}]
    assert (await done(http, gateway, job_id, {"output": "all"}))["accepted"] is True
    _, job = await get(http, gateway, f"status/{job_id}")
    assert (job["status"], job["output"]) == ("COMPLETED", "all")


async def test_a_split_chunk_that_does_not_fit_under_the_cap_is_refused_whole(http, gateway):
    job_id = await running_job(http, gateway)
    assert (await push(http, gateway, job_id, {"output": "a" * (2 * 1024 * 1024)}))[0] == 200
    status, _ = await push(http, gateway, job_id, {"output": "b" * (2 * 1024 * 1024)})
    assert status == 413
    assert {c["output"][0] for c in await read(http, gateway, job_id)} == {"a"}


async def test_a_requeued_job_starts_its_stream_and_its_cap_afresh(http, gateway):
    job_id = await running_job(http, gateway)
    assert (await push(http, gateway, job_id, {"output": "x" * (CAP - 1000)}))[0] == 200
    await done(http, gateway, job_id, {"error": "boom"})
    assert (await post(http, gateway, f"retry/{job_id}"))[1]["status"] == "IN_QUEUE"
    assert (await take(http, gateway, "w2"))["id"] == job_id
    assert await read(http, gateway, job_id) == []
    assert (await push(http, gateway, job_id, {"output": "y" * (CAP - 1000)}, "w2"))[0] == 200


async def test_a_worker_that_no_longer_holds_the_job_streams_nothing(http, gateway):
    job_id = await running_job(http, gateway)
    assert (await push(http, gateway, job_id, {"output": 1}, "intruder"))[1]["accepted"] is False
    await post(http, gateway, f"cancel/{job_id}")
    assert await push(http, gateway, job_id, {"output": 2}) == (200, {"accepted": False})
    assert await read(http, gateway, job_id) == []


@pytest.mark.parametrize("body", [b"[1]", b'{"metrics": {}}', b"not json", b""])
async def test_a_stream_body_without_output_is_refused_with_400(http, gateway, body):
    job_id = await running_job(http, gateway)
    url = gateway.job_url(f"job-stream/w1/{job_id}")
    async with http.post(url, data=body, headers=gateway.worker_headers()) as r:
        assert r.status == 400 and "error" in await r.json()


async def test_unread_stream_data_lives_and_dies_with_its_job(http, gateway, redis):
    job_id = await running_job(http, gateway)
    await push(http, gateway, job_id, {"output": "never read"})
    job_key, stream_key = keys.job("echo", job_id), keys.stream("echo", job_id)
    # the stream dies with its job (pttl is read one key after the other: allow 50 ms)
    assert 0 < await redis.pttl(stream_key) <= await redis.pttl(job_key) + 50
    await done(http, gateway, job_id, {"output": "x"})  # kept 1 s (retention_run_s)
    assert 0 < await redis.pttl(stream_key) <= 1000
    assert await redis.pttl(stream_key) - await redis.pttl(job_key) in range(-50, 50)
    await asyncio.sleep(1.2)
    assert await redis.exists(job_key, stream_key) == 0
    assert (await get(http, gateway, f"stream/{job_id}"))[0] == 404


async def test_a_new_ttl_moves_the_unread_streams_expiry_with_the_job(http, gateway, redis):
    job_id = await running_job(http, gateway)
    await push(http, gateway, job_id, {"output": "chunk"})
    stream_key = keys.stream("echo", job_id)
    before = await redis.pttl(stream_key)
    assert (await get(http, gateway, f"status/{job_id}?ttl=20000"))[0] == 200
    after = await redis.pttl(stream_key)
    assert after < before - 60_000  # 24 h + grace before; 20 s + grace now
    assert after <= await redis.pttl(keys.job("echo", job_id)) + 50


async def test_status_details_count_attempts_and_show_the_chunks_no_read_took(http, gateway, redis):
    job_id = await running_job(http, gateway)
    plain = (await get(http, gateway, f"status/{job_id}"))[1]
    assert "attempts" not in plain and "stream" not in plain  # RunPod's answer without it
    await JobStore(redis).release_worker(gateway.endpoint, "w1")  # its pod is gone
    assert (await take(http, gateway, "w2"))["id"] == job_id
    assert (await push(http, gateway, job_id, {"output": "one"}, "w2"))[0] == 200
    assert (await push(http, gateway, job_id, {"output": {"n": 2}}, "w2"))[0] == 200
    await done(http, gateway, job_id, {"output": "end"}, "w2")
    details = (await get(http, gateway, f"status/{job_id}?details=1"))[1]
    assert details["status"] == "COMPLETED" and details["attempts"] == 2
    lost, returned = details["attemptHistory"]  # each take: its worker, how it ended
    assert (lost["workerId"], lost["ended"]) == ("w1", "WORKER_LOST")
    assert (returned["workerId"], returned["ended"]) == ("w2", "COMPLETED")
    assert lost["takenAt"] <= lost["endedAt"] <= returned["takenAt"] <= returned["endedAt"]
    assert details["stream"] == [{"output": "one"}, {"output": {"n": 2}}]
    # reading the details takes nothing: /stream still gets the chunks, then they are gone
    assert await read(http, gateway, job_id) == [{"output": "one"}, {"output": {"n": 2}}]
    assert (await get(http, gateway, f"status/{job_id}?details=1"))[1]["stream"] == []
    bad = await get(http, gateway, f"status/{job_id}?details=yes")
    assert bad[0] == 400 and "'details'" in bad[1]["error"]


async def test_a_retry_starts_the_attempts_again_and_keeps_their_history(http, gateway):
    job_id = await running_job(http, gateway)
    await done(http, gateway, job_id, {"error": "boom"})
    assert (await get(http, gateway, f"status/{job_id}?details=1"))[1]["attempts"] == 1
    assert (await post(http, gateway, f"retry/{job_id}"))[1]["status"] == "IN_QUEUE"
    details = (await get(http, gateway, f"status/{job_id}?details=1"))[1]
    assert details["attempts"] == 0
    assert [a["ended"] for a in details["attemptHistory"]] == ["FAILED"]
    assert (await take(http, gateway, "w2"))["id"] == job_id
    history = (await get(http, gateway, f"status/{job_id}?details=1"))[1]["attemptHistory"]
    assert history[-1]["workerId"] == "w2" and "ended" not in history[-1]  # running


async def test_the_attempt_history_keeps_the_last_ten_takes(http, gateway, redis):
    job_id = (await submit(http, gateway, {"input": {}}))["id"]
    store = JobStore(redis)
    for n in range(12):  # each worker told to stop exits before running it: given back
        assert (await take(http, gateway, f"w{n}"))["id"] == job_id
        assert await store.release_worker(gateway.endpoint, f"w{n}", clean=True) == (1, 0)
    details = (await get(http, gateway, f"status/{job_id}?details=1"))[1]
    assert details["status"] == "IN_QUEUE" and details["attempts"] == 0  # none used
    history = details["attemptHistory"]
    assert [a["workerId"] for a in history] == [f"w{n}" for n in range(2, 12)]
    assert {a["ended"] for a in history} == {"GIVEN_BACK"}
