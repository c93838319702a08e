"""The batching benchmark's embedding-shaped handler: one model call costs 20 ms plus
0.2 ms per input, and calls run one at a time (one GPU), slept, not computed.

`$BENCH_BATCH` = 0: one job per call (RunPod's default, one job at a time); N > 0: dynamic
batching, `{"max_size": N, "wait_ms": $BENCH_WAIT_MS (default 10)}`.
"""

import asyncio
import os

import lockgate.worker

CALL_S, PER_ITEM_S = 0.020, 0.0002
_BATCH = int(os.environ.get("BENCH_BATCH", "0"))
_WAIT_MS = float(os.environ.get("BENCH_WAIT_MS", "10"))
_gpu: asyncio.Lock | None = None


async def model(count: int) -> list[list[float]]:
    """`count` embeddings, one call on the (one) GPU."""
    global _gpu
    _gpu = _gpu or asyncio.Lock()
    async with _gpu:
        await asyncio.sleep(CALL_S + PER_ITEM_S * count)
    return [[0.0] * 8 for _ in range(count)]


async def one(job: dict) -> dict:
    return {"embedding": (await model(1))[0]}


async def many(jobs: list[dict]) -> list[dict]:
    return [{"embedding": e} for e in await model(len(jobs))]


if __name__ == "__main__":
    if _BATCH:
        lockgate.worker.start({"handler": many, "batch": {"max_size": _BATCH, "wait_ms": _WAIT_MS}})
    else:
        lockgate.worker.start({"handler": one})
