"""How many workers an endpoint should have: a pure function of metrics, settings and time.

The rules, in the order `decide` applies them:

0. **Set from outside.** While the endpoint's `replicas` is set (`kubectl scale`, an HPA
   or KEDA through the Endpoint's scale subresource), it is the count, kept within
   `workersMin..workersMax`, with or without metrics; the rules below apply once it is unset.
1. **No data, no change.** Without a metrics reading the count is held (only clamped to
   `workersMin..workersMax`): missing data never scales anything to zero.
2. **Bounds.** Below `workersMin` or above `workersMax`, go to the bound at once.
3. **Scale up** only while normal (not lowPriority) jobs wait:
   - `QUEUE_DELAY`: when the oldest normal job has waited longer than `scalerValue` s,
     want one worker per waiting job beyond the busy ones (`busy + queued`; a worker that
     is still starting counts as free, so a cold start is never paid twice). At zero
     workers the first one starts at once (activation): nothing else could serve the job.
   - `REQUEST_COUNT`: want `ceil((queued + in progress) / scalerValue)` workers; for a
     load-balancing endpoint, `ceil((requests held + in flight) / scalerValue)`, and
     requests in flight may scale up too (they share their worker).
   Step limit: one decision adds at most `max(UP_STEP_MIN, current)` workers (it at
   most doubles the pool), so one odd reading cannot summon `workersMax` workers.
4. **Scale down** only when no normal job waits, and only by workers idle for at least
   `idleTimeout` s (the per-worker stabilisation: a worker idle that long was surplus for
   that whole window), down to what the scaler type wants (zero when nothing runs and
   `workersMin` is 0). Nothing is removed within `STABILISATION_S` of a scale-up (or
   `idleTimeout`, when shorter and not 0), so a pool that just grew is not shrunk by the
   next reading, even with `idleTimeout` 0; a worker started for a job arriving at zero
   goes `idleTimeout` after that job, as the user set it, not 10 s after it started.

lowPriority jobs never cause a scale-up: they are run by workers that exist for other
reasons (`workersMin`, normal jobs), which take them like any other job, and a worker
never counts as idle while it holds one. At zero workers they wait until a normal job
(or `workersMin`) brings a worker, or until their `ttl` ends; an endpoint that receives
only lowPriority jobs needs `workersMin` >= 1. Jobs in progress count for
`REQUEST_COUNT` whatever their priority: they already have a worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockgate.models.endpoint import EndpointSpec, ScalerType

UP_STEP_MIN = 4  # workers a scale-up may always add, even to a pool of 0 or 1
STABILISATION_S = 10.0  # s after a scale-up during which nothing is removed

_DEFAULTS = EndpointSpec()


@dataclass(frozen=True, slots=True)
class EndpointMetrics:
    """What the gateway's `/metrics` says about one endpoint at one instant."""

    queued: int = 0  # normal jobs waiting
    queued_low: int = 0  # lowPriority jobs waiting
    oldest_queued_age_s: float = 0.0  # of normal jobs; 0 when none waits
    oldest_queued_low_age_s: float = 0.0
    in_progress: int = 0
    workers_idle: int = 0
    workers_running: int = 0
    worker_jobs: Mapping[str, int] = field(default_factory=dict)  # live worker -> jobs held
    # Load-balancing endpoints: requests held for a routable worker, and in flight (their
    # workers are in `worker_jobs` with the requests each serves).
    requests_held: int = 0
    requests_in_flight: int = 0

    @property
    def waiting(self) -> int:
        """Work that has no worker yet: normal jobs queued, requests held."""
        return self.queued + self.requests_held


@dataclass(frozen=True, slots=True)
class Limits:
    """The endpoint settings scaling obeys; idle timeout in seconds."""

    workers_min: int
    workers_max: int
    idle_timeout_s: float
    scaler_type: ScalerType = _DEFAULTS.scalerType
    scaler_value: int = _DEFAULTS.scalerValue
    replicas: int | None = None  # set from outside (scale subresource): the count to keep

    @classmethod
    def from_settings(cls, entry: Mapping[str, Any]) -> Limits:
        """From an endpoint's settings in the spec's camelCase (a registry entry, a spec)."""
        spec = EndpointSpec.model_validate(
            {k: v for k, v in entry.items() if k in EndpointSpec.model_fields}
        )
        return cls(
            workers_min=spec.workersMin,
            workers_max=spec.workersMax,
            idle_timeout_s=float(spec.idleTimeout),
            scaler_type=spec.scalerType,
            scaler_value=spec.scalerValue,
            replicas=spec.replicas,
        )


@dataclass(frozen=True, slots=True)
class Workers:
    """The pool as the scaler sees it: how many workers, and how long each free one idled."""

    count: int  # asked for and not stopping, including those still starting
    idle_s: tuple[float, ...] = ()  # per worker holding no job (or starting): seconds idle

    @property
    def busy(self) -> int:
        return max(0, self.count - len(self.idle_s))


@dataclass(frozen=True, slots=True)
class Decision:
    """The desired worker count and why, in words fit for a Kubernetes Event."""

    desired: int
    reason: str


def _clamp(n: int, limits: Limits) -> int:
    return max(limits.workers_min, min(limits.workers_max, n))


def wanted(metrics: EndpointMetrics, limits: Limits, workers: Workers) -> tuple[int, str]:
    """The workers the scaler type asks for now, and why (before bounds and steps)."""
    q = metrics.queued
    if limits.scaler_type == ScalerType.REQUEST_COUNT:
        held, flying = metrics.requests_held, metrics.requests_in_flight
        need = math.ceil((q + metrics.in_progress + held + flying) / limits.scaler_value)
        per = f"{limits.scaler_value}/worker"
        if held or flying:
            return need, f"{held} requests held + {flying} in flight, {per}"
        return need, f"{q} queued + {metrics.in_progress} in progress, {per}"
    if not q:
        return workers.busy, f"nothing queued, {workers.busy} busy"
    age, limit = metrics.oldest_queued_age_s, limits.scaler_value
    if age > limit:
        return workers.busy + q, f"oldest job waited {age:.1f}s > {limit}s, {q} queued"
    if workers.count == 0:
        return 1, f"{q} queued and no worker: starting one"
    return workers.count, f"oldest job waited {age:.1f}s <= {limit}s"


def _scale_down(
    need: int, limits: Limits, workers: Workers, now: float, last_scale_up: float | None
) -> Decision:
    current = workers.count
    target = _clamp(need, limits)
    window = min(STABILISATION_S, limits.idle_timeout_s or STABILISATION_S)
    if last_scale_up is not None and now - last_scale_up < window:
        return Decision(current, f"holding {current}: scaled up {now - last_scale_up:.0f}s ago")
    removable = sum(1 for s in workers.idle_s if s >= limits.idle_timeout_s)
    desired = max(target, current - removable)
    if desired == current:
        return Decision(current, f"holding {current}: no worker idle {limits.idle_timeout_s:g}s")
    why = f"{current - desired} worker(s) idle >= {limits.idle_timeout_s:g}s"
    return Decision(desired, f"{why}: {current} -> {desired}")


def _pinned(current: int, replicas: int, limits: Limits) -> Decision:
    target = _clamp(replicas, limits)
    why = f"spec.replicas is {replicas}" + (f", kept to {target}" if target != replicas else "")
    if target == current:
        return Decision(current, f"holding {current}: {why}")
    return Decision(target, f"{why}: {current} -> {target}")


def decide(
    metrics: EndpointMetrics | None,
    limits: Limits,
    workers: Workers,
    *,
    now: float,
    last_scale_up: float | None = None,
) -> Decision:
    """The desired worker count (see the module docstring for the rules).

    `now` and `last_scale_up` are seconds on one monotonic clock; `last_scale_up` is when
    a previous decision last raised the count (None: never)."""
    current = workers.count
    if limits.replicas is not None:
        return _pinned(current, limits.replicas, limits)
    if metrics is None:
        held = _clamp(current, limits)
        return Decision(held, f"metrics unavailable: holding {held}")
    if current != _clamp(current, limits):
        bound = _clamp(current, limits)
        name = "workersMin" if bound > current else "workersMax"
        return Decision(bound, f"{name} is {bound}: {current} -> {bound}")
    need, why = wanted(metrics, limits, workers)
    if need > current:
        # A request in flight shares its worker (a job has one to itself): more workers
        # serve the next requests sooner, so in-flight requests may scale up too.
        if metrics.waiting == 0 and metrics.requests_in_flight == 0:
            return Decision(current, f"holding {current}: only lowPriority or running work")
        desired = min(_clamp(need, limits), current + max(UP_STEP_MIN, current))
        if desired > current:
            return Decision(desired, f"{limits.scaler_type}: {why}: {current} -> {desired}")
        return Decision(current, f"holding {current}: workersMax is {limits.workers_max}")
    if metrics.waiting > 0 or need == current:
        return Decision(current, f"holding {current}: {why}")
    return _scale_down(need, limits, workers, now, last_scale_up)
