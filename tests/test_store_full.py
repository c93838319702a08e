"""A full Redis (maxmemory reached, noeviction, as the chart runs it) with a real gateway:
clients and workers get 503 `{"error": ...}` naming the cause, never a 500, and no job
accepted before is lost: once Redis has room again, it runs to completion."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from tests.conftest import LiveGateway


@pytest.fixture
async def fill_up(redis: Redis) -> AsyncIterator[object]:
    """A function making Redis full: maxmemory of 1 byte, so every write is refused
    (the session's Redis gets its unbounded maxmemory back afterwards)."""

    async def full() -> None:
        await redis.config_set("maxmemory", 1)

    yield full
    await redis.config_set("maxmemory", 0)


async def call(http, method: str, url: str, headers: dict, **kwargs) -> tuple[int, dict, dict]:
    async with http.request(method, url, headers=headers, **kwargs) as r:
        return r.status, (await r.json() if r.status != 204 else {}), dict(r.headers)


async def test_a_full_redis_answers_503_naming_the_cause_and_loses_no_accepted_job(
    http, gateway: LiveGateway, redis: Redis, fill_up
) -> None:
    client, worker = gateway.client_headers(), gateway.worker_headers()
    status, accepted, _ = await call(http, "POST", gateway.job_url("run"), client,
                                     json={"input": {"n": 1}})  # fmt: skip
    assert status == 200, accepted
    await fill_up()
    for method, path in (("POST", "run"), ("POST", "runsync?wait=1000")):
        status, body, headers = await call(http, method, gateway.job_url(path), client,
                                           json={"input": {"n": 2}})  # fmt: skip
        assert status == 503, (path, body)
        assert "maxmemory" in body["error"] and "Retry-After" in headers, body
    status, body, _ = await call(http, "GET", gateway.job_url("job-take/w1"), worker)
    assert status == 503 and "maxmemory" in body["error"], body

    await redis.config_set("maxmemory", 0)  # room again (e.g. after the queue drained)
    status, health, _ = await call(http, "GET", gateway.job_url("health"), client)
    assert health["jobs"]["inQueue"] == 1, "the refused jobs left nothing behind"
    status, job, _ = await call(http, "GET", gateway.job_url("job-take/w1"), worker)
    assert status == 200 and job["id"] == accepted["id"], job
    done = gateway.job_url(f"job-done/w1/{job['id']}?isStream=false")
    status, _, _ = await call(http, "POST", done, worker, json={"output": {"ok": True}})
    assert status == 200
    status, final, _ = await call(http, "GET", gateway.job_url(f"status/{job['id']}"), client)
    assert final["status"] == "COMPLETED" and final["output"] == {"ok": True}, final


async def test_a_full_redis_still_serves_reads_cancel_and_purge_so_an_operator_can_drain_it(
    http, gateway: LiveGateway, redis: Redis, fill_up
) -> None:
    client, worker = gateway.client_headers(), gateway.worker_headers()
    ids = []
    for n in range(4):
        status, job, _ = await call(http, "POST", gateway.job_url("run"), client,
                                    json={"input": {"n": n}})  # fmt: skip
        ids.append(job["id"])
    status, running, _ = await call(http, "GET", gateway.job_url("job-take/w1"), worker)
    assert running["id"] == ids.pop(0)
    await fill_up()
    status, body, _ = await call(http, "POST", gateway.job_url("run"), client,
                                 json={"input": {"n": 9}})  # fmt: skip
    assert status == 503 and body["error"].startswith("store full: "), body
    status, health, _ = await call(http, "GET", gateway.job_url("health"), client)
    assert status == 200 and health["jobs"]["inQueue"] == 3, health
    status, job, _ = await call(http, "GET", gateway.job_url(f"status/{ids[0]}"), client)
    assert status == 200 and job["status"] == "IN_QUEUE", job
    status, streamed, _ = await call(http, "GET", gateway.job_url(f"stream/{ids[0]}"), client)
    assert status == 200 and streamed["status"] == "IN_QUEUE", streamed
    status, cancelled, _ = await call(http, "POST", gateway.job_url(f"cancel/{ids[0]}"), client)
    assert status == 200 and cancelled["status"] == "CANCELLED", cancelled
    status, purged, _ = await call(http, "POST", gateway.job_url("purge-queue"), client)
    assert status == 200 and purged["removed"] == 2, purged
    url = gateway.job_url(f"cancel/{running['id']}")
    status, cancelled, _ = await call(http, "POST", url, client)
    assert status == 200 and cancelled["status"] == "CANCELLED", cancelled
