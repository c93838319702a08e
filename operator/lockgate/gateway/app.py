"""The gateway application factory: client job API, worker API, health of the process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from redis.asyncio import Redis

from lockgate.gateway import batch_api, client_api, lb_proxy, openai_api, worker_api
from lockgate.gateway.auth import Authenticator
from lockgate.gateway.background import run_background
from lockgate.gateway.batch_runner import run_batches
from lockgate.gateway.cors import add_cors_headers, cors_middleware
from lockgate.gateway.endpoints import EndpointCache
from lockgate.gateway.http import json_response
from lockgate.gateway.keyfile import KeyFile
from lockgate.gateway.lb_warmup import LbWarmer
from lockgate.gateway.lb_workers import LbRouter
from lockgate.gateway.limits import Limiter
from lockgate.gateway.metrics import GatewayMetrics, metrics_middleware, serve_metrics
from lockgate.gateway.middleware import error_middleware
from lockgate.gateway.notify import Notifier
from lockgate.gateway.openapi import openapi_json
from lockgate.gateway.resources import BodyBudget, HeaderTimeout, resources_middleware
from lockgate.gateway.state import GATEWAY, Gateway
from lockgate.gateway.worker_binding import WorkerBinding
from lockgate.models.limits import limits_table
from lockgate.settings import Settings
from lockgate.store import (
    JobStore,
    Liveness,
    QueueQuota,
    Registry,
    Replication,
    Retention,
    connect,
)
from lockgate.store.addresses import WorkerAddresses
from lockgate.store.batches import BatchStore
from lockgate.store.lb_workers import LbWorkers
from lockgate.store.limits import RateLimits

log = logging.getLogger("lockgate.gateway")

# aiohttp tries the /v2 routes one by one, in the order they were added, until one matches:
# the routes of a job's life come first (its submit, its worker's take and result, its
# polls), the rest after them, and every trailing-slash variant last.
BUSIEST = ("run", "runsync", "job-done", "job-take", "status", "ping", "job-take-batch")

# aiohttp's own cap; each route enforces its smaller limit (10 MB /run, 20 MB /runsync).
MAX_BODY = 21 * 1024 * 1024


def build_gateway(settings: Settings, redis: Redis) -> Gateway:
    """Wire the gateway's collaborators around one Redis client."""
    registry = Registry(redis)
    retention = Retention(
        run_ms=int(settings.retention_run_s * 1000), sync_ms=int(settings.retention_sync_s * 1000)
    )
    liveness = Liveness(
        heartbeat_timeout_ms=int(settings.heartbeat_timeout_s * 1000),
        max_attempts=settings.max_attempts,
        unlisted_grace_ms=int(settings.unlisted_grace_s * 1000),
    )
    quota = QueueQuota(max_jobs=settings.max_queued_jobs, max_bytes=settings.max_queued_bytes)
    replication = Replication(
        replicas=settings.redis_min_replicas_ack,
        timeout_ms=int(settings.redis_replicas_ack_timeout_s * 1000),
    )
    store = JobStore(
        redis, retention=retention, liveness=liveness, quota=quota, replication=replication
    )
    meters = GatewayMetrics()
    key_file = None
    if settings.keys_file:
        key_file = KeyFile(settings.keys_file, reload_s=settings.keys_file_reload_s)
    endpoints = EndpointCache(registry, cache_s=settings.registry_cache_s)
    gw = Gateway(
        settings=settings,
        store=store,
        registry=registry,
        endpoints=endpoints,
        auth=Authenticator(
            registry, cache_s=settings.auth_cache_s, key_file=key_file, enabled=settings.auth
        ),
        limiter=Limiter(
            RateLimits(redis, store.scripts),
            store,
            limits_table(settings.rate_limits),
            window_s=settings.rate_limit_window_s,
            workers_cache_s=settings.workers_cache_s,
            enabled=settings.rate_limited,
            on_refusal=lambda ep, op: meters.rate_limited.labels(ep, op).inc(),
        ),
        metrics=meters,
        batches=BatchStore(redis, store.scripts, store.replication),
        notifier=Notifier(redis),
        binding=WorkerBinding(
            WorkerAddresses(redis, ttl_ms=int(settings.worker_binding_ttl_s * 1000)),
            enabled=settings.worker_address_binding,
            cache_s=min(settings.auth_cache_s, settings.worker_binding_ttl_s / 4),
        ),
        budget=BodyBudget(settings.body_budget()),
        header_timeout=HeaderTimeout(settings.header_timeout_s),
        reads=asyncio.Semaphore(settings.read_concurrency),
        lb=LbRouter(
            LbWorkers(redis),
            clock_ms=store.clock,
            hold_s=settings.lb_hold_s,
            max_held=settings.lb_max_held,
            fast_s=settings.lb_health_fast_s,
            calm_s=settings.lb_health_calm_s,
            on_hold=meters.observe_lb_hold,
            warmer=LbWarmer(LbWorkers(redis), store, endpoints, clock_ms=store.clock),
        ),
    )
    if key_file is not None:
        key_file.load()  # a broken key file stops the gateway before it serves
    gw.notifier.on_registry_change = gw.endpoints.invalidate
    gw.notifier.on_key_change = gw.auth.forget
    gw.notifier.on_activity = gw.activity.mark
    gw.notifier.on_subscribed = gw.activity.missed_events
    gw.notifier.on_lb_change = gw.lb.reload
    return gw


async def livez(request: web.Request) -> web.Response:
    """The process is up (for liveness probes)."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Redis answers and the event subscription is live (for readiness probes)."""
    gw = request.app[GATEWAY]
    await gw.store.redis.ping()
    if not gw.notifier.connected.is_set():
        return json_response({"error": "event subscription not connected"}, status=503)
    return json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics (see `gateway.metrics` for the names and the access rule)."""
    gw = request.app[GATEWAY]
    return await serve_metrics(
        request, gw.metrics, gw.store, gw.registry, gw.settings.metrics_token, gw.activity
    )


def busiest_first(*tables: web.RouteTableDef) -> list[web.AbstractRouteDef]:
    """The routes of `tables` in the order to add them: the `BUSIEST` operations first (in
    that order), then the others as they were declared, then the trailing-slash variants.
    No two routes match the same path, so the order changes only how soon one is found."""

    def rank(route: web.AbstractRouteDef) -> tuple[bool, int]:
        path = getattr(route, "path", "")  # a static route (none so far) has a prefix instead
        op = path.split("/")[3] if path.startswith("/v2/") else ""
        busy = BUSIEST.index(op) if op in BUSIEST else len(BUSIEST)
        return path.endswith("/"), busy

    return sorted((route for table in tables for route in table), key=rank)


def _application(gw: Gateway, *, cors: bool = False, lb_host: bool = False) -> web.Application:
    """An application over `gw` with the shared middlewares and the probes; `cors`: answer
    browsers from `settings.cors_allow_origins`; `lb_host`: serve the load-balancing host
    form under `settings.lb_domain` (both: the job API's application only)."""
    middlewares = [
        metrics_middleware(gw.metrics),
        error_middleware,
        resources_middleware(gw.budget, gw.header_timeout),
    ]
    if lb_host and gw.settings.lb_domain:
        middlewares.append(lb_proxy.lb_host_middleware(gw.settings.lb_domain))
    cors = cors and bool(gw.settings.cors_allow_origins)
    if cors:
        cors_mw = cors_middleware(gw.settings.cors_allow_origins, gw.settings.lb_domain)
        middlewares.insert(1, cors_mw)
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY)
    if cors:
        app.on_response_prepare.append(add_cors_headers)
    app[GATEWAY] = gw
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    return app


def create_worker_app(gw: Gateway) -> web.Application:
    """The worker API alone, served on `settings.worker_port` beside the application of
    `create_app` (whose gateway, Redis client and background tasks it shares)."""
    app = _application(gw)
    app.add_routes(busiest_first(worker_api.routes))
    return app


def create_app(settings: Settings, *, redis: Redis | None = None) -> web.Application:
    """The gateway as an aiohttp application; owns its Redis client unless one is given.

    It serves the worker API too unless `settings.worker_port` is set: then the worker
    routes answer 404 here and only `create_worker_app(app[GATEWAY])` serves them."""
    owned = redis is None
    client = redis
    if client is None:
        client = connect(settings)
    gw = build_gateway(settings, client)
    app = _application(gw, cors=True, lb_host=True)
    tables = [client_api.routes, batch_api.routes, openai_api.routes, lb_proxy.routes]
    if not settings.worker_port:
        tables.append(worker_api.routes)
    app.add_routes(busiest_first(*tables))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi_json)
    if not settings.auth:
        log.warning("LOCKGATE_AUTH=false: every request is let in without a key")

    async def background(_app: web.Application) -> AsyncIterator[None]:
        gw.notifier.start()
        tasks = {
            asyncio.create_task(run_background(gw), name="lockgate-background"),
            asyncio.create_task(gw.limiter.run(), name="lockgate-limits"),
            asyncio.create_task(gw.header_timeout.run(), name="lockgate-header-timeout"),
            asyncio.create_task(gw.lb.run(), name="lockgate-lb-requests"),
            asyncio.create_task(run_batches(gw), name="lockgate-batches"),
        }
        if gw.auth.key_file is not None:
            tasks.add(asyncio.create_task(gw.auth.key_file.watch(), name="lockgate-key-file"))
        yield
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=5)
        await gw.lb.close()
        await gw.notifier.close()
        if owned:
            await client.aclose()

    app.cleanup_ctx.append(background)
    return app
