"""Pure: Kubernetes Events about an Endpoint (scaling decisions, metrics lost and found)."""

from __future__ import annotations

from typing import Any

from lockgate.kube.crds import API_VERSION, ENDPOINT
from lockgate.kube.manifests.names import Owner

COMPONENT = "lockgate-operator"
MESSAGE_LIMIT = 1024  # characters; the API server refuses Events with longer messages


def endpoint_event(owner: Owner, reason: str, message: str, *, now: str, warning: bool = False):
    """A core/v1 Event on the Endpoint, as `kubectl describe endpoints.lockgate.dev` shows."""
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{owner.name}.", "namespace": owner.namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": ENDPOINT.kind,
            "name": owner.name,
            "namespace": owner.namespace,
            "uid": owner.uid,
        },
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    return event
