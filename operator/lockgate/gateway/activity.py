"""Which endpoints a gateway process looks after each sweep interval (issue 32).

An endpoint with nothing queued or running, no worker, no webhook to send, no worker state
reported and no record to expire soon needs no sweep, and its `/metrics` snapshot does not
change: it is *quiet* (`sweep.lua` says so). Once a sweep found it quiet, the process stops
sweeping it, claiming its webhooks and reading its snapshot (the last one is served) until
a sign of activity makes it active again:

- an event on `lg:events`, whichever process caused it: `q:` (a job queued onto empty
  queues, jobs requeued, a load-balanced request held), `a:` (a worker new to the endpoint,
  a first worker-state report), `r:` (its registry entry changed), `l:` (its
  load-balancing workers changed);
- a request of this process for it (a submit, a worker call);
- the full pass: every registered endpoint is swept and its snapshot read again each time
  the event subscription (re)connects (events published while it was down are lost; the
  first subscription counts), and every `FULL_PASS_S` besides. A record due to expire
  before the next full pass keeps its endpoint active.

So a thousand idle endpoints cost a gateway process a thousand sweeps every five minutes,
not a thousand a second, and a scrape of `/metrics` one Redis call for the ids.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from lockgate.store import Registry, Snapshot

FULL_PASS_S = 300.0


class Activity:
    """The endpoints to look after, and the snapshots of the quiet ones."""

    def __init__(
        self, *, full_pass_s: float = FULL_PASS_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.full_pass_s = full_pass_s
        self.clock = clock
        self.active: set[str] = set()  # swept every interval
        self.quiet: set[str] = set()  # found quiet by a sweep, no sign of activity since
        self.snapshots: dict[str, Snapshot] = {}  # the last snapshot of a quiet endpoint
        self._marks: dict[str, int] = defaultdict(int)
        self._next_full = 0.0  # the first pass is a full one

    def mark(self, endpoint_id: str) -> None:
        """A sign of activity: sweep the endpoint and read its snapshot again."""
        self.active.add(endpoint_id)
        self.quiet.discard(endpoint_id)
        self.snapshots.pop(endpoint_id, None)
        self._marks[endpoint_id] += 1

    def missed_events(self) -> None:
        """Signs of activity may have been lost (the subscription (re)connected): the next
        sweep is a full pass."""
        self._next_full = 0.0

    def generation(self, endpoint_id: str) -> int:
        """Counts the endpoint's marks: read before a sweep or a snapshot, it tells whether
        a sign of activity came while the call was out."""
        return self._marks[endpoint_id]

    async def to_sweep(self, registry: Registry) -> list[str]:
        """The endpoints to sweep now: the active ones, or every registered one when a
        full pass is due (then the quiet ones' snapshots are read again too)."""
        now = self.clock()
        if now < self._next_full:
            return sorted(self.active)
        self._next_full = now + self.full_pass_s
        self.snapshots.clear()
        return sorted(set(await registry.endpoint_ids()) | self.active)

    def swept(self, endpoint_id: str, *, quiet: bool, generation: int) -> None:
        """What a sweep found; a quiet endpoint leaves the active set unless it was marked
        since the sweep began."""
        if not quiet:
            self.active.add(endpoint_id)
            self.quiet.discard(endpoint_id)
        elif self._marks[endpoint_id] == generation:
            self.active.discard(endpoint_id)
            self.quiet.add(endpoint_id)

    def cached(self, endpoint_id: str) -> Snapshot | None:
        """The snapshot to serve without reading Redis: a quiet endpoint's last one."""
        return self.snapshots.get(endpoint_id) if endpoint_id in self.quiet else None

    def keep(self, endpoint_id: str, snapshot: Snapshot, *, generation: int) -> None:
        """Remember a snapshot read of a quiet endpoint (not when marked meanwhile)."""
        if endpoint_id in self.quiet and self._marks[endpoint_id] == generation:
            self.snapshots[endpoint_id] = snapshot

    def horizon_ms(self, sweep_interval_s: float) -> int:
        """How far ahead a record's expiry keeps its endpoint active: past the next full
        pass, with two sweep intervals to spare."""
        return int((self.full_pass_s + 2 * sweep_interval_s) * 1000)
