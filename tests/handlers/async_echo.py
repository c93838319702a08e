"""An async handler: echoes the input after yielding to the event loop."""

import asyncio

import lockgate.worker


async def handler(job):
    await asyncio.sleep(0)
    return {"echo": job["input"]}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
