"""Rate and concurrency limits of the client job API: the spec's "Limits" section.

Per key owner (the key's name), per endpoint, per operation: a rate per fixed 10-second
window (see store/limits.py for why fixed) and a number of requests in flight. The rate
follows the dynamic rule `max(base, running workers x requests_per_worker)`; running
workers are those `/health` reports as running, counted at most every `workers_cache_s`.

A Redis call per request would cost more than the request itself, so each replica
reserves a batch (1% of a rate, 5% of a concurrency) and spends it locally; Redis never
grants past a limit, so the limits hold across replicas. The price: a client near its
limit may be refused a little early while another replica still holds part of a batch.
Held slots are leases, renewed every `RENEW_S` for every (endpoint, operation, owner) at
once: the calls are issued together, so `store/scripts.py` sends them as one pipeline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Literal

from lockgate.gateway.errors import TooManyRequests
from lockgate.models.limits import Operation, OperationLimit
from lockgate.store import JobStore
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.limits import RateLimits
from lockgate.store.scripts import StoreFull

log = logging.getLogger("lockgate.gateway")

LEASE_MS = 15_000  # slots of a replica that stops renewing them are free after this
RENEW_S = 5.0  # how often held slots are renewed, and idle ones given back


def effective_rate(base: int | None, running_workers: int, requests_per_worker: int) -> int | None:
    """The spec's dynamic rule: the larger of the base and workers x requests per worker."""
    if base is None:
        return None
    return max(base, running_workers * requests_per_worker)


def rate_batch(rate: int) -> int:
    """Rate units a replica reserves at once: 1% of the rate (exact for small rates)."""
    return max(1, rate // 100)


def slot_batch(concurrency: int) -> int:
    """Slots a replica reserves beyond those in use: 5% of the concurrency."""
    return max(1, concurrency // 20)


def retry_after_s(retry_after_ms: int) -> int:
    """Whole seconds for `Retry-After` (at least 1: 0 would invite an immediate retry)."""
    return max(1, math.ceil(retry_after_ms / 1000))


@dataclass
class Budget:
    """One replica's share of one (endpoint, operation, owner)'s limits."""

    window: int = -1  # start (ms) of the window `units` belong to
    units: int = 0  # rate granted in that window and not spent yet
    spent_until: int = 0  # ms: Redis said the window's rate is all granted...
    spent_rate: int = 0  # ...at this rate (more running workers may raise it meanwhile)
    in_flight: int = 0
    slots: int = 0  # concurrency slots this replica holds in Redis
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def short(self, rate: int | None, concurrency: int | None) -> bool:
        """No rate unit or no free slot left: Redis must be asked."""
        out_of_units = rate is not None and self.units <= 0
        return out_of_units or (concurrency is not None and self.in_flight >= self.slots)


Key = tuple[str, Operation, str]


class _Ask(Enum):
    REDIS = "ask Redis"


ASK_REDIS: Final = _Ask.REDIS  # `Limiter.admit_now`: not without Redis, await `admit`
AskRedis = Literal[_Ask.REDIS]


@dataclass(slots=True)
class Hold:
    """`Limiter.hold`: a request admitted on entry, its slot given back on exit (a plain
    class: an `asynccontextmanager` costs a generator per request)."""

    limiter: Limiter
    endpoint_id: str
    op: Operation
    owner: str
    budget: Budget | None = None

    async def __aenter__(self) -> None:
        budget = self.limiter.admit_now(self.endpoint_id, self.op, self.owner)
        if budget is ASK_REDIS:
            budget = await self.limiter.admit(self.endpoint_id, self.op, self.owner)
        self.budget = budget

    async def __aexit__(self, *_exc: object) -> None:
        self.limiter.release(self.budget)


class Limiter:
    """Admits or refuses a client request; an admitted request holds a slot while it runs."""

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
        lease_ms: int = LEASE_MS,
        on_refusal: Callable[[str, Operation], None] = lambda endpoint_id, operation: None,
    ) -> None:
        self.counts = counts
        self.store = store
        self.table = table
        self.window_ms = int(window_s * 1000)
        self.workers_cache_s = workers_cache_s
        self.enabled = enabled
        self.clock = clock or store.clock
        self.lease_ms = lease_ms  # must outlast a renewal round (RENEW_S) by a safe margin
        self.on_refusal = on_refusal  # counts each 429 (lockgate_rate_limited_total)
        self._workers: dict[str, tuple[float, int]] = {}
        self._budgets: dict[Key, Budget] = {}

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

    def _rate_now(self, endpoint_id: str, limit: OperationLimit) -> int | AskRedis | None:
        """`rate` when it needs no Redis read (no per-worker rate, or the running workers
        cached), else `ASK_REDIS`."""
        if limit.rate is None or not limit.requests_per_worker:
            return limit.rate
        hit = self._workers.get(endpoint_id)
        if hit is None or hit[0] < time.monotonic():
            return ASK_REDIS
        return effective_rate(limit.rate, hit[1], limit.requests_per_worker)

    async def rate(self, endpoint_id: str, limit: OperationLimit) -> int | None:
        """The effective rate of an operation on an endpoint now."""
        rate = self._rate_now(endpoint_id, limit)
        if rate is not ASK_REDIS:
            return rate
        assert limit.rate is not None and limit.requests_per_worker
        running = await self.running_workers(endpoint_id)  # read, then cached
        return effective_rate(limit.rate, running, limit.requests_per_worker)

    def hold(self, endpoint_id: str, op: Operation, owner: str) -> Hold:
        """Admit one request for its duration (`async with`), or raise 429 with
        `Retry-After`."""
        return Hold(self, endpoint_id, op, owner)

    def admit_now(self, endpoint_id: str, op: Operation, owner: str) -> Budget | AskRedis | None:
        """`admit` when this replica's budget already holds a unit and a slot (and the
        rate needs no Redis read): the common case, without an await. `ASK_REDIS` when
        `admit` must be awaited instead."""
        limit = self.table[op]
        if not self.enabled or (limit.rate is None and limit.concurrency is None):
            return None
        budget = self._budgets.get((endpoint_id, op, owner))
        rate = self._rate_now(endpoint_id, limit)
        if budget is None or rate is ASK_REDIS:
            return ASK_REDIS
        self._roll(budget)
        conc = limit.concurrency
        if budget.short(rate, conc):
            return ASK_REDIS
        if rate is not None:
            budget.units -= 1
        if conc is None:
            return None
        budget.in_flight += 1
        return budget

    async def admit(self, endpoint_id: str, op: Operation, owner: str) -> Budget | None:
        """Admit one request, or raise 429: the budget whose slot it now holds (None when
        it holds none), to be given back with `release`."""
        limit = self.table[op]
        if not self.enabled or (limit.rate is None and limit.concurrency is None):
            return None
        key = (endpoint_id, op, owner)
        budget = self._budgets.setdefault(key, Budget())
        try:
            await self._admit(key, budget, limit)
        except StoreFull:
            # Redis refuses writes, so no count can be kept: let the request through
            # uncounted, so reads, cancel and purge still drain a full store (a write the
            # request makes is refused by the store as a whole anyway).
            log.warning("store full: /%s on %s admitted without rate limiting", op, endpoint_id)
            return None
        return budget if limit.concurrency is not None else None

    @staticmethod
    def release(budget: Budget | None) -> None:
        """An admitted request ended: its slot is free again."""
        if budget is not None:
            budget.in_flight -= 1

    async def _admit(self, key: Key, budget: Budget, limit: OperationLimit) -> None:
        """Spend one unit of rate and take one slot, reserving more from Redis if needed."""
        rate, conc = await self.rate(key[0], limit), limit.concurrency
        for _ in range(2):  # again once if the window turned while a reservation was out
            now = self._roll(budget)
            spent = now < budget.spent_until and rate is not None and rate <= budget.spent_rate
            if spent and budget.units <= 0:
                raise self._refusal(key, "requests in this window", budget.spent_until - now)
            if not budget.short(rate, conc):
                break
            async with budget.lock:  # one reservation at a time; the others then reuse it
                now = self._roll(budget)  # the window may have turned while this waited
                if budget.short(rate, conc):
                    await self._reserve(key, budget, now, rate, conc)
            if budget.window == now - now % self.window_ms:
                break  # units of a window that is still the current one
        if rate is not None and budget.units <= 0:
            raise self._refusal(key, "requests in this window", budget.spent_until - now)
        if conc is not None and budget.in_flight >= budget.slots:
            raise self._refusal(key, "requests in flight", 1000)
        if rate is not None:
            budget.units -= 1
        if conc is not None:
            budget.in_flight += 1

    def _roll(self, budget: Budget) -> int:
        """The clock now; the budget starts the current window if it is still in an older
        one. Never before the budget's window: a wall clock stepped back (NTP) across a
        window's start would otherwise reserve in the old window, drop those units as
        stale and refuse a request far below the rate."""
        now = max(self.clock(), budget.window)
        start = now - now % self.window_ms
        if budget.window < start:
            budget.window, budget.units = start, 0
        return now

    async def _reserve(
        self, key: Key, budget: Budget, now: int, rate: int | None, conc: int | None
    ) -> None:
        want_units = rate is not None and budget.units <= 0
        want_slots = conc is not None and budget.in_flight >= budget.slots
        slots = None
        if want_slots and conc is not None:
            slots = min(conc, budget.in_flight + slot_batch(conc))
        grant = await self.counts.reserve(
            *key, now=now, window_ms=self.window_ms, rate=rate,
            units=rate_batch(rate) if want_units and rate is not None else 0,
            concurrency=conc, slots=slots, lease_ms=self.lease_ms,
        )  # fmt: skip
        if want_units and budget.window == now - now % self.window_ms:
            budget.units += grant.units
            if grant.units == 0:
                budget.spent_until, budget.spent_rate = now + grant.window_left_ms, rate or 0
        if slots is not None:
            budget.slots = grant.slots

    def _refusal(self, key: Key, what: str, retry_after_ms: int) -> TooManyRequests:
        endpoint_id, op, _owner = key
        self.on_refusal(endpoint_id, op)
        seconds = retry_after_s(retry_after_ms)
        return TooManyRequests(
            f"rate limit: too many /{op} {what} for this key; retry in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )

    async def renew(self) -> None:
        """Renew the leases of slots in use, give back idle ones, forget spent budgets.

        One round trip for all of them: the calls are made in one loop tick, which
        `store/scripts.py` sends to Redis as one pipeline."""
        now = self.clock()
        held = [
            self._renewal(key, budget, conc, now)
            for key, budget in self._budgets.items()
            if budget.slots > 0 and (conc := self.table[key[1]].concurrency) is not None
        ]
        failed = [r for r in await asyncio.gather(*held, return_exceptions=True) if r is not None]
        for key, budget in list(self._budgets.items()):
            idle = budget.in_flight == 0 and budget.slots == 0
            if idle and budget.window + self.window_ms <= now and budget.spent_until <= now:
                del self._budgets[key]
        if failed:
            raise failed[0]

    async def _renewal(self, key: Key, budget: Budget, conc: int, now: int) -> None:
        """Keep as many slots as are in flight. The idle ones are given back here first, so
        a request admitted meanwhile reserves its slot (after this) instead of counting on
        one that Redis is being told this replica no longer holds."""
        async with budget.lock:
            budget.slots = min(budget.slots, budget.in_flight)
            grant = await self.counts.reserve(
                *key, now=now, window_ms=self.window_ms, rate=None, units=0,
                concurrency=conc, slots=budget.slots, lease_ms=self.lease_ms,
            )  # fmt: skip
            budget.slots = grant.slots

    async def run(self) -> None:
        """Renew every `RENEW_S` until cancelled (a Redis outage is logged, not fatal)."""
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                await self.renew()
            except Exception as err:  # the next round tries again
                log.warning("renewing rate-limit slots failed: %s", err)
            raise_if_cancelled()
