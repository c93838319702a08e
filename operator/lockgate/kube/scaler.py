"""The operator's scaler: one loop for every Endpoint, about once a second.

Each tick reads the gateway's `/metrics` once, lists the worker Deployments and pods of
each namespace once, then for each registered endpoint lets an `Autoscaler` decide and
apply through a `DeploymentPool`. Endpoints are decided concurrently (as many at once as
the cluster client has connections), those with jobs waiting or running first, and an
endpoint's decision is its own task: a tick waits for them at most one interval, and an
endpoint whose last decision is still being applied (a first sighting's status refresh,
a slow API call) is skipped until it is done, so no endpoint's reaction waits on
another's API round trips. Each endpoint decides, and scales, before it reports its
conditions. When `/metrics` cannot be read, or does not report an
endpoint, its worker count is held (missing data never scales anything to zero) and the
Endpoint's `MetricsAvailable` condition says why. Changes of the count are Events on the
Endpoint, and its `status.workers.desired/ready` are patched, in a lane of their own a few
at a time (each endpoint's in order), so a burst of scale-ups writes every count first.
A load-balancing endpoint's pods are written to Redis for the gateways to route to
(`kube.lb_pods`: on a change only; a worker that just started, or a pod being deleted, is
written from kopf's watch event, `worker_pod`, not a tick later), and a scale-down takes
its victims out of routing before they go.

The operator itself sets replicas only when it creates a Deployment (`workersMin`);
after that only this loop writes them, through the scale subresource, unless the Endpoint
carries `lockgate.dev/scaler: external` (KEDA or an HPA owns the count): then the loop
still reports `MetricsAvailable` and marks busy pods, and writes no replica count.

An endpoint *at rest* (no pod, its Deployment at zero, nothing queued or running, no live
worker, `workersMin` 0, its conditions as last reported) has nothing to decide: it gets no
task, no API call and no Redis call. While every endpoint is at rest the loop ticks every
`scale_rest_interval_s` instead of every `scale_interval_s`: a job queued onto empty queues
(the `q:` event) wakes it at once, resting or not, for a decision of that endpoint alone
read from its store snapshot (`tick_queued`: no scrape of every endpoint's series on a cold
start's path), and a worker new to an endpoint or a registry change (`a:`, `r:`) ends a
rest; so a thousand idle endpoints cost the operator almost nothing.

Of several operator replicas only one runs this loop: the holder of the scaler Lease
(`kube.leader`; `apps.operator.scaling` starts a fresh loop for each term and cancels it when
the Lease is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp
import kopf

from lockgate.kube import reconcile as rc
from lockgate.kube.cluster import ClusterError
from lockgate.kube.deployment_pool import DeploymentPool
from lockgate.kube.events import endpoint_event
from lockgate.kube.lb_pods import LbPods, parked_until, wanted_workers
from lockgate.kube.manifests.names import Owner, deployment_name
from lockgate.kube.manifests.rollout import pod_version
from lockgate.kube.podstates import pod_ready, pod_starts, pod_states, pull_errors, worker_starts
from lockgate.kube.registry_record import EXTERNAL_SCALER
from lockgate.kube.scale_first import Report
from lockgate.kube.status import METRICS_AVAILABLE, Check, same_status, shows
from lockgate.kube.watched import (
    ENDPOINT_LABEL,
    WORKERS,
    endpoint_worker_labels,
    endpoint_workers,
)
from lockgate.kube.worker_health import WorkerHealth, worst
from lockgate.models import EndpointType
from lockgate.models.registry_entry import RegistryEntry
from lockgate.scaling.autoscaler import Autoscaler
from lockgate.scaling.crashloop import (
    CrashCount,
    counted,
    crash_loop,
    held,
    restarted,
    unhealthy_starts,
)
from lockgate.scaling.decision import Decision, EndpointMetrics, Limits
from lockgate.scaling.readings import MetricsUnreadable, from_snapshot, parse_metrics
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.lb_workers import LbWorkers

log = logging.getLogger("lockgate.scaler")

REPORTS_AT_ONCE = 4  # Events and status writes in flight at once (`ScalingLoop._report`)
# Endpoints of a namespace needing a look that are read one by one (its Deployment by
# name, its pods by a label-selected list, all together) rather than by listing every
# worker object of the namespace.
READ_ONE_BY_ONE = 8

Obj = Mapping[str, Any]


async def fetch_metrics(
    session: aiohttp.ClientSession, url: str, *, token: str = "", timeout_s: float = 2.0
) -> dict[str, EndpointMetrics]:
    """Every endpoint's reading from one scrape; `MetricsUnreadable` when it fails."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.get(url, headers=headers, timeout=timeout) as response:
            if response.status != 200:
                raise MetricsUnreadable(f"{url} answered HTTP {response.status}")
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as err:
        raise MetricsUnreadable(f"{url}: {err or type(err).__name__}") from err
    # In a thread: at a thousand endpoints the parse is tens of ms the loop keeps serving.
    return await asyncio.to_thread(parse_metrics, text)


def metrics_check(endpoint_id: str, readings: Mapping[str, Any], error: str | None) -> Check:
    """The `MetricsAvailable` condition of one endpoint after a scrape."""
    holding = "the worker count is held until metrics return"
    if error is not None:
        return Check(METRICS_AVAILABLE, False, "GatewayUnreachable", f"{error}; {holding}")
    if endpoint_id not in readings:
        message = f"the gateway's /metrics does not report this endpoint; {holding}"
        return Check(METRICS_AVAILABLE, False, "EndpointNotReported", message)
    return Check(METRICS_AVAILABLE, True, "Scraped", "the scaler reads the gateway's /metrics")


def externally_scaled(entry: RegistryEntry) -> bool:
    """Whether another scaler owns the endpoint's worker count (its registry entry says)."""
    return entry.scaler == EXTERNAL_SCALER


def at_rest(
    entry: RegistryEntry,
    deployment: Obj | None,
    pods: list[Obj],
    metrics: EndpointMetrics | None,
) -> bool:
    """Whether an endpoint has nothing for the scaler to decide: no pod, a Deployment asked
    for and running zero replicas, a reading with nothing queued or running and no live
    worker, no minimum and no count set from outside (a decision would keep it at zero)."""
    if pods or deployment is None or metrics is None or externally_scaled(entry):
        return False
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    at_zero = not spec.get("replicas") and not status.get("replicas")
    idle = not has_demand(metrics) and not (metrics.workers_idle or metrics.workers_running)
    unset = not entry.workersMin and not entry.replicas
    return at_zero and idle and not metrics.worker_jobs and unset


def load_balanced(entry: RegistryEntry) -> bool:
    """Whether the endpoint is a load-balancing one (`type: LB`): its pods are routed to."""
    return entry.type == EndpointType.LB


def busy_members(members: Iterable[str], worker_jobs: Mapping[str, int]) -> list[str]:
    """The workers holding at least one job."""
    return [w for w in members if worker_jobs.get(w, 0) > 0]


def has_demand(metrics: EndpointMetrics | None) -> bool:
    """Jobs (or load-balanced requests) wait or run at the endpoint: its decision goes
    first."""
    if metrics is None:
        return False
    jobs = metrics.queued + metrics.queued_low + metrics.in_progress
    return jobs + metrics.requests_held + metrics.requests_in_flight > 0


def healthy_pods(pods: Iterable[Obj], metrics: EndpointMetrics | None) -> int:
    """Pods whose worker works: live at the gateway (it calls the worker API), or, without
    a reading, ready."""
    if metrics is not None:
        names = {p["metadata"]["name"] for p in pods}
        return len(names & set(metrics.worker_jobs))
    return len([p for p in pods if pod_ready(p)])


def as_selected(deployment: Obj | None, endpoint_id: str) -> list[Obj]:
    """The endpoint's worker Deployment read by name, as the label-selected list of it
    would give it: itself when it carries the endpoint's worker labels, else nothing."""
    labels = ((deployment or {}).get("metadata") or {}).get("labels") or {}
    wanted = endpoint_worker_labels(endpoint_id)
    return [deployment] if deployment and all(labels.get(k) == v for k, v in wanted.items()) else []


def by_endpoint(objects: list[Obj]) -> dict[str, list[Obj]]:
    grouped: dict[str, list[Obj]] = defaultdict(list)
    for obj in objects:
        endpoint = (obj["metadata"].get("labels") or {}).get(ENDPOINT_LABEL)
        if endpoint:
            grouped[endpoint].append(obj)
    return grouped


class ScrapeHealth:
    """Hysteresis for `/metrics` failures: a scrape that fails now and then (a slow
    gateway, a restart) holds every count for that tick without a word, instead of turning
    every endpoint's `MetricsAvailable` False and back (at a thousand endpoints, two
    thousand Events and status patches for one timeout). Failures that last `grace_s` are
    reported."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.failing_since: float | None = None

    def seen(self, error: str | None, now: float) -> tuple[bool, str | None]:
        """After a scrape: (whether to decide this tick, the error to report)."""
        if error is None:
            self.failing_since = None
            return True, None
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since < self.grace_s:
            return False, None
        return True, error


@dataclass
class EndpointState:
    """What the loop keeps of one endpoint between ticks (`ScalingLoop.endpoints`): an
    endpoint no longer registered is forgotten whole."""

    scaler: Autoscaler | None = None  # its autoscaler, while the loop owns its count
    pods_seen: set[str] = field(default_factory=set)  # its pods at the last tick
    # image -> the registry's last answer to a failed pull (kube.podstates)
    pull_errors: dict[str, str] = field(default_factory=dict)
    # The crash-loop rule (`scaling.crashloop`): its failed starts in a row, and whether its
    # registry entry held a crash loop as last seen (one gone since was cleared: a release,
    # a restart).
    crashes: CrashCount = field(default_factory=CrashCount)
    looping: bool = False


class ScalingLoop:
    """Scales every registered Endpoint of the watched namespaces; state lives here."""

    def __init__(
        self,
        ctx: rc.Context,
        session: aiohttp.ClientSession,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.session = session
        self.clock = clock
        self.endpoints: dict[str, EndpointState] = {}  # what is kept of each endpoint
        self.wakeup = asyncio.Event()  # set: tick now instead of at the next interval
        self.busy: dict[str, asyncio.Task] = {}  # endpoint -> its decision being applied
        self.resting = False  # the last tick found every endpoint at rest
        # Endpoints whose `q:` event came since the last tick, and whether any other sign
        # (`stir`) did: a wake-up by jobs alone decides just those endpoints (`tick_queued`)
        # and leaves the others to the full tick, due at `full_due` (self.clock()).
        self.queued: set[str] = set()
        self.stirred = False
        self.full_due = 0.0
        self.scrapes = ScrapeHealth(ctx.settings.metrics_grace_s)
        self._lb_pods: LbPods | None = None  # LB endpoints' pods, as routed (made on use)
        self._health: WorkerHealth | None = None  # marked workers, startup deadlines
        self.routing: set[asyncio.Task] = set()  # `worker_pod`'s registrations
        self.slots = asyncio.Semaphore(ctx.settings.kube_concurrency)  # decided at once
        # Events and status writes go through a lane of their own, a few at a time, each
        # endpoint's in order: a burst's scale writes are not queued behind them.
        self.reports = asyncio.Semaphore(REPORTS_AT_ONCE)
        self.reporting: dict[str, asyncio.Task] = {}  # endpoint -> its last report
        # endpoint -> its report not yet begun: a later one is merged into it
        self.unsent: dict[str, Report] = {}
        # Wake-ups waiting for their decision: reports wait for them (`kube.scale_first`).
        self.first = ctx.scale_first
        # When this term began, for the crash-loop rule (`EndpointState.crashes`): unhealthy
        # marks older than it were counted, or not, by an earlier term.
        self.began_ms = time.time_ns() // 1_000_000  # epoch ms, as the store's clock

    def state(self, endpoint_id: str) -> EndpointState:
        """What is kept of the endpoint (made on first use)."""
        state = self.endpoints.get(endpoint_id)
        if state is None:
            state = self.endpoints[endpoint_id] = EndpointState()
        return state

    @property
    def lb_pods(self) -> LbPods:
        """The routing records of load-balancing endpoints' pods, kept for this term."""
        if self._lb_pods is None:
            self._lb_pods = LbPods(LbWorkers(self.ctx.redis), clock=self.clock)
        return self._lb_pods

    @property
    def health(self) -> WorkerHealth:
        """Marked workers' pods to replace and startup deadlines, kept for this term."""
        if self._health is None:
            lb = self.lb_pods.lb
            self._health = WorkerHealth(self.ctx.cluster, self.ctx.jobs, lb, now=rc.now)
        return self._health

    def worker_marked(self, endpoint_id: str) -> None:
        """A worker of the endpoint was marked unhealthy (`u:`): its pod is replaced at the
        endpoint's next decision, at once when at rest."""
        self.health.marked(endpoint_id)
        self.stir(endpoint_id)

    def events_resumed(self) -> None:
        """The event subscription (re)connected: what it missed is looked at again (every
        endpoint's marked workers are read at its next decision), and a rest ends."""
        if self._health is not None:  # else nothing was read yet this term
            self._health.marked(None)
        self.stir()

    async def run(self) -> None:
        """Tick every `scale_interval_s`, or at once when `wakeup` is set, until cancelled;
        a failed tick is logged and the next one tries again."""
        try:
            while True:
                self.wakeup.clear()  # a wake-up during the tick below starts the next one
                try:
                    if self._targeted():
                        await self.tick_queued()
                    else:
                        await self.tick()
                        self.full_due = self.clock() + self._interval()
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    log.warning("scaling tick failed: %s", err)
                raise_if_cancelled()
                with contextlib.suppress(TimeoutError):
                    wait = max(0.0, self.full_due - self.clock())
                    await asyncio.wait_for(self.wakeup.wait(), wait)
        finally:
            await self.stop()

    def _interval(self) -> float:
        settings = self.ctx.settings
        if self.resting:
            return max(settings.scale_interval_s, settings.scale_rest_interval_s)
        return settings.scale_interval_s

    def _targeted(self) -> bool:
        """Whether this wake-up decides only the endpoints whose jobs were just queued: the
        full tick is not due yet, and no other sign ended a rest."""
        return (
            bool(self.queued)
            and self.clock() < self.full_due
            and not (self.resting and self.stirred)
        )

    def stir(self, endpoint_id: str | None = None) -> None:
        """A sign of activity at an endpoint (a new worker, a registry change), or at any
        (None): while at rest, tick now; otherwise the next tick, an interval away, sees it
        anyway (a burst of such signs, e.g. a thousand Endpoints created, does not make
        ticks back to back). A sign at an endpoint with a job just queued is read with it."""
        if endpoint_id is None or endpoint_id not in self.queued:
            self.stirred = True
        if self.resting:
            self.wakeup.set()

    def job_queued(self, endpoint_id: str) -> None:
        """A job queued onto the endpoint's empty queues (`q:`): tick now; until its
        decision is applied, reports wait (`ScaleFirst`)."""
        self.queued.add(endpoint_id)
        self.first.waking(endpoint_id)
        self.wakeup.set()

    def worker_pod(self, pod: Obj) -> None:
        """A worker pod as kopf's watch delivered it: a load-balancing worker that just
        started is registered for the gateways now, and one being deleted taken out of
        routing (`LbPods.seen`); the next tick's list comes up to an interval later (while
        a request is held for the new one, or routed to the leaving one)."""
        endpoint = (pod["metadata"].get("labels") or {}).get(ENDPOINT_LABEL)
        if not endpoint or self._lb_pods is None or endpoint not in self._lb_pods.known:
            return  # not an LB endpoint this term has synced: the tick decides
        task = asyncio.get_running_loop().create_task(
            self._route(endpoint, pod), name=f"routing-{endpoint}"
        )
        self.routing.add(task)
        task.add_done_callback(self.routing.discard)

    async def _route(self, endpoint_id: str, pod: Obj) -> None:
        try:
            await self.lb_pods.seen(endpoint_id, pod)
        except Exception as err:  # the next tick writes it
            log.warning("routing a pod of %s failed: %s", endpoint_id, err)

    def _ours(self, entry: RegistryEntry) -> bool:
        watched = self.ctx.settings.namespaces
        namespace = entry.namespace
        return bool(namespace and entry.uid) and (not watched or namespace in watched)

    async def _read(self) -> tuple[dict[str, EndpointMetrics], str | None]:
        settings = self.ctx.settings
        try:
            readings = await fetch_metrics(
                self.session, settings.scrape_url(), token=settings.metrics_token,
                timeout_s=settings.metrics_timeout_s,
            )  # fmt: skip
        except MetricsUnreadable as err:
            return {}, str(err)
        return readings, None

    async def tick(self) -> None:
        """One decision for every endpoint not still busy with its last one; returns when
        they are applied, or after one interval (the rest go on in their own tasks)."""
        self.queued.clear()  # read with the rest
        self.stirred = False
        entries = await self.ctx.registry.list_endpoints()
        ours = {ep: e for ep, e in entries.items() if self._ours(e)}
        readings, error = await self._read()
        decide, error = self.scrapes.seen(error, self.clock())
        if not decide:
            log.info("scaler: /metrics unreadable; every count held for now")
            return
        self.resting = not await self._decide_each(ours, readings, error) and not self.busy
        self._forget(set(ours))
        self.first.keep(set(self.busy) | self.queued)  # the others: nothing to decide

    async def tick_queued(self) -> None:
        """Decide only the endpoints whose jobs were just queued (`q:` events), each read
        from its store snapshot: the reading the gateway would publish for it now
        (`readings.from_snapshot`), without a scrape of every endpoint's series (about a
        quarter of a second at a thousand endpoints). The others wait for the full tick,
        due within `scale_interval_s` (a rest ends here: a job waits)."""
        queued, self.queued = sorted(self.queued), set()
        entries = await asyncio.gather(*(self.ctx.registry.get_endpoint(ep) for ep in queued))
        ours = {
            ep: entry
            for ep, entry in zip(queued, entries, strict=True)
            if entry is not None and self._ours(entry)
        }
        for ep in set(queued) - set(ours) - self.queued:
            self.first.decided(ep)  # not ours to scale
        snaps = await asyncio.gather(*(self.ctx.jobs.snapshot(ep) for ep in ours))
        now_ms = self.ctx.jobs.clock()
        readings = {ep: from_snapshot(snap, now_ms) for ep, snap in zip(ours, snaps, strict=True)}
        await self._decide_each(ours, readings, None, targeted=True)
        self.resting = False
        self.full_due = min(self.full_due, self.clock() + self.ctx.settings.scale_interval_s)

    async def _decide_each(
        self,
        ours: Mapping[str, RegistryEntry],
        readings: Mapping[str, EndpointMetrics],
        error: str | None,
        *,
        targeted: bool = False,
    ) -> bool:
        """Start a decision for each endpoint of `ours` not busy and not settled, those with
        demand first, and wait for them at most one interval; False when none needed one."""
        namespaces: dict[str, dict[str, RegistryEntry]] = defaultdict(dict)
        for ep, entry in ours.items():
            if ep not in self.busy:
                namespaces[entry.namespace or ""][ep] = entry
        work = []
        for namespace, group in namespaces.items():
            listed_at = self.clock()  # the pods below are at least this fresh
            looks, deployments, pods = await self._observe(namespace, group, readings, error)
            for ep in looks:
                entry = group[ep]
                owner = Owner(ep, namespace, entry.uid or "")
                deployment = next(iter(deployments.get(ep, [])), None)
                if not self._settled(ep, entry, deployment, pods.get(ep, []), readings, error):
                    work.append((owner, entry, deployment, pods.get(ep, []), listed_at))
        work.sort(key=lambda item: not has_demand(readings.get(item[0].name)))
        tasks = [
            self._start(owner, entry, deployment, pods, readings, error, targeted=targeted,
                        listed_at=listed_at)
            for owner, entry, deployment, pods, listed_at in work
        ]  # fmt: skip
        if tasks:
            await asyncio.wait(tasks, timeout=self.ctx.settings.scale_interval_s or None)
        return bool(work)

    async def _observe(
        self,
        namespace: str,
        group: Mapping[str, RegistryEntry],
        readings: Mapping[str, EndpointMetrics],
        error: str | None,
    ) -> tuple[list[str], dict[str, list[Obj]], dict[str, list[Obj]]]:
        """The endpoints of `group` to look at, with their worker Deployments and pods read
        from the API. With kopf's watched workers (`kube.watched`), those the index shows
        settled are left out, and the rest are read one by one when they are few (no call
        at all while every endpoint rests); without, the namespace's are listed.
        `_decide_each` runs `_settled` again on what is read here: the index only picks what
        to read, fresh objects decide."""
        watched, cluster = self.ctx.workers, self.ctx.cluster
        looks = list(group)
        if watched is not None and watched.ready:
            looks = [
                ep for ep in group
                if not self._settled(
                    ep, group[ep], watched.deployment(namespace, ep),
                    watched.pods_of(namespace, ep), readings, error,
                )
            ]  # fmt: skip
            if len(looks) <= READ_ONE_BY_ONE:
                found = await asyncio.gather(
                    *(self._deployment_of(namespace, ep) for ep in looks),
                    *(cluster.list_objects("Pod", namespace, endpoint_workers(ep)) for ep in looks),
                )  # fmt: skip
                deployments = dict(zip(looks, found[: len(looks)], strict=True))
                return looks, deployments, dict(zip(looks, found[len(looks) :], strict=True))
        deployments = by_endpoint(await cluster.list_objects("Deployment", namespace, WORKERS))
        pods = by_endpoint(await cluster.list_objects("Pod", namespace, WORKERS))
        return looks, deployments, pods

    async def _deployment_of(self, namespace: str, endpoint_id: str) -> list[Obj]:
        """The endpoint's worker Deployment, read fresh, as a list of it: by name when
        the watch has it (a list, even label-selected, reads every Deployment of the
        namespace: 1.5 s for a few of them at a thousand endpoints), else label-selected
        (a new endpoint's may be on its way: no 404)."""
        cluster, watched = self.ctx.cluster, self.ctx.workers
        if watched is not None and watched.deployment(namespace, endpoint_id) is not None:
            found = await cluster.read("Deployment", namespace, deployment_name(endpoint_id))
            return as_selected(found, endpoint_id)
        return await cluster.list_objects("Deployment", namespace, endpoint_workers(endpoint_id))

    def _settled(
        self,
        endpoint_id: str,
        entry: RegistryEntry,
        deployment: Obj | None,
        pods: list[Obj],
        readings: Mapping[str, EndpointMetrics],
        error: str | None,
    ) -> bool:
        """At rest, with nothing left to report: no pod remembered from the last tick and
        both conditions this loop keeps as they were last reported."""
        if not at_rest(entry, deployment, pods, readings.get(endpoint_id)):
            return False
        state = self.endpoints.get(endpoint_id)
        if state is not None and state.pods_seen:
            return False  # a pod gone since the last tick: its worker is released first
        reported = self.ctx.scaling.get(endpoint_id)
        check = metrics_check(endpoint_id, readings, error)
        if reported is None or (reported.ok, reported.reason) != (check.ok, check.reason):
            return False
        return self.ctx.pods.get(endpoint_id) is None or bool(self.ctx.pods[endpoint_id].ok)

    def _forget(self, ours: set[str]) -> None:
        """Drop what was kept of endpoints no longer registered."""
        for gone in set(self.busy) - ours:
            self.busy.pop(gone).cancel()
        for gone in set(self.endpoints) - ours:
            del self.endpoints[gone]
        if self._lb_pods is not None:
            self._lb_pods.forget(ours)
        if self._health is not None:
            self._health.forget(ours)
        for gone in set(self.ctx.scaling) - ours:
            del self.ctx.scaling[gone]
        for gone in set(self.ctx.pods) - ours:
            del self.ctx.pods[gone]

    def _start(
        self,
        owner: Owner,
        entry: RegistryEntry,
        deployment: Obj | None,
        pods: list[Obj],
        readings: Mapping[str, EndpointMetrics],
        error: str | None,
        *,
        targeted: bool = False,
        listed_at: float | None = None,
    ) -> asyncio.Task:
        """`scale` one endpoint in a task of its own, marked busy until it ends."""
        scale = partial(
            self.scale, owner, entry, deployment, pods, readings, error, targeted=targeted,
            listed_at=listed_at,
        )  # fmt: skip

        async def decide() -> None:
            try:
                await scale()
            finally:
                if owner.name not in self.queued:  # else a new job: decided again
                    self.first.decided(owner.name)

        return self._spawn(self.busy, owner, "scaling", decide, self.slots)

    def _spawn(
        self,
        tasks: dict[str, asyncio.Task],
        owner: Owner,
        doing: str,
        work: Callable[[], Awaitable[object]],
        gate: asyncio.Semaphore,
    ) -> asyncio.Task:
        """Run `work` under `gate` in a task kept in `tasks` for the endpoint until it ends,
        after the endpoint's task there before it; a failure is logged, as `doing` failed."""
        previous = tasks.get(owner.name)

        async def run() -> None:
            if previous is not None:
                await asyncio.wait({previous})
            async with gate:
                try:
                    await work()
                except (ClusterError, kopf.TemporaryError) as err:
                    log.warning("%s %s/%s failed: %s", doing, owner.namespace, owner.name, err)
                except Exception:
                    log.exception("%s %s/%s failed", doing, owner.namespace, owner.name)

        task = asyncio.get_running_loop().create_task(run(), name=f"{doing}-{owner.name}")
        tasks[owner.name] = task

        def done(t: asyncio.Task) -> None:
            if tasks.get(owner.name) is t:
                del tasks[owner.name]

        task.add_done_callback(done)
        return task

    async def stop(self) -> None:
        """Cancel the decisions still being applied and their reports (when the loop ends:
        a term of the scaler Lease ends with every decision of its loop)."""
        tasks = [*self.busy.values(), *self.reporting.values(), *self.routing]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.busy.clear()
        self.reporting.clear()
        self.unsent.clear()
        for endpoint_id in list(self.first.pending):  # this term decides nothing more
            self.first.decided(endpoint_id)

    def _report(self, owner: Owner, report: Report) -> None:
        """Write `report` (Events, a status refresh) in the report lane: once no wake-up
        waits for its decision (`ScaleFirst`), after the endpoint's earlier reports,
        `REPORTS_AT_ONCE` across endpoints. A report of the endpoint not yet begun takes
        this one in (one status write for both)."""
        if report.empty():
            return
        waiting = self.unsent.get(owner.name)
        if waiting is not None:
            self.unsent[owner.name] = waiting.merged(report)
            return
        self.unsent[owner.name] = report

        async def write() -> None:
            await self.first.clear()
            whole = self.unsent.pop(owner.name, report)
            for event in whole.events:
                await self.ctx.cluster.create_event(event)
            refreshed = whole.refresh and await self._refresh_status(
                owner, force=whole.force, workers=whole.workers
            )
            if whole.workers and not refreshed:  # a count alone: no GET, no reconcile
                status = {"workers": whole.workers}
                await self.ctx.cluster.patch_endpoint_status(owner.namespace, owner.name, status)

        self._spawn(self.reporting, owner, "reporting on", write, self.reports)

    async def scale(
        self,
        owner: Owner,
        entry: RegistryEntry,
        deployment: Obj | None,
        pods: list[Obj],
        readings: Mapping[str, EndpointMetrics],
        error: str | None,
        *,
        targeted: bool = False,
        listed_at: float | None = None,
    ) -> Decision | None:
        """Decide for one endpoint and apply it, then report its conditions; None when it
        has no Deployment yet or another scaler owns its count. `targeted` (a reading from
        the store snapshot, `tick_queued`): `MetricsAvailable` is left to the full tick.
        `listed_at` (self.clock): when `pods` were read, for `LbPods.sync`."""
        starts = pod_starts(pods, self.state(owner.name).pods_seen)
        await self.ctx.jobs.note_worker_starts(owner.name, starts)  # for cold-start times
        await self._forget_gone_pods(owner.name, pods)
        if load_balanced(entry):  # the gateways route to the pods Redis names
            await self.lb_pods.sync(owner.name, pods, listed_at=listed_at)
        check = metrics_check(owner.name, readings, error)
        metrics = readings.get(owner.name) if check.ok else None
        deleted, replaced = await self.health.tend(
            owner, pods, startup_timeout_s=entry.startupTimeout, lb=load_balanced(entry),
            live=set(metrics.worker_jobs) if metrics is not None else None,
        )  # fmt: skip
        pods = [p for p in pods if p["metadata"]["name"] not in deleted]
        try:
            entry = await self._count_starts(owner, entry, deployment, pods, metrics)
            return await self._decide(owner, entry, deployment, pods, metrics)
        finally:
            report = await self._report_pods(owner, entry, pods, replaced)
            if not targeted:  # a snapshot says nothing of whether /metrics can be read
                report = report.merged(self._report_metrics(owner, check))
            self._report(owner, report)

    async def _decide(
        self,
        owner: Owner,
        entry: RegistryEntry,
        deployment: Obj | None,
        pods: list[Obj],
        metrics: EndpointMetrics | None,
    ) -> Decision | None:
        if deployment is None:
            return None
        state = self.state(owner.name)
        lb = self.lb_pods if load_balanced(entry) else None
        pool = DeploymentPool(
            self.ctx.cluster, deployment, pods, store=self.ctx.jobs, endpoint_id=owner.name, lb=lb,
            resume_window_s=float(entry.lbResumeWindowS),
        )  # fmt: skip
        await pool.keep_serving(set(metrics.worker_jobs) if metrics is not None else None)
        await pool.act_on_asks(scaled_here=not externally_scaled(entry))
        if externally_scaled(entry):
            # Another scaler sets the count; busy pods are still marked, so that its
            # scale-downs remove idle pods first.
            state.scaler = None
            if metrics is not None:
                members = (await pool.state()).members
                await pool.mark_busy(busy_members(members, metrics.worker_jobs))
            return None
        if state.scaler is None:
            state.scaler = Autoscaler(pool, clock=self.clock)
        scaler = state.scaler
        scaler.pool = pool
        await pool.upkeep()  # parked pods asked back or past their window
        before = pool.size
        limits = Limits.from_settings(entry.settings())
        if entry.crashLoop is not None:  # no pod starts; those that work may stay
            limits = held(limits, healthy_pods(pods, metrics))
        decision = await scaler.step(metrics, limits)
        if decision.desired != before:
            self._scaled(owner, deployment, before, decision)
        return decision

    async def _count_starts(
        self,
        owner: Owner,
        entry: RegistryEntry,
        deployment: Obj | None,
        pods: list[Obj],
        metrics: EndpointMetrics | None,
    ) -> RegistryEntry:
        """Count the worker starts seen since the last tick (`scaling.crashloop`): at the
        endpoint's `crashLoopThreshold`, declare the crash loop in its registry entry (the
        gateway and the next ticks read it there), with a Warning Event and a status
        refresh. A loop gone from the entry was cleared: the count starts over. Returns
        the entry as it now is."""
        ep, state = owner.name, self.state(owner.name)
        count = state.crashes
        if entry.crashLoop is None and state.looping:  # a release or a restart
            state.looping = False
            count = restarted(count)
            log.info("%s/%s: crash loop cleared; workers start again", owner.namespace, ep)
            self._report(owner, Report(refresh=True, force=True))
        if entry.crashLoop is not None:
            state.looping = True
        if metrics is not None and pods:  # without a reading no start is known to be good
            live = set(metrics.worker_jobs)
            if load_balanced(entry):  # an LB worker works once its health check passes
                live |= {p["metadata"]["name"] for p in pods if pod_ready(p)}
            starts = worker_starts(pods, live)
            if any(p["metadata"]["name"] not in live for p in pods):  # one may be marked
                marked = await self.ctx.jobs.unhealthy_workers(ep)
                fresh = {w: why for w, why in marked.items() if why.at >= self.began_ms}
                starts += unhealthy_starts(fresh)
            count = counted(count, starts)
        state.crashes = count
        if state.looping:
            return entry
        version = pod_version(deployment)
        now_ms = self.ctx.jobs.clock()
        loop = crash_loop(
            count, entry.crashLoopThreshold, now_ms=now_ms,
            version=int(version) if version and version.isdigit() else None,
        )  # fmt: skip
        if loop is None:
            return entry
        entry = entry.model_copy(update={"crashLoop": loop})
        await self.ctx.registry.put_endpoint(ep, entry)
        state.looping = True
        message = (
            f"{loop.text()}: {loop.failedStarts} failed starts in a row; no worker starts "
            "until a new release or a restart (POST /v2/serverless/{id}/workers/restart)"
        )
        log.warning("%s/%s CrashLoop: %s", owner.namespace, ep, message)
        event = endpoint_event(owner, "CrashLoop", message, now=rc.now(), warning=True)
        self._report(owner, Report([event], refresh=True, force=True))
        return entry

    async def _forget_gone_pods(self, endpoint_id: str, pods: list[Obj]) -> None:
        """A pod the API no longer lists has no process left: its worker is released at
        once (its jobs back to the queue, `/health` no longer counts it) instead of when
        its heartbeat times out."""
        names, state = {p["metadata"]["name"] for p in pods}, self.state(endpoint_id)
        for worker in state.pods_seen - names:
            requeued, failed = await self.ctx.jobs.release_worker(endpoint_id, worker)
            if requeued or failed:
                log.warning(
                    "worker pod %s of %s is gone: %d job(s) requeued, %d failed",
                    worker, endpoint_id, requeued, failed,
                )  # fmt: skip
        state.pods_seen = names

    def _scaled(self, owner: Owner, deployment: Obj, before: int, decision: Decision) -> None:
        """Tell people, in the report lane: an Event on the Endpoint, and the new desired
        count in its status (with the rest of what changed meanwhile: one write)."""
        reason = "ScaledUp" if decision.desired > before else "ScaledDown"
        log.info("%s/%s %s: %s", owner.namespace, owner.name, reason, decision.reason)
        event = endpoint_event(owner, reason, decision.reason, now=rc.now())
        ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        self._report(owner, Report([event], workers={"desired": decision.desired, "ready": ready}))

    async def _report_pods(
        self, owner: Owner, entry: RegistryEntry, pods: list[Obj], replaced: Check | None = None
    ) -> Report:
        """Worker states from the pods to Redis (for `/health`), and `WorkersHealthy` on
        the Endpoint: on a change, an Event and a status refresh (the report). A
        load-balancing endpoint's routed pods are counted by the gateways' health polls;
        its parked pods count nowhere (scaled down, only resumable). `replaced`: the
        condition a worker replaced recently gives (`kube.worker_health`, which posted its
        own Event), unless the pods show a problem now."""
        routed = wanted_workers(pods) if load_balanced(entry) else {}
        pods = [p for p in pods if parked_until(p) is None]
        state = self.state(owner.name)
        if failed := pull_errors(pods):
            state.pull_errors.update(failed)
        marked = self.health.marked_workers(owner.name)  # as `tend` read them: no Redis call
        states = pod_states(pods, entry.settings(), routed, state.pull_errors, marked=marked)
        await self.ctx.jobs.report_worker_states(
            owner.name, initializing=states.initializing, throttled=states.throttled,
            unhealthy=states.unhealthy,
        )  # fmt: skip
        check, previous = worst(states.check, replaced), self.ctx.pods.get(owner.name)
        self.ctx.pods[owner.name] = check
        if check is None or check == previous:
            return Report()
        if check.ok is False and check is not replaced:
            event = endpoint_event(owner, check.reason, check.message, now=rc.now(), warning=True)
            return Report([event], refresh=True)
        return Report(refresh=True)

    def _report_metrics(self, owner: Owner, check: Check) -> Report:
        """Keep `MetricsAvailable` current: on a change, an Event and a status refresh."""
        previous = self.ctx.scaling.get(owner.name)
        self.ctx.scaling[owner.name] = check
        if previous is not None and (previous.ok, previous.reason) == (check.ok, check.reason):
            return Report()
        if not check.ok or previous is not None:
            reason = "MetricsAvailable" if check.ok else "MetricsUnavailable"
            event = endpoint_event(owner, reason, check.message, now=rc.now(), warning=not check.ok)
            return Report([event], refresh=True)
        return Report(refresh=True)

    async def _refresh_status(
        self, owner: Owner, *, force: bool = False, workers: Mapping[str, int] | None = None
    ) -> bool:
        """One status refresh for whatever this tick changed, unless the Endpoint's status
        already says it (the first sighting after an operator restart: a GET, no
        reconcile); True when it was reconciled. `workers`: the counts of the scaler's last
        decision, written with it (the Deployment as watched may not show it yet). An
        Endpoint with no status yet is being created: its create handler writes the
        conditions kept in the context, and the resync those it missed. The worker-key
        Secret is not checked (a resync checks it when a pod cannot start without it)."""
        body = await self.ctx.cluster.get_endpoint(owner.namespace, owner.name)
        if body is None or body["metadata"].get("deletionTimestamp") or not body.get("status"):
            return False
        checks = [c for c in (self.ctx.scaling.get(owner.name), self.ctx.pods.get(owner.name)) if c]
        if not force and shows(body.get("status"), checks):
            return False
        status = await rc.reconcile(body, self.ctx, steady=True, rest=True)
        if workers:
            status["workers"] = {**(status.get("workers") or {}), **workers}
        if not same_status(body.get("status"), status):
            await self.ctx.cluster.patch_endpoint_status(owner.namespace, owner.name, status)
        return True
