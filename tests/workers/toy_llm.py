"""A deterministic toy language model answering in the OpenAI API's shapes, for the OpenAI
route's test workers (runpod_vllm.py, lockgate_openai.py): no download, no clock.

The model echoes: its answer to a prompt is `echo: <prompt>`, one token per word, cut at
`max_tokens` (finish_reason "length"). `answer` maps a request (route and body) to the
objects a worker sends: `[response]`, or for `"stream": true` every stream chunk in order.
A request the model refuses raises `ToyError` with the HTTP status vLLM would answer.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

Json = dict[str, Any]

MODEL = "toy-echo"
CREATED = 1_763_856_000  # seconds: a fixed `created`, so answers are reproducible
DIMENSIONS = 8  # embedding length


class ToyError(Exception):
    """A request the toy refuses, with the HTTP status vLLM gives it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def reply(prompt: str, max_tokens: int | None = None) -> tuple[list[str], str]:
    """The answer's tokens (each but the first with its leading space) and finish_reason."""
    words = f"echo: {prompt}".split()
    kept = words if max_tokens is None else words[:max_tokens]
    tokens = [word if i == 0 else f" {word}" for i, word in enumerate(kept)]
    return tokens, "stop" if len(kept) == len(words) else "length"


def embedding(text: str) -> list[float]:
    """A unit-free vector of DIMENSIONS floats, each exact in float32 (k/128)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(byte - 128) / 128 for byte in digest[:DIMENSIONS]]


def wants_stream(body: Json | None) -> bool:
    """Whether the client asked for Server-Sent Events."""
    return bool(body) and body.get("stream") is True


def answer(route: str | None, body: Json | None, request_id: str) -> list[Json]:
    """The objects answering one request: `[response]`, or a stream's chunks."""
    if route == "/v1/models":
        return [{"object": "list", "data": [_model()]}]
    handlers = {"/v1/chat/completions": _chat, "/v1/completions": _text, "/v1/embeddings": _embed}
    if route not in handlers:
        raise ToyError(f"route {route!r} not found", 404)
    if not isinstance(body, dict):
        raise ToyError(f"{route} needs a JSON body", 400)
    if body.get("model") != MODEL:
        raise ToyError(f"The model `{body.get('model')}` does not exist.", 404)
    return handlers[route](body, request_id)


def chat_prompt(body: Json) -> str:
    """The last message's text: what the toy echoes."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        raise ToyError("'messages' must be a non-empty list of messages", 400)
    return str(messages[-1].get("content") or "")


def _model() -> Json:
    return {"id": MODEL, "object": "model", "created": CREATED, "owned_by": "lockgate"}


def _chat(body: Json, request_id: str) -> list[Json]:
    prompt = chat_prompt(body)
    tokens, finish = reply(prompt, body.get("max_tokens"))
    head = {"id": f"chatcmpl-{request_id}", "created": CREATED, "model": MODEL}
    if not wants_stream(body):
        message = {"role": "assistant", "content": "".join(tokens)}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        usage = _usage(prompt, tokens)
        return [{**head, "object": "chat.completion", "choices": [choice], "usage": usage}]
    deltas = [{"role": "assistant", "content": ""}, *({"content": t} for t in tokens), {}]
    ends = [None] * (len(deltas) - 1) + [finish]
    return [
        {**head, "object": "chat.completion.chunk", "choices": [_delta(d, e)]}
        for d, e in zip(deltas, ends, strict=True)
    ]


def _delta(delta: Json, finish: str | None) -> Json:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _text(body: Json, request_id: str) -> list[Json]:
    prompt = str(body.get("prompt", ""))
    tokens, finish = reply(prompt, body.get("max_tokens"))
    head = {
        "id": f"cmpl-{request_id}",
        "object": "text_completion",
        "created": CREATED,
        "model": MODEL,
    }
    if not wants_stream(body):
        choice = {"index": 0, "text": "".join(tokens), "logprobs": None, "finish_reason": finish}
        return [{**head, "choices": [choice], "usage": _usage(prompt, tokens)}]
    ends = [None] * (len(tokens) - 1) + [finish]
    return [
        {**head, "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": e}]}
        for t, e in zip(tokens, ends, strict=True)
    ]


def _embed(body: Json, request_id: str) -> list[Json]:
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ToyError("'input' must be a string or a list of strings", 400)
    as_base64 = body.get("encoding_format") == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(t, as_base64)}
        for i, t in enumerate(texts)
    ]
    used = sum(len(t.split()) for t in texts)
    usage = {"prompt_tokens": used, "total_tokens": used}
    return [{"object": "list", "data": data, "model": MODEL, "usage": usage}]


def _vector(text: str, as_base64: bool) -> list[float] | str:
    """The embedding as floats, or as OpenAI's base64 of little-endian float32s."""
    values = embedding(text)
    if not as_base64:
        return values
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def _usage(prompt: str, tokens: list[str]) -> Json:
    used = len(prompt.split())
    return {
        "prompt_tokens": used,
        "completion_tokens": len(tokens),
        "total_tokens": used + len(tokens),
    }
