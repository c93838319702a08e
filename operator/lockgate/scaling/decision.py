"""How many workers an endpoint should have: a pure function of what the queue shows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PoolView:
    """What the scaler sees of one endpoint at one instant."""

    queued: int  # jobs waiting that may trigger scaling (lowPriority excluded)
    in_progress: int
    workers: int  # workers started and not yet stopping
    idle_s: tuple[float, ...]  # for each idle worker, seconds since it last held a job


@dataclass(frozen=True, slots=True)
class Limits:
    workers_min: int
    workers_max: int
    idle_timeout_s: float


def desired_workers(view: PoolView, limits: Limits) -> int:
    """One worker per waiting job beyond those already free (idle or starting), up to the
    maximum; when nothing waits, stop idle workers past the idle timeout one at a time;
    never below the minimum."""
    current = view.workers
    if view.queued > 0:
        busy = view.workers - len(view.idle_s)
        current = max(current, busy + view.queued)
    elif any(s >= limits.idle_timeout_s for s in view.idle_s):
        current -= 1
    return max(limits.workers_min, min(limits.workers_max, current))
