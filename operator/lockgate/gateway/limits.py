"""Rate and concurrency limits of the client job API: the spec's "Limits" section.

Per key owner (the key's name), per endpoint, per operation: a rate per fixed 10-second
window (see store/limits.py for why fixed) and a number of requests in flight. The rate
follows the dynamic rule `max(base, running workers x requests_per_worker)`; running
workers are those `/health` reports as running, counted at most every `workers_cache_s`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from lockgate.gateway.errors import TooManyRequests
from lockgate.models.limits import Operation, OperationLimit
from lockgate.store import JobStore
from lockgate.store.limits import RateLimits, Verdict

log = logging.getLogger("lockgate.gateway")

# How long an in-flight slot is held at most if its replica dies before giving it back (ms):
# a /runsync may wait 300 s; every other request is short.
LEASE_MS = {Operation.RUNSYNC: 330_000}
LEASE_DEFAULT_MS = 60_000


def effective_rate(base: int | None, running_workers: int, requests_per_worker: int) -> int | None:
    """The spec's dynamic rule: the larger of the base and workers x requests per worker."""
    if base is None:
        return None
    return max(base, running_workers * requests_per_worker)


def retry_after_s(retry_after_ms: int) -> int:
    """Whole seconds for `Retry-After` (at least 1: 0 would invite an immediate retry)."""
    return max(1, math.ceil(retry_after_ms / 1000))


def rate_limited(endpoint_id: str, operation: Operation) -> None:
    """Record one 429 of the rate limiter. The single place a refusal is counted: the
    Prometheus counter `lockgate_rate_limited_total{endpoint,operation}` hooks in here."""


class Limiter:
    """Admits or refuses a client request; an admitted request holds its slot while it runs."""

    def __init__(
        self,
        counts: RateLimits,
        store: JobStore,
        table: dict[Operation, OperationLimit],
        *,
        window_s: float,
        workers_cache_s: float,
        enabled: bool = True,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.counts = counts
        self.store = store
        self.table = table
        self.window_ms = int(window_s * 1000)
        self.workers_cache_s = workers_cache_s
        self.enabled = enabled
        self.clock = clock or store.clock
        self._workers: dict[str, tuple[float, int]] = {}

    async def running_workers(self, endpoint_id: str) -> int:
        """Workers running a job on the endpoint, as `/health` counts them (cached briefly)."""
        hit = self._workers.get(endpoint_id)
        if hit is None or hit[0] < time.monotonic():
            running = (await self.store.snapshot(endpoint_id)).workers_running
            if len(self._workers) > 10_000:
                self._workers.clear()
            hit = (time.monotonic() + self.workers_cache_s, running)
            self._workers[endpoint_id] = hit
        return hit[1]

    async def rate(self, endpoint_id: str, limit: OperationLimit) -> int | None:
        """The effective rate of an operation on an endpoint now."""
        if limit.rate is None or not limit.requests_per_worker:
            return limit.rate
        running = await self.running_workers(endpoint_id)
        return effective_rate(limit.rate, running, limit.requests_per_worker)

    @asynccontextmanager
    async def hold(self, endpoint_id: str, op: Operation, owner: str) -> AsyncIterator[None]:
        """Admit one request for its duration, or raise 429 with `Retry-After`."""
        limit = self.table[op]
        if not self.enabled or (limit.rate is None and limit.concurrency is None):
            yield
            return
        admission = await self.counts.admit(
            endpoint_id, op, owner,
            now=self.clock(), window_ms=self.window_ms, rate=await self.rate(endpoint_id, limit),
            concurrency=limit.concurrency, lease_ms=LEASE_MS.get(op, LEASE_DEFAULT_MS),
        )  # fmt: skip
        if admission.verdict is not Verdict.ADMITTED:
            rate_limited(endpoint_id, op)
            raise _refusal(op, admission.verdict, admission.retry_after_ms)
        try:
            yield
        finally:
            if admission.holds:
                await self.counts.release(endpoint_id, op, owner, admission.token)


def _refusal(op: Operation, verdict: Verdict, retry_after_ms: int) -> TooManyRequests:
    seconds = retry_after_s(retry_after_ms)
    what = "requests in this window" if verdict is Verdict.RATE else "requests in flight"
    return TooManyRequests(
        f"rate limit: too many /{op} {what} for this key; retry in {seconds} s",
        headers={"Retry-After": str(seconds)},
    )
