"""Sleeps `input.sleep` seconds, then echoes. argv: sync|async [concurrency].

With `input.marks` (a directory) it leaves files that tests read: `<job id>.start` and
`<job id>.end` around the sleep, `<job id>.cancelled` when an async sleep is cancelled;
each holds this process's BOOT token, which tells a restarted worker from the first.
With `input.stubborn` the async handler shrugs a cancellation off and returns anyway.
With `input.fail` (a message) the async handler raises it after the sleep: the job FAILS.
With `input.die_once` (a path) the process exits at once unless that file exists, which it
leaves first: the job's first worker is lost, the next one runs it.
"""

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

import lockgate.worker

BOOT = uuid.uuid4().hex


def mark(job, what):
    if marks := job["input"].get("marks"):
        Path(marks, f"{job['id']}.{what}").write_text(BOOT)


def sync_handler(job):
    mark(job, "start")
    time.sleep(job["input"].get("sleep", 0))
    mark(job, "end")
    return {"echo": job["input"]}


async def async_handler(job):
    if (once := job["input"].get("die_once")) and not Path(once).exists():
        Path(once).write_text(BOOT)
        os._exit(3)
    mark(job, "start")
    try:
        await asyncio.sleep(job["input"].get("sleep", 0))
    except asyncio.CancelledError:
        mark(job, "cancelled")
        if not job["input"].get("stubborn"):
            raise
        return {"late": True}
    mark(job, "end")
    if failure := job["input"].get("fail"):
        raise ValueError(failure)
    return {"echo": job["input"]}


if __name__ == "__main__":
    handler = sync_handler if sys.argv[1] == "sync" else async_handler
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    lockgate.worker.start({"handler": handler, "concurrency_modifier": lambda _: concurrency})
