"""`DeploymentPool`: an endpoint's workers as the pods of its Deployment.

It resizes through the Deployment's scale subresource, and makes the ReplicaSet remove
idle pods first in two ways: before shrinking it takes the idle pods to remove out of
service (their readiness gate `lockgate.dev/Serving` goes False, so they are not Ready,
and a ReplicaSet deletes pods that are not Ready first: any Kubernetes version); and busy
pods carry a high `controller.kubernetes.io/pod-deletion-cost` (Kubernetes >= 1.22). A new
pod is put in service (its gate True, which is what makes it Ready) once its worker runtime
has started, that is once the gateway has seen it poll: readiness means "takes jobs", and a
rollout waits for it. Busy pods also carry `cluster-autoscaler.kubernetes.io/safe-to-evict:
"false"`, idle ones "true" (their /dev/shm emptyDir would otherwise keep a node up). Whichever
pod is removed, no job is cut short: the pod gets SIGTERM, the worker runtime finishes the
job in hand, and the pod's termination grace period covers the endpoint's execution timeout.

A load-balancing endpoint with a resume window (`lbResumeWindowS`, `scaling.parking`) parks
its scale-down's routed victims instead: drained and out of service as above, they stay in
the Deployment (the replica count keeps them: workers wanted + parked) annotated
`PARKED_UNTIL` and with the lowest deletion cost, and are not workers for the scaler. A
`strict-resume` request (`upkeep`) or a scale-up brings one back: annotation removed, in
service (Ready) again, routed again. When its window ends the replica count drops by one
and the pod is deleted (the ReplicaSet, told to shrink, removes the cheapest not-Ready pod:
the parked one, unless a new pod is still Pending). Kubernetes cannot pause a container:
a parked pod keeps running idle and holds its node resources (GPU included) for the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lockgate.kube.cluster import Cluster, NotFound
from lockgate.kube.lb_pods import PARKED_UNTIL, LbPods, parked_until
from lockgate.kube.manifests.names import SERVING_CONDITION
from lockgate.scaling.parking import SCALE_DOWN, adopt_first, expired, parks
from lockgate.scaling.pool import PoolState
from lockgate.store import JobStore
from lockgate.timestamps import parse_time

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
REVERT_AFTER_S = 10.0  # a pod taken out of service that still lives after this goes back
NOT_READY_WAIT_S = 5.0  # longest a scale-down waits for the kubelet to mark victims not Ready
NOT_READY_POLL_S = 0.1
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
BUSY_COST = "1000"  # removed last
IDLE_COST = "0"  # the default when the annotation is absent
# What a pod carries, busy or idle: removed last and never evicted by the autoscaler while
# a job runs; idle, it may go (emptyDir volumes alone would make the autoscaler keep it).
BUSY = {DELETION_COST: BUSY_COST, SAFE_TO_EVICT: "false"}
IDLE = {DELETION_COST: IDLE_COST, SAFE_TO_EVICT: "true"}
PARKED_COST = "-1000"  # a parked pod is the first the ReplicaSet removes when it shrinks

Obj = Mapping[str, Any]

log = logging.getLogger("lockgate.scaler")


def live_pods(pods: Sequence[Obj]) -> list[Obj]:
    """Pods that count as workers: not being deleted, not finished."""
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def eviction_changes(pods: Sequence[Obj], busy: Collection[str]) -> dict[str, dict[str, str]]:
    """Pod name -> the deletion cost and safe-to-evict annotations it should carry, for pods
    whose annotations differ (a missing deletion cost counts as the idle one)."""
    changes = {}
    for pod in pods:
        meta = pod["metadata"]
        want = BUSY if meta["name"] in busy else IDLE
        have = {DELETION_COST: IDLE_COST, **(meta.get("annotations") or {})}
        if any(have.get(k) != v for k, v in want.items()):
            changes[meta["name"]] = want
    return changes


def gated(pod: Obj) -> bool:
    """Whether the pod's readiness waits for the scaler's `Serving` condition."""
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    return any(g.get("conditionType") == SERVING_CONDITION for g in gates)


def serving(pod: Obj) -> Obj | None:
    """The pod's `Serving` condition, None while it has none."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == SERVING_CONDITION), None)


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def ready(pod: Obj) -> bool:
    """Whether the pod's `Ready` condition is True (what the ReplicaSet ranks by)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def to_serve(pods: Sequence[Obj], now: datetime, seen: Collection[str] | None) -> list[str]:
    """Gated live pods to put in service: new ones whose worker the gateway has `seen`
    (None: not known, so no new pod yet), and those taken out of service over
    `REVERT_AFTER_S` ago that still live (the ReplicaSet removed another pod, or the
    scaler grew again before it acted)."""
    names = []
    for pod in pods:
        condition = serving(pod)
        if not gated(pod) or (condition and condition["status"] == "True"):
            continue
        if condition is None and pod["metadata"]["name"] not in (seen or ()):
            continue  # its worker runtime has not polled yet: not Ready
        taken_out = parse_time(condition and condition.get("lastTransitionTime"))
        if taken_out is not None and (now - taken_out).total_seconds() < REVERT_AFTER_S:
            continue
        names.append(pod["metadata"]["name"])
    return names


def serving_condition(on: bool, now: str) -> Obj:
    reason, message = (
        ("InService", "the scaler keeps this worker")
        if on
        else ("ScalingDown", "idle: the scaler removes this worker")
    )
    status = "True" if on else "False"
    return {"type": SERVING_CONDITION, "status": status, "reason": reason,
            "message": message, "lastTransitionTime": now}  # fmt: skip


class DeploymentPool:
    """One endpoint's Deployment and its pods, as observed at the start of a loop tick."""

    def __init__(
        self,
        cluster: Cluster,
        deployment: Obj,
        pods: Sequence[Obj],
        *,
        store: JobStore | None = None,
        endpoint_id: str = "",
        now: datetime | None = None,
        lb: LbPods | None = None,
        resume_window_s: float = 0.0,
    ) -> None:
        self.cluster = cluster
        self.store = store  # tells the gateway which workers get no new job
        self.lb = lb  # a load-balancing endpoint's routing records (None: a queue endpoint)
        self.endpoint_id = endpoint_id
        self.now = now or datetime.now(UTC)
        self.namespace = deployment["metadata"]["namespace"]
        self.name = deployment["metadata"]["name"]
        self.replicas = int((deployment.get("spec") or {}).get("replicas", 1))
        labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        self.selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        # a scale-down's victims are parked this long (LB endpoints only; 0: removed)
        self.resume_window_s = resume_window_s if lb is not None else 0.0
        live_ones = live_pods(pods)
        live = {p["metadata"]["name"] for p in live_ones}
        self.leaving = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in live]
        self.pods = [p for p in live_ones if parked_until(p) is None]
        # parked pod name -> the end of its resume window (epoch ms)
        self.parked = {
            p["metadata"]["name"]: until
            for p in live_ones
            if (until := parked_until(p)) is not None
        }

    @property
    def size(self) -> int:
        """Workers asked for: the replica count less the parked pods it keeps."""
        return max(0, self.replicas - len(self.parked))

    async def state(self) -> PoolState:
        return PoolState(self.size, tuple(p["metadata"]["name"] for p in self.pods))

    def _now_ms(self) -> int:
        return int(self.now.timestamp() * 1000)

    async def upkeep(self) -> None:
        """Before a decision: resume the parked pods `strict-resume` requests asked back,
        remove those whose window ended. No Redis call without a parked pod."""
        if self.lb is None or not self.parked:
            return
        for name in await self.lb.resumes(self.endpoint_id):
            if name in self.parked:
                await self._unpark(name, "strict-resume")
        await self._shorten_windows()
        ended = expired(self.parked, self._now_ms())
        if not ended:
            return
        await self.lb.forget_parked(self.endpoint_id, ended)
        for name in ended:
            del self.parked[name]
        self.replicas = max(0, self.replicas - len(ended))
        await self.cluster.scale_deployment(self.namespace, self.name, self.replicas)
        for name in ended:
            log.info("pod %s/%s: its resume window ended: deleting it", self.namespace, name)
            with contextlib.suppress(NotFound):
                await self.cluster.delete("Pod", self.namespace, name)
            self.leaving.append(name)

    async def _shorten_windows(self) -> None:
        """A window shortened since a pod was parked (`lbResumeWindowS` lowered, or 0) ends
        it as the new setting would have (the pod's stamp; its routing record goes when the
        window ends, `forget_parked`)."""
        limit = self._now_ms() + int(self.resume_window_s * 1000)
        for name, until in list(self.parked.items()):
            if until <= limit:
                continue
            try:
                await self.cluster.annotate("Pod", self.namespace, name, {PARKED_UNTIL: str(limit)})
            except NotFound:
                continue
            self.parked[name] = limit

    async def mark_busy(self, busy: Collection[str]) -> None:
        """Busy pods cost much to delete and may not be evicted, idle ones cost nothing and
        may; only pods whose annotations change are patched."""
        for name, wanted in eviction_changes(self.pods, busy).items():
            with contextlib.suppress(NotFound):  # deleted since the tick began
                await self.cluster.annotate("Pod", self.namespace, name, wanted)

    async def keep_serving(self, seen: Collection[str] | None = None) -> None:
        """Pods being deleted (a scale-down, a rollout, `kubectl delete`, an eviction) get no
        new job; gated live pods not in service whose worker has polled (`seen`: the live
        workers the gateway reports; None when unknown) are put in service (Ready)."""
        back = to_serve(self.pods, self.now, seen)
        if self.store is not None and (self.leaving or back):
            await self.store.stop_taking(self.endpoint_id, self.leaving, resume=back)
        for name in back:
            await self._set_serving(name, True)

    async def act_on_asks(self, *, scaled_here: bool = True) -> None:
        """Delete the live pods a worker or a person asked gone, in one read of the asks
        (`JobStore.worker_asks`): replaced (`refresh_worker`: the runpod SDK's `stopPod`, the
        Workers tab's Restart), so the ReplicaSet starts a fresh pod, where restarting the
        container in place would reuse the pod (and, exited 0 again and again, back off as
        a crash loop); or stopped (`ask_stop`: the Workers tab's Stop), with the replica
        count lowered by as many when this scaler sets it (`scaled_here`), so none starts
        in their place (the scaler starts another only if workersMin or the queue want
        one). The gateway already gives them no new job; SIGTERM lets the job in hand end."""
        if self.store is None or not self.pods:
            return  # no pod to replace: no Redis call (an endpoint at zero costs none)
        restart, stop = await self.store.worker_asks(self.endpoint_id)
        for pod in [p for p in self.pods if p["metadata"]["name"] in set(restart)]:
            name = pod["metadata"]["name"]
            log.info("pod %s/%s asked for a fresh worker: deleting it", self.namespace, name)
            await self.cluster.delete("Pod", self.namespace, name)
            self.pods.remove(pod)
            self.leaving.append(name)
        await self._remove_stopped(set(stop), scaled_here=scaled_here)

    async def _remove_stopped(self, wanted: set[str], *, scaled_here: bool) -> None:
        """Each pod to stop first gets the lowest deletion cost, so a smaller count removes
        it and no other pod; then the count drops (`scaled_here`) and the pod is deleted."""
        victims = [p for p in self.pods if p["metadata"]["name"] in wanted]
        if not victims:
            return
        names = [p["metadata"]["name"] for p in victims]
        cheapest = {DELETION_COST: PARKED_COST}  # the one a smaller count removes
        for name in names:
            with contextlib.suppress(NotFound):  # deleted since the tick began
                await self.cluster.annotate("Pod", self.namespace, name, cheapest)
        if scaled_here:
            self.replicas = max(0, self.replicas - len(names))
            await self.cluster.scale_deployment(self.namespace, self.name, self.replicas)
        for pod, name in zip(victims, names, strict=True):
            log.info("pod %s/%s: a stop was asked: deleting it", self.namespace, name)
            with contextlib.suppress(NotFound):
                await self.cluster.delete("Pod", self.namespace, name)
            self.pods.remove(pod)
            self.leaving.append(name)

    async def resize(self, desired: int, *, idle_first: Sequence[str]) -> None:
        """Patch the scale subresource. Shrinking, the idle pods to remove (`idle_first`
        first) are taken out of service before, so the ReplicaSet deletes them; a
        load-balancing endpoint's are first taken out of routing (draining), and with a
        resume window parked rather than removed; growing, parked pods come back first."""
        for name in adopt_first(self.parked, desired - len(self.pods)):
            await self._unpark(name, "scale-up")
        surplus = len(self.pods) - desired
        if surplus > 0:
            by_name = {p["metadata"]["name"]: p for p in self.pods}
            victims = [n for n in idle_first if n in by_name][:surplus]
            if self.lb is not None and victims:
                await self.lb.drain(self.endpoint_id, victims)
            if self.store is not None and victims:
                await self.store.stop_taking(self.endpoint_id, victims)
            gated_victims = [n for n in victims if gated(by_name[n])]
            for name in gated_victims:
                await self._set_serving(name, False)
            parked = [n for n in victims if await self._park(by_name[n])]
            await self._until_not_ready([n for n in gated_victims if n not in parked])
        replicas = desired + len(self.parked)
        await self.cluster.scale_deployment(self.namespace, self.name, replicas)
        self.replicas = replicas

    async def _park(self, pod: Obj) -> bool:
        """Park a scale-down's victim (drained, out of service) when the endpoint has a
        resume window and the pod was routed; False when it goes as before."""
        name = pod["metadata"]["name"]
        if self.lb is None or not parks(self.resume_window_s, SCALE_DOWN):
            return False
        if not await self.lb.routed(self.endpoint_id, name):
            return False  # never routed: nothing to resume
        until = self._now_ms() + int(self.resume_window_s * 1000)
        marks = {PARKED_UNTIL: str(until), DELETION_COST: PARKED_COST, SAFE_TO_EVICT: "true"}
        try:
            await self.cluster.annotate("Pod", self.namespace, name, marks)
        except NotFound:  # deleted since the tick began
            return False
        await self.lb.park(self.endpoint_id, name, until)  # the pod says so first
        self.pods.remove(pod)
        self.parked[name] = until
        log.info("pod %s/%s parked: resumable for %g s", self.namespace, name, self.resume_window_s)
        return True

    async def _unpark(self, name: str, why: str) -> None:
        """A parked pod a worker again: in service (Ready), routed, idle marks."""
        until = self.parked.pop(name)
        try:
            await self.cluster.annotate("Pod", self.namespace, name, {PARKED_UNTIL: None, **IDLE})
        except NotFound:  # deleted meanwhile: the ReplicaSet replaces it with a worker
            return
        await self._set_serving(name, True)
        await self.lb.unpark(self.endpoint_id, name)  # type: ignore[union-attr]
        pod = {"metadata": {"name": name, "annotations": dict(IDLE)}, "status": {}}
        self.pods.append(pod)
        log.info(
            "pod %s/%s resumed (%s; its window ended at %d ms)", self.namespace, name, why, until
        )

    async def _until_not_ready(self, names: Collection[str]) -> None:
        """Wait (a little) until the kubelet has turned the pods' `Ready` to False: a
        ReplicaSet told to shrink before that would rank them like any Ready pod."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + NOT_READY_WAIT_S
        while names and self.selector:
            pods = await self.cluster.list_objects("Pod", self.namespace, self.selector)
            if not any(ready(p) for p in pods if p["metadata"]["name"] in names):
                return
            if loop.time() > deadline:
                log.warning("pods %s still Ready after %.0f s; shrinking anyway",
                            ", ".join(names), NOT_READY_WAIT_S)  # fmt: skip
                return
            await asyncio.sleep(NOT_READY_POLL_S)

    async def _set_serving(self, name: str, on: bool) -> None:
        with contextlib.suppress(NotFound):  # deleted since the tick began
            condition = serving_condition(on, rfc3339(self.now))
            await self.cluster.set_pod_condition(self.namespace, name, condition)
