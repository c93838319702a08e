"""How a worker Deployment rolls: the version its pods carry, and the strategy a new
version (a release) or any other change of the pod template gets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockgate.kube.manifests.names import VERSION_LABEL, Obj

# RunPod's rolling rule, for a new version: every old worker is told to stop at once (the
# idle ones exit, a busy one finishes its job or its requests within its termination grace
# period) while the new ones start; no extra worker beyond the replica count is made.
AT_ONCE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}}
# Any other change of the pod template (a GPU type fallback, a new worker key, a timeout):
# Kubernetes' default, the old workers serve until new ones are Ready.
GENTLY = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}


def pod_version(deployment: Mapping[str, Any] | None) -> str | None:
    """The version a worker Deployment's pod template carries (None: none, or no
    Deployment)."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("labels") or {}).get(VERSION_LABEL)


def rollout_strategy(deployed: Mapping[str, Any] | None, version: int) -> Obj:
    """`AT_ONCE` when the Deployment as it is runs another version than `version` (a
    release rolls out), else `GENTLY`."""
    label = pod_version(deployed)
    return AT_ONCE if deployed is not None and label != str(version) else GENTLY
