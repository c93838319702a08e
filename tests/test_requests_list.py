"""`GET /v2/{endpoint}/requests` against a real gateway and Redis: order, fields, filters,
pagination while jobs arrive, records that die, bad parameters, scopes, rate limit."""

from __future__ import annotations

import secrets
from datetime import datetime

import aiohttp
import pytest

from lockgate.store import JobStore, Registry, now_ms
from lockgate.store import keys as store_keys
from tests.conftest import LiveGateway
from tests.test_job_api import done, submit, take

GATEWAY_SETTINGS = {"webhook_allow_private": True, "sweep_interval_s": 3600}
S3 = {"accessId": "a", "accessSecret": "secret-s3", "bucketName": "b", "endpointUrl": "u"}


async def listing(
    http: aiohttp.ClientSession, gw: LiveGateway, query: str = "", key: str | None = None
) -> tuple[int, dict]:
    headers = {"authorization": key or gw.client_key}
    async with http.get(gw.job_url(f"requests{query}"), headers=headers) as r:
        return r.status, await r.json()


async def all_pages(http, gw: LiveGateway, query: str, limit: int) -> list[dict]:
    items, cursor = [], None
    while True:
        sep = "&" if query else ""
        q = f"?{query}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        status, body = await listing(http, gw, q)
        assert status == 200, body
        items += body["items"]
        if (cursor := body["nextCursor"]) is None:
            return items


async def put_key(gw: LiveGateway, redis, scopes: list[str], endpoints: list[str]) -> str:
    key = f"lg_{secrets.token_hex(8)}"
    record = {"name": f"key-{key[-4:]}", "scopes": scopes, "endpoints": endpoints}
    await Registry(redis).put_key(key, record)
    return key


async def test_jobs_are_listed_newest_first_with_their_state_and_nothing_private(http, gateway):
    body = {"input": {"secret": "in"}, "s3Config": S3, "webhook": "http://127.0.0.1:9/hook"}
    ids = [(await submit(http, gateway, body))["id"] for _ in range(4)]
    first = await take(http, gateway, "w1")
    second = await take(http, gateway, "w2")
    third = await take(http, gateway, "w3")
    assert [first["id"], second["id"], third["id"]] == ids[:3]  # FIFO
    await done(http, gateway, first["id"], {"output": {"secret": "out"}}, "w1")
    await done(http, gateway, second["id"], {"error": "boom: the handler raised"}, "w2")

    status, page = await listing(http, gateway)
    assert status == 200 and page["nextCursor"] is None
    items = page["items"]
    assert [i["id"] for i in items] == ids[::-1]
    by_id = {i["id"]: i for i in items}
    assert by_id[ids[0]]["status"] == "COMPLETED" and by_id[ids[0]]["workerId"] == "w1"
    failed = by_id[ids[1]]
    assert failed["status"] == "FAILED" and failed["error"] == "boom: the handler raised"
    assert by_id[ids[2]]["status"] == "IN_PROGRESS" and by_id[ids[2]]["workerId"] == "w3"
    assert by_id[ids[3]]["status"] == "IN_QUEUE" and "workerId" not in by_id[ids[3]]
    for i in items:
        assert set(i) <= {"id", "status", "createdAt", "delayTime", "executionTime"} | {
            "workerId",
            "error",
        }
        assert isinstance(i["delayTime"], int) and isinstance(i["executionTime"], int)
        assert datetime.fromisoformat(i["createdAt"].replace("Z", "+00:00"))
        assert i["createdAt"].endswith("Z") and len(i["createdAt"]) == 24
    raw = str(page)
    assert "secret" not in raw and "127.0.0.1:9" not in raw


async def test_status_and_time_filters(http, gateway):
    ids = [(await submit(http, gateway, {"input": {"n": n}}))["id"] for n in range(5)]
    for n in range(3):
        job = await take(http, gateway, f"w{n}")
        await done(
            http, gateway, job["id"], {"error": f"e{n}"} if n < 2 else {"output": 1}, f"w{n}"
        )
    _, failed = await listing(http, gateway, "?status=FAILED")
    assert [i["id"] for i in failed["items"]] == [ids[1], ids[0]]
    _, some = await listing(http, gateway, "?status=FAILED,IN_QUEUE&status=COMPLETED")
    assert [i["id"] for i in some["items"]] == ids[::-1]
    _, queued = await listing(http, gateway, "?status=IN_QUEUE")
    assert [i["id"] for i in queued["items"]] == [ids[4], ids[3]]

    _, whole = await listing(http, gateway)
    created = {i["id"]: i["createdAt"] for i in whole["items"]}
    ms = {
        i: int(datetime.fromisoformat(c.replace("Z", "+00:00")).timestamp() * 1000)
        for i, c in created.items()
    }
    # `from` inclusive, `to` exclusive; ISO or epoch milliseconds.
    _, since = await listing(http, gateway, f"?from={created[ids[2]]}")
    assert {i["id"] for i in since["items"]} == {j for j in ids if ms[j] >= ms[ids[2]]}
    assert ids[2] in {i["id"] for i in since["items"]}
    _, until = await listing(http, gateway, f"?to={ms[ids[2]]}")
    assert {i["id"] for i in until["items"]} == {j for j in ids if ms[j] < ms[ids[2]]}
    _, none = await listing(http, gateway, "?from=2000-01-01T00:00:00Z&to=2000-01-02T00:00:00Z")
    assert none == {"items": [], "nextCursor": None}
    _, reversed_range = await listing(http, gateway, f"?from={ms[ids[3]]}&to={ms[ids[0]]}")
    assert reversed_range == {"items": [], "nextCursor": None}


async def test_cancel_retry_and_a_lost_worker_move_jobs_between_status_filters(
    http, gateway, redis
):
    async def ids_in(status: str) -> list[str]:
        return [i["id"] for i in (await listing(http, gateway, f"?status={status}"))[1]["items"]]

    queued, failing, running = [(await submit(http, gateway, {"input": {}}))["id"] for _ in "abc"]
    async with http.post(gateway.job_url(f"cancel/{queued}"), headers=gateway.client_headers()):
        pass
    assert await ids_in("CANCELLED") == [queued]
    assert (await take(http, gateway, "w1"))["id"] == failing
    await done(http, gateway, failing, {"error": "boom"}, "w1")
    assert await ids_in("FAILED") == [failing]
    async with http.post(gateway.job_url(f"retry/{failing}"), headers=gateway.client_headers()):
        pass
    assert await ids_in("FAILED") == []
    assert await ids_in("IN_QUEUE") == [running, failing]
    assert (await take(http, gateway, "w2"))["id"] == running  # a retry queues at the back
    assert await ids_in("IN_PROGRESS") == [running]
    await JobStore(redis).release_worker(gateway.endpoint, "w2")  # its pod is gone
    assert await ids_in("IN_QUEUE") == [running, failing]
    assert await ids_in("IN_PROGRESS") == []


async def test_pages_have_no_duplicates_or_gaps_while_new_jobs_arrive(http, gateway):
    before = [(await submit(http, gateway, {"input": {"n": n}}))["id"] for n in range(23)]
    seen, cursor, arrived = [], None, []
    for _ in range(10):
        q = "?limit=5" + (f"&cursor={cursor}" if cursor else "")
        status, page = await listing(http, gateway, q)
        assert status == 200 and len(page["items"]) <= 5
        seen += [i["id"] for i in page["items"]]
        # Jobs keep arriving and changing state between pages.
        arrived.append((await submit(http, gateway, {"input": {"late": True}}))["id"])
        job = await take(http, gateway)
        await done(http, gateway, job["id"], {"output": "ok"})
        if (cursor := page["nextCursor"]) is None:
            break
    assert seen == before[::-1]
    assert not set(arrived) & set(seen)
    # The first page read again starts with the newest arrivals.
    _, first = await listing(http, gateway, "?limit=3")
    assert [i["id"] for i in first["items"]] == arrived[::-1][:3]


async def test_jobs_whose_record_died_drop_out_and_the_index_empties(http, gateway, redis):
    ttl_ids = [
        (await submit(http, gateway, {"input": {}, "policy": {"ttl": 10_000}}))["id"]
        for _ in range(3)
    ]
    kept = (await submit(http, gateway, {"input": {}}))["id"]
    purged_later = (await submit(http, gateway, {"input": {}}))["id"]
    job = await take(http, gateway)  # the first ttl job, now running
    assert job["id"] == ttl_ids[0]
    # One record deleted behind the store's back: listed no more.
    await redis.delete(store_keys.job(gateway.endpoint, ttl_ids[1]))
    items = await all_pages(http, gateway, "", 2)
    assert ttl_ids[1] not in {i["id"] for i in items}
    assert len(items) == 4

    # Eleven seconds later (the store's clock), the ttl jobs are past their ttl: swept out.
    later = JobStore(redis, clock=lambda: now_ms() + 11_000)
    await redis.delete(store_keys.prefix(gateway.endpoint) + "sweep")  # the gateway's lock
    await later.sweep(gateway.endpoint, lock_ms=1)
    items = await all_pages(http, gateway, "", 2)
    assert [i["id"] for i in items] == [purged_later, kept]

    async with http.post(gateway.job_url("purge-queue"), headers=gateway.client_headers()) as r:
        assert r.status == 200
    assert (await listing(http, gateway))[1] == {"items": [], "nextCursor": None}
    prefix = store_keys.prefix(gateway.endpoint)
    sizes = [await redis.zcard(f"{prefix}ix:{s}") for s in ("IN_QUEUE", "IN_PROGRESS")]
    assert sizes == [0, 0]

    await submit(http, gateway, {"input": {}})
    await JobStore(redis).delete_endpoint_data(gateway.endpoint)
    assert not [k async for k in redis.scan_iter(match=f"{prefix}ix:*")]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?limit=0", "limit"),
        ("?limit=101", "limit"),
        ("?limit=ten", "limit"),
        ("?status=DONE", "status"),
        ("?status=failed", "status"),
        ("?from=yesterday", "from"),
        ("?to=2026-13-40", "to"),
        ("?to=99999999999999999999", "to"),
        ("?cursor=abc", "cursor"),
        ("?cursor=-5", "cursor"),
        ("?cursor=", "cursor"),
        ("?to=", "to"),
        ("?status=", "status"),
        ("?status=FAILED,", "status"),
    ],
)
async def test_bad_parameters_get_400_naming_them(http, gateway, query, named):
    status, body = await listing(http, gateway, query)
    assert status == 400, body
    assert f"'{named}'" in body["error"]


async def test_a_read_key_may_list_and_a_key_of_another_endpoint_may_not(http, gateway, redis):
    await submit(http, gateway, {"input": {}})
    reader = await put_key(gateway, redis, ["jobs:read"], [gateway.endpoint])
    status, body = await listing(http, gateway, key=reader)
    assert status == 200 and len(body["items"]) == 1
    other = await put_key(gateway, redis, ["jobs"], ["other-endpoint"])
    status, body = await listing(http, gateway, key=other)
    assert status == 401 and "may not use" in body["error"]
    status, _ = await listing(http, gateway, key="lg_not-a-key")
    assert status == 401


async def test_the_rate_limit_is_ten_per_ten_seconds(http, gateway):
    statuses = [(await listing(http, gateway))[0] for _ in range(21)]
    assert set(statuses) == {200, 429}
    # 21 calls span at most two 10-second windows: at most 20 are admitted.
    assert 10 <= statuses.count(200) <= 20
