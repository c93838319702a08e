"""Webhook fairness: a receiver that never answers holds at most `webhook_per_host`
attempts, and deliveries to other hosts do not wait for it."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from lockgate.dev.redis_server import free_port
from tests.conftest import eventually
from tests.test_job_api import done, submit, take

PER_HOST = 3
SLOW_JOBS = 12

GATEWAY_SETTINGS = dict(
    sweep_interval_s=0.1,
    webhook_allow_private=True,
    webhook_per_host=PER_HOST,
    webhook_timeout_s=120.0,  # longer than the test: only the cap may free the sender
    webhook_host_busy_delay_s=0.2,
    webhook_retry_interval_s=0.2,
    webhook_attempts=2,
)


class Receiver:
    """A webhook receiver on a loopback address. Each job's first call fails with 500, its
    second succeeds; while `held`, every call waits (as a receiver that never answers)."""

    def __init__(self, address: str, *, held: bool = False) -> None:
        self.address = address
        self.released = asyncio.Event()
        if not held:
            self.released.set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls: dict[str, int] = {}
        self.delivered: set[str] = set()

    async def handle(self, request: web.Request) -> web.Response:
        job_id = orjson.loads(await request.read())["id"]
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.released.wait()
        finally:
            self.in_flight -= 1
        self.calls[job_id] = self.calls.get(job_id, 0) + 1
        if self.calls[job_id] == 1:
            return web.Response(status=500)
        self.delivered.add(job_id)
        return web.Response(status=200)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, self.address, port).start()
        return f"http://{self.address}:{port}/hook"


async def _finish_job_with_webhook(http, gateway, url: str) -> str:
    job = await submit(http, gateway, {"input": {}, "webhook": url})
    assert (await take(http, gateway))["id"] == job["id"]
    await done(http, gateway, job["id"], {"output": "ok"})
    return job["id"]


async def test_a_receiver_that_never_answers_delays_no_other_host(http, gateway):
    slow, healthy = Receiver("127.0.0.1", held=True), Receiver("127.0.0.2")
    slow_url, healthy_url = await slow.start(), await healthy.start()
    try:
        slow_jobs = {
            await _finish_job_with_webhook(http, gateway, slow_url) for _ in range(SLOW_JOBS)
        }

        async def slow_host_saturated() -> bool:
            return slow.in_flight >= PER_HOST

        await eventually(slow_host_saturated, "the slow receiver to hold its calls", 20)
        healthy_job = await _finish_job_with_webhook(http, gateway, healthy_url)

        async def healthy_delivered() -> bool:
            return healthy_job in healthy.delivered

        # Well within webhook_timeout_s: only a sender that did not wait for the slow
        # receiver delivers it while the slow receiver still holds its calls.
        await eventually(healthy_delivered, "the healthy receiver's webhook", 30)
        assert slow.in_flight == PER_HOST and not slow.calls, "the slow calls were not pending"
        assert slow.most_in_flight == PER_HOST

        # Put back while their host was busy, the other slow deliveries used no attempt:
        # each still has its retry after its first (failed) call, so every one arrives.
        slow.released.set()

        async def all_slow_delivered() -> bool:
            return slow.delivered == slow_jobs

        await eventually(all_slow_delivered, "every slow receiver's webhook", 60)
        assert all(n == 2 for n in slow.calls.values()), slow.calls
        assert slow.most_in_flight == PER_HOST
    finally:
        slow.released.set()
        await slow.runner.cleanup()
        await healthy.runner.cleanup()
