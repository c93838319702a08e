"""What an endpoint's state reads as in the CLI: the console's badge (`static/pages/state.js`,
`endpointState`), so `lockgate endpoints list` says "Crash loop" where the console does, not
the bare phase `Ready`. The same rules in Python; tests/test_endpoint_state.py runs both on
the same records and compares."""

from __future__ import annotations

from typing import Any, NamedTuple

# WorkersHealthy reasons and the label each one shows; another reason shows "Unhealthy".
WORKER_LABELS = {
    "CrashLoop": "Crash loop",
    "ImagePullError": "Image pull error",
    "ContainerConfigError": "Config error",
    "NoGpuCapacity": "No GPU capacity",
    "NoCpuCapacity": "No CPU capacity",
    "ModelFetchFailed": "Model download failed",
}


class State(NamedTuple):
    """A label for the table, and why (empty: nothing to say)."""

    label: str
    why: str = ""


def _condition(status: dict[str, Any], kind: str, value: str) -> dict[str, Any] | None:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind and c.get("status") == value:
            return c
    return None


def _models_downloading(status: dict[str, Any]) -> dict[str, Any] | None:
    for c in status.get("conditions") or []:
        if not isinstance(c, dict):
            continue
        cached = c.get("type") == "ModelsCached" and c.get("status") == "False"
        healthy = c.get("type") == "WorkersHealthy" and c.get("status") == "True"
        if (cached and c.get("reason") == "Downloading") or (
            healthy and c.get("reason") == "DownloadingModels"
        ):
            return c
    return None


def endpoint_state(status: dict[str, Any] | None, health: dict[str, Any] | None = None) -> State:
    """The endpoint's state from its lockgate `status` (phase, conditions) and, when read,
    its job API's `/health`: the cause when its workers fail (a crash loop first), else
    "Downloading models" while none serves, else its phase."""
    status = status or {}
    phase = status.get("phase") or "Pending"
    if phase == "Failed":
        return State(phase)
    loop = _condition(status, "CrashLoop", "True")
    if phase == "CrashLoop" or loop:
        return State("Crash loop", (loop or {}).get("message") or "")
    workers = (health or {}).get("workers") or {}
    failing = _condition(status, "WorkersHealthy", "False")
    if failing:
        label = WORKER_LABELS.get(failing.get("reason") or "", "Unhealthy")
        return State(label, failing.get("message") or failing.get("reason") or "")
    unhealthy = workers.get("unhealthy") or 0
    if unhealthy > 0:
        return State("Unhealthy", f"{unhealthy} worker{'' if unhealthy == 1 else 's'} unhealthy")
    serving = (workers.get("idle") or 0) + (workers.get("running") or 0)
    models = None if serving else _models_downloading(status)
    if models:
        return State("Downloading models", models.get("message") or "")
    return State(phase)
