"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does
it, so that one operator replica at a time runs the scaler.

Every `renew_s` each replica reads the Lease and `decide`s: the holder writes a new
`renewTime`; the others take the Lease only when it is absent, released (no holder) or
expired (`renewTime + leaseDurationSeconds` before now). Every write carries the
`resourceVersion` that was read, so of two replicas racing for it one gets 409 Conflict
and stands by. A holder that could not renew for `duration_s - renew_s` stops leading on
its own, before anyone else may take the Lease; on shutdown it releases the Lease, so a
standby takes over at its next look instead of after the lease duration.

Expiry compares the Lease's `renewTime` with this replica's clock (client-go measures it
locally instead): nodes' clocks must agree to well within the lease duration (NTP does).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from lockgate.kube.cluster import Cluster, ClusterError, Conflict
from lockgate.kube.settings import OperatorSettings
from lockgate.store.connection import raise_if_cancelled
from lockgate.timestamps import parse_time

log = logging.getLogger("lockgate.scaler")

Obj = dict[str, Any]
Work = Callable[[], Coroutine[Any, Any, None]]
RELEASED_DURATION_S = 1  # what a released Lease says, as client-go writes it
RELEASE_TRIES = 3  # reads of the Lease to release it when a write of ours meanwhile changed it


class Step(StrEnum):
    """What a replica does after reading the Lease."""

    ACQUIRE = "acquire"  # absent, released or expired: take it
    RENEW = "renew"  # ours: write a new renewTime
    STANDBY = "standby"  # another replica holds it and renews it


def holder_of(lease: Mapping[str, Any] | None) -> str:
    """The Lease's holder identity; empty when absent or released."""
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def micro_time(moment: datetime) -> str:
    """`moment` as the API server's MicroTime: UTC, always six fraction digits."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decide(lease: Mapping[str, Any] | None, me: str, now: datetime) -> Step:
    """Acquire, renew or stand by, given the Lease as read (None: absent) at `now`."""
    holder = holder_of(lease)
    if lease is not None and holder == me:
        return Step.RENEW
    if not holder:
        return Step.ACQUIRE
    spec = (lease or {}).get("spec") or {}
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))
    if renewed is None or renewed + duration < now:
        return Step.ACQUIRE
    return Step.STANDBY


def claimed(
    lease: Mapping[str, Any] | None,
    me: str,
    now: datetime,
    *,
    name: str,
    namespace: str,
    duration_s: int,
) -> Obj:
    """The Lease to write to hold it from `now`: renewed when ours, taken over otherwise
    (then `acquireTime` is now and `leaseTransitions` counts one more)."""
    if lease is None:
        base: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
        }
    else:
        base = dict(lease)
    spec = dict(base.get("spec") or {})
    stamp = micro_time(now)
    if holder_of(lease) != me:
        spec["acquireTime"] = stamp
        if lease is not None:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.update(holderIdentity=me, leaseDurationSeconds=duration_s, renewTime=stamp)
    return {**base, "spec": spec}


def released(lease: Mapping[str, Any], now: datetime) -> Obj:
    """The Lease to write when its holder stops: no holder, expiring at once."""
    spec = dict(lease.get("spec") or {})
    spec.update(
        holderIdentity="",
        leaseDurationSeconds=RELEASED_DURATION_S,
        renewTime=micro_time(now),
    )
    return {**lease, "spec": spec}


def identity(pod_name: str | None = None) -> str:
    """This replica's holder identity: its pod name ($POD_NAME, else the host name) and a
    random suffix, so a restarted pod of the same name is a new holder."""
    base = pod_name or os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{secrets.token_hex(4)}"


def utc_now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaigns for one Lease and runs work only while this replica holds it."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        name: str,
        namespace: str,
        me: str,
        duration_s: int = 15,
        renew_s: float = 5.0,
        now: Callable[[], datetime] = utc_now,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.namespace = namespace
        self.me = me
        self.duration_s = duration_s
        self.renew_s = renew_s
        self.now = now
        self.clock = clock
        self.leading = False
        self.renewed_at = 0.0  # clock() of the last write that kept the Lease ours
        self.seen_holder: str | None = None  # for logging changes only

    @classmethod
    def for_scaler(cls, cluster: Cluster, settings: OperatorSettings) -> LeaderElector:
        """The elector of the scaler's Lease, as the operator's settings describe it."""
        return cls(
            cluster,
            name=settings.lease_name,
            namespace=settings.scaler_lease_namespace(),
            me=identity(),
            duration_s=settings.lease_duration_s,
            renew_s=settings.lease_renew_s,
        )

    async def try_once(self) -> bool:
        """One round: read the Lease, then acquire it, renew it or stand by.
        Returns whether this replica leads afterwards; API failures are logged."""
        try:
            self._lead(await self._campaign())
        except Conflict:
            self._lead(False)  # another replica wrote first: it leads
        except ClusterError as err:
            deadline = self.duration_s - self.renew_s
            if self.leading and self.clock() - self.renewed_at >= deadline:
                log.warning("scaler: could not renew the Lease for %.0f s: %s", deadline, err)
                self._lead(False)
            else:
                log.warning("scaler: Lease %s/%s: %s", self.namespace, self.name, err)
        return self.leading

    async def _campaign(self) -> bool:
        lease = await self.cluster.get_lease(self.namespace, self.name)
        now = self.now()
        if decide(lease, self.me, now) == Step.STANDBY:
            self._saw(holder_of(lease))
            return False
        mine = claimed(
            lease, self.me, now, name=self.name, namespace=self.namespace,
            duration_s=self.duration_s,
        )  # fmt: skip
        if lease is None:
            await self.cluster.create_lease(mine)
        else:
            await self.cluster.replace_lease(mine)
        self.renewed_at = self.clock()
        return True

    def _lead(self, leading: bool) -> None:
        if leading and not self.leading:
            log.info("scaler: leading as %s", self.me)
            self.seen_holder = self.me
        elif not leading and self.leading:
            log.info("scaler: %s stopped leading", self.me)
        self.leading = leading

    def _saw(self, holder: str) -> None:
        if holder != self.seen_holder:
            log.info("scaler: standing by, %s leads", holder)
            self.seen_holder = holder

    async def release(self) -> None:
        """Give the Lease up, if still ours, so a standby takes it at its next look."""
        self.leading = False
        for _ in range(RELEASE_TRIES):
            try:
                lease = await self.cluster.get_lease(self.namespace, self.name)
                if lease is not None and holder_of(lease) == self.me:
                    await self.cluster.replace_lease(released(lease, self.now()))
                    log.info("scaler: %s released the Lease", self.me)
                return
            except Conflict:  # a renewal cut short by the stop still landed: read it again
                continue
            except ClusterError as err:  # it expires by itself
                log.warning("scaler: could not release the Lease: %s", err)
                return
        log.warning("scaler: could not release the Lease: it kept changing")

    async def run(self, work: Work) -> None:
        """Campaign until cancelled. While this replica leads, `work()` runs as a task; it
        is cancelled as soon as the Lease is lost, and started afresh when won again.
        On the way out the work stops and the Lease is released."""
        task: asyncio.Task[None] | None = None
        try:
            while True:
                if await self.try_once():
                    if task is not None and task.done():
                        _report(task)
                    if task is None or task.done():
                        task = asyncio.create_task(work(), name=f"leading-{self.name}")
                elif task is not None:
                    await _stop(task)
                    task = None
                raise_if_cancelled()
                await asyncio.sleep(self.renew_s)
        finally:
            if task is not None:
                await _stop(task)
            if self.leading:
                await self.release()


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _report(task: asyncio.Task[None]) -> None:
    """Log why work ended while this replica still leads (it is started again)."""
    if not task.cancelled() and (err := task.exception()) is not None:
        log.warning("scaler: the work of this term failed, starting it again: %r", err)
