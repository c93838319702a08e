"""The OpenAI benchmark's handler, with RunPod vLLM worker's conventions: an async generator
started with `return_aggregate_stream`, input `{"openai_route", "openai_input"}`.

A non-streaming chat completion is answered at once (one yield of the whole response). A
streaming one yields `max_tokens` `chat.completion.chunk` objects, `TOKEN_INTERVAL_S` apart
(a fast model's pace, so chunks do not pile up between reads), each stamped with
`time.monotonic()` just before its yield (`bench_emitted`), the first also with the time the
handler started (`bench_started`). CLOCK_MONOTONIC is one clock for every process of a Linux
machine, so the client can subtract these stamps from its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import lockgate.worker

TOKEN_INTERVAL_S = 0.01
MODEL = "bench-model"


def completion(request: dict) -> dict:
    """The whole answer to a non-streaming chat completion request."""
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", MODEL),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chunk(index: int, started: float) -> dict:
    """One streamed token, stamped with the time it is emitted."""
    stamped = {"bench_emitted": time.monotonic()}
    if index == 0:
        stamped["bench_started"] = started
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": f"t{index} "}, "finish_reason": None}],
        **stamped,
    }


async def handler(job: dict) -> AsyncIterator[dict]:
    """Answer a chat completion: whole, or token by token when it asks for a stream."""
    started = time.monotonic()
    request = job["input"].get("openai_input") or {}
    if not request.get("stream"):
        yield completion(request)
        return
    for index in range(int(request.get("max_tokens", 16))):
        if index:
            await asyncio.sleep(TOKEN_INTERVAL_S)
        yield chunk(index, started)


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler, "return_aggregate_stream": True})
