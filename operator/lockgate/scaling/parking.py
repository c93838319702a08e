"""Parking: a load-balancing worker a scale-down removes is kept resumable for the
endpoint's `lbResumeWindowS` instead of stopped (RunPod's `strict-resume` affinity can
bring it back), then stopped for good. Pure decisions; the pools apply them
(`dev.lb_pool.LbProcessPool`). Deadlines are on the caller's monotonic clock (s)."""

from __future__ import annotations

from collections.abc import Mapping

SCALE_DOWN = "idle"  # the reason a pool's `resize` stops a worker with


def parks(window_s: float, why: str) -> bool:
    """Whether a worker being stopped for `why` is parked rather than stopped: only a
    scale-down's (idle) victims, and only with a resume window (0: stopped at once; a
    replacement, a refresh or a shutdown always stops)."""
    return window_s > 0 and why == SCALE_DOWN


def expired(deadlines: Mapping[str, float], now: float) -> list[str]:
    """The parked workers whose resume window has passed (to stop for good), in order."""
    return sorted(w for w, until in deadlines.items() if until <= now)


def adopt_first(deadlines: Mapping[str, float], wanted: int) -> list[str]:
    """The parked workers a scale-up of `wanted` workers resumes instead of starting new
    ones: the most recently parked first (latest deadline; expire the others first)."""
    newest = sorted(deadlines, key=lambda w: (-deadlines[w], w))
    return newest[: max(0, wanted)]
