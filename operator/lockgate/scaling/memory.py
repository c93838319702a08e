"""What the scaler remembers of one endpoint between decisions: when each worker last
held a job, and when the pool last grew. Times are seconds on the caller's clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lockgate.scaling.decision import Decision, Workers


class ScalerMemory:
    """Idle times per worker and the last scale-up; fed one observation per decision."""

    def __init__(self) -> None:
        self.last_busy: dict[str, float] = {}  # worker id -> last time seen holding a job
        self.last_scale_up: float | None = None
        self.missing_since: float | None = None  # since when fewer members exist than asked

    def observe(
        self, size: int, members: Sequence[str], jobs: Mapping[str, int], now: float
    ) -> Workers:
        """The pool as the decision sees it. A worker seen for the first time counts as
        busy until now (it is starting); one asked for but not there (no pod yet, or a quota
        refused it) is idle since the pool first fell short."""
        for gone in self.last_busy.keys() - set(members):
            del self.last_busy[gone]
        idle = []
        for worker in members:
            if jobs.get(worker, 0) > 0 or worker not in self.last_busy:
                self.last_busy[worker] = now
            if jobs.get(worker, 0) == 0:
                idle.append(now - self.last_busy[worker])
        missing = max(0, size - len(members))
        if not missing:
            self.missing_since = None
        elif self.missing_since is None:
            self.missing_since = now
        if self.missing_since is not None:
            idle += [now - self.missing_since] * missing
        return Workers(size, tuple(sorted(idle, reverse=True)))

    def idle_first(self, members: Sequence[str], jobs: Mapping[str, int]) -> list[str]:
        """The idle members, longest idle first: the ones to stop when shrinking."""
        idle = [w for w in members if jobs.get(w, 0) == 0]
        return sorted(idle, key=lambda w: self.last_busy.get(w, float("inf")))

    def record(self, decision: Decision, size: int, now: float) -> None:
        if decision.desired > size:
            self.last_scale_up = now
