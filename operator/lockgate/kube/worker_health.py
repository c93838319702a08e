"""Worker pods that must go: those marked unhealthy, and those past their startup deadline.

A worker marked unhealthy (`JobStore.mark_unhealthy`: a failed fitness check, a failed
warm-up, or the startup deadline below) already gets no job; its pod is deleted here, so
that its Deployment makes a new pod under a new name. Restarting the container would not
do: a runpod SDK worker whose fitness check fails exits 1 and the kubelet restarts it in
the same pod, under the same (now refused) worker id.

The scaler calls `WorkerHealth.tend` for each endpoint it decides, with the pods it listed
anyway. It reads the endpoint's records (`lg:{ep}:un`) only when a worker was just marked
(the store's `u:` event), at first sight, and when the pods changed (a pod new or gone, a
worker container restarted: what a fitness failure looks like from here); an endpoint
whose pods do not change costs no Redis call. A deleted pod is an Event on the Endpoint
naming the worker and why; `WorkersHealthy` says the newest reason for a while
(`scaling.worker_health.SHOWN_MS`).

The startup deadline (`startupTimeout`, `scaling.worker_health`) runs from the worker
container's start (`state.running.startedAt`: an image pull and the `fetch-models` init
container's downloads count apart). A queue worker is ready once it has polled: its pod got
the scaler's `Serving` condition (`kube.deployment_pool`), or the gateway lists it live. A
load-balancing worker is ready once a gateway's health poll saw 200 (`lbh`): read only
while some running pod has not been seen ready yet. The last log line comes from the
pod's log (tail).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockgate.kube.cluster import Cluster, ClusterError
from lockgate.kube.deployment_pool import live_pods, serving
from lockgate.kube.events import endpoint_event
from lockgate.kube.manifests.names import WORKER_CONTAINER, Owner
from lockgate.kube.status import WORKERS_HEALTHY, Check
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.scaling.worker_health import REASONS, overdue, shown, startup_record
from lockgate.store import JobStore
from lockgate.store.lb_workers import HEALTHY, LbWorkers
from lockgate.timestamps import epoch_ms

log = logging.getLogger("lockgate.scaler")

Obj = Mapping[str, Any]

MARKED_GRACE_S = 5  # a marked worker holds no job: SIGKILL this soon after SIGTERM
LOG_TAIL_LINES = 5  # of a worker past its deadline, for its last line
LOG_TAIL_BYTES = 8192


# -- pure ----------------------------------------------------------------------------------


def _name(pod: Obj) -> str:
    return str(pod["metadata"]["name"])


def worker_status(pod: Obj) -> Obj:
    """The worker container's status ({} while it has none)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == WORKER_CONTAINER), {})


def worker_started_ms(pod: Obj) -> int | None:
    """When the pod's worker container started (epoch ms), while it runs; else None."""
    running = (worker_status(pod).get("state") or {}).get("running") or {}
    return epoch_ms(running.get("startedAt"))


def fingerprint(pods: Iterable[Obj]) -> frozenset[tuple[str, int]]:
    """What changes when a pod comes or goes or its worker container restarts: the names
    of the live pods with their worker's restart count."""
    return frozenset(
        (_name(p), int(worker_status(p).get("restartCount") or 0)) for p in live_pods(list(pods))
    )


def to_replace(pods: Sequence[Obj], marked: Collection[str]) -> list[str]:
    """The live pods (not being deleted, not finished) whose worker is `marked`."""
    return [_name(p) for p in live_pods(pods) if _name(p) in marked]


def waiting_for_ready(pods: Sequence[Obj], ready: Collection[str]) -> list[str]:
    """Live pods whose worker container runs and which are not known `ready`."""
    return [
        _name(p)
        for p in live_pods(pods)
        if worker_started_ms(p) is not None and _name(p) not in ready
    ]


def past_deadline(
    pods: Sequence[Obj], timeout_s: int, now_ms: int, ready: Collection[str], *, lb: bool
) -> list[str]:
    """Live pods whose worker container started `timeout_s` or more ago and that are not
    `ready`. A queue worker's pod carrying the `Serving` condition has polled (the scaler
    sets it once the gateway saw the worker); a load-balancing pod's says nothing of its
    health, so only `ready` counts there."""
    started = {_name(p): at for p in live_pods(pods) if (at := worker_started_ms(p)) is not None}
    polled = set() if lb else {_name(p) for p in pods if serving(p) is not None}
    return overdue(started, set(ready) | polled, timeout_s, now_ms)


def marked_check(records: Mapping[str, UnhealthyWorker], now_ms: int) -> Check | None:
    """`WorkersHealthy` False naming the newest worker marked recently (`shown`); None when
    there is none."""
    said = shown(records, now_ms)
    return Check(WORKERS_HEALTHY, False, *said) if said else None


def worst(pods: Check | None, marked: Check | None) -> Check | None:
    """The condition to show: a problem of the pods now (an image that cannot be pulled, a
    crash loop) before a worker replaced recently."""
    if pods is not None and pods.ok is False:
        return pods
    return marked or pods


def replaced_event(owner: Owner, why: UnhealthyWorker, *, now: str) -> dict[str, Any]:
    """The Warning Event on the Endpoint when a marked worker's pod is deleted."""
    message = f"worker {why.worker} replaced (its pod deleted): {why.text()}"
    return endpoint_event(owner, REASONS[why.kind], message, now=now, warning=True)


# -- the scaler's adapter --------------------------------------------------------------------


@dataclass
class Tended:
    """What is kept of one endpoint between ticks."""

    fingerprint: frozenset[tuple[str, int]] = frozenset()
    records: dict[str, UnhealthyWorker] = field(default_factory=dict)  # as last read
    ready: set[str] = field(default_factory=set)  # workers seen ready (deadline met)
    due: bool = True  # read the records at the next look (first sight, a `u:` event)


class WorkerHealth:
    """Replaces marked worker pods and enforces the startup deadline, for one scaler term
    (a new term reads every endpoint's records again)."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: JobStore,
        lb: LbWorkers,
        *,
        now: Callable[[], str],
    ) -> None:
        self.cluster = cluster
        self.jobs = jobs
        self.lb = lb
        self.now = now  # RFC 3339, for Events
        self.endpoints: dict[str, Tended] = {}

    def marked(self, endpoint_id: str | None) -> None:
        """A worker of the endpoint was just marked (`u:`): read its records at the next
        look; None: any endpoint's (events may have been missed)."""
        if endpoint_id is None:
            for state in self.endpoints.values():
                state.due = True
            return
        self.endpoints.setdefault(endpoint_id, Tended()).due = True

    def marked_workers(self, endpoint_id: str) -> set[str]:
        """The endpoint's workers marked within the hour, as last read (`tend`)."""
        state = self.endpoints.get(endpoint_id)
        return set(state.records) if state is not None else set()

    def forget(self, ours: Collection[str]) -> None:
        """Drop what was kept of endpoints no longer registered."""
        for gone in set(self.endpoints) - set(ours):
            del self.endpoints[gone]

    async def tend(
        self,
        owner: Owner,
        pods: Sequence[Obj],
        *,
        startup_timeout_s: int,
        lb: bool,
        live: Collection[str] | None,
    ) -> tuple[list[str], Check | None]:
        """Mark the workers past their startup deadline, delete the pods of marked workers.
        `live`: the workers the gateway reports now (None: unknown). Returns the pods
        deleted and the endpoint's `WorkersHealthy` for its marked workers (None: none
        recent)."""
        state = self.endpoints.setdefault(owner.name, Tended())
        changed = fingerprint(pods)
        if state.due or changed != state.fingerprint:
            state.due = False
            state.records = await self.jobs.unhealthy_workers(owner.name)
        state.fingerprint = changed
        now_ms = self.jobs.clock()
        await self._deadline(owner, pods, state, startup_timeout_s, lb, live, now_ms)
        deleted = []
        for name in to_replace(pods, state.records):
            if await self._replace(owner, state.records[name]):
                deleted.append(name)
        state.ready &= {_name(p) for p in pods}
        return deleted, marked_check(state.records, now_ms)

    async def _deadline(
        self,
        owner: Owner,
        pods: Sequence[Obj],
        state: Tended,
        timeout_s: int,
        lb: bool,
        live: Collection[str] | None,
        now_ms: int,
    ) -> None:
        if timeout_s <= 0:
            return
        if not lb and live is not None:
            state.ready |= set(live)
        if lb and waiting_for_ready(pods, state.ready):  # was a first 200 seen meanwhile?
            health = await self.lb.health(owner.name)
            state.ready |= {w for w, h in health.items() if h.state == HEALTHY}
        late = [
            n
            for n in past_deadline(pods, timeout_s, now_ms, state.ready, lb=lb)
            if n not in state.records
        ]
        if late and not lb:  # a first call just now: the store is the judge
            state.ready |= set((await self.jobs.snapshot(owner.name)).worker_jobs)
            late = [n for n in late if n not in state.ready]
        for name in late:
            output = await self._log_tail(owner, name)
            why = startup_record(name, timeout_s, output, self.jobs.clock())
            await self.jobs.mark_unhealthy(owner.name, why)
            state.records[name] = why
            log.warning("worker %s of %s: %s", name, owner.name, why.reason)

    async def _log_tail(self, owner: Owner, name: str) -> str:
        """The last lines the pod's worker wrote ("" when they cannot be read)."""
        try:
            return await self.cluster.pod_log(
                owner.namespace, name, container=WORKER_CONTAINER,
                tail_lines=LOG_TAIL_LINES, limit_bytes=LOG_TAIL_BYTES,
            )  # fmt: skip
        except ClusterError as err:
            log.info("worker %s: no log to quote: %s", name, err)
            return ""

    async def _replace(self, owner: Owner, why: UnhealthyWorker) -> bool:
        """Delete the marked worker's pod (its Deployment makes a new one) and say so in an
        Event; False when it was already gone."""
        deleted = await self.cluster.delete(
            "Pod", owner.namespace, why.worker, grace_period_seconds=MARKED_GRACE_S
        )
        if deleted:
            log.warning("worker %s of %s replaced: %s", why.worker, owner.name, why.text())
            await self.cluster.create_event(replaced_event(owner, why, now=self.now()))
        return deleted
