"""`lockgate operator`: kopf reconciling Endpoints and Templates and the scaler, in one
event loop; with `--manage-port`, the management API too (the chart serves it apart)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
from aiohttp import web

from lockgate.apps import manage
from lockgate.gateway.notify import Notifier
from lockgate.kube import handlers
from lockgate.kube.cluster import cluster_for
from lockgate.kube.leader import LeaderElector
from lockgate.kube.reconcile import Context
from lockgate.kube.scaler import ScalingLoop
from lockgate.kube.settings import OperatorSettings

Flag = asyncio.Event | threading.Event | None
log = logging.getLogger("lockgate.operator")


def settings_from_args(args: argparse.Namespace) -> OperatorSettings:
    """Environment settings, with the command line's flags on top."""
    overrides: dict[str, Any] = {}
    if getattr(args, "namespace", None):
        overrides["namespaces"] = args.namespace
    if getattr(args, "manage_port", None) is not None:
        overrides["manage_port"] = args.manage_port
    return OperatorSettings(**overrides)


async def start_manage_api(ctx: Context) -> web.AppRunner:
    """Serve `/v1/endpoints` beside kopf (development and tests; the chart runs
    `lockgate manage` apart, with its own ServiceAccount)."""
    return await manage.start(ctx.settings, ctx.cluster, ctx.registry)


def wake_on_events(loop: ScalingLoop, notifier: Notifier) -> None:
    """A `q:` event wakes the loop; an `a:` or `r:` event ends its rest, and so does the
    subscription (re)connecting (events published while it was down are lost); a `u:`
    event (a worker marked unhealthy) has its pod replaced."""
    notifier.on_queued = loop.job_queued
    notifier.on_activity = loop.stir
    notifier.on_subscribed = loop.events_resumed
    notifier.on_unhealthy = loop.worker_marked  # its pod is replaced


async def scale(ctx: Context, session: aiohttp.ClientSession) -> None:
    """One leadership term of the scaler: a fresh `ScalingLoop` until cancelled; what it
    learnt (stabilisation windows, `MetricsAvailable` readings) goes with it.

    A job queued onto an endpoint's empty queues (the store's `q:` event) wakes the loop at
    once: at zero workers the first one starts without waiting for the next tick. A worker
    new to an endpoint or a registry change (`a:`, `r:`) ends a rest (`ScalingLoop.stir`)."""
    loop = ScalingLoop(ctx, session)
    notifier = Notifier(ctx.redis)
    wake_on_events(loop, notifier)
    notifier.start()
    ctx.on_worker_pod = loop.worker_pod  # a load-balancing worker is routed as it starts
    try:
        await loop.run()
    finally:
        ctx.on_worker_pod = None
        await notifier.close()
        ctx.scaling.clear()  # a former leader's reconciles carry the new leader's
        ctx.pods.clear()


@contextlib.asynccontextmanager
async def scaling(ctx: Context, elector: LeaderElector | None = None) -> AsyncIterator[None]:
    """The scaler beside kopf (unless `scale_interval_s` is 0), running only while this
    replica holds the scaler Lease; on exit it stops and the Lease is released."""
    if not ctx.settings.scale_interval_s:
        yield
        return
    elector = elector or LeaderElector.for_scaler(ctx.cluster, ctx.settings)
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(
            elector.run(lambda: scale(ctx, session)), name="lockgate-scaler-election"
        )

        async def stop() -> None:
            task.cancel()
            await asyncio.wait({task}, timeout=5)

        ctx.beside.append(stop)  # stopped by kopf's cleanup, before kopf's own shutdown
        try:
            yield
        finally:
            await stop()


async def run(
    settings: OperatorSettings,
    *,
    api_client: Any = None,
    stop_flag: Flag = None,
    ready_flag: Flag = None,
) -> None:
    """Run until `stop_flag` is set (or a signal, in the main thread)."""
    ctx = Context.open(settings, cluster_for(settings, api_client))
    chosen = handlers.registry(builds=bool(settings.builds_registry))  # + build Jobs
    if settings.manage_port:
        ctx.beside.append((await start_manage_api(ctx)).cleanup)
    port = settings.liveness_port
    liveness = f"http://0.0.0.0:{port}/healthz" if port else None
    handlers.quiet_daemon_ends()  # a stop: one line, not one per Endpoint
    try:
        async with scaling(ctx):
            await kopf.operator(
                registry=chosen,
                clusterwide=not settings.namespaces,
                namespaces=settings.namespaces,
                liveness_endpoint=liveness,
                memo=kopf.Memo(lockgate=ctx),
                stop_flag=stop_flag,
                ready_flag=ready_flag,
            )
    finally:
        await ctx.stop_beside()  # unless kopf's cleanup did already
        await ctx.close()
        log.info("operator stopped: %d Endpoint resync(s) ended", ctx.resyncs_ended)


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    log_format = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL
    kopf.configure(log_format=log_format)
    asyncio.run(run(settings))
    return 0
