"""Why a queue endpoint's jobs wait, in a person's words: one line for `/health`'s
`waiting` field (beyond the spec), which the CLI's `jobs run --wait` prints on stderr and
the console can show. Pure: the gateway gives it the counts of its `/health` answer."""

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
) -> str | None:
    """Why `queued` jobs wait, or None: nothing waits, or a worker is free to take them.
    The first cause that holds: a crash loop (no worker starts), a maximum of 0, every
    worker busy at the maximum, workers starting, none yet (a cold start)."""
    if queued <= 0:
        return None
    if crash_loop is not None:
        return f"{crash_loop.text()}; no worker starts until a new release or a restart"
    if workers_max <= 0:
        return "max workers is 0: no worker will start"
    if idle > 0:
        return None
    in_queue = f"{queued} job{'' if queued == 1 else 's'} in the queue"
    if running >= workers_max:
        return f"{_workers(running)} busy, max reached ({workers_max}); {in_queue}"
    if starting > 0:
        return f"{_workers(starting)} starting (a cold start); {in_queue}"
    if running > 0:
        return f"{_workers(running)} busy, another is being started; {in_queue}"
    return f"no worker yet: one is being started (a cold start); {in_queue}"
