"""A runpod-SDK worker that follows RunPod's worker-vllm conventions (src/handler.py), with
the toy model of toy_llm.py in place of the vLLM server.

As worker-vllm: an async generator started with `return_aggregate_stream`; the input is
`{"openai_route", "openai_input"}` (a route alone is a GET, e.g. /v1/models); a
non-streaming request yields the whole response once; `"stream": true` yields the raw SSE
text as aiohttp's `iter_any()` reads it from vLLM: several `data:` events per yield, cut
mid-line where a read ends, the last one `data: [DONE]`; any failure yields
`{"error": {"message", "type": "worker_error", "code": None}}` once.

Test knobs (not worker-vllm's): `delay_ms` in the body waits that long per event, as
tokens come from a GPU; `linger_ms` waits that long after the last yield before the job
is done (a worker that cleans up after its stream).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import runpod
import toy_llm

# Characters per socket read, cycled: a read holds several events or ends mid-line.
READ_SIZES = (700, 45, 1300)


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "worker_error", "code": None}}


async def handler(job: dict[str, Any]) -> AsyncIterator[Any]:
    job_input = job.get("input") or {}
    body = job_input.get("openai_input")
    try:
        items = toy_llm.answer(job_input.get("openai_route"), body, job["id"])
    except toy_llm.ToyError as err:
        yield _error(f"vLLM returned HTTP {err.status}: {err}")
        return
    if not toy_llm.wants_stream(body):
        yield items[0]
        return
    async for text in _reads(items, float(body.get("delay_ms", 0)) / 1000):
        yield text
    await asyncio.sleep(float(body.get("linger_ms", 0)) / 1000)


async def _reads(items: list[dict[str, Any]], delay_s: float) -> AsyncIterator[str]:
    """The SSE text of `items` and `[DONE]`, in the pieces a socket read would cut."""
    events = [f"data: {json.dumps(item, separators=(',', ':'))}\n\n" for item in items]
    sizes, buffer = itertools.cycle(READ_SIZES), ""
    size = next(sizes)
    for event in [*events, "data: [DONE]\n\n"]:
        await asyncio.sleep(delay_s)
        buffer += event
        while len(buffer) >= size:
            yield buffer[:size]
            buffer, size = buffer[size:], next(sizes)
    if buffer:
        yield buffer


if __name__ == "__main__":
    runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
