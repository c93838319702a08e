"""Worker affinity on load-balancing endpoints (RunPod's `X-Runpod-Worker-Id`): the
header's four modes, what a pinned request (`strict`, `strict-resume`) does about the
worker it names as this gateway process sees it, and the two errors only pinned requests
get. Pure: `gateway.lb_workers` applies it (docs/load-balancing.md, worker affinity).

| header                      | mode          |
|-----------------------------|---------------|
| absent or empty             | none          |
| `<id>`                      | soft          |
| `strict <id>`               | strict        |
| `strict-resume <id>`        | strict-resume |
"""

from __future__ import annotations

from typing import NamedTuple

from lockgate.gateway.errors import ApiError

NONE, SOFT, STRICT, STRICT_RESUME = "none", "soft", "strict", "strict-resume"
PINNED = (STRICT, STRICT_RESUME)

# How the named worker looks to this gateway process now
ROUTABLE = "routable"  # registered, its health poll said 200, not tried by this request
WAITING = "waiting"  # registered, not routable yet (starting, unhealthy, already tried)
DRAINING = "draining"  # taken out of routing: finishing its requests, then parked or gone
PARKED = "parked"  # scaled down, still resumable (`lbp`)
ABSENT = "absent"  # neither registered nor parked: gone, or it never existed

# What the request does about it
GO = "go"  # send it there now
WAIT = "wait"  # hold (within the hold time) and look again when the workers change
RESUME = "resume"  # ask for the worker back, then hold as WAIT does
GONE = "gone"  # 404 affinity_worker_gone now

WORKER_TIMEOUT = "worker_timeout"
WORKER_GONE = "affinity_worker_gone"


class Affinity(NamedTuple):
    """A request's affinity: the worker it names (None: none) and how it insists."""

    worker: str | None
    mode: str

    @property
    def pinned(self) -> bool:
        """Only that worker will do (`strict`, `strict-resume`)."""
        return self.mode in PINNED


def parse_affinity(header: str | None) -> Affinity:
    """`X-Runpod-Worker-Id` as sent: `<id>` soft, `strict <id>` or `strict-resume <id>`
    pinned (the mode word in any case); a mode word alone is a soft worker id."""
    value = (header or "").strip()
    if not value:
        return Affinity(None, NONE)
    word, _, rest = value.partition(" ")
    if word.lower() in PINNED and rest.strip():
        return Affinity(rest.strip(), word.lower())
    return Affinity(value, SOFT)


def pinned_step(mode: str, seen: str) -> str:
    """What a pinned request does about its worker as `seen` now. `strict` waits for a
    registered worker only: a scaled-down (parked) or leaving one is gone for it.
    `strict-resume` also asks a parked or leaving worker back and waits for it."""
    if seen == ROUTABLE:
        return GO
    if seen == WAITING:
        return WAIT
    if seen in (PARKED, DRAINING):
        return RESUME if mode == STRICT_RESUME else GONE
    return GONE


def gone_because(mode: str, seen: str) -> str:
    """Why a pinned request's worker is gone, in the caller's words."""
    if seen == PARKED:
        return "it was scaled down; `strict-resume <id>` resumes it while it can be resumed"
    if seen == DRAINING:
        return "it is leaving (scaled down or replaced)"
    if mode == STRICT_RESUME:
        return "it is not running and can no longer be resumed (removed, or never existed)"
    return "it is not running (removed, or never existed)"


class WorkerTimeout(ApiError):
    """A pinned request's worker did not become routable within the hold (RunPod's 400)."""

    status = 400
    reason = WORKER_TIMEOUT


class WorkerGone(ApiError):
    """A pinned request's worker is gone for good (RunPod's 404)."""

    status = 404
    reason = WORKER_GONE
