"""RunPod's management rate limits on v2 answers (issue 46, item 9): `RateLimit` and
`RateLimit-Policy` on every authenticated answer, a 429 problem with `Retry-After` once a
window is spent, counted per caller in Redis (dev mode's app on loopback)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.manage.v2.ratelimit import QUOTAS_ENV, Window, headers_for, parse_quotas, refusal
from lockgate.store import Registry
from tests.test_manage_api import admin_key, dev_app

WINDOWS = parse_quotas("")


def test_the_default_quotas_and_an_override_of_one_window() -> None:
    assert [(w.name, w.seconds, w.quota) for w in WINDOWS] == [
        ("minute", 60, 600), ("hour", 3600, 20_000), ("day", 86_400, 200_000)
    ]  # fmt: skip
    assert [w.quota for w in parse_quotas("hour=5")] == [600, 5, 200_000]


@pytest.mark.parametrize("text", ["week=5", "minute=0", "minute=x", "minute"])
def test_a_bad_quota_setting_says_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError, match=QUOTAS_ENV):
        parse_quotas(text)


def test_the_headers_say_what_is_left_and_when_each_window_ends() -> None:
    now = 1_700_000_010  # 30 s into a minute
    headers = headers_for(WINDOWS, [10, 10, 10], now)
    assert headers["RateLimit"].startswith('"minute";r=590;t=30, "hour";r=19990;t=')
    assert headers["RateLimit-Policy"] == (
        '"minute";q=600;w=60, "hour";q=20000;w=3600, "day";q=200000;w=86400'
    )
    windows = (Window("minute", 60, 2), Window("hour", 3600, 100))
    assert refusal(windows, [2, 2], now) is None
    refused = refusal(windows, [3, 3], now)
    assert refused is not None and refused.status == 429
    assert refused.headers == {"Retry-After": "30"} and "minute window" in refused.message


@pytest.fixture
async def limited(
    redis_server: EmbeddedRedis, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    monkeypatch.setenv(QUOTAS_ENV, "minute=3")
    async with dev_app(redis_server) as (url, _plane):
        yield url


async def test_a_caller_over_its_minute_gets_a_429_problem_with_retry_after(
    limited: str, redis: Redis, http: aiohttp.ClientSession
) -> None:
    key = await admin_key(redis)
    headers = {"authorization": f"Bearer {key}"}

    async def get() -> aiohttp.ClientResponse:
        async with http.get(f"{limited}/v2/serverless", headers=headers) as resp:
            await resp.read()
            return resp

    first = await get()
    left_s = int(re.search(r"t=(\d+)", first.headers["RateLimit"]).group(1))
    if left_s < 10:  # the minute ends before the test does: start in the next one
        await asyncio.sleep(left_s + 1)
        first = await get()
    assert first.status == 200
    assert first.headers["RateLimit"].startswith('"minute";r=2;')
    assert first.headers["RateLimit-Policy"].startswith('"minute";q=3;w=60, "hour";q=20000')
    assert (await get()).headers["RateLimit"].startswith('"minute";r=1;')
    assert (await get()).headers["RateLimit"].startswith('"minute";r=0;')
    async with http.get(f"{limited}/v2/serverless", headers=headers) as resp:
        problem = await resp.json(content_type=None)
        assert resp.status == 429 and resp.content_type == "application/problem+json"
        assert int(resp.headers["Retry-After"]) >= 1
        assert resp.headers["RateLimit"].startswith('"minute";r=0;')
    assert problem["title"] == "Too Many Requests" and "minute window" in problem["detail"]
    # another caller (another key name) has its own count; an unauthenticated request
    # counts for no one
    await Registry(redis).put_key("lga_another_admin_key", {"name": "other", "scopes": ["admin"]})
    other = {"authorization": "Bearer lga_another_admin_key"}
    async with http.get(f"{limited}/v2/serverless", headers=other) as resp:
        assert resp.status == 200 and resp.headers["RateLimit"].startswith('"minute";r=2;')
    async with http.get(f"{limited}/v2/serverless") as resp:
        assert resp.status == 401 and "RateLimit" not in resp.headers
    # an error answer carries the headers too
    async with http.get(f"{limited}/v2/serverless/nosuch", headers=other) as resp:
        assert resp.status == 404 and resp.headers["RateLimit"].startswith('"minute";r=1;')
