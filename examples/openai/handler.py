"""An OpenAI-compatible worker: answers `/v2/{endpoint}/openai/v1/...` requests.

The gateway turns each OpenAI request into a job whose input is
`{"openai_route": "/v1/chat/completions", "openai_input": <the request body>}` (no
`openai_input` for a GET such as /v1/models). This handler follows RunPod's vLLM worker:
an async generator started with `return_aggregate_stream`, which yields the whole
response once, or with `"stream": true` one `chat.completion.chunk` (or `text_completion`
chunk) per token; the gateway sends each as an SSE `data:` line and adds `data: [DONE]`.
A bad request yields one OpenAI error object `{"error": {...}}`.

The answers come from responder.py, a deterministic toy (no model, no download); put a
real model's token loop in its place, or run RunPod's vLLM worker image (vllm/).

Pacing: `TOKEN_DELAY_MS` (environment) or `delay_ms` in the request body (the openai SDK's
`extra_body`) waits that long per generated token, as a model on a GPU would.
Concurrency: `MAX_CONCURRENCY` jobs per worker (the vLLM worker's name; default 8).

    lockgate dev examples/openai/handler.py
    curl -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
      -d '{"model": "lockgate-toy", "messages": [{"role": "user", "content": "Hi"}]}' \
      http://127.0.0.1:8080/v2/openai/openai/v1/chat/completions
    python handler.py --test_input '{"input": {"openai_route": "/v1/models"}}'
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import responder

import lockgate.worker

MAX_DELAY_MS = 10_000  # a request's own `delay_ms` is capped: it holds a worker slot


def token_delay_s(body: Any, default_ms: str) -> float:
    """Seconds to wait per token: the body's `delay_ms`, else `default_ms`, capped."""
    value = body.get("delay_ms") if isinstance(body, dict) else None
    try:
        ms = float(default_ms if value is None else value)
    except ValueError:
        ms = 0
    return max(0.0, min(ms, MAX_DELAY_MS)) / 1000


async def handler(job: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Yield the response once, or each stream chunk as it is "generated"."""
    job_input = job["input"]
    reply = responder.answer(job_input, request_id=job["id"], created=int(time.time()))
    body = job_input.get("openai_input") if isinstance(job_input, dict) else None
    delay_s = token_delay_s(body, os.environ.get("TOKEN_DELAY_MS", "0"))
    if not reply.stream:
        await asyncio.sleep(delay_s * reply.tokens)  # a real model spends this on the GPU
        yield reply.items[0]
        return
    for position, chunk in enumerate(reply.items):
        if position and delay_s:
            await asyncio.sleep(delay_s)  # the first chunk (the role) goes at once
        yield chunk


def concurrency(current: int) -> int:
    """Jobs one worker runs at once (runpod's `concurrency_modifier` contract)."""
    return int(os.environ.get("MAX_CONCURRENCY", "8"))


if __name__ == "__main__":
    lockgate.worker.start(
        {"handler": handler, "return_aggregate_stream": True, "concurrency_modifier": concurrency}
    )
