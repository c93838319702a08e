"""A request held for a load-balancing worker is woken by the worker turning routable at any
moment after it looked, including while the hold's first awaits (its report of the held
request to Redis) are still under way. Before the fix, a worker that turned healthy during
that report was seen only at the end of the hold (120 s by default): the CI flake of
`test_operator_builds`' load-balancing canary test. A real `LbRouter` on real Redis."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from lockgate.dev.redis_server import free_port
from lockgate.gateway.lb_workers import LbRouter
from lockgate.store.lb_workers import HEALTHY, LbWorker, LbWorkers

ENDPOINT, WORKER = "held-wake", "w-1"
HOLD_S = 120.0  # the gateway's default: a missed wake is seen only after this
SLOW_POLL_S = 600.0  # no health poll after the first: the transition below is the only one


class TurnsHealthyDuringTheReport(LbWorkers):
    """The real store; when a held request's first report has reached Redis, the worker
    turns healthy as a health poll would turn it (state, code, wake), before the report's
    await returns to the held request."""

    router: LbRouter

    async def report_requests(self, endpoint_id: str, reporter: str, **counts) -> None:
        await super().report_requests(endpoint_id, reporter, **counts)
        ep = self.router.endpoints[endpoint_id]
        target = ep.targets[WORKER]
        if counts["held"] and target.state != HEALTHY:
            target.state, target.code = HEALTHY, 200
            ep.wake()


async def test_a_worker_turning_healthy_while_the_hold_reports_wakes_the_held_request(
    redis: Redis,
) -> None:
    store = TurnsHealthyDuringTheReport(redis)
    router = LbRouter(
        store, clock_ms=lambda: int(time.time() * 1000), hold_s=HOLD_S, max_held=8,
        fast_s=SLOW_POLL_S, calm_s=SLOW_POLL_S,
    )  # fmt: skip
    store.router = router
    address = f"127.0.0.1:{free_port()}"  # nothing listens: its one poll sees no answer
    await store.register(ENDPOINT, WORKER, LbWorker(address, address))
    try:
        ep = await router.endpoint(ENDPOINT)
        assert ep.targets[WORKER].state != HEALTHY
        target = await asyncio.wait_for(router.acquire(ENDPOINT, None), HOLD_S / 4)
        assert target.id == WORKER and target.in_flight == 1
        router.release(ENDPOINT, target)
    finally:
        await router.close()
