"""Job lifecycle with shortened timings: timeouts, ttl, retention, lost workers, webhooks."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from lockgate.dev.redis_server import free_port
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry
from lockgate.worker import verify_webhook
from tests.conftest import eventually as shared_eventually
from tests.conftest import make_settings, start_gateway
from tests.test_job_api import done, get, post, submit, take

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


# Test-sized timings; a test may override some with indirect parametrization.
GATEWAY_SETTINGS = dict(
    sweep_interval_s=0.1,
    heartbeat_timeout_s=1.0,
    max_attempts=2,
    unlisted_grace_s=0.3,
    webhook_secret=SECRET,
    webhook_retry_interval_s=1.0,
    webhook_allow_private=True,
)


def eventually(check, timeout_s: float = 10.0):
    """`conftest.eventually` with this module's pace: 10 s, polled every 50 ms."""
    return shared_eventually(check, timeout=timeout_s, interval=0.05)


async def status_of(http, gw, job_id: str) -> str | int:
    code, body = await get(http, gw, f"status/{job_id}")
    return body["status"] if code == 200 else code


async def test_a_job_past_its_execution_timeout_is_timed_out_and_its_worker_told(
    http, gateway, redis
):
    await Registry(redis).put_endpoint("echo", RegistryEntry(id="echo", executionTimeoutMs=300))
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await eventually(lambda: _is(status_of(http, gateway, job["id"]), "TIMED_OUT"))
    async with http.get(gateway.job_url("job-stop/w1"), headers=gateway.worker_headers()) as r:
        assert (await r.json()) == {"jobsToStop": [job["id"]]}
    assert (await done(http, gateway, job["id"], {"output": "late"}))["accepted"] is False
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert body["status"] == "TIMED_OUT" and "output" not in body
    assert (await post(http, gateway, f"retry/{job['id']}"))[1]["status"] == "IN_QUEUE"


async def _is(awaitable, expected) -> bool:
    return (await awaitable) == expected


async def test_a_job_policy_execution_timeout_overrides_the_endpoints(http, gateway, redis):
    await Registry(redis).put_endpoint("echo", RegistryEntry(id="echo", executionTimeoutMs=300))
    job = await submit(http, gateway, {"input": {}, "policy": {"executionTimeout": 60000}})
    await take(http, gateway)
    await asyncio.sleep(0.8)
    assert await status_of(http, gateway, job["id"]) == "IN_PROGRESS"


async def keep_alive(http, gw, worker: str, job_id: str) -> None:
    """Ping as a live worker running `job_id` does."""
    while True:
        url = gw.job_url(f"ping/{worker}?job_id={job_id}")
        async with http.get(url, headers=gw.worker_headers()):
            pass
        await asyncio.sleep(0.2)


async def test_a_job_is_gone_when_its_ttl_elapses_even_while_running(http, gateway):
    job = await submit(http, gateway, {"input": {}, "policy": {"ttl": 10000}})
    await take(http, gateway)
    pinger = asyncio.create_task(keep_alive(http, gateway, "w1", job["id"]))
    assert await status_of(http, gateway, job["id"]) == "IN_PROGRESS"
    await eventually(
        lambda: _is(status_of(http, gateway, job["id"]), 404), timeout_s=40
    )  # the sweeper, on a loaded machine
    pinger.cancel()
    async with http.get(gateway.job_url("job-stop/w1"), headers=gateway.worker_headers()) as r:
        assert (await r.json()) == {"jobsToStop": [job["id"]]}
    assert (await get(http, gateway, "health"))[1]["jobs"]["inProgress"] == 0


@pytest.mark.parametrize("gateway_settings", [{"retention_run_s": 1.0}], indirect=True)
async def test_results_are_kept_for_the_retention_then_gone_and_not_retryable(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"error": "boom"})
    assert await status_of(http, gateway, job["id"]) == "FAILED"
    await eventually(lambda: _is(status_of(http, gateway, job["id"]), 404), timeout_s=5)
    assert (await post(http, gateway, f"retry/{job['id']}"))[0] == 404


async def test_a_silent_worker_loses_its_job_to_the_queue_then_it_fails(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    assert (await take(http, gateway, "w1"))["id"] == job["id"]
    await eventually(lambda: _is(status_of(http, gateway, job["id"]), "IN_QUEUE"))
    assert (await get(http, gateway, "health"))[1]["jobs"]["retried"] == 1
    assert (await take(http, gateway, "w2"))["id"] == job["id"]
    await eventually(lambda: _is(status_of(http, gateway, job["id"]), "FAILED"))
    _, body = await get(http, gateway, f"status/{job['id']}")
    assert "worker" in body["error"] and "lost" in body["error"]


async def test_a_job_the_workers_ping_does_not_list_goes_back_to_the_queue(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway, "w1")
    await asyncio.sleep(0.4)
    url = gateway.job_url("ping/w1?job_id=someone-else")
    async with http.get(url, headers=gateway.worker_headers()) as r:
        assert r.status == 200
    assert await status_of(http, gateway, job["id"]) == "IN_QUEUE"


async def test_a_job_the_workers_ping_lists_stays_with_it(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway, "w1")
    pinger = asyncio.create_task(keep_alive(http, gateway, "w1", job["id"]))
    await asyncio.sleep(1.6)
    pinger.cancel()
    assert await status_of(http, gateway, job["id"]) == "IN_PROGRESS"


class Receiver:
    """A webhook receiver on loopback that fails its first `failures` calls, or leaves its
    first `hangs` calls unanswered until `released` is set."""

    def __init__(self, failures: int = 0, hangs: int = 0) -> None:
        self.failures = failures
        self.hangs = hangs
        self.released = asyncio.Event()
        self.calls: list[tuple[float, dict, bytes]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.calls.append((time.monotonic(), dict(request.headers), await request.read()))
        n = len(self.calls)
        if n <= self.hangs:
            await self.released.wait()
        return web.Response(status=500 if n <= self.failures else 200)

    async def start(self, port: int | None = None) -> str:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        port = port or free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}/hook"


async def test_a_webhook_that_fails_twice_is_called_exactly_three_times_signed(http, gateway):
    receiver = Receiver(failures=2)
    url = await receiver.start()
    s3 = {"accessId": "AK", "accessSecret": "SECRET-S3", "bucketName": "b", "endpointUrl": "e"}
    job = await submit(http, gateway, {"input": {}, "webhook": url, "s3Config": s3})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"output": {"ok": 1}})
    await eventually(lambda: _true(len(receiver.calls) >= 3), timeout_s=10)
    await asyncio.sleep(1.5)
    await receiver.runner.cleanup()
    assert len(receiver.calls) == 3
    gaps = [b[0] - a[0] for a, b in zip(receiver.calls, receiver.calls[1:], strict=False)]
    # Each retry waits its interval (1 s); how much later it comes is the machine's load.
    assert all(gap >= 0.9 for gap in gaps), gaps
    _, status = await get(http, gateway, f"status/{job['id']}")
    for _, headers, body in receiver.calls:
        verify_webhook(headers, body, SECRET)
        assert b"SECRET-S3" not in body
    import orjson

    sent = orjson.loads(receiver.calls[-1][2])
    assert sent["id"] == job["id"] and sent["output"] == {"ok": 1}
    assert sent["status"] == "COMPLETED" == status["status"]


async def _true(value: bool) -> bool:
    return value


async def test_a_webhook_is_called_once_with_two_gateway_replicas(
    http, gateway, redis_server, gateway_settings
):
    second = await start_gateway(make_settings(redis_server.url, free_port(), **gateway_settings))
    try:
        receiver = Receiver()
        url = await receiver.start()
        job = await submit(http, gateway, {"input": {}, "webhook": url})
        await take(http, gateway)
        await done(http, gateway, job["id"], {"output": 1})
        await eventually(lambda: _true(len(receiver.calls) >= 1))
        await asyncio.sleep(1.5)
        assert len(receiver.calls) == 1
        await receiver.runner.cleanup()
    finally:
        await second.cleanup()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://10.1.2.3/x",
        "http://169.254.169.254/latest",
        "http://[::1]/x",
    ],
)
async def test_webhooks_to_private_addresses_are_refused(http, redis, redis_server, url):
    from tests.conftest import register

    client_key, _ = await register(redis, "echo")
    runner = await start_gateway(make_settings(redis_server.url, port := free_port()))
    try:
        async with http.post(
            f"http://127.0.0.1:{port}/v2/echo/run",
            json={"input": {}, "webhook": url},
            headers={"authorization": client_key},
        ) as r:
            assert r.status == 400
            assert "private" in (await r.json())["error"]
    finally:
        await runner.cleanup()
