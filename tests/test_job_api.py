"""Client job API against a real gateway and Redis; the worker side speaks raw HTTP."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest

from lockgate.store import JobStore
from tests.conftest import LiveGateway


async def submit(http: aiohttp.ClientSession, gw: LiveGateway, body: dict) -> dict:
    async with http.post(gw.job_url("run"), json=body, headers=gw.client_headers()) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def take(http: aiohttp.ClientSession, gw: LiveGateway, worker: str = "w1") -> dict | None:
    async with http.get(gw.job_url(f"job-take/{worker}"), headers=gw.worker_headers()) as r:
        if r.status == 204:
            return None
        assert r.status == 200, await r.text()
        return await r.json()


async def done(http, gw: LiveGateway, job_id: str, body: dict, worker: str = "w1") -> dict:
    url = gw.job_url(f"job-done/{worker}/{job_id}?isStream=false")
    async with http.post(url, json=body, headers=gw.worker_headers()) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def get(http, gw: LiveGateway, path: str) -> tuple[int, dict]:
    async with http.get(gw.job_url(path), headers=gw.client_headers()) as r:
        return r.status, await r.json()


async def post(http, gw: LiveGateway, path: str, **kw) -> tuple[int, dict]:
    async with http.post(gw.job_url(path), headers=gw.client_headers(), **kw) as r:
        return r.status, await r.json()


async def test_run_queues_a_job_and_status_reports_it(http, gateway):
    job = await submit(http, gateway, {"input": {"x": 1}})
    assert job["status"] == "IN_QUEUE"
    status, body = await get(http, gateway, f"status/{job['id']}")
    assert status == 200
    assert body["status"] == "IN_QUEUE" and "output" not in body
    assert isinstance(body["delayTime"], int) and body["executionTime"] == 0


async def test_job_ids_are_fresh_random_uuids_as_runpod_gives(http, gateway):
    ids = [(await submit(http, gateway, {"input": {}}))["id"] for _ in range(50)]
    async with http.post(
        gateway.job_url("runsync?wait=1000"), json={"input": {}}, headers=gateway.client_headers()
    ) as r:
        sync_id = (await r.json())["id"]
    assert sync_id.startswith("sync-")
    for job_id in [*ids, sync_id.removeprefix("sync-")]:
        parsed = uuid.UUID(job_id)
        assert str(parsed) == job_id and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert len(set(ids)) == len(ids)


async def test_a_taken_job_completes_with_its_output(http, gateway):
    job = await submit(
        http,
        gateway,
        {
            "input": {"x": 1},
            "s3Config": {
                "accessId": "a",
                "accessSecret": "s",
                "bucketName": "b",
                "endpointUrl": "u",
            },
        },
    )
    taken = await take(http, gateway)
    assert taken == {
        "id": job["id"],
        "input": {"x": 1},
        "s3Config": {"accessId": "a", "accessSecret": "s", "bucketName": "b", "endpointUrl": "u"},
    }
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "IN_PROGRESS"
    assert (await done(http, gateway, job["id"], {"output": {"y": 2}}))["accepted"] is True
    _status, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "COMPLETED" and body["output"] == {"y": 2}
    assert "s3Config" not in body


async def test_jobs_are_taken_in_submission_order(http, gateway):
    ids = [(await submit(http, gateway, {"input": {"n": n}}))["id"] for n in range(5)]
    taken = [(await take(http, gateway))["id"] for _ in ids]
    assert taken == ids


async def test_low_priority_jobs_are_taken_after_normal_ones(http, gateway):
    low = await submit(http, gateway, {"input": {}, "policy": {"lowPriority": True}})
    normal = await submit(http, gateway, {"input": {}})
    assert (await take(http, gateway))["id"] == normal["id"]
    assert (await take(http, gateway))["id"] == low["id"]


async def test_a_worker_error_fails_the_job_with_the_message(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"error": "ValueError: boom"})
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "FAILED" and body["error"] == "ValueError: boom"
    assert "output" not in body


async def test_runsync_returns_the_completed_job(http, gateway):
    async def worker():
        job = await take(http, gateway)
        await done(http, gateway, job["id"], {"output": job["input"]})

    task = asyncio.create_task(worker())
    status, body = await post(http, gateway, "runsync", json={"input": {"a": 1}})
    await task
    assert status == 200
    assert body["id"].startswith("sync-") and body["status"] == "COMPLETED"
    assert body["output"] == {"a": 1}
    assert {"delayTime", "executionTime"} <= body.keys()


async def test_runsync_returns_the_current_state_when_wait_elapses(http, gateway):
    status, body = await post(http, gateway, "runsync?wait=1000", json={"input": {}})
    assert status == 200 and body["status"] == "IN_QUEUE" and body["id"].startswith("sync-")
    assert (await get(http, gateway, f"status/{body['id']}"))[1]["status"] == "IN_QUEUE"


@pytest.mark.parametrize("wait", ["999", "300001", "abc", "-5"])
async def test_runsync_refuses_a_wait_out_of_range(http, gateway, wait):
    status, body = await post(http, gateway, f"runsync?wait={wait}", json={"input": {}})
    assert status == 400 and "wait" in body["error"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "input"),
        ({"input": 5}, "input"),
        ({"input": {}, "policy": {"ttl": 9999}}, "policy.ttl"),
        ({"input": {}, "policy": {"executionTimeout": 4999}}, "policy.executionTimeout"),
        ({"input": {}, "policy": {"executionTimeout": 604800001}}, "policy.executionTimeout"),
        ({"input": {}, "policy": {"ttl": 604800001}}, "policy.ttl"),
        ({"input": {}, "webhook": "ftp://x"}, "webhook"),
        ({"input": {}, "s3Config": {"accessId": "a"}}, "s3Config.accessSecret"),
        ({"input": {}, "policy": {"bogus": 1}}, "policy.bogus"),
    ],
)
async def test_invalid_requests_are_refused_naming_the_field(http, gateway, body, field):
    status, reply = await post(http, gateway, "run", json=body)
    assert status == 400
    assert field in reply["error"]


@pytest.mark.parametrize("raw", [b"", b"{", b"[1,2]", b"null", b'"x"'])
async def test_bodies_that_are_not_a_json_object_are_refused(http, gateway, raw):
    status, reply = await post(http, gateway, "run", data=raw)
    assert status == 400 and reply["error"]


async def test_run_refuses_a_body_over_10_mb_and_runsync_accepts_it(http, gateway):
    big = {"input": {"blob": "x" * (10 * 1024 * 1024)}}
    status, reply = await post(http, gateway, "run", json=big)
    assert status == 413 and "10 MB" in reply["error"]
    status, reply = await post(http, gateway, "runsync?wait=1000", json=big)
    assert status == 200 and reply["status"] == "IN_QUEUE"


async def test_runsync_refuses_a_body_over_20_mb(http, gateway):
    big = {"input": {"blob": "x" * (20 * 1024 * 1024)}}
    status, _reply = await post(http, gateway, "runsync", json=big)
    assert status == 413


async def test_chunked_bodies_over_the_limit_are_refused(http, gateway):
    async def chunks():
        for _ in range(11):
            yield b" " * (1024 * 1024)

    status, _ = await post(http, gateway, "run", data=chunks())
    assert status == 413


@pytest.mark.parametrize("header", [None, "", "Bearer", "nope", "Bearer nope"])
async def test_a_missing_or_unknown_key_gets_401(http, gateway, header):
    headers = {} if header is None else {"authorization": header}
    async with http.post(gateway.job_url("run"), json={"input": {}}, headers=headers) as r:
        assert r.status == 401
        assert "error" in await r.json()


async def test_both_authorization_forms_are_accepted(http, gateway):
    for header in (gateway.client_key, f"Bearer {gateway.client_key}"):
        async with http.get(gateway.job_url("health"), headers={"authorization": header}) as r:
            assert r.status == 200


async def test_a_worker_key_cannot_call_client_routes(http, gateway):
    async with http.post(
        gateway.job_url("run"), json={"input": {}}, headers=gateway.worker_headers()
    ) as r:
        assert r.status == 401


async def test_a_client_key_cannot_take_jobs(http, gateway):
    await submit(http, gateway, {"input": {}})
    async with http.get(gateway.job_url("job-take/w1"), headers=gateway.client_headers()) as r:
        assert r.status == 401
    assert (await get(http, gateway, "health"))[1]["jobs"]["inQueue"] == 1


async def test_unknown_endpoints_and_jobs_get_404(http, gateway):
    async with http.get(f"{gateway.url}/v2/nope/health", headers=gateway.client_headers()) as r:
        assert r.status == 404 and "nope" in (await r.json())["error"]
    for path in ("status/missing", "stream/missing", "status/..%2F..", "status/" + "x" * 200):
        status, _body = await get(http, gateway, path)
        assert status == 404, path
    for path in ("cancel/missing", "retry/missing"):
        assert (await post(http, gateway, path))[0] == 404


async def test_cancel_removes_a_queued_job_before_it_starts(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    status, body = await post(http, gateway, f"cancel/{job['id']}")
    assert (status, body) == (200, {"id": job["id"], "status": "CANCELLED"})
    assert await take(http, gateway) is None
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "CANCELLED"


async def test_cancel_of_a_finished_job_is_refused_naming_its_state(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"output": 1})
    status, body = await post(http, gateway, f"cancel/{job['id']}")
    assert status == 400 and "COMPLETED" in body["error"]


async def test_cancel_in_progress_signals_the_worker_and_ignores_its_late_result(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    assert (await post(http, gateway, f"cancel/{job['id']}"))[1]["status"] == "CANCELLED"
    async with http.get(gateway.job_url("job-stop/w1"), headers=gateway.worker_headers()) as r:
        assert r.status == 200 and (await r.json()) == {"jobsToStop": [job["id"]]}
    assert (await done(http, gateway, job["id"], {"output": "late"}))["accepted"] is False
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "CANCELLED" and "output" not in body


async def test_retry_requeues_a_failed_job_with_the_same_id_and_input(http, gateway):
    job = await submit(http, gateway, {"input": {"k": "v"}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"error": "boom"})
    status, body = await post(http, gateway, f"retry/{job['id']}")
    assert (status, body) == (200, {"id": job["id"], "status": "IN_QUEUE"})
    _, st = await get(http, gateway, f"status/{job['id']}")
    assert st["status"] == "IN_QUEUE" and "error" not in st
    assert (await take(http, gateway)) == {"id": job["id"], "input": {"k": "v"}}
    assert (await get(http, gateway, "health"))[1]["jobs"]["retried"] == 1


async def test_retry_of_a_completed_job_is_refused(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"output": 1})
    status, body = await post(http, gateway, f"retry/{job['id']}")
    assert status == 400 and "COMPLETED" in body["error"]


async def test_purge_removes_queued_jobs_and_leaves_running_ones(http, gateway):
    running = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    queued = [await submit(http, gateway, {"input": {}}) for _ in range(3)]
    await submit(http, gateway, {"input": {}, "policy": {"lowPriority": True}})
    status, body = await post(http, gateway, "purge-queue")
    assert (status, body) == (200, {"removed": 4, "status": "completed"})
    assert (await get(http, gateway, f"status/{queued[0]['id']}"))[0] == 404
    assert (await get(http, gateway, f"status/{running['id']}"))[1]["status"] == "IN_PROGRESS"


async def test_health_counts_jobs_and_workers(http, gateway):
    a = await submit(http, gateway, {"input": {}})
    b = await submit(http, gateway, {"input": {}})
    await submit(http, gateway, {"input": {}})
    await take(http, gateway, "w1")
    await take(http, gateway, "w2")
    await done(http, gateway, a["id"], {"output": 1}, "w1")
    await done(http, gateway, b["id"], {"error": "x"}, "w2")
    await take(http, gateway, "w3")
    _, health = await get(http, gateway, "health")
    assert health == {
        "jobs": {"completed": 1, "failed": 1, "inProgress": 1, "inQueue": 0, "retried": 0},
        "workers": {"idle": 2, "running": 1, "initializing": 0, "throttled": 0, "unhealthy": 0},
    }


async def test_stream_returns_chunks_once_and_ends_with_a_final_empty_read(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    for n in range(3):
        url = gateway.job_url(f"job-stream/w1/{job['id']}")
        async with http.post(url, json={"output": n}, headers=gateway.worker_headers()) as r:
            assert r.status == 200
    _, body = await get(http, gateway, f"stream/{job['id']}")
    assert body == {
        "id": job["id"],
        "status": "IN_PROGRESS",
        "stream": [{"output": 0}, {"output": 1}, {"output": 2}],
    }
    _, body = await get(http, gateway, f"stream/{job['id']}")
    assert body["stream"] == []
    await done(http, gateway, job["id"], {"output": [0, 1, 2]})
    _, body = await get(http, gateway, f"stream/{job['id']}")
    assert body == {"id": job["id"], "status": "COMPLETED", "stream": []}


async def test_job_take_long_polls_until_a_job_arrives(http, gateway):
    waiting = asyncio.create_task(take(http, gateway))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    job = await submit(http, gateway, {"input": {"late": True}})
    assert (await asyncio.wait_for(waiting, 1.0))["id"] == job["id"]


async def test_job_take_batch_hands_out_up_to_batch_size_jobs(http, gateway):
    ids = [(await submit(http, gateway, {"input": {}}))["id"] for _ in range(3)]
    url = gateway.job_url("job-take-batch/w1?batch_size=2&job_in_progress=0")
    async with http.get(url, headers=gateway.worker_headers()) as r:
        assert [j["id"] for j in await r.json()] == ids[:2]


async def test_job_done_accepts_json_sent_with_a_form_content_type(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    url = gateway.job_url(f"job-done/w1/{job['id']}?isStream=false")
    headers = {**gateway.worker_headers(), "Content-Type": "application/x-www-form-urlencoded"}
    async with http.post(url, data='{"output": {"ok": true}}', headers=headers) as r:
        assert r.status == 200
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["output"] == {"ok": True}


async def test_a_progress_update_posted_to_job_done_does_not_finish_the_job(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"status": "IN_PROGRESS", "output": "50%"})
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "IN_PROGRESS"
    await done(http, gateway, job["id"], {"output": "all"})
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["output"] == "all"


async def test_a_result_from_another_worker_is_ignored(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway, "w1")
    assert (await done(http, gateway, job["id"], {"output": "x"}, "intruder"))["accepted"] is False
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "IN_PROGRESS"


async def test_status_ttl_shortens_a_jobs_life(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    status, body = await get(http, gateway, f"status/{job['id']}?ttl=10000")
    assert status == 200
    status, body = await get(http, gateway, f"status/{job['id']}?ttl=5")
    assert status == 400 and "ttl" in body["error"]


async def test_status_wait_answers_once_the_job_is_final(http, gateway):
    """`?wait=` (lockgate only): the poll is held while the job queues and runs, and
    answered with the final job as soon as it completes, not at the end of `wait`."""
    job = await submit(http, gateway, {"input": {"x": 1}})
    held = asyncio.create_task(get(http, gateway, f"status/{job['id']}?wait=60000"))
    assert (await take(http, gateway))["id"] == job["id"]
    done_, _ = await asyncio.wait({held}, timeout=0.5)
    assert not done_  # queued, then running: still held
    await done(http, gateway, job["id"], {"output": {"y": 2}})
    status, body = await asyncio.wait_for(held, 30)  # far below the 60 s asked for
    assert status == 200 and body["status"] == "COMPLETED" and body["output"] == {"y": 2}


async def test_status_wait_answers_the_current_state_when_it_passes(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    status, body = await get(http, gateway, f"status/{job['id']}?wait=300")
    assert status == 200 and body["status"] == "IN_QUEUE"
    status, body = await get(http, gateway, f"status/{job['id']}?wait=0")
    assert status == 200 and body["status"] == "IN_QUEUE"


@pytest.mark.parametrize("wait", ["-1", "soon", "300001"])
async def test_status_wait_out_of_range_is_a_400_naming_it(http, gateway, wait):
    job = await submit(http, gateway, {"input": {}})
    status, body = await get(http, gateway, f"status/{job['id']}?wait={wait}")
    assert status == 400 and "wait" in body["error"]


async def take_saying(http, gw: LiveGateway, worker: str, in_progress: str) -> dict | None:
    url = gw.job_url(f"job-take/{worker}?job_in_progress={in_progress}")
    async with http.get(url, headers=gw.worker_headers()) as r:
        assert r.status in (200, 204), await r.text()
        return await r.json() if r.status == 200 else None


async def test_a_worker_that_holds_no_job_gets_back_what_its_id_held_before(http, gateway):
    """A container restarted in its pod keeps the worker id (the pod name): its first take
    says `job_in_progress=0`, and the job its killed predecessor held runs again at once."""
    job = await submit(http, gateway, {"input": {"x": 1}})
    assert (await take_saying(http, gateway, "pod-a", "0"))["id"] == job["id"]
    assert await take_saying(http, gateway, "pod-a", "1") is None  # still its own: kept
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "IN_PROGRESS"
    again = await take_saying(http, gateway, "pod-a", "0")  # the restarted process
    assert again is not None and again["id"] == job["id"]
    _, health = await get(http, gateway, "health")
    assert health["jobs"]["retried"] == 1
    assert await done(http, gateway, job["id"], {"output": 7}, worker="pod-a")
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "COMPLETED" and body["output"] == 7


@pytest.mark.parametrize("gateway_settings", [{"take_wait_s": 1.0}], indirect=True)
async def test_a_worker_told_to_stop_gets_no_new_job_until_resumed(http, gateway, redis):
    """Its pod is going (a scale-down, a rollout): its long-poll stays empty, the job waits
    for another worker; resumed (the pod stayed), it takes jobs again."""
    store = JobStore(redis)
    await store.stop_taking("echo", ["pod-going"])
    job = await submit(http, gateway, {"input": {}})
    assert await take_saying(http, gateway, "pod-going", "0") is None
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "IN_QUEUE"
    await store.stop_taking("echo", [], resume=["pod-going"])
    assert (await take_saying(http, gateway, "pod-going", "0"))["id"] == job["id"]
