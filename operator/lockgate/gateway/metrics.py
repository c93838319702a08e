"""Prometheus metrics of the gateway, served at `GET /metrics` (text format 0.0.4).

Per endpoint, read from Redis at scrape time, so every replica reports the same values
(aggregate replicas with `max`, not `sum`); the scaler reads these:

    lockgate_jobs_queued{endpoint,priority}               gauge    jobs waiting (normal|low)
    lockgate_oldest_queued_job_age_seconds{endpoint,priority}  gauge  oldest wait; 0 if none
    lockgate_jobs_in_progress{endpoint}                   gauge    jobs held by workers
    lockgate_workers{endpoint,state}                      gauge    live workers (idle|running)
    lockgate_worker_jobs{endpoint,worker}                 gauge    jobs each live worker holds
    lockgate_jobs_total{endpoint,outcome}                 counter  completed|failed|retried
    lockgate_lb_requests_held{endpoint}                   gauge    LB: requests waiting for a
                                              routable worker (every gateway process's)
    lockgate_lb_requests_in_flight{endpoint}              gauge    LB: requests at workers
                                              (per worker in lockgate_worker_jobs)

Per replica, since the process started (sum them over replicas):

    lockgate_http_requests_total{route,method,status}     counter  route: the route pattern;
                                              status 499: the client hung up first
    lockgate_job_queue_delay_seconds{endpoint}            histogram  both observed when a
    lockgate_job_execution_seconds{endpoint}              histogram  worker reports a result
    lockgate_webhook_deliveries_total{endpoint,outcome}   counter  one per attempt: delivered|
                                              retrying|gave_up|refused (private)|expired
    lockgate_rate_limited_total{endpoint,operation}       counter  requests refused by limits
    lockgate_lb_requests_total{endpoint,code}             counter  LB: requests answered on
                                              /lb/ or the host form (after the key and
                                              type checks); code
                                              499: the client hung up first
    lockgate_lb_hold_seconds{endpoint}                    histogram  LB: how long a request
                                              that found no routable worker was held (the
                                              cold start), sent or answered 503
    lockgate_lb_upstream_seconds{endpoint}                histogram  LB: request sent to the
                                              worker -> the worker's answer headers
    lockgate_lb_connect_failures_total{endpoint,reason}   counter  LB: a chosen worker not
                                              reached before any byte was sent (reason:
                                              refused|reset|timeout|unreachable); the
                                              request went to another worker or was held

With `lockgate gateway --processes N` a scrape reaches one of the N processes; each writes
its counters and histograms to the parent's PROMETHEUS_MULTIPROC_DIR (prometheus_client's
multiprocess mode, chosen when prometheus_client is imported) and a scrape sums them over
the processes, so the per-replica figures stay per replica (pod), not per process.

Access: `/metrics` is served on the gateway's own port, without an API key by default (the
gateway Service is cluster-internal; Prometheus and the operator scrape it there). When
`LOCKGATE_METRICS_TOKEN` is set it requires `Authorization: Bearer <token>`. Labels
never carry job ids, inputs or `s3Config`.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Iterable, Iterator
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from lockgate.gateway.activity import Activity
from lockgate.gateway.errors import CLIENT_CLOSED
from lockgate.store import JobStore, Registry, Snapshot
from lockgate.store.records import Finished
from lockgate.supervisor import MULTIPROC_DIR  # set by the parent of gateway processes

QUEUED = "lockgate_jobs_queued"
OLDEST_AGE = "lockgate_oldest_queued_job_age_seconds"
IN_PROGRESS = "lockgate_jobs_in_progress"
WORKERS = "lockgate_workers"
WORKER_JOBS = "lockgate_worker_jobs"
JOBS = "lockgate_jobs"  # a counter: exposed as lockgate_jobs_total
LB_HELD = "lockgate_lb_requests_held"
LB_IN_FLIGHT = "lockgate_lb_requests_in_flight"

DELAY_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
HOLD_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2.5, 5, 10, 30, 60, 120, 300)
UPSTREAM_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
    330,
)  # fmt: skip
EXECUTION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


def scrape_registry(own: CollectorRegistry, multiproc_dir: str | None) -> CollectorRegistry:
    """What a scrape reads for the replica's own metrics: this process's registry, or with a
    multiprocess directory, the sum over every process's files in it."""
    if not multiproc_dir:
        return own
    summed = CollectorRegistry(auto_describe=True)
    MultiProcessCollector(summed, path=multiproc_dir)
    return summed


class GatewayMetrics:
    """The replica's own counters and histograms, in a registry of their own (no globals)."""

    def __init__(self) -> None:
        r = CollectorRegistry(auto_describe=True)
        self.registry = scrape_registry(r, os.environ.get(MULTIPROC_DIR))
        self.requests = Counter(
            "lockgate_http_requests", "HTTP requests answered", ["route", "method", "status"],
            registry=r,
        )  # fmt: skip
        self.queue_delay = Histogram(
            "lockgate_job_queue_delay_seconds", "time jobs waited in the queue before starting",
            ["endpoint"], buckets=DELAY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.execution = Histogram(
            "lockgate_job_execution_seconds", "time from a job's start to its worker's result",
            ["endpoint"], buckets=EXECUTION_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.webhooks = Counter(
            "lockgate_webhook_deliveries", "webhook delivery attempts by outcome",
            ["endpoint", "outcome"], registry=r,
        )  # fmt: skip
        self.rate_limited = Counter(
            "lockgate_rate_limited", "requests refused by a rate limit",
            ["endpoint", "operation"], registry=r,
        )  # fmt: skip
        self.lb_requests = Counter(
            "lockgate_lb_requests", "LB requests answered, by endpoint and status code",
            ["endpoint", "code"], registry=r,
        )  # fmt: skip
        self.lb_hold = Histogram(
            "lockgate_lb_hold_seconds",
            "time LB requests that found no routable worker were held (the cold start)",
            ["endpoint"], buckets=HOLD_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.lb_upstream = Histogram(
            "lockgate_lb_upstream_seconds", "LB request sent -> the worker's answer headers",
            ["endpoint"], buckets=UPSTREAM_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.lb_connect_failures = Counter(
            "lockgate_lb_connect_failures",
            "LB connections to a worker that failed before any byte was sent (request re-routed)",
            ["endpoint", "reason"], registry=r,
        )  # fmt: skip
        self._requests: dict[tuple[str, str, int], Any] = {}
        self._finished: dict[str, tuple[Any, Any]] = {}
        self._lb_codes: dict[tuple[str, int], Any] = {}
        self._lb_upstream: dict[str, Any] = {}

    def count_request(self, route: str, method: str, status: int) -> None:
        """One answered request (a cached child per label set: cheap on the hot path)."""
        key = (route, method, status)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.requests.labels(route, method, str(status))
        child.inc()

    def observe_finished(self, endpoint_id: str, done: Finished) -> None:
        """A job's time in the queue and its execution (cached children, as above)."""
        children = self._finished.get(endpoint_id)
        if children is None:
            children = self._finished[endpoint_id] = (
                self.queue_delay.labels(endpoint_id),
                self.execution.labels(endpoint_id),
            )
        children[0].observe(done.delay_ms / 1000)
        children[1].observe(done.execution_ms / 1000)

    def count_lb(self, endpoint_id: str, code: int) -> None:
        """One LB request answered with `code` (cached children, as above)."""
        key = (endpoint_id, code)
        child = self._lb_codes.get(key)
        if child is None:
            child = self._lb_codes[key] = self.lb_requests.labels(endpoint_id, str(code))
        child.inc()

    def observe_lb_hold(self, endpoint_id: str, seconds: float) -> None:
        """How long a held LB request waited for a routable worker (rare: no cache)."""
        self.lb_hold.labels(endpoint_id).observe(seconds)

    def count_lb_connect_failure(self, endpoint_id: str, reason: str) -> None:
        """A worker not reached before any byte was sent (rare: no cache)."""
        self.lb_connect_failures.labels(endpoint_id, reason).inc()

    def observe_lb_upstream(self, endpoint_id: str, seconds: float) -> None:
        """Request sent to the worker -> its answer's headers."""
        child = self._lb_upstream.get(endpoint_id)
        if child is None:
            child = self._lb_upstream[endpoint_id] = self.lb_upstream.labels(endpoint_id)
        child.observe(seconds)


def age_s(since_ms: int | None, now_ms: int) -> float:
    """Seconds since `since_ms`; 0 when nothing waits."""
    return 0.0 if since_ms is None else max(0, now_ms - since_ms) / 1000


def endpoint_families(snapshots: dict[str, Snapshot], now_ms: int) -> list[Metric]:
    """The per-endpoint gauges and counters, from one store snapshot per endpoint."""
    queued = GaugeMetricFamily(QUEUED, "jobs waiting", labels=["endpoint", "priority"])
    oldest = GaugeMetricFamily(
        OLDEST_AGE, "seconds the oldest waiting job has waited", labels=["endpoint", "priority"]
    )
    running = GaugeMetricFamily(IN_PROGRESS, "jobs held by workers", labels=["endpoint"])
    workers = GaugeMetricFamily(WORKERS, "live workers", labels=["endpoint", "state"])
    held = GaugeMetricFamily(WORKER_JOBS, "jobs a live worker holds", labels=["endpoint", "worker"])
    jobs = CounterMetricFamily(JOBS, "jobs by outcome", labels=["endpoint", "outcome"])
    lb_held = GaugeMetricFamily(LB_HELD, "LB requests held", labels=["endpoint"])
    lb_flight = GaugeMetricFamily(LB_IN_FLIGHT, "LB requests in flight", labels=["endpoint"])
    for ep, s in sorted(snapshots.items()):
        lb_held.add_metric([ep], s.requests_held)
        lb_flight.add_metric([ep], s.requests_in_flight)
        queued.add_metric([ep, "normal"], s.in_queue)
        queued.add_metric([ep, "low"], s.in_queue_low)
        oldest.add_metric([ep, "normal"], age_s(s.oldest_queued_ms, now_ms))
        oldest.add_metric([ep, "low"], age_s(s.oldest_queued_low_ms, now_ms))
        running.add_metric([ep], s.in_progress)
        workers.add_metric([ep, "idle"], s.workers_idle)
        workers.add_metric([ep, "running"], s.workers_running)
        for worker, n in sorted(s.worker_jobs.items()):
            held.add_metric([ep, worker], n)
        outcomes = {"completed": s.completed, "failed": s.failed, "retried": s.retried}
        for outcome, n in outcomes.items():
            jobs.add_metric([ep, outcome], n)
    return [queued, oldest, running, workers, held, jobs, lb_held, lb_flight]


async def read_snapshots(
    store: JobStore, registry: Registry, activity: Activity | None = None
) -> dict[str, Snapshot]:
    """One snapshot of every registered endpoint, read concurrently; a quiet endpoint's
    (see `Activity`) is the last one read, with no Redis call."""
    activity = activity or Activity()

    async def snapshot(ep: str) -> Snapshot:
        if (kept := activity.cached(ep)) is not None:
            return kept
        generation = activity.generation(ep)
        snap = await store.snapshot(ep)
        activity.keep(ep, snap, generation=generation)
        return snap

    ids = sorted(await registry.endpoint_ids())
    snaps = await asyncio.gather(*(snapshot(ep) for ep in ids))
    return dict(zip(ids, snaps, strict=True))


class _Exposition:
    """What one scrape writes: the replica's own metrics, then the endpoints' families."""

    def __init__(self, own: CollectorRegistry, families: Iterable[Metric]) -> None:
        self.own = own
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.own.collect()
        yield from self.families


async def render(
    metrics: GatewayMetrics, store: JobStore, registry: Registry, activity: Activity | None = None
) -> bytes:
    """The `/metrics` body: Redis is read first (async), then the text is generated."""
    snapshots = await read_snapshots(store, registry, activity)
    families = endpoint_families(snapshots, store.clock())
    return generate_latest(_Exposition(metrics.registry, families))


def authorized(request: web.Request, token: str) -> bool:
    """No token configured: open. Otherwise `Authorization: Bearer <token>`, compared in
    constant time."""
    if not token:
        return True
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


ROUTE_KEY = "lockgate.route"  # a request's route label when not its resource's (set inside)


def metrics_middleware(metrics: GatewayMetrics) -> Middleware:
    """Counts every answered request by route pattern (never the raw path), method, status;
    a request served in the load-balancing host form counts as `ROUTE_KEY`'s value."""

    @web.middleware
    async def count_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        matched = resource.canonical if resource is not None else "unmatched"
        try:
            response = await handler(request)
        except web.HTTPException as err:
            metrics.count_request(request.get(ROUTE_KEY, matched), request.method, err.status)
            raise
        status = response.status
        if request.transport is None or request.transport.is_closing():
            status = CLIENT_CLOSED  # e.g. a worker's long-poll whose worker hung up
        metrics.count_request(request.get(ROUTE_KEY, matched), request.method, status)
        return response

    return count_requests


async def serve_metrics(
    request: web.Request,
    metrics: GatewayMetrics,
    store: JobStore,
    registry: Registry,
    token: str,
    activity: Activity | None = None,
) -> web.Response:
    """The `/metrics` response (401 without the token when one is configured)."""
    if not authorized(request, token):
        return web.json_response({"error": "metrics need the bearer token"}, status=401)
    body = await render(metrics, store, registry, activity)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
