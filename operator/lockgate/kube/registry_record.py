"""The operator's registry entry for an Endpoint: the record in Redis (`store.Registry`)
that the gateway and the scaler read about it. A Redis record, not a Kubernetes object, so
it is not among the manifests; it stays in `kube` because it is built from the Endpoint
resource (its `Owner`, its `lockgate.dev/scaler` annotation)."""

from __future__ import annotations

from collections.abc import Mapping

from lockgate.kube.manifests.names import Owner
from lockgate.models import EndpointSpec
from lockgate.models.crashloop import CrashLoop
from lockgate.models.registry_entry import RegistryEntry

# `lockgate.dev/scaler: external` on an Endpoint hands its worker count to another scaler
# (KEDA, an HPA): the operator's scaler then leaves the Deployment's replicas alone.
SCALER_ANNOTATION = "lockgate.dev/scaler"
EXTERNAL_SCALER = "external"


def scaled_externally(annotations: Mapping[str, str] | None) -> bool:
    """Whether an Endpoint's annotations hand its worker count to another scaler."""
    value = (annotations or {}).get(SCALER_ANNOTATION) or ""
    return value.strip().lower() == EXTERNAL_SCALER


def registry_entry(
    owner: Owner,
    spec: EndpointSpec,
    *,
    key_digest: str,
    job_api_url: str,
    external_scaler: bool = False,
    crash_loop: CrashLoop | None = None,
) -> RegistryEntry:
    """What the gateway (and the scaler) read about the endpoint from Redis; `crash_loop`:
    the one the scaler declared, while it holds (`scaling.crashloop.still_holds`)."""
    return RegistryEntry(
        id=owner.name,
        namespace=owner.namespace,
        uid=owner.uid,
        workerKeyDigest=key_digest,
        jobApiUrl=job_api_url,
        scaler=EXTERNAL_SCALER if external_scaler else None,
        crashLoop=crash_loop,
        **spec.model_dump(mode="json"),
    )
