"""History for the console's charts: a sampler and `GET /v1/endpoints/{id}/metrics`.

The process that serves `/v1` (`lockgate manage` on a cluster, `lockgate dev`) writes one
point per endpoint every `HISTORY_INTERVAL_S` seconds into Redis (`JobStore.record_history`,
one call per endpoint), so a page reload or another replica reads the same curves. Every
replica samples; the store writes a point only when its interval has none yet, so two
replicas never write two points for one interval. A point holds the gauges as the interval
ends (queue depths, jobs in progress, workers running / idle / starting) and what happened
during it: jobs that ended completed or failed (TIMED_OUT counts as failed), and the
p50/p95 queue delay of jobs taken (from 10 %-wide log buckets the store counts as workers
take jobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from lockgate.gateway.errors import BadRequest, NotFound
from lockgate.gateway.http import json_response
from lockgate.store import JobStore, Registry
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.keys import ENDPOINT_ID_RE, HISTORY_INTERVAL_S, HISTORY_POINTS

log = logging.getLogger("lockgate.history")

SETTLE_S = 1.0  # after an interval ends, scripts of jobs that ended in it have run
# Each sample also writes the intervals before the newest one if they have no point yet
# (a late wake-up, a busy loop, a restart): a point per interval, never a gap.
CATCH_UP = 3
# The loop sleeps on the monotonic clock but slots follow the wall clock; when the two
# drift (NTP slewing), a wake-up can come a little early: then it sleeps at least this (s).
MIN_SLEEP_S = 0.5
HISTORY_STORE = web.AppKey("history_store", JobStore)
HISTORY_REGISTRY = web.AppKey("history_registry", Registry)


def interval_to_sample(now_s: float) -> int:
    """The epoch second starting the newest interval that ended `SETTLE_S` ago."""
    ended = int((now_s - SETTLE_S) // HISTORY_INTERVAL_S) * HISTORY_INTERVAL_S
    return ended - HISTORY_INTERVAL_S


def seconds_to_next(now_s: float) -> float:
    """How long until the next interval has ended and settled."""
    return HISTORY_INTERVAL_S - ((now_s - SETTLE_S) % HISTORY_INTERVAL_S)


class HistorySampler:
    """Writes one history point per registered endpoint and interval."""

    def __init__(
        self, store: JobStore, registry: Registry, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock

    async def sample(self) -> int:
        """Write the points of the last ended intervals that have none yet (oldest first);
        returns how many this call wrote."""
        newest = interval_to_sample(self.clock())
        slots = [newest - k * HISTORY_INTERVAL_S for k in reversed(range(CATCH_UP))]
        written = 0
        for endpoint_id in await self.registry.endpoint_ids():
            written += await self.store.record_history(endpoint_id, slots)
        return written

    async def run(self) -> None:
        while True:
            await asyncio.sleep(max(MIN_SLEEP_S, seconds_to_next(self.clock())))
            try:
                await self.sample()
            except Exception as err:  # Redis away for a moment: the next interval retries
                log.warning("history sample failed: %s", err)
            raise_if_cancelled()


def history_sampler(store: JobStore, registry: Registry) -> Callable:
    """A cleanup context running a `HistorySampler` while the app serves."""

    async def sampling(_app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(HistorySampler(store, registry).run(), name="lockgate-history")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return sampling


def _since(request: web.Request) -> int:
    raw = request.query.get("since")
    if raw is None:
        return 0
    try:
        return int(float(raw))
    except ValueError as err:
        raise BadRequest("since: expected epoch seconds") from err


async def endpoint_metrics(request: web.Request) -> web.Response:
    """`{"interval": 10, "points": [...]}`, oldest first, the last hour at most."""
    endpoint_id = request.match_info["endpoint_id"]
    registry = request.app[HISTORY_REGISTRY]
    if not ENDPOINT_ID_RE.match(endpoint_id) or await registry.get_endpoint(endpoint_id) is None:
        raise NotFound(f"endpoint {endpoint_id!r} not found")
    points = await request.app[HISTORY_STORE].history(endpoint_id, _since(request))
    return json_response({"interval": HISTORY_INTERVAL_S, "points": points[-HISTORY_POINTS:]})


def add_history_routes(
    app: web.Application, store: JobStore, registry: Registry, *, prefix: str = ""
) -> None:
    """`GET {prefix}/endpoints/{id}/metrics` on the management app (its middleware checks
    the admin key); `prefix` as given to `create_manage_app`."""
    app[HISTORY_STORE] = store
    app[HISTORY_REGISTRY] = registry
    app.router.add_get(f"{prefix}/endpoints/{{endpoint_id}}/metrics", endpoint_metrics)
