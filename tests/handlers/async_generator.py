"""An async generator that streams the numbers below input n."""

import asyncio

import lockgate.worker


async def handler(job):
    for number in range(job["input"]["n"]):
        await asyncio.sleep(0)
        yield number


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler, "return_aggregate_stream": True})
