"""Gateway `/metrics` against a real gateway and Redis, read back as the scaler reads it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lockgate.dev.redis_server import free_port
from lockgate.scaling.readings import parse_metrics
from tests.conftest import LiveGateway, make_settings, start_gateway
from tests.test_job_api import done, get, submit, take
from tests.test_lifecycle import Receiver

GATEWAY_SETTINGS = dict(
    webhook_allow_private=True, webhook_retry_interval_s=0.3, sweep_interval_s=0.1
)


async def scrape(http: aiohttp.ClientSession, url: str, **kw) -> str:
    async with http.get(f"{url}/metrics", **kw) as r:
        assert r.status == 200, await r.text()
        assert r.headers["content-type"].startswith("text/plain")
        return await r.text()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, by name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def ping(http: aiohttp.ClientSession, gw: LiveGateway, worker: str) -> None:
    async with http.get(gw.job_url(f"ping/{worker}"), headers=gw.worker_headers()) as r:
        assert r.status == 200


async def test_gauges_report_queue_oldest_waits_progress_and_workers_per_endpoint(http, gateway):
    await submit(http, gateway, {"input": {"n": 1}})
    await submit(http, gateway, {"input": {"n": 2}})
    await submit(http, gateway, {"input": {"n": 3}, "policy": {"lowPriority": True}})
    await take(http, gateway, "w-busy")
    await ping(http, gateway, "w-idle")
    await asyncio.sleep(0.3)

    reading = parse_metrics(await scrape(http, gateway.url))["echo"]

    assert (reading.queued, reading.queued_low, reading.in_progress) == (1, 1, 1)
    assert (reading.workers_idle, reading.workers_running) == (1, 1)
    assert reading.worker_jobs == {"w-busy": 1, "w-idle": 0}
    assert 0.3 <= reading.oldest_queued_age_s < 60
    assert 0.3 <= reading.oldest_queued_low_age_s < 60


async def test_an_empty_endpoint_reports_zeros(http, gateway):
    reading = parse_metrics(await scrape(http, gateway.url))["echo"]
    assert (reading.queued, reading.oldest_queued_age_s, reading.workers_idle) == (0, 0.0, 0)


async def test_every_replica_reports_the_same_endpoint_gauges(
    http, gateway, redis_server, gateway_settings
):
    second = await start_gateway(make_settings(redis_server.url, port := free_port()))
    try:
        await submit(http, gateway, {"input": {}})
        await take(http, gateway, "w1")
        await submit(http, gateway, {"input": {}})
        first = parse_metrics(await scrape(http, gateway.url))["echo"]
        other = parse_metrics(await scrape(http, f"http://127.0.0.1:{port}"))["echo"]
    finally:
        await second.cleanup()
    assert (first.queued, first.in_progress, first.worker_jobs) == (1, 1, {"w1": 1})
    assert (other.queued, other.in_progress, other.worker_jobs) == (1, 1, {"w1": 1})


async def test_requests_are_counted_by_route_pattern_never_by_raw_path(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await get(http, gateway, f"status/{job['id']}")
    await get(http, gateway, "status/no-such-job")
    async with http.get(f"{gateway.url}/nowhere/at/all") as r:
        assert r.status == 404

    text = await scrape(http, gateway.url)
    counted = samples(text)

    route = "/v2/{endpoint}/status/{job}"
    ok = {("route", route), ("method", "GET"), ("status", "200")}
    missing = {("route", route), ("method", "GET"), ("status", "404")}
    assert counted[("lockgate_http_requests_total", frozenset(ok))] == 1
    assert counted[("lockgate_http_requests_total", frozenset(missing))] == 1
    run = {("route", "/v2/{endpoint}/run"), ("method", "POST"), ("status", "200")}
    assert counted[("lockgate_http_requests_total", frozenset(run))] == 1
    unmatched = {("route", "unmatched"), ("method", "GET"), ("status", "404")}
    assert counted[("lockgate_http_requests_total", frozenset(unmatched))] == 1
    assert job["id"] not in text and "nowhere" not in text


async def test_a_finished_job_is_observed_in_the_delay_and_execution_histograms(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await asyncio.sleep(0.2)
    await take(http, gateway)
    await asyncio.sleep(0.3)
    assert (await done(http, gateway, job["id"], {"output": 1}))["accepted"] is True
    assert (await done(http, gateway, job["id"], {"output": 2}))["accepted"] is False

    counted = samples(await scrape(http, gateway.url))

    ep = frozenset({("endpoint", "echo")})
    assert counted[("lockgate_job_queue_delay_seconds_count", ep)] == 1
    assert counted[("lockgate_job_execution_seconds_count", ep)] == 1
    assert 0.2 <= counted[("lockgate_job_queue_delay_seconds_sum", ep)] < 30
    assert 0.3 <= counted[("lockgate_job_execution_seconds_sum", ep)] < 30
    completed = frozenset({("endpoint", "echo"), ("outcome", "completed")})
    assert counted[("lockgate_jobs_total", completed)] == 1


async def test_webhook_attempts_are_counted_by_outcome(http, gateway):
    receiver = Receiver(failures=1)
    url = await receiver.start()
    try:
        job = await submit(http, gateway, {"input": {}, "webhook": url})
        await take(http, gateway)
        await done(http, gateway, job["id"], {"output": 1})
        deadline = time.monotonic() + 10
        while len(receiver.calls) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    finally:
        await receiver.runner.cleanup()

    counted = samples(await scrape(http, gateway.url))

    def outcome(name: str) -> float:
        key = frozenset({("endpoint", "echo"), ("outcome", name)})
        return counted.get(("lockgate_webhook_deliveries_total", key), 0)

    assert (outcome("retrying"), outcome("delivered"), outcome("gave_up")) == (1, 1, 0)


@pytest.mark.parametrize(
    "gateway_settings",
    [{"rate_limit_window_s": 3600, "rate_limits": {"health": {"rate": 1}}}],
    indirect=True,
)
async def test_each_rate_limit_refusal_is_counted(http, gateway):
    for _ in range(3):
        async with http.get(gateway.job_url("health"), headers=gateway.client_headers()) as r:
            await r.read()
    assert r.status == 429
    counted = samples(await scrape(http, gateway.url))
    key = frozenset({("endpoint", "echo"), ("operation", "health")})
    assert counted[("lockgate_rate_limited_total", key)] == 2


async def test_a_metrics_token_is_required_when_configured(http, redis, redis_server):
    settings = make_settings(redis_server.url, port := free_port(), metrics_token="s3cret")
    runner = await start_gateway(settings)
    url = f"http://127.0.0.1:{port}"
    try:
        async with http.get(f"{url}/metrics") as r:
            assert r.status == 401
        async with http.get(f"{url}/metrics", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
        assert "lockgate_http_requests_total" in await scrape(
            http, url, headers={"Authorization": "Bearer s3cret"}
        )
    finally:
        await runner.cleanup()
