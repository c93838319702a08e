"""A lockgate-runtime OpenAI worker that streams chunk objects (vLLM's non-raw mode), with
the toy model of toy_llm.py.

An async generator started with `return_aggregate_stream`: a non-streaming request yields
the whole response once; `"stream": true` yields the first chunk as an object, then the
rest in lists of 1, 2, 4, ... chunks (as vLLM's non-raw mode batches them); a refused
request yields one OpenAI error object with the HTTP status as its `code`.

Test knobs: a last chat message `raise: <text>` raises RuntimeError(<text>) (a stream
after its first chunk); `delay_ms` in the body waits that long per yield.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import toy_llm

import lockgate.worker

RAISE = "raise: "


async def handler(job: dict[str, Any]) -> AsyncIterator[Any]:
    job_input = job["input"]
    route, body = job_input.get("openai_route"), job_input.get("openai_input")
    try:
        items = toy_llm.answer(route, body, job["id"])
    except toy_llm.ToyError as err:
        yield {"error": {"message": str(err), "type": "invalid_request_error", "code": err.status}}
        return
    failure = _failure(route, body)
    if not toy_llm.wants_stream(body):
        if failure:
            raise RuntimeError(failure)
        yield items[0]
        return
    delay_s = float(body.get("delay_ms", 0)) / 1000
    for batch in _batches(items):
        await asyncio.sleep(delay_s)
        yield batch
        if failure:
            raise RuntimeError(failure)  # mid-stream, after the first chunk


def _failure(route: str, body: dict[str, Any]) -> str | None:
    """The message to raise with: a chat request whose last message is `raise: <text>`."""
    if route != "/v1/chat/completions":
        return None
    prompt = toy_llm.chat_prompt(body)
    return prompt.removeprefix(RAISE) if prompt.startswith(RAISE) else None


def _batches(items: list[Any]) -> list[Any]:
    """The first item alone, then lists of 1, 2, 4, ... items."""
    batches, start, size = [items[0]], 1, 1
    while start < len(items):
        batches.append(items[start : start + size])
        start, size = start + size, size * 2
    return batches


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler, "return_aggregate_stream": True})
