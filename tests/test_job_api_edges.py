"""Edges of the job API found in issue 13: a /runsync whose job disappears, trailing
slashes, `"policy": null`, webhook URLs refused in words, `?ttl=` needing the `jobs` scope,
and CORS for browser clients. A real gateway and Redis; workers speak raw HTTP."""

from __future__ import annotations

import asyncio
import json

import pytest

from lockgate.apikeys import create, key_record
from lockgate.store import JobStore, Registry
from tests.conftest import LiveGateway
from tests.test_job_api import get, post, submit, take


async def runsync(http, gw: LiveGateway, body: dict, wait_ms: int) -> tuple[int, dict]:
    return await post(http, gw, f"runsync?wait={wait_ms}", json=body)


# -- /runsync whose job disappears (item 7) -------------------------------------------------


async def test_runsync_answers_404_when_its_job_is_purged_during_the_wait(http, gateway):
    waiting = asyncio.create_task(runsync(http, gateway, {"input": {}}, wait_ms=20_000))
    await asyncio.sleep(0.5)  # the job is queued (no worker takes it)
    status, body = await post(http, gateway, "purge-queue")
    assert status == 200 and body["removed"] == 1
    status, body = await waiting
    assert status == 404, body
    assert "purged" in body["error"] and "sync-" in body["error"]


async def test_runsync_answers_404_when_its_job_ttl_passes_during_the_wait(http, gateway):
    body = {"input": {}, "policy": {"ttl": 10_000}}
    status, answer = await runsync(http, gateway, body, wait_ms=25_000)
    assert status == 404, answer
    assert "ttl" in answer["error"]


# -- trailing slash, "policy": null, webhook rule in words (items 10, 11) -------------------


async def test_job_api_paths_answer_with_a_trailing_slash(http, gateway):
    status, job = await post(http, gateway, "run/", json={"input": {"x": 1}})
    assert status == 200, job
    assert (await get(http, gateway, f"status/{job['id']}/"))[0] == 200
    assert (await get(http, gateway, "health/"))[0] == 200
    assert (await post(http, gateway, f"cancel/{job['id']}/"))[0] == 200


async def test_a_null_policy_is_taken_as_absent(http, gateway):
    status, job = await post(http, gateway, "run", json={"input": {}, "policy": None})
    assert status == 200, job
    assert job["status"] == "IN_QUEUE"


@pytest.mark.parametrize("port", ["99999", "0", "65536"])
async def test_a_webhook_port_out_of_range_is_refused_with_400(http, gateway, port):
    body = {"input": {}, "webhook": f"http://hooks.example.com:{port}/x"}
    status, answer = await post(http, gateway, "run", json=body)
    assert status == 400, answer
    assert "port must be from 1 to 65535" in answer["error"]


async def test_a_malformed_webhook_is_refused_naming_the_rule_in_words(http, gateway):
    status, answer = await post(http, gateway, "run", json={"input": {}, "webhook": "ftp://x/"})
    assert status == 400
    assert "http:// or https:// URL" in answer["error"]
    assert "[0-9A-Fa-f]" not in answer["error"] and len(answer["error"]) < 300


# -- ?ttl= is a write (item 12) ---------------------------------------------------------------


async def test_a_jobs_read_key_cannot_set_a_ttl_and_the_ttl_stays(http, gateway, redis):
    job = await submit(http, gateway, {"input": {}, "policy": {"ttl": 3_600_000}})
    reader = await create(Registry(redis), key_record("reader", ["jobs:read"], None))
    url = gateway.job_url(f"status/{job['id']}?ttl=10000")
    async with http.get(url, headers={"authorization": reader}) as r:
        assert r.status == 403
        assert "'jobs' scope" in (await r.json())["error"]
    record = await JobStore(redis).get(gateway.endpoint, job["id"])
    assert record.ttl == 3_600_000
    async with http.get(
        gateway.job_url(f"status/{job['id']}"), headers={"authorization": reader}
    ) as r:
        assert r.status == 200  # reading stays allowed
    assert (await get(http, gateway, f"status/{job['id']}?ttl=10000"))[0] == 200  # a jobs key may
    assert (await JobStore(redis).get(gateway.endpoint, job["id"])).ttl == 10_000


# -- CORS (item 11) ---------------------------------------------------------------------------

ORIGIN = "https://app.example.com"


@pytest.mark.parametrize("gateway_settings", [{"cors_allow_origins": [ORIGIN]}], indirect=True)
async def test_a_preflight_from_an_allowed_origin_is_answered_without_a_key(http, gateway):
    headers = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    async with http.options(gateway.job_url("run"), headers=headers) as r:
        assert r.status == 204
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert "POST" in r.headers["Access-Control-Allow-Methods"]
        assert "authorization" in r.headers["Access-Control-Allow-Headers"]
    headers = {**gateway.client_headers(), "Origin": ORIGIN}
    async with http.post(gateway.job_url("run"), json={"input": {}}, headers=headers) as r:
        assert r.status == 200
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    async with http.get(gateway.job_url("status/nope"), headers=headers) as r:
        assert r.status == 404  # errors carry the header too, so the page can read them
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN


@pytest.mark.parametrize("gateway_settings", [{"cors_allow_origins": [ORIGIN]}], indirect=True)
async def test_other_origins_get_no_cors_headers(http, gateway):
    headers = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    async with http.options(gateway.job_url("run"), headers=headers) as r:
        assert r.status == 403
        assert "Access-Control-Allow-Origin" not in r.headers
    headers = {**gateway.client_headers(), "Origin": "https://evil.example"}
    async with http.get(gateway.job_url("health"), headers=headers) as r:
        assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


async def test_without_the_setting_no_origin_is_allowed(http, gateway):
    headers = {**gateway.client_headers(), "Origin": ORIGIN}
    async with http.get(gateway.job_url("health"), headers=headers) as r:
        assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


@pytest.mark.parametrize("gateway_settings", [{"cors_allow_origins": ["*"]}], indirect=True)
async def test_a_star_allows_every_origin(http, gateway):
    headers = {"Origin": "https://any.example", "Access-Control-Request-Method": "GET"}
    async with http.options(gateway.job_url("status/x"), headers=headers) as r:
        assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == "*"


# -- inputs and results the schema allows: no 500 (item 10) ----------------------------------


def nested(levels: int) -> dict:
    """An object nested `levels` deep: {"a": {"a": ... 1}}."""
    value: dict | int = 1
    for _ in range(levels):
        value = {"a": value}
    return value  # type: ignore[return-value]


async def post_raw(http, gw: LiveGateway, path: str, raw: str) -> tuple[int, dict]:
    headers = {**gw.client_headers(), "content-type": "application/json"}
    async with http.post(gw.job_url(path), data=raw, headers=headers) as r:
        return r.status, await r.json()


async def test_an_input_nested_254_deep_reaches_the_worker_whole(http, gateway):
    job = await submit(http, gateway, {"input": nested(254)})
    assert (await take(http, gateway))["input"] == nested(254)
    assert job["status"] == "IN_QUEUE"


@pytest.mark.parametrize("levels", [255, 600, 1022])
async def test_an_input_nested_deeper_is_refused_with_400_saying_so(http, gateway, levels):
    raw = '{"input": ' + '{"a": ' * levels + "1" + "}" * levels + "}"
    status, body = await post_raw(http, gateway, "run", raw)
    assert status == 400, body
    assert f"nested {levels} levels deep; at most 254" in body["error"]


async def test_an_input_nested_past_the_parser_is_refused_with_400(http, gateway):
    raw = '{"input": ' + '{"a": ' * 1100 + "1" + "}" * 1100 + "}"
    status, body = await post_raw(http, gateway, "runsync?wait=1000", raw)
    assert status == 400 and "nested deeper than 1024" in body["error"]


BIG = [2**64, -(2**63) - 1, 10**40, 2**63 - 1]


async def test_integers_beyond_64_bits_in_input_reach_the_worker_exact(http, gateway):
    numbers = ", ".join(str(n) for n in BIG)
    raw = f'{{"input": {{"big": [{numbers}], "f": 1.5, "s": "12345678901234567890"}}}}'
    status, job = await post_raw(http, gateway, "run", raw)
    assert status == 200, job
    url = gateway.job_url("job-take/w1")
    async with http.get(url, headers=gateway.worker_headers()) as r:
        text = await r.text()
    for n in BIG:
        assert str(n) in text  # exact digits on the wire, not 1.8446744073709552e19
    assert json.loads(text)["input"] == {"big": BIG, "f": 1.5, "s": "12345678901234567890"}


async def test_a_worker_result_nested_too_deep_fails_the_job_with_a_clear_error(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    url = gateway.job_url(f"job-done/w1/{job['id']}")
    async with http.post(url, json={"output": nested(300)}, headers=gateway.worker_headers()) as r:
        assert r.status == 200 and (await r.json())["accepted"] is True
    body = (await get(http, gateway, f"status/{job['id']}"))[1]
    assert body["status"] == "FAILED"
    assert "nested 300 levels deep; at most 254" in body["error"]


async def test_a_worker_result_nested_past_the_parser_fails_the_job(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    raw = '{"output": ' + "[" * 1100 + "]" * 1100 + "}"
    url = gateway.job_url(f"job-done/w1/{job['id']}")
    async with http.post(url, data=raw, headers=gateway.worker_headers()) as r:
        assert r.status == 200
    body = (await get(http, gateway, f"status/{job['id']}"))[1]
    assert body["status"] == "FAILED" and "nested deeper than 1024" in body["error"]
