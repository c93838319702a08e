"""Dev mode's batch pool (issue 49, item 2; docs/batch-jobs.md): each queue endpoint's
Batch Jobs run on a second local pool of worker processes, the only workers of a hidden
endpoint of its own, `batch-<id>` (`models.batch.batch_pool_id`): a registry entry (origin
`batch`) the control plane never lists, so the gateway's job path and worker API serve it
as any queue endpoint. It runs what the endpoint runs, from zero workers up to the
endpoint's `batchWorkersMax` (`models.batch.batch_pool_spec`), and its scaler takes it
back to zero once its queue is empty. `/run` traffic never reaches its queue nor its
workers; the endpoint's own workers never take a batch's job.

The pool is made when the endpoint's first batch is to run (`LocalControlPlane.
ensure_batch_pool`, which the batch runner calls through `Gateway.pool_needed`), or at
start when the endpoint has batches in Redis already: an endpoint that never had a batch
has no pool, so no `batch-<id>` entry, history nor usage."""

from __future__ import annotations

from lockgate.gateway.state import Gateway
from lockgate.models.batch import batch_pool_id, batch_pool_spec
from lockgate.models.endpoint import EndpointSpec, EndpointType
from lockgate.models.registry_entry import RegistryEntry

BATCH_ORIGIN = "batch"  # a registry entry's origin: an endpoint's batch pool, never resumed


def has_batch_pool(spec: EndpointSpec) -> bool:
    """Whether the endpoint runs batches: a queue endpoint (an LB one takes no jobs)."""
    return spec.type == EndpointType.QUEUE


def batch_entry(pool_id: str, spec: EndpointSpec, job_api_url: str) -> RegistryEntry:
    """The batch pool's registry entry: the endpoint's settings for its pool."""
    return RegistryEntry(
        id=pool_id, jobApiUrl=job_api_url, origin=BATCH_ORIGIN,
        **batch_pool_spec(spec).model_dump(mode="json"),
    )  # fmt: skip


async def remove_batch_pool(gw: Gateway, endpoint_id: str) -> None:
    """A deleted endpoint's batch pool and batches: its entry, jobs and history, and every
    batch record (its workers are stopped first, by the caller)."""
    pool = batch_pool_id(endpoint_id)
    await gw.registry.delete_endpoint(pool)
    await gw.store.delete_endpoint_data(pool)
    await gw.batches.delete_endpoint_data(endpoint_id)
