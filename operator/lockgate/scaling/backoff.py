"""Restarting a crashing worker with exponential back-off, as the kubelet does.

A worker that exits without being asked, and not with 0 (the runpod SDK's
`refresh_worker` exits 0 after its job on purpose), is a crash. After a crash the pool starts no
replacement for `first_s` (10 s), doubling with each crash that follows, up to `max_s`
(5 min); a worker that ran `reset_s` (10 min) before it crashed starts the count over.
Without it, dev mode restarted a handler that raises at import about three times a
second (115 processes in 35 s while one job waited).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CrashBackoff:
    """When the next worker may start, after the crashes seen so far."""

    first_s: float = 10.0
    max_s: float = 300.0
    reset_s: float = 600.0
    crashes: int = 0  # in a row: none of them ran `reset_s`
    until: float = 0.0  # monotonic time before which no worker starts

    def crashed(self, now: float, ran_s: float) -> float:
        """Count a crash of a worker that ran `ran_s`; returns the delay before the next
        start."""
        if ran_s >= self.reset_s:
            self.crashes = 0
        self.crashes += 1
        delay = min(self.first_s * 2 ** (self.crashes - 1), self.max_s)
        self.until = now + delay
        return delay

    def may_start(self, now: float) -> bool:
        """Whether a worker may start now."""
        return now >= self.until
