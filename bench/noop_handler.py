"""The benchmark's no-op handler: records each job id it runs, returns at once.

Each worker appends the ids it ran to `$BENCH_IDS_DIR/<worker id>.ids` (one per line,
written before the result is sent), so the bench can tell a lost job from one run twice.
`$BENCH_CONCURRENCY` jobs run at once per worker (default 1, RunPod's default).
"""

import os

import lockgate.worker

_DIR = os.environ.get("BENCH_IDS_DIR")
_WORKER = os.environ.get("LOCKGATE_WORKER_ID") or str(os.getpid())
_IDS = open(os.path.join(_DIR, f"{_WORKER}.ids"), "a", buffering=1) if _DIR else None  # noqa: SIM115
_CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "1"))


async def handler(job: dict) -> dict:
    """Return `{"ok": true}`; note the job id first."""
    if _IDS is not None:
        _IDS.write(job["id"] + "\n")
    return {"ok": True}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler, "concurrency_modifier": lambda _c: _CONCURRENCY})
