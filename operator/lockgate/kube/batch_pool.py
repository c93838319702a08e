"""A cluster's batch pool (issue 49, item 2; docs/batch-jobs.md): each queue Endpoint's
Batch Jobs run on a hidden child `Endpoint` of its own, `batch-<id>`
(`models.batch.batch_pool_id`), which the operator reconciles as any Endpoint: a second
worker Deployment, its worker key, its registry entry, its scaler (from zero workers up to
the parent's `batchWorkersMax`, back to zero when its queue is empty).

The child is labelled `BATCH_OF_LABEL` (the management API neither lists, reads, changes
nor deletes it: kube/controlplane.py), owned by the parent (garbage-collected with it),
and carries the parent's running build (`BUILD_ANNOTATION`), so it runs what the parent
runs. `ensure_batch_pool` makes it at the parent's first reconcile (a change or a resync)
that finds a batch of the endpoint in Redis (an endpoint that never had a batch has no
pool: no second Deployment, worker key Secret nor registry entry, and no call for it), and
updates it at each change of the parent while the endpoint has batches (a done batch is
kept `LOCKGATE_BATCH_RETENTION_S`; after the last is gone the pool stays as it was).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from lockgate.kube.cluster import Conflict
from lockgate.kube.controlplane import (
    BATCH_OF_LABEL,
    BUILD_ANNOTATION,
    CANARY_OF_LABEL,
    spec_from_resource,
)
from lockgate.kube.crds import ENDPOINT, GROUP, VERSION, omit_empty_strings
from lockgate.models.batch import batch_pool_id, batch_pool_spec
from lockgate.models.endpoint import EndpointType
from lockgate.models.source import BuildTrigger

if TYPE_CHECKING:
    from lockgate.kube.cluster import Cluster

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def is_hidden_child(obj: Obj) -> bool:
    """Whether an Endpoint is the operator's own (a build's canary, a batch pool)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return CANARY_OF_LABEL in labels or BATCH_OF_LABEL in labels


def batch_pool_endpoint(parent: Obj) -> Obj | None:
    """The batch pool `Endpoint` of the Endpoint `parent` (its object as the API server
    has it); None when it has none (a load-balancing endpoint, or a hidden child)."""
    if is_hidden_child(parent):
        return None
    spec = spec_from_resource(parent)
    if spec.type != EndpointType.QUEUE:
        return None
    pool = batch_pool_spec(spec)
    if pool.source is not None:  # kept (the running build applies to its URL), built never
        git = pool.source.git.model_copy(update={"trigger": BuildTrigger.MANUAL})
        pool = pool.model_copy(update={"source": pool.source.model_copy(update={"git": git})})
    meta = parent["metadata"]
    body = {k: v for k, v in pool.model_dump(mode="json").items() if v is not None}
    annotations = {}
    if build := (meta.get("annotations") or {}).get(BUILD_ANNOTATION):
        annotations[BUILD_ANNOTATION] = build
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": ENDPOINT.kind,
        "metadata": {
            "name": batch_pool_id(meta["name"]),
            "namespace": meta["namespace"],
            "labels": {BATCH_OF_LABEL: meta["name"]},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": ENDPOINT.kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": omit_empty_strings(body),
    }


def differs(found: Obj, wanted: Obj) -> bool:
    """Whether the pool as found needs the wanted spec or build."""
    build = ((found.get("metadata") or {}).get("annotations") or {}).get(BUILD_ANNOTATION)
    wanted_build = wanted["metadata"]["annotations"].get(BUILD_ANNOTATION)
    return found.get("spec") != wanted["spec"] or build != wanted_build


async def ensure_batch_pool(cluster: Cluster, parent: Obj) -> None:
    """Make or update the parent's batch pool Endpoint (nothing for an endpoint that takes
    no batch). An Endpoint of that name that is not the parent's pool is left alone."""
    wanted = batch_pool_endpoint(parent)
    if wanted is None:
        return
    meta = wanted["metadata"]
    found = await cluster.get_endpoint(meta["namespace"], meta["name"])
    if found is None:
        with contextlib.suppress(Conflict):  # made meanwhile: the next change compares
            await cluster.create_endpoint(meta["namespace"], wanted)
        return
    labels = (found.get("metadata") or {}).get("labels") or {}
    if labels.get(BATCH_OF_LABEL) != parent["metadata"]["name"] or not differs(found, wanted):
        return
    build = meta["annotations"].get(BUILD_ANNOTATION)
    patch = {"metadata": {"annotations": {BUILD_ANNOTATION: build}}, "spec": wanted["spec"]}
    # a merge patch: fields the parent dropped go as null
    for field in (found.get("spec") or {}).keys() - wanted["spec"].keys():
        patch["spec"][field] = None
    await cluster.patch_endpoint(meta["namespace"], meta["name"], patch)
