"""Load-balancing worker pods into Redis, so that gateways find them without the
Kubernetes API (docs/load-balancing.md).

The scaler lists each endpoint's worker pods every tick anyway; `LbPods.sync` turns that
list into the endpoint's `lbw` records (`store.lb_workers`): a pod whose worker container
runs is registered as `podIP:PORT` under its name (the worker id the gateway answers in
`X-Runpod-Worker-Id`); a pod being deleted, or taken out of service by the scaler, stays
registered as `draining` (no new request, its requests in flight finish); a pod no longer
listed, or finished, is unregistered. Only changes are written: the records are kept in
memory after a first read of Redis, so an endpoint whose pods do not change costs no
Redis call (but one read a minute while it has pods: what Redis lost, a restart or a
failover, is written again). `drain` takes the pods a scale-down removes out of routing before the
ReplicaSet deletes them.

A pod the scale-down parked (`PARKED_UNTIL`: resumable by a `strict-resume` request until
then, `kube.deployment_pool`) has no `lbw` record but a parked one (`lbp`); `park` and
`unpark` write the move, and `sync` forgets the parked record of a pod no longer listed (a
rollout's old ReplicaSet removed it, someone deleted it): it is gone for good.

Two changes are written from kopf's watch event instead, as the pod changes (`seen`): a
pod whose worker has just started is registered (the tick's list comes up to
`scale_interval_s` later, and a request held through a cold start waits for the record; the
gateway polls the health path from the `l:` event on and routes on its first 200), and a
routed pod being deleted by anyone is marked `draining`. A sync whose pod list was read
before such a write leaves that worker's record alone (`listed_at`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from lockgate.kube.manifests.lb import LB_ANNOTATION
from lockgate.kube.manifests.names import SERVING_CONDITION, WORKER_CONTAINER
from lockgate.store.lb_workers import LbWorker, LbWorkers, Parked

Obj = Mapping[str, Any]

log = logging.getLogger("lockgate.scaler")

REREAD_S = 60.0  # an endpoint's records are read from Redis again after this
PARKED_UNTIL = "lockgate.dev/parked-until"  # a parked pod's end of resume window (epoch ms)


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def taken_out(pod: Obj) -> bool:
    """Whether the scaler took the pod out of service (its `Serving` condition False)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == SERVING_CONDITION and c["status"] == "False" for c in conditions)


def parked_until(pod: Obj) -> int | None:
    """When a parked pod's resume window ends (epoch ms); None when it is not parked."""
    raw = (pod["metadata"].get("annotations") or {}).get(PARKED_UNTIL)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def worker_running(pod: Obj) -> bool:
    """Whether the pod's worker container runs (its image pulled, its process started)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(
        s.get("name") == WORKER_CONTAINER and "running" in (s.get("state") or {}) for s in statuses
    )


def lb_worker_of(pod: Obj) -> LbWorker | None:
    """The record a worker pod should have in Redis: None until its worker container runs
    (an image pull does not eat the gateway's start grace) and once it stopped, without
    an IP, or when it carries no `LB_ANNOTATION` (not a load-balancing worker), or while
    it is parked (its record is a parked one); `draining` while it is being deleted or was
    taken out of service."""
    meta, status = pod["metadata"], pod.get("status") or {}
    raw = (meta.get("annotations") or {}).get(LB_ANNOTATION)
    ip = status.get("podIP")
    if not raw or not ip or not worker_running(pod) or parked_until(pod) is not None:
        return None
    try:
        where = json.loads(raw)
        port, health, path = int(where["port"]), int(where["healthPort"]), str(where["path"])
    except (ValueError, KeyError, TypeError):
        log.warning("pod %s: unreadable %s annotation %r", meta.get("name"), LB_ANNOTATION, raw)
        return None
    draining = bool(meta.get("deletionTimestamp")) or taken_out(pod)
    return LbWorker(_host_port(ip, port), _host_port(ip, health), path, draining)


def wanted_workers(pods: Sequence[Obj]) -> dict[str, LbWorker]:
    """Pod name -> the record it should have, for every pod that should have one."""
    found = {}
    for pod in pods:
        worker = lb_worker_of(pod)
        if worker is not None:
            found[pod["metadata"]["name"]] = worker
    return found


def changes(
    known: Mapping[str, LbWorker], wanted: Mapping[str, LbWorker]
) -> tuple[dict[str, LbWorker], list[str]]:
    """What to write so that Redis holds `wanted`: (records to register, ids to remove)."""
    register = {w: rec for w, rec in wanted.items() if known.get(w) != rec}
    return register, sorted(set(known) - set(wanted))


class LbPods:
    """The `lbw` records of every load-balancing endpoint the scaler looks after, as last
    written (one scaler term: a new term reads Redis again)."""

    def __init__(self, lb: LbWorkers, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.lb = lb
        self.clock = clock
        self.known: dict[str, dict[str, LbWorker]] = {}
        self.parked: dict[str, set[str]] = {}  # endpoint -> its parked workers (`lbp`)
        self.read_at: dict[str, float] = {}
        # (endpoint, worker) -> when `seen` wrote its record (self.clock): kept until a
        # sync's pod list is newer
        self.seen_at: dict[tuple[str, str], float] = {}

    async def _known(self, endpoint_id: str) -> dict[str, LbWorker]:
        """The records as last written; read from Redis at first sight (what an earlier
        term left) and every `REREAD_S`."""
        now = self.clock()
        if endpoint_id not in self.known or now - self.read_at[endpoint_id] >= REREAD_S:
            roster = await self.lb.roster(endpoint_id)
            self.known[endpoint_id] = roster.workers
            self.parked[endpoint_id] = set(roster.parked)
            self.read_at[endpoint_id] = now
        return self.known[endpoint_id]

    async def sync(
        self, endpoint_id: str, pods: Sequence[Obj], *, listed_at: float | None = None
    ) -> None:
        """Make the endpoint's records match its pods; writes only what changed. `listed_at`
        (self.clock before the pods were listed): a worker whose record `seen` wrote after
        it is left as written (the list is older)."""
        known = await self._known(endpoint_id)
        register, remove = changes(known, wanted_workers(pods))
        listed_parked = {p["metadata"]["name"] for p in pods if parked_until(p) is not None}
        gone = sorted(self.parked[endpoint_id] - listed_parked)
        if listed_at is not None:
            register = {
                w: rec for w, rec in register.items() if not self._newer(endpoint_id, w, listed_at)
            }
            remove = [w for w in remove if not self._newer(endpoint_id, w, listed_at)]
            gone = [w for w in gone if not self._newer(endpoint_id, w, listed_at)]
        if gone:  # no longer resumable: a strict-resume request for it is 404
            await self.lb.forget_parked(endpoint_id, gone)
            self.parked[endpoint_id].difference_update(gone)
        if not register and not remove:
            return
        await self.lb.apply(endpoint_id, register, remove)
        known.update(register)
        for worker_id in remove:
            known.pop(worker_id, None)
        for worker_id, rec in register.items():
            log.info("lb worker %s/%s at %s%s", endpoint_id, worker_id, rec.address,
                     " (draining)" if rec.draining else "")  # fmt: skip

    def _newer(self, endpoint_id: str, worker_id: str, listed_at: float) -> bool:
        """Whether `seen` wrote the worker's record after `listed_at` (forgotten once a
        list is newer)."""
        at = self.seen_at.get((endpoint_id, worker_id))
        if at is not None and at < listed_at:
            del self.seen_at[(endpoint_id, worker_id)]
        return at is not None and at >= listed_at

    async def seen(self, endpoint_id: str, pod: Obj) -> None:
        """A worker pod as the watch just delivered it: one not registered yet whose worker
        runs (and is not leaving) is registered now, and a registered one being deleted is
        marked `draining` now; anything else is left to the tick. So are endpoints this
        term has not synced yet (the tick also decides whether they are this operator's)."""
        known = self.known.get(endpoint_id)
        worker = lb_worker_of(pod)
        name = pod["metadata"]["name"]
        if known is None or worker is None:
            return
        had = known.get(name)
        new = had is None and not worker.draining
        leaving = had is not None and not had.draining and worker.draining
        if not new and not leaving:
            return
        known[name] = worker  # before the write: a sync meanwhile sees it
        self.seen_at[(endpoint_id, name)] = self.clock()
        try:
            await self.lb.register(endpoint_id, name, worker)
        except BaseException:  # the next sync writes it
            if had is None:
                known.pop(name, None)
            else:
                known[name] = had
            raise
        log.info("lb worker %s/%s at %s%s (watch)", endpoint_id, name, worker.address,
                 " (draining)" if worker.draining else "")  # fmt: skip

    async def drain(self, endpoint_id: str, worker_ids: Collection[str]) -> None:
        """Take registered workers out of routing now (a scale-down is about to remove
        them): gateways send them no new request from the `l:` event on."""
        known = await self._known(endpoint_id)
        leaving = {
            w: LbWorker(rec.address, rec.health, rec.path, draining=True)
            for w, rec in known.items()
            if w in worker_ids and not rec.draining
        }
        if leaving:
            await self.lb.apply(endpoint_id, leaving)
            known.update(leaving)

    async def routed(self, endpoint_id: str, worker_id: str) -> bool:
        """Whether the worker has a routing record (only such a worker is parked)."""
        return worker_id in await self._known(endpoint_id)

    async def park(self, endpoint_id: str, worker_id: str, until_ms: int) -> bool:
        """Move a routed worker's record to the parked ones (resumable until `until_ms`);
        False when it has no record (never routed: nothing to resume)."""
        known = await self._known(endpoint_id)
        record = known.get(worker_id)
        if record is None:
            return False
        await self.lb.park(endpoint_id, worker_id, Parked(record, until_ms))
        known.pop(worker_id, None)
        self.parked[endpoint_id].add(worker_id)
        self.seen_at[(endpoint_id, worker_id)] = self.clock()
        return True

    async def unpark(self, endpoint_id: str, worker_id: str) -> None:
        """A parked worker's record back in `lbw`, in routing (the gateways poll it)."""
        parked = (await self.lb.roster(endpoint_id)).parked.get(worker_id)
        if parked is None:
            return
        old = parked.worker
        record = LbWorker(old.address, old.health, old.path)
        await self.lb.unpark(endpoint_id, worker_id, record)
        (await self._known(endpoint_id))[worker_id] = record
        self.parked[endpoint_id].discard(worker_id)
        self.seen_at[(endpoint_id, worker_id)] = self.clock()

    async def forget_parked(self, endpoint_id: str, worker_ids: Collection[str]) -> None:
        """Parked workers whose window ended: no longer resumable (404 from now on)."""
        await self._known(endpoint_id)
        await self.lb.forget_parked(endpoint_id, sorted(worker_ids))
        self.parked[endpoint_id].difference_update(worker_ids)

    async def resumes(self, endpoint_id: str) -> list[str]:
        """The workers `strict-resume` requests asked back since the last call."""
        return await self.lb.take_resumes(endpoint_id)

    def forget(self, keep: Collection[str]) -> None:
        """Drop what is kept of endpoints not in `keep` (no longer registered)."""
        for gone in set(self.known) - set(keep):
            del self.known[gone]
            self.parked.pop(gone, None)
            self.read_at.pop(gone, None)
        for key in [k for k in self.seen_at if k[0] not in keep]:
            del self.seen_at[key]
