"""A handler with fitness checks, as its environment says:
- `FITNESS_FAIL=<reason>`: a sync check `check_weights` raises RuntimeError(reason);
- `FITNESS_MARK=<path>`: an async check `check_async` writes the file (it ran) and passes.
Jobs echo their input."""

import asyncio
import os
from pathlib import Path

import lockgate.worker

if reason := os.environ.get("FITNESS_FAIL"):

    @lockgate.worker.register_fitness_check
    def check_weights():
        raise RuntimeError(reason)


if mark := os.environ.get("FITNESS_MARK"):

    @lockgate.worker.register_fitness_check
    async def check_async():
        await asyncio.sleep(0)
        Path(mark).write_text("ran")


def handler(job):
    return {"echo": job["input"]}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
