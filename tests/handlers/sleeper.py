"""Sleeps `input.sleep` seconds, then echoes. argv: sync|async [concurrency]."""

import asyncio
import sys
import time

import lockgate.worker


def sync_handler(job):
    time.sleep(job["input"].get("sleep", 0))
    return {"echo": job["input"]}


async def async_handler(job):
    await asyncio.sleep(job["input"].get("sleep", 0))
    return {"echo": job["input"]}


if __name__ == "__main__":
    handler = sync_handler if sys.argv[1] == "sync" else async_handler
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    lockgate.worker.start({"handler": handler, "concurrency_modifier": lambda _: concurrency})
