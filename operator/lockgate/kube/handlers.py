"""kopf handlers: thin, typed, each delegating to `kube.reconcile`.

kopf keeps its own bookkeeping in annotations under `operator.lockgate.dev/` (see
`configure`): the CRD's status schema declares only lockgate's fields, and Kubernetes prunes
anything else. The prefix is not `lockgate.dev/` itself: kopf leaves annotations under its
own prefix out of its diffs, and a change of `lockgate.dev/scaler` must reach the handler.
Handlers return nothing for the same reason (kopf would store results under status).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import time
from typing import Any

import kopf

from lockgate.kube import builds as build_jobs
from lockgate.kube import reconcile as rc
from lockgate.kube import watched
from lockgate.kube.crds import ENDPOINT, GROUP, TEMPLATE, VERSION
from lockgate.kube.placement import on_fallback
from lockgate.kube.scale_first import key_check_due
from lockgate.kube.status import rest_confirmed, resync_may_wait, shows

# Its own generator: the global `random` is shared with every thread of the process.
_RANDOM = random.Random()

ENDPOINTS = (GROUP, VERSION, ENDPOINT.plural)
TEMPLATES = (GROUP, VERSION, TEMPLATE.plural)
FINALIZER = f"{GROUP}/cleanup"  # held only for the Redis cleanup of a deleted Endpoint
KOPF_PREFIX = f"operator.{GROUP}"  # kopf's own annotations, marked as such by kopf


class DaemonEnds(logging.Filter):
    """Drops kopf's line for each resync daemon's end ("Daemon 'resync_endpoint'
    succeeded.", INFO, and posted as an Event on the Endpoint): the daemon only returns when
    kopf stops it (the Endpoint deleted, or the operator stopping, where a thousand
    Endpoints made a thousand lines), so its end is no news; the daemons count their ends
    (`Context.resyncs_ended`) for one line of the operator's own (`apps.operator.run`).
    Failures are not touched: a daemon that fails, or lets a cancel through, is still
    logged by kopf as such. For `logging.getLogger("kopf.objects")` (`quiet_daemon_ends`)."""

    LINE = "Daemon 'resync_endpoint' succeeded."

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and record.getMessage() == self.LINE)


def quiet_daemon_ends() -> None:
    """Put `DaemonEnds` on kopf's per-object logger, once per process."""
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, DaemonEnds) for f in objects.filters):
        objects.addFilter(DaemonEnds())


def progress_storage() -> kopf.AnnotationsProgressStorage:
    """Where kopf records handler progress."""
    return kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)


def diffbase_storage() -> kopf.AnnotationsDiffBaseStorage:
    """Where kopf keeps the last handled spec, labels and annotations it diffs against."""
    return kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX, key="last-handled-configuration")


def _ctx(memo: Any) -> rc.Context:
    return memo.lockgate


def _indexed(memo: Any) -> rc.Context:
    """The context, its watched workers marked filled: kopf runs an Endpoint's handlers
    only once every index is."""
    ctx = _ctx(memo)
    if ctx.workers is not None:
        ctx.workers.ready = True
    return ctx


@kopf.index(*watched.DEPLOYMENTS, labels=watched.WORKER_LABELS)
def worker_deployments(body: kopf.Body, **_: Any) -> dict | None:
    """Worker Deployments by (namespace, endpoint): `kube.watched`."""
    return watched.index_entry(body)


@kopf.index(*watched.PODS, labels=watched.WORKER_LABELS)
async def worker_pods(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict | None:
    """Worker pods by (namespace, endpoint): `kube.watched`. Each pod as delivered (kopf
    indexes every event but deletions) also goes to the scaler of this replica's term, if
    any (`Context.on_worker_pod`: a load-balancing worker is routed as it starts). Here
    rather than in an `on.event` handler, which kopf would log a line for per pod event;
    async, so that it runs in the event loop, not kopf's thread pool."""
    seen = _ctx(memo).on_worker_pod
    if seen is not None:
        seen(dict(body))
    return watched.index_entry(body)


@kopf.on.startup()
def configure(
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    worker_deployments: kopf.Index,
    worker_pods: kopf.Index,
    **_: Any,
) -> None:
    """Every kopf setting of the operator, in one place; the worker indices (live, empty
    until kopf has listed them) handed to the context."""
    ours = _ctx(memo).settings
    _ctx(memo).workers = watched.WatchedWorkers(worker_deployments, worker_pods)
    # Only the operator's worker objects are watched, filtered by the API server.
    settings.watching.label_selectors[watched.DEPLOYMENTS] = watched.WORKERS
    settings.watching.label_selectors[watched.PODS] = watched.WORKERS
    settings.watching.label_selectors[build_jobs.BUILD_JOBS] = build_jobs.BUILD_JOB_SELECTOR
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = progress_storage()
    settings.persistence.diffbase_storage = diffbase_storage()
    settings.peering.standalone = not ours.peering
    settings.peering.mandatory = ours.peering
    settings.peering.name = ours.peering_name
    settings.posting.reporting_component = "lockgate-operator"
    settings.watching.server_timeout = 300  # s; re-list now and then, whatever the proxies do
    settings.watching.client_timeout = 330


@kopf.on.cleanup()
async def stop_beside(memo: kopf.Memo, **_: Any) -> None:
    """The scaler and an in-process management API stop first: kopf then finds no task it
    did not start still running, and exits at once rather than after 5 s."""
    await _ctx(memo).stop_beside()


@kopf.on.login()
def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """kopf uses the same credentials as the operator's own API client."""
    return _ctx(memo).cluster.connection_info()


@kopf.on.create(*ENDPOINTS)
async def create_endpoint(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    patch.status.update(await rc.reconcile(body, _indexed(memo), created=True))


@kopf.on.resume(*ENDPOINTS)
@kopf.on.update(*ENDPOINTS)
async def reconcile_endpoint(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    patch.status.update(await rc.reconcile(body, _indexed(memo)))


@kopf.daemon(*ENDPOINTS, cancellation_timeout=5)
async def resync_endpoint(
    body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: kopf.Logger, **_: Any
) -> None:
    """Level-based resync: status counts, and repairs (a Redis restart, a deleted object).
    Each Endpoint's timer has a random phase and a ±10% jittered period, so a thousand
    Endpoints' resyncs spread over the period instead of coming all at once. An Endpoint
    at rest (its status: Ready, no worker, no job) is resynced every `resync_rest_s` only,
    as long as its registry entry is there (the ids every resync shares, read once per half
    period: a Redis loss is repaired within 1.5 periods) and its worker Deployment, as
    kopf watches it, agrees (`status.rest_confirmed`), and the status shows the conditions
    the scaler last reported (a report lost to a race is written within a period). No call
    is made in between: `body` is kopf's live view, so a status the scaler changes (a
    scale-up) ends the rest at the next period, and so does a Deployment deleted, scaled or
    newly observed; workers on a fallback GPU type do not rest (the first type is retried
    at a reconcile). An Endpoint with no status yet is its create handler's (kopf retries
    it): no resync doubles that work while a thousand are being created. A resync waits
    while woken endpoints wait for their scale patch (`kube.scale_first`), and checks the
    worker-key Secret only when a worker pod cannot create its container (`key_check_due`):
    a wake-up makes no Secret call.

    kopf stops the daemon (the operator stopping, the Endpoint deleted) by setting
    `stopped`, then, as it sleeps, by cancelling it (`cancellation_timeout`): that cancel is
    its end, returned from quietly (kopf logs a WARNING for each cancel that escapes)."""
    ctx = _indexed(memo)
    try:
        await _resync(ctx, body, stopped, logger)
    except asyncio.CancelledError:
        if not stopped:
            raise  # not kopf stopping the daemon: let it through
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # the cancel asked the daemon to end: it has
    ctx.resyncs_ended += 1  # told in one line at the operator's stop (`DaemonEnds`)


async def _resync(
    ctx: rc.Context, body: kopf.Body, stopped: kopf.DaemonStopped, logger: kopf.Logger
) -> None:
    """`resync_endpoint`'s loop, until `stopped`."""
    period, rest = ctx.settings.resync_s, ctx.settings.resync_rest_s
    delay = _RANDOM.uniform(0.1, 1.0) * period
    last = time.monotonic()
    while not stopped:
        # A plain sleep, ended by kopf's cancel when it stops the daemon (above):
        # `stopped.wait()` costs a task and a timeout each time (at a thousand Endpoints,
        # more than half of the operator's idle CPU).
        await asyncio.sleep(delay)
        delay = period * _RANDOM.uniform(0.9, 1.1)
        if stopped:
            return
        try:
            status = body.get("status")
            if not status:
                continue
            waits = resync_may_wait(status, time.monotonic() - last, rest)
            if (
                waits
                and _rest_holds(ctx, body, status)
                and await rc.still_registered(ctx, body)
                and not await rc.batch_pool_due(ctx, body)
            ):
                continue
            last = time.monotonic()
            await ctx.scale_first.clear()  # a wake-up's scale patch before this resync's writes
            if stopped:
                return
            check_key = key_check_due(body.get("status"), _watched_pods(ctx, body))
            await rc.refresh(ctx, body, steady=True, rest=not check_key)
        except kopf.TemporaryError as err:
            logger.warning(f"resync failed, will retry: {err}")


def _watched_pods(ctx: rc.Context, body: kopf.Body) -> list[Any] | None:
    """The Endpoint's worker pods as kopf's index has them; None before it is filled."""
    if ctx.workers is None or not ctx.workers.ready:
        return None
    meta = body["metadata"]
    return ctx.workers.pods_of(meta.get("namespace", ""), meta["name"])


def _rest_holds(ctx: rc.Context, body: kopf.Body, status: Any) -> bool:
    """Whether what the operator watches agrees with an at-rest status (no call made): the
    worker Deployment (`status.rest_confirmed`), the scaler's last conditions shown, and no
    fallback GPU type whose first type a reconcile would retry. Without kopf's index, yes."""
    if ctx.workers is None or not ctx.workers.ready:
        return True
    meta = body["metadata"]
    deployment = ctx.workers.deployment(meta.get("namespace", ""), meta["name"])
    reported = [c for c in (ctx.scaling.get(meta["name"]), ctx.pods.get(meta["name"])) if c]
    gpu_types = (body.get("spec") or {}).get("gpuTypeIds") or []
    return (
        rest_confirmed(status, deployment)
        and shows(status, reported)
        and not on_fallback(gpu_types, meta.get("annotations"))
    )


@kopf.on.delete(*ENDPOINTS)
async def clean_up_endpoint(
    name: str, namespace: str, uid: str, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    removed = await rc.clean_up(_ctx(memo), name, namespace, uid)
    logger.info(f"registry entry, worker key and {removed} job(s) of {name!r} removed")


@kopf.on.event(*TEMPLATES)
def track_template(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Keep each Template as the watch delivers it, for the Endpoints' resyncs (kopf runs
    event handlers before the change handlers below, so those see it too)."""
    meta = body.get("metadata") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    if event.get("type") == "DELETED":
        _ctx(memo).templates.pop(key, None)
    else:
        _ctx(memo).templates[key] = dict(body)


@kopf.on.create(*TEMPLATES)
@kopf.on.update(*TEMPLATES)
@kopf.on.delete(*TEMPLATES, optional=True)
async def roll_template_users(
    name: str, namespace: str, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    """A Template change re-renders (and so rolls) every Endpoint that uses it."""
    users = await rc.template_users(_ctx(memo), namespace, name)
    for endpoint in users:
        await rc.refresh(_ctx(memo), endpoint)
    if users:
        logger.info(f"Template {name!r} applied to {len(users)} Endpoint(s)")


async def follow_build_job(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A build Job changed: its build's record follows (`kube.builds.on_job`)."""
    ctx = _ctx(memo)
    try:
        await build_jobs.on_job(
            ctx.cluster, ctx.build_store(), ctx.settings, dict(body), ctx.build_following(),
            ctx.canary_tests(),
        )  # fmt: skip
    except (rc.ClusterError, rc.RedisError) as err:
        raise kopf.TemporaryError(f"build Job: {err}", delay=rc.RETRY_DELAY_S) from err


def registry(*, builds: bool) -> kopf.OperatorRegistry:
    """The handlers of one operator run: this module's (kopf's default registry), copied,
    and with `builds` the build Jobs' watch, which only operators with `builds_registry`
    set may have (the operator's RBAC grants Jobs only then; a watch refused would retry
    for ever). A copy, so a run with builds leaves no Jobs watch to a later run in the
    same process (tests run several operators in one)."""
    chosen = copy.deepcopy(kopf.get_default_registry())
    if builds:
        kopf.on.event(*build_jobs.BUILD_JOBS, registry=chosen)(follow_build_job)
    return chosen
