"""Worker Deployments and pods as kopf's watches deliver them (two kopf indices).

The scaler would otherwise list every worker Deployment and pod of a namespace each tick
just to find that a thousand idle endpoints are still at rest, and each Endpoint's resync
would GET its Deployment to find it unchanged. kopf watches both kinds (filtered by label
on the server: only the operator's worker objects), indexes them by (namespace, endpoint)
before any handler runs, and keeps the index live; `kube/handlers.py` registers the index
functions below and hands the indices to the `Context`.

What the index is trusted for: deciding that nothing needs a look (an endpoint at rest, a
Deployment that already carries the desired content hash). A decision that writes (a
scale, a pod's `Serving` condition) still reads fresh objects from the API: a watch may
be a moment behind the operator's own writes, and a deletion missed across a re-list would
leave a ghost pod in an index, which then only costs a fresh read, never a wrong count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.kube.manifests.names import (
    COMPONENT_LABEL,
    ENDPOINT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
)

WORKER_LABELS = {COMPONENT_LABEL: "worker", MANAGED_BY_LABEL: MANAGED_BY}
WORKERS = ",".join(f"{key}={value}" for key, value in WORKER_LABELS.items())


def endpoint_worker_labels(endpoint_id: str) -> dict[str, str]:
    """The labels every worker object of the endpoint carries."""
    return {**WORKER_LABELS, ENDPOINT_LABEL: endpoint_id}


def endpoint_workers(endpoint_id: str) -> str:
    """The label selector of the endpoint's worker objects."""
    return ",".join(f"{key}={value}" for key, value in endpoint_worker_labels(endpoint_id).items())


DEPLOYMENTS = ("apps", "v1", "deployments")
PODS = ("v1", "pods")

Obj = Mapping[str, Any]
IndexKey = tuple[str, str]  # (namespace, endpoint id)


def index_entry(body: Obj) -> dict[IndexKey, Obj] | None:
    """A worker object's index entry: (namespace, endpoint) -> the object as delivered
    (None for an object without the endpoint label: not indexed)."""
    meta = body.get("metadata") or {}
    endpoint = (meta.get("labels") or {}).get(ENDPOINT_LABEL)
    if not endpoint:
        return None
    return {(meta.get("namespace", ""), endpoint): dict(body)}


@dataclass
class WatchedWorkers:
    """kopf's live indices of worker Deployments and pods; `ready` once kopf has filled
    them (it runs no Endpoint handler before that, and each of those sets it)."""

    deployments: Mapping[IndexKey, Iterable[Obj]]
    pods: Mapping[IndexKey, Iterable[Obj]]
    ready: bool = False

    def deployment(self, namespace: str, endpoint_id: str) -> Obj | None:
        """The endpoint's worker Deployment as last delivered (None: none seen)."""
        return next(iter(self.deployments.get((namespace, endpoint_id), ())), None)

    def pods_of(self, namespace: str, endpoint_id: str) -> list[Obj]:
        """The endpoint's worker pods as last delivered."""
        return list(self.pods.get((namespace, endpoint_id), ()))
