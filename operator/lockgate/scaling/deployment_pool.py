"""`DeploymentPool`: an endpoint's workers as the pods of its Deployment.

It resizes through the Deployment's scale subresource and marks busy pods with a high
`controller.kubernetes.io/pod-deletion-cost`, so the ReplicaSet removes idle pods first
(Kubernetes >= 1.22; older clusters ignore the annotation). Whichever pod is removed,
no job is cut short: the pod gets SIGTERM, the worker runtime finishes the job in hand,
and the pod's termination grace period covers the endpoint's execution timeout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from lockgate.kube.cluster import Cluster, NotFound
from lockgate.scaling.pool import PoolState

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
BUSY_COST = "1000"  # removed last
IDLE_COST = "0"  # the default when the annotation is absent

Obj = Mapping[str, Any]


def live_pods(pods: Sequence[Obj]) -> list[Obj]:
    """Pods that count as workers: not being deleted, not finished."""
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def cost_changes(pods: Sequence[Obj], busy: Collection[str]) -> dict[str, str]:
    """Pod name -> the deletion cost it should carry, for pods whose annotation differs."""
    changes = {}
    for pod in pods:
        meta = pod["metadata"]
        want = BUSY_COST if meta["name"] in busy else IDLE_COST
        if (meta.get("annotations") or {}).get(DELETION_COST, IDLE_COST) != want:
            changes[meta["name"]] = want
    return changes


class DeploymentPool:
    """One endpoint's Deployment and its pods, as observed at the start of a loop tick."""

    def __init__(self, cluster: Cluster, deployment: Obj, pods: Sequence[Obj]) -> None:
        self.cluster = cluster
        self.namespace = deployment["metadata"]["namespace"]
        self.name = deployment["metadata"]["name"]
        self.replicas = int((deployment.get("spec") or {}).get("replicas", 1))
        self.pods = live_pods(pods)

    async def state(self) -> PoolState:
        return PoolState(self.replicas, tuple(p["metadata"]["name"] for p in self.pods))

    async def mark_busy(self, busy: Collection[str]) -> None:
        """Busy pods cost much to delete, idle ones nothing; only changed pods are patched."""
        for name, cost in cost_changes(self.pods, busy).items():
            with contextlib.suppress(NotFound):  # deleted since the tick began
                await self.cluster.annotate("Pod", self.namespace, name, {DELETION_COST: cost})

    async def resize(self, desired: int, *, idle_first: Sequence[str]) -> None:
        """Patch the scale subresource; the ReplicaSet picks victims by deletion cost."""
        await self.cluster.scale_deployment(self.namespace, self.name, desired)
        self.replicas = desired
