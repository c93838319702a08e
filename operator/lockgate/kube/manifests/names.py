"""What names and labels an Endpoint's objects: the owner, object names, label and
annotation keys, and the metadata every owned object carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.kube.crds import API_VERSION, ENDPOINT
from lockgate.models import podfields

Obj = dict[str, Any]

ANNOTATION_PREFIX = "lockgate.dev/"
HASH_ANNOTATION = "lockgate.dev/applied-hash"
TEMPLATE_ANNOTATION = "lockgate.dev/template"
KEY_ANNOTATION = "lockgate.dev/worker-key"
# The worker key's full SHA-256 on the worker Deployment: the operator reads no Secret's data, so
# this (and the Redis registry) is where it finds the key's digest again.
KEY_DIGEST_ANNOTATION = "lockgate.dev/worker-key-digest"
# The pod annotations a Template set (comma-separated keys): removed from the Template, they
# are removed from the pods too, while annotations other tools added stay.
POD_ANNOTATIONS_ANNOTATION = "lockgate.dev/template-annotations"
SERVING_CONDITION = "lockgate.dev/Serving"  # a worker pod's readiness gate (the scaler's)
# A worker pod's label: the endpoint version (release) it runs. A new version changes the
# pod template, which is what rolls the workers (`AT_ONCE`).
VERSION_LABEL = "lockgate.dev/version"
WORKER_CONTAINER = "worker"


@dataclass(frozen=True, slots=True)
class Owner:
    """The Endpoint resource the objects belong to; its name is the endpoint id."""

    name: str
    namespace: str
    uid: str
    created: str = ""  # metadata.creationTimestamp (RFC 3339), when known

    def reference(self) -> Obj:
        return {
            "apiVersion": API_VERSION,
            "kind": ENDPOINT.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def deployment_name(endpoint_id: str) -> str:
    return f"{endpoint_id}-workers"


def secret_name(endpoint_id: str) -> str:
    return f"{endpoint_id}{podfields.WORKER_KEY_SUFFIX}"


def daemonset_name(endpoint_id: str) -> str:
    return f"{endpoint_id}-flashboot"


def network_policy_name(endpoint_id: str) -> str:
    return f"{endpoint_id}-lb-workers"


# The labels that find an Endpoint's workloads (`selector`, `labels`), for watches,
# selectors and the uninstaller (`kube.watched`, `kube.podlogs`, `kube.uninstall`).
ENDPOINT_LABEL = "lockgate.dev/endpoint"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "lockgate-operator"


def selector(endpoint_id: str, component: str) -> dict[str, str]:
    """The immutable selector of a workload: endpoint and component only."""
    return {ENDPOINT_LABEL: endpoint_id, COMPONENT_LABEL: component}


def labels(endpoint_id: str, component: str) -> dict[str, str]:
    """The standard `app.kubernetes.io/*` labels plus `lockgate.dev/endpoint`."""
    return {
        "app.kubernetes.io/name": "lockgate",
        "app.kubernetes.io/instance": endpoint_id,
        COMPONENT_LABEL: component,
        "app.kubernetes.io/part-of": "lockgate",
        MANAGED_BY_LABEL: MANAGED_BY,
        **selector(endpoint_id, component),
    }


def metadata(owner: Owner, name: str, component: str, annotations: dict | None = None) -> Obj:
    """An owned object's metadata: its name, the Endpoint's namespace, labels and owner
    reference."""
    meta: Obj = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner.name, component),
        "ownerReferences": [owner.reference()],
    }
    if annotations:
        meta["annotations"] = annotations
    return meta
