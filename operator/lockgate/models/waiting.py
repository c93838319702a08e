"""Why a queue endpoint's jobs wait, in a person's words: one line for `/health`'s
`waiting` field (beyond the spec), and for one queued job `/status?position=1`'s `waiting`,
with its place (`queue_position`), which the CLI's `jobs run --wait` prints on stderr and
the console's runner shows. Pure: the gateway gives it the counts of its `/health` answer
and the job's ranks in the queues."""

from __future__ import annotations

from lockgate.models.crashloop import CrashLoop


def _workers(n: int) -> str:
    return f"{n} worker{'' if n == 1 else 's'}"


def why_waiting(
    *,
    queued: int,
    idle: int,
    running: int,
    starting: int,
    workers_max: int,
    crash_loop: CrashLoop | None = None,
    position: int | None = None,
) -> str | None:
    """Why `queued` jobs wait, or None: nothing waits, or a worker is free to take them.
    The first cause that holds: a crash loop (no worker starts), a maximum of 0, every
    worker busy at the maximum, workers starting, none yet (a cold start). With
    `position` (one job's rank, 1 first; `/status?position=1`), the line ends with that
    job's place in the queue instead of the queue's length."""
    if queued <= 0:
        return None
    if crash_loop is not None:
        return f"{crash_loop.text()}; no worker starts until a new release or a restart"
    if workers_max <= 0:
        return "max workers is 0: no worker will start"
    if idle > 0:
        return None
    in_queue = in_queue_text(queued, position)
    if running >= workers_max:
        return f"{_workers(running)} busy, max reached ({workers_max}); {in_queue}"
    if starting > 0:
        return f"{_workers(starting)} starting (a cold start); {in_queue}"
    if running > 0:
        return f"{_workers(running)} busy, another is being started; {in_queue}"
    return f"no worker yet: one is being started (a cold start); {in_queue}"


def in_queue_text(queued: int, position: int | None = None) -> str:
    """`3 jobs in the queue`, or for one job `position 3 of 5 in the queue`."""
    if position is None:
        return f"{queued} job{'' if queued == 1 else 's'} in the queue"
    return f"position {position} of {max(queued, position)} in the queue"


def queue_position(
    *, normal_rank: int | None, low_rank: int | None, normal_queued: int
) -> int | None:
    """A queued job's place (1: taken next) from its 0-based rank in the queue it is in:
    workers take the normal queue first, then the lowPriority one (store/lua/take.lua), so
    a lowPriority job waits behind every normal one. None when it is in neither (taken,
    cancelled or gone meanwhile)."""
    if normal_rank is not None:
        return normal_rank + 1
    if low_rank is not None:
        return normal_queued + low_rank + 1
    return None
