"""Security contexts: the Template's Pod Security level for workers, `restricted` for the
flashboot helpers."""

from __future__ import annotations

from lockgate.kube.manifests.names import Obj
from lockgate.models import TemplateSpec
from lockgate.models.podfields import PodSecurity

HELPER_UID = 10001  # the flashboot helpers' non-root user (any image runs `busybox true` so)
SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}
LOCKED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_security_context(template: TemplateSpec) -> Obj:
    """Pod-level: `restricted` runs as a fixed non-root uid (the kubelet refuses to start a
    container as root); `baseline` keeps the image's own user and only sets seccomp."""
    if template.podSecurity == PodSecurity.BASELINE:
        return dict(SECCOMP)
    uid = template.runAsUser
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid, **SECCOMP}


def container_security_context(template: TemplateSpec) -> Obj:
    """Container-level: no privilege escalation and no capabilities under `restricted`;
    `baseline` keeps the runtime's default capabilities (root images may need them)."""
    if template.podSecurity == PodSecurity.BASELINE:
        return {"privileged": False, **SECCOMP}
    return {"runAsNonRoot": True, **LOCKED, **SECCOMP}


def helper_security_context() -> Obj:
    """The flashboot helpers: `restricted`, as a non-root uid that any image can run as."""
    return {"runAsNonRoot": True, "runAsUser": HELPER_UID, "runAsGroup": HELPER_UID, **LOCKED}
