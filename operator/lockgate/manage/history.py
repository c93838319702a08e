"""History for the console's charts: a sampler and `GET /v1/endpoints/{id}/metrics`.

The process that serves `/v1` (`lockgate manage` on a cluster, `lockgate dev`) writes one
point per endpoint every `HISTORY_INTERVAL_S` seconds into Redis (`JobStore.record_history`,
one call per endpoint), so a page reload or another replica reads the same curves. Every
replica samples; the store writes a point only when its interval has none yet, so two
replicas never write two points for one interval. A point holds the gauges as the interval
ends (queue depths, jobs in progress, workers running / idle / starting / throttled /
unhealthy) and what happened during it: jobs that ended by final state (completed, failed,
timed out, cancelled), the p50/p95 execution time of those that ran, cold starts (workers
new to the endpoint), and the p50/p95 queue delay of jobs taken (from 10 %-wide log
buckets the store counts as workers take and end jobs). Each point written also adds its
ready workers times the interval to its hour's usage (`store.usage`, `/v2/billing`), at
the rate of the endpoint's registry entry (`store.usage.rate_of`).

An endpoint whose newest point is quiet (nothing queued, running, ended or alive) is not
sampled again until a sign of activity (the store's `q:`, `a:`, `r:` and `l:` events, given
to `mark`), a read of its history, or a full pass: then the intervals skipped are written
at once, with zero gauges for those before the sign (issue 32: a thousand idle endpoints
cost a call each every five minutes, not each ten seconds). A full pass follows each
(re)subscription of the event subscription (events published while it was down are lost)
and comes every `FULL_PASS_S` besides; a read never sees a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from lockgate.gateway.errors import BadRequest, NotFound
from lockgate.gateway.http import json_response
from lockgate.gateway.notify import Notifier
from lockgate.store import JobStore, Registry
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.keys import (
    ENDPOINT_ID_RE,
    HISTORY_INTERVAL_S,
    HISTORY_MINUTE_POINTS,
    HISTORY_MINUTE_S,
    HISTORY_POINTS,
)
from lockgate.store.usage import UsageLedger, rate_of

log = logging.getLogger("lockgate.history")

SETTLE_S = 1.0  # after an interval ends, scripts of jobs that ended in it have run
# Each sample also writes the intervals before the newest one if they have no point yet
# (a late wake-up, a busy loop, a restart): a point per interval, never a gap.
CATCH_UP = 3
# The loop sleeps on the monotonic clock but slots follow the wall clock; when the two
# drift (NTP slewing), a wake-up can come a little early: then it sleeps at least this (s).
MIN_SLEEP_S = 0.5
FULL_PASS_S = 300.0  # every endpoint sampled, quiet or not, at least this often


def interval_to_sample(now_s: float) -> int:
    """The epoch second starting the newest interval that ended `SETTLE_S` ago."""
    ended = int((now_s - SETTLE_S) // HISTORY_INTERVAL_S) * HISTORY_INTERVAL_S
    return ended - HISTORY_INTERVAL_S


def seconds_to_next(now_s: float) -> float:
    """How long until the next interval has ended and settled."""
    return HISTORY_INTERVAL_S - ((now_s - SETTLE_S) % HISTORY_INTERVAL_S)


class HistorySampler:
    """Writes one history point per registered endpoint and interval; quiet endpoints'
    points are written in arrears (see the module's doc)."""

    def __init__(
        self,
        store: JobStore,
        registry: Registry,
        *,
        clock: Callable[[], float] = time.time,
        full_pass_s: float = FULL_PASS_S,
    ) -> None:
        self.store = store
        self.registry = registry
        self.ledger = UsageLedger(store.redis, clock=clock)
        self.clock = clock
        self.full_pass_s = full_pass_s
        self.quiet: dict[str, int] = {}  # endpoint -> its newest slot written, found quiet
        self.marked: dict[str, float] = {}  # a quiet endpoint -> its first sign since (clock)
        self._marks: dict[str, int] = defaultdict(int)
        self._next_full = 0.0  # the first pass is a full one

    def mark(self, endpoint_id: str) -> None:
        """A sign of activity: the endpoint is sampled again at the next interval."""
        self._marks[endpoint_id] += 1
        if endpoint_id in self.quiet:
            self.marked.setdefault(endpoint_id, self.clock())

    def missed_events(self) -> None:
        """Signs of activity may have been lost (the subscription (re)connected): the next
        sample is a full pass."""
        self._next_full = 0.0

    async def sample(self) -> int:
        """Write the points of the last ended intervals that have none yet (oldest first),
        of every endpoint not known quiet (all of them on a full pass); returns how many
        this call wrote."""
        now = self.clock()
        full = now >= self._next_full
        if full:
            self._next_full = now + self.full_pass_s
        written, ids = 0, await self.registry.endpoint_ids()
        for endpoint_id in ids:
            if full or endpoint_id not in self.quiet or endpoint_id in self.marked:
                written += await self.catch_up(endpoint_id, now)
        if full:  # forget endpoints deleted since
            for gone in set(self._marks) - set(ids):
                self.quiet.pop(gone, None)
                self.marked.pop(gone, None)
                del self._marks[gone]
        return written

    async def catch_up(self, endpoint_id: str, now: float | None = None) -> int:
        """Write the endpoint's missing points up to the newest ended interval (a read of
        its history calls this first); returns how many were written."""
        now = self.clock() if now is None else now
        newest = interval_to_sample(now)
        slots, quiet = fill(newest, self.quiet.get(endpoint_id), self.marked.get(endpoint_id))
        generation = self._marks[endpoint_id]
        entry = await self.registry.get_endpoint(endpoint_id)
        rate = rate_of(entry.settings() if entry is not None else None)
        result = await self.store.record_history(endpoint_id, slots, quiet=quiet, rate=rate)
        if result.used_hour:
            await self.ledger.note(endpoint_id, result.used_hour)
        if result.quiet and self._marks[endpoint_id] == generation:
            self.quiet[endpoint_id] = newest
            self.marked.pop(endpoint_id, None)
        elif not result.quiet:
            self.quiet.pop(endpoint_id, None)
            self.marked.pop(endpoint_id, None)
        return result.written

    async def run(self) -> None:
        while True:
            await asyncio.sleep(max(MIN_SLEEP_S, seconds_to_next(self.clock())))
            try:
                await self.sample()
            except Exception as err:  # Redis away for a moment: the next interval retries
                log.warning("history sample failed: %s", err)
            raise_if_cancelled()


HISTORY_SAMPLER = web.AppKey("history_sampler", HistorySampler)


def fill(newest: int, quiet_since: int | None, marked_at: float | None) -> tuple[list[int], int]:
    """The intervals to write up to `newest` (epoch seconds, oldest first), and how many of
    the first are known quiet. An endpoint sampled last interval, or never: the newest and
    the `CATCH_UP - 1` before it (a late wake-up, a restart), none known quiet. One found
    quiet at `quiet_since`: every interval since (at most an hour's), quiet up to the one in
    which a sign of activity came (`marked_at`), or all but the newest without one."""
    if quiet_since is None or quiet_since >= newest:
        return [newest - k * HISTORY_INTERVAL_S for k in reversed(range(CATCH_UP))], 0
    oldest = newest - (HISTORY_POINTS - 1) * HISTORY_INTERVAL_S  # an hour's
    first = max(quiet_since + HISTORY_INTERVAL_S, oldest)
    slots = list(range(first, newest + HISTORY_INTERVAL_S, HISTORY_INTERVAL_S))
    if marked_at is None:
        return slots, len(slots) - 1
    return slots, min(len(slots) - 1, sum(1 for t in slots if t + HISTORY_INTERVAL_S <= marked_at))


def history_sampler(
    sampler: HistorySampler, events: Notifier | None = None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context running `sampler` while the app serves; with `events`, a
    subscription of its own whose signs of activity it is given (dev mode gives the
    gateway's subscription's instead, see `apps.dev`)."""

    async def sampling(_app: web.Application) -> AsyncIterator[None]:
        if events is not None:
            events.on_activity = sampler.mark
            events.on_subscribed = sampler.missed_events
            events.start()
        task = asyncio.create_task(sampler.run(), name="lockgate-history")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if events is not None:
            await events.close()

    return sampling


def _since(request: web.Request) -> int:
    raw = request.query.get("since")
    if raw is None:
        return 0
    try:
        return int(float(raw))
    except ValueError as err:
        raise BadRequest("since: expected epoch seconds") from err


def _interval(request: web.Request) -> int:
    raw = request.query.get("interval", str(HISTORY_INTERVAL_S))
    if raw not in (str(HISTORY_INTERVAL_S), str(HISTORY_MINUTE_S)):
        raise BadRequest(f"interval: expected {HISTORY_INTERVAL_S} or {HISTORY_MINUTE_S} (s)")
    return int(raw)


async def endpoint_metrics(request: web.Request) -> web.Response:
    """`{"interval": 10, "points": [...]}`, oldest first, the last hour at most; with
    `?interval=60`, minute points, the last day at most."""
    endpoint_id = request.match_info["endpoint_id"]
    sampler = request.app[HISTORY_SAMPLER]
    since, interval = _since(request), _interval(request)
    if not ENDPOINT_ID_RE.fullmatch(endpoint_id) or not await sampler.registry.has_endpoint(
        endpoint_id
    ):
        raise NotFound(f"endpoint {endpoint_id!r} not found")
    if endpoint_id in sampler.quiet:
        await sampler.catch_up(endpoint_id)  # the intervals it was skipped for
    minutes = interval == HISTORY_MINUTE_S
    points = await sampler.store.history(endpoint_id, since, minutes=minutes)
    keep = HISTORY_MINUTE_POINTS if minutes else HISTORY_POINTS
    return json_response({"interval": interval, "points": points[-keep:]})


def add_history_routes(app: web.Application, sampler: HistorySampler, *, prefix: str = "") -> None:
    """`GET {prefix}/endpoints/{id}/metrics` on the management app (its middleware checks
    the admin key), read through `sampler`; `prefix` as given to `create_manage_app`."""
    app[HISTORY_SAMPLER] = sampler
    app.router.add_get(f"{prefix}/endpoints/{{endpoint_id}}/metrics", endpoint_metrics)
