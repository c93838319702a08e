"""Pure: an Endpoint's status (phase, conditions, counts) from what the operator observed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockgate.kube.crds import omit_empty_strings
from lockgate.kube.manifests.names import selector
from lockgate.models import Condition, ConditionStatus, EndpointStatus, Phase
from lockgate.models.crashloop import CrashLoop
from lockgate.scaling.crashloop import loop_condition

SPEC_VALID = "SpecValid"
TEMPLATE_FOUND = "TemplateFound"
SECRETS_ALLOWED = "SecretsAllowed"  # the Template hands workers only Secrets marked for them
REGISTERED = "Registered"
WORKLOADS_APPLIED = "WorkloadsApplied"  # the API server took the Deployment (and DaemonSet)
DEPLOYMENT_AVAILABLE = "DeploymentAvailable"
READY = "Ready"  # mirrors the phase, for tools that read a Ready condition (kstatus, Flux)
METRICS_AVAILABLE = "MetricsAvailable"  # the scaler could read the gateway's /metrics
WORKERS_HEALTHY = "WorkersHealthy"  # worker pods schedule and start (kube.podstates)
CRASH_LOOP = "CrashLoop"  # True: workers failed to start too often, none is started


@dataclass(frozen=True, slots=True)
class Check:
    """One condition before it gets a timestamp. `ok=None` means Unknown; a failed `fatal`
    check makes the endpoint Failed (its spec must change), a failed other one Pending."""

    type: str
    ok: bool | None
    reason: str
    message: str = ""
    fatal: bool = False

    @property
    def status(self) -> ConditionStatus:
        if self.ok is None:
            return ConditionStatus.UNKNOWN
        return ConditionStatus.TRUE if self.ok else ConditionStatus.FALSE


@dataclass(frozen=True, slots=True)
class Activity:
    """Counts of the endpoint from the job store."""

    idle: int = 0
    running: int = 0
    in_queue: int = 0
    in_progress: int = 0


@dataclass(frozen=True)
class Observed:
    """Everything a status is computed from, as read in one reconcile."""

    generation: int
    checks: Sequence[Check] = ()  # spec, Template, registry, workloads: up to the first failure
    deployment: Mapping[str, Any] | None = None  # the Deployment as the API returned it
    activity: Activity = field(default_factory=Activity)
    # The scaler's `MetricsAvailable`; when False, a Ready endpoint shows as Degraded. None
    # where this replica does not run the scaler (another holds its Lease): the condition
    # is then kept as it was, and so is its effect on the phase.
    scaling: Check | None = None
    # `WorkersHealthy` from the worker pods (kube.podstates), by the replica running the
    # scaler; None elsewhere: the condition is then kept as it was.
    pods: Check | None = None
    # `CrashLoop` from the registry entry (`crash_loop_check`); None when the endpoint is
    # not registered: no such condition. True makes the phase CrashLoop.
    crash_loop: Check | None = None


def deployment_check(deployment: Mapping[str, Any] | None) -> Check:
    """`DeploymentAvailable`, mirrored from the Deployment's own `Available` condition."""
    if deployment is None:
        return Check(DEPLOYMENT_AVAILABLE, False, "DeploymentMissing", "no worker Deployment yet")
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Available":
            ok = {"True": True, "False": False}.get(cond.get("status"))
            return Check(DEPLOYMENT_AVAILABLE, ok, cond.get("reason", ""), cond.get("message", ""))
    return Check(DEPLOYMENT_AVAILABLE, None, "NotObservedYet", "the Deployment has no status yet")


def worker_selector(endpoint_id: str) -> str:
    """The worker pods' label selector as a string (`status.selector`, which an HPA reads
    through the scale subresource)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector(endpoint_id, "worker").items()))


def pod_count(deployment: Mapping[str, Any] | None) -> int:
    """Worker pods the Deployment has, in any state (`status.replicas`)."""
    return int(((deployment or {}).get("status") or {}).get("replicas") or 0)


def replica_counts(deployment: Mapping[str, Any] | None) -> tuple[int, int]:
    """(desired, ready) workers of a Deployment."""
    if deployment is None:
        return 0, 0
    desired = (deployment.get("spec") or {}).get("replicas", 1)
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    return int(desired), int(ready)


def _stalled(deployment: Mapping[str, Any]) -> str | None:
    """The Deployment controller's message when the rollout gave up, else None."""
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return cond.get("message") or "workers did not become ready in time"
    return None


def phase(checks: Sequence[Check], deployment: Mapping[str, Any] | None) -> tuple[Phase, str]:
    """The phase and a one-line reason a person can act on."""
    for check in checks:
        if check.ok is False:
            return (Phase.FAILED if check.fatal else Phase.PENDING), check.message
    if deployment is None:
        return Phase.INITIALIZING, "creating the worker Deployment"
    desired, ready = replica_counts(deployment)
    if ready >= 1 or desired == 0:
        return Phase.READY, f"{ready} of {desired} workers ready"
    if stalled := _stalled(deployment):
        return Phase.FAILED, stalled
    return Phase.INITIALIZING, f"waiting for {desired} worker(s) to become ready"


def degraded(current: Phase, why: str, metrics: Check | None) -> tuple[Phase, str]:
    """A Ready endpoint whose metrics the scaler cannot read is Degraded: it serves with the
    workers it has, but the count is held, so queued jobs may get no new worker."""
    if current != Phase.READY or metrics is None or metrics.ok is not False:
        return current, why
    return Phase.DEGRADED, f"{why}; {metrics.message}"


def crash_loop_check(loop: CrashLoop | None, threshold: int, endpoint_id: str) -> Check:
    """The `CrashLoop` condition: True while the endpoint starts no worker
    (`scaling.crashloop`), with the last failed start's exit code and line."""
    said = loop_condition(loop, threshold, endpoint_id)
    return Check(CRASH_LOOP, said.looping, said.reason, said.message)


def crash_looping(current: Phase, why: str, crash: Check | None) -> tuple[Phase, str]:
    """An endpoint whose workers crash at start is in phase CrashLoop (unless its spec
    already keeps it from running: Failed, Pending)."""
    if crash is None or crash.ok is not True or current in (Phase.FAILED, Phase.PENDING):
        return current, why
    return Phase.CRASH_LOOP, crash.message


def metrics_of(observed: Observed, previous: Sequence[Mapping[str, Any]]) -> Check | None:
    """`MetricsAvailable` as this reconcile knows it: the scaler's, else the one carried."""
    if observed.scaling is not None:
        return observed.scaling
    for cond in carried(previous, METRICS_AVAILABLE):
        ok = {"True": True, "False": False}.get(cond.status)
        return Check(cond.type, ok, cond.reason, cond.message)
    return None


def merge_conditions(
    previous: Sequence[Mapping[str, Any]], checks: Sequence[Check], now: str
) -> list[Condition]:
    """Conditions for `checks`, keeping a condition's transition time while its status holds."""
    before = {c.get("type"): c for c in previous}
    out = []
    for check in checks:
        old = before.get(check.type)
        same = old is not None and old.get("status") == check.status
        since = old.get("lastTransitionTime", now) if same and old else now
        out.append(
            Condition(
                type=check.type,
                status=check.status,
                reason=check.reason,
                message=check.message,
                lastTransitionTime=since,
            )
        )
    return out


def carried(previous: Sequence[Mapping[str, Any]], type_: str) -> list[Condition]:
    """The previous condition of `type_`, unchanged (none when there was none)."""
    return [Condition.model_validate(c) for c in previous if c.get("type") == type_]


def endpoint_status(
    observed: Observed,
    *,
    endpoint_id: str,
    job_api_url: str,
    previous: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    """The `status` to write on the Endpoint (JSON)."""
    before = (previous or {}).get("conditions") or []
    current, why = degraded(
        *phase(observed.checks, observed.deployment), metrics_of(observed, before)
    )
    current, why = crash_looping(current, why, observed.crash_loop)
    ready = Check(READY, current == Phase.READY, str(current), why)
    checks = [*observed.checks, deployment_check(observed.deployment), ready]
    if observed.scaling is not None:
        checks.append(observed.scaling)
    if observed.pods is not None:
        checks.append(observed.pods)
    if observed.crash_loop is not None:
        checks.append(observed.crash_loop)
    kept = [] if observed.scaling is not None else carried(before, METRICS_AVAILABLE)
    kept += [] if observed.pods is not None else carried(before, WORKERS_HEALTHY)
    desired, ready_workers = replica_counts(observed.deployment)
    act = observed.activity
    status = EndpointStatus(
        phase=current,
        endpointId=endpoint_id,
        jobApiUrl=job_api_url,
        workers={
            "desired": desired,
            "ready": ready_workers,
            "idle": act.idle,
            "running": act.running,
        },
        jobs={"inQueue": act.in_queue, "inProgress": act.in_progress},
        conditions=merge_conditions(before, checks, now) + kept,
        observedGeneration=observed.generation,
        replicas=pod_count(observed.deployment),
        selector=worker_selector(endpoint_id),
    )
    return omit_empty_strings(status.model_dump(mode="json"))


def at_rest(status: Mapping[str, Any] | None) -> bool:
    """Whether an Endpoint's status says it is Ready with no worker and no job: then its
    resync may come less often (`resync_rest_s`)."""
    status = status or {}
    counts = [*(status.get("workers") or {}).values(), *(status.get("jobs") or {}).values()]
    return status.get("phase") == "Ready" and bool(counts) and not any(counts)


def resync_may_wait(status: Mapping[str, Any] | None, since_s: float, rest_s: float) -> bool:
    """Whether a resync may be skipped: the Endpoint is at rest and its last full resync
    is less than `rest_s` old."""
    return at_rest(status) and since_s < rest_s


def rest_confirmed(status: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None) -> bool:
    """Whether a worker Deployment as watched agrees with an at-rest status: there, asking
    for and having no pod, with the availability the status shows. A Deployment just
    observed by its controller, deleted or scaled from outside ends the rest at once."""
    if deployment is None or pod_count(deployment) or replica_counts(deployment)[0]:
        return False
    return shows(status, [deployment_check(deployment)])


def shows(status: Mapping[str, Any] | None, checks: Sequence[Check]) -> bool:
    """Whether a status already carries each check's condition (status, reason, message)."""
    have = {
        c.get("type"): (c.get("status"), c.get("reason"), c.get("message") or "")
        for c in (status or {}).get("conditions") or []
    }
    return all(have.get(c.type) == (c.status.value, c.reason, c.message) for c in checks)


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether writing `b` over `a` would change anything a reader sees."""
    return dict(a or {}) == dict(b or {})
