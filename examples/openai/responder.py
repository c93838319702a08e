"""A deterministic stand-in for a language model that answers in the OpenAI API's shapes.

Pure functions only: a request (the route and the JSON body a client sent) goes in, the
response objects come out; no clock, no randomness, no I/O. The same request always gets
the same text and the same vectors, so tests need no model and no download. The handler
(handler.py) adds the job id, the time and the pacing between tokens.

Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings,
GET /v1/models, GET /v1/models/{id}. Anything else, or a bad request, raises
`OpenAIError`, whose `body()` is the OpenAI error object a client expects.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

MODEL = "lockgate-toy"
MODEL_CREATED = 1_763_856_000  # 2025-11-23, seconds: a model's fixed creation time
OWNER = "lockgate"
# fmt: off
VOCABULARY = (
    "the", "queue", "waits", "while", "a", "worker", "wakes", "and", "takes", "the", "job",
    "then", "streams", "each", "word", "back", "to", "the", "client", "until", "it", "ends",
)
# fmt: on
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat has none, we cap it
MAX_TOKENS = 512
ANSWER_WORDS = (4, 20)  # a natural answer is 4..19 words; fewer than max_tokens => "stop"
EMBEDDING_DIMENSIONS = 256  # default vector length; `dimensions` asks for another
MAX_EMBEDDING_DIMENSIONS = 4096
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit on inputs per request


class OpenAIError(Exception):
    """A request the responder refuses, with the HTTP status a client should see."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> Json:
        """The error as OpenAI sends it: `{"error": {message, type, code, param}}`."""
        return {
            "error": {
                "message": str(self),
                "type": "invalid_request_error",
                "code": self.status,
                "param": self.param,
            }
        }


@dataclass(frozen=True)
class Reply:
    """What one request produces: one response object, or the chunks of a stream."""

    items: list[Json]
    stream: bool = False
    tokens: int = 0  # completion tokens generated (the handler paces by them)


@dataclass(frozen=True)
class Request:
    """One OpenAI request as the gateway hands it to a worker."""

    route: str
    body: Json | None = None  # None for a GET (no `openai_input`)
    request_id: str = "local"
    created: int = 0  # seconds since the epoch, the response's `created`


# -- text --------------------------------------------------------------------------------


def count_tokens(text: str) -> int:
    """Whitespace tokens: enough for a toy; a real model counts with its tokenizer."""
    return len(text.split())


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def answer_words(prompt: str) -> list[str]:
    """The whole answer to `prompt` before any `max_tokens` cut: 4..19 words."""
    low, high = ANSWER_WORDS
    length = low + _digest(prompt, "length")[0] % (high - low)
    return [VOCABULARY[_digest(prompt, str(i))[0] % len(VOCABULARY)] for i in range(length)]


def generate(prompt: str, max_tokens: int) -> tuple[list[str], str]:
    """The answer's tokens (each but the first with its leading space) and `finish_reason`."""
    words = answer_words(prompt)
    kept = words[:max_tokens]
    pieces = [word if i == 0 else f" {word}" for i, word in enumerate(kept)]
    return pieces, "stop" if len(words) <= max_tokens else "length"


def message_text(messages: Any) -> str:
    """The prompt a chat request's `messages` make: each message's text, one per line."""
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' must be a non-empty array", param="messages")
    lines = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise OpenAIError("each message needs a 'role'", param="messages")
        lines.append(_content_text(message.get("content")))
    return "\n".join(lines)


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts: keep the text ones
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


# -- request fields ----------------------------------------------------------------------


def max_tokens(body: Json) -> int:
    """`max_completion_tokens` (newer chat clients) or `max_tokens`, within 1..MAX_TOKENS."""
    newer = body.get("max_completion_tokens") is not None
    name = "max_completion_tokens" if newer else "max_tokens"
    value = body.get(name)
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise OpenAIError(f"'{name}' must be a positive integer", param=name)
    return min(value, MAX_TOKENS)


def check_n(body: Json) -> None:
    """Refuse `n` above 1: the toy answers one choice per prompt."""
    if body.get("n") not in (None, 1):
        raise OpenAIError("only n=1 is supported", param="n")


def wants_stream(body: Json | None) -> bool:
    """Whether the client asked for a stream (exactly `"stream": true`, as the gateway)."""
    return bool(body) and body.get("stream") is True


def include_usage(body: Json) -> bool:
    """Whether a stream ends with a usage chunk (`stream_options.include_usage`)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    """OpenAI's `usage` object."""
    total = prompt_tokens + completion_tokens
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": total,
    }


def model_of(body: Json) -> str:
    """The model the client named (any name is answered by the toy), else MODEL."""
    model = body.get("model")
    return model if isinstance(model, str) and model else MODEL


# -- /v1/chat/completions ----------------------------------------------------------------


def chat_completion(request: Request) -> Reply:
    """A `chat.completion`, or with `stream` its `chat.completion.chunk`s."""
    body = request.body or {}
    check_n(body)
    prompt = message_text(body.get("messages"))
    pieces, finish = generate(prompt, max_tokens(body))
    spent = usage(count_tokens(prompt), len(pieces))
    response_id, model = f"chatcmpl-{request.request_id}", model_of(body)
    if wants_stream(body):
        head = _head(response_id, "chat.completion.chunk", request.created, model)
        return Reply(_chat_chunks(head, pieces, finish, spent, body), True, len(pieces))
    message = {"role": "assistant", "content": "".join(pieces)}
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    head = _head(response_id, "chat.completion", request.created, model)
    response = {**head, "choices": [choice], "usage": spent}
    return Reply([response], tokens=len(pieces))


def _chat_chunks(head: Json, pieces: list[str], finish: str, spent: Json, body: Json) -> list[Json]:
    def chunk(delta: Json, finish_reason: str | None = None) -> Json:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**head, "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in pieces]
    chunks.append(chunk({}, finish))
    return _with_usage(chunks, head, spent, body)


def _with_usage(chunks: list[Json], head: Json, spent: Json, body: Json) -> list[Json]:
    """With `include_usage`: `usage: null` on every chunk and a last one with the usage."""
    if not include_usage(body):
        return chunks
    return [{**c, "usage": None} for c in chunks] + [{**head, "choices": [], "usage": spent}]


def _head(response_id: str, kind: str, created: int, model: str) -> Json:
    return {"id": response_id, "object": kind, "created": created, "model": model}


# -- /v1/completions ---------------------------------------------------------------------


def prompts(body: Json) -> list[str]:
    """`prompt` as a list: a string, or a list of strings (one choice each)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return prompt
    raise OpenAIError("'prompt' must be a string or a non-empty array of strings", param="prompt")


def text_completion(request: Request) -> Reply:
    """A `text_completion` (a choice per prompt), or with `stream` its chunks."""
    body = request.body or {}
    check_n(body)
    texts, limit = prompts(body), max_tokens(body)
    answers = [generate(text, limit) for text in texts]
    generated = sum(len(pieces) for pieces, _ in answers)
    spent = usage(sum(count_tokens(t) for t in texts), generated)
    head = _head(f"cmpl-{request.request_id}", "text_completion", request.created, model_of(body))
    if wants_stream(body):
        return Reply(_completion_chunks(head, answers, spent, body), True, generated)
    choices = [_text_choice(i, "".join(p), f) for i, (p, f) in enumerate(answers)]
    return Reply([{**head, "choices": choices, "usage": spent}], tokens=generated)


def _text_choice(index: int, text: str, finish: str | None) -> Json:
    return {"index": index, "text": text, "finish_reason": finish, "logprobs": None}


def _completion_chunks(head: Json, answers: list, spent: Json, body: Json) -> list[Json]:
    chunks = []
    for index, (pieces, finish) in enumerate(answers):
        chunks += [{**head, "choices": [_text_choice(index, p, None)]} for p in pieces]
        chunks.append({**head, "choices": [_text_choice(index, "", finish)]})
    return _with_usage(chunks, head, spent, body)


# -- /v1/embeddings ----------------------------------------------------------------------


def unit_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic vector of length 1 for `text` (float32-exact components)."""
    raw = hashlib.shake_256(text.encode()).digest(4 * dimensions)
    ints = struct.unpack(f"<{dimensions}I", raw)
    values = [(i / 0xFFFFFFFF) * 2 - 1 for i in ints]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    floats = [v / norm for v in values]
    return list(struct.unpack(f"<{dimensions}f", struct.pack(f"<{dimensions}f", *floats)))


def embedding_inputs(body: Json) -> list[str]:
    """`input` as texts: a string, strings, a token array or token arrays."""
    value = body.get("input")
    if isinstance(value, str) or _is_tokens(value):
        value = [value]
    if not isinstance(value, list) or not 0 < len(value) <= MAX_EMBEDDING_INPUTS:
        raise OpenAIError(f"'input' must hold 1..{MAX_EMBEDDING_INPUTS} items", param="input")
    if not all(isinstance(v, str) or _is_tokens(v) for v in value):
        raise OpenAIError("'input' items must be strings or token arrays", param="input")
    return [v if isinstance(v, str) else " ".join(map(str, v)) for v in value]


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)


def dimensions(body: Json) -> int:
    """`dimensions`, 1..MAX_EMBEDDING_DIMENSIONS; the default when absent."""
    value = body.get("dimensions")
    if value is None:
        return EMBEDDING_DIMENSIONS
    if type(value) is not int or not 0 < value <= MAX_EMBEDDING_DIMENSIONS:
        limit = MAX_EMBEDDING_DIMENSIONS
        raise OpenAIError(f"'dimensions' must be an integer in 1..{limit}", param="dimensions")
    return value


def encode(vector: list[float], encoding_format: Any) -> list[float] | str:
    """The vector as floats, or as base64 of little-endian float32 (what the SDK asks for)."""
    if encoding_format in (None, "float"):
        return vector
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    raise OpenAIError("'encoding_format' must be 'float' or 'base64'", param="encoding_format")


def embeddings(request: Request) -> Reply:
    """A `list` of `embedding` objects, one per input, in input order."""
    body = request.body or {}
    texts, size, fmt = embedding_inputs(body), dimensions(body), body.get("encoding_format")
    vectors = [encode(unit_vector(text, size), fmt) for text in texts]
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    tokens = sum(count_tokens(t) for t in texts)
    spent = {"prompt_tokens": tokens, "total_tokens": tokens}
    return Reply([{"object": "list", "data": data, "model": model_of(body), "usage": spent}])


# -- /v1/models --------------------------------------------------------------------------


def model_card() -> Json:
    """The one model this responder serves."""
    return {"id": MODEL, "object": "model", "created": MODEL_CREATED, "owned_by": OWNER}


def models(request: Request) -> Reply:
    """GET /v1/models: the list of models."""
    return Reply([{"object": "list", "data": [model_card()]}])


def one_model(request: Request, model_id: str) -> Reply:
    """GET /v1/models/{id}: the model, or 404."""
    if model_id != MODEL:
        raise OpenAIError(f"The model '{model_id}' does not exist", status=404, param="model")
    return Reply([model_card()])


# -- routing -----------------------------------------------------------------------------

POST_ROUTES: dict[str, Callable[[Request], Reply]] = {
    "/v1/chat/completions": chat_completion,
    "/v1/completions": text_completion,
    "/v1/embeddings": embeddings,
}
GET_ROUTES: dict[str, Callable[[Request], Reply]] = {"/v1/models": models}


def respond(request: Request) -> Reply:
    """Answer one request; raises OpenAIError for an unknown route or a bad body."""
    route = request.route.split("?", 1)[0].rstrip("/")
    if route in POST_ROUTES:
        if not isinstance(request.body, dict):
            raise OpenAIError(f"{route} takes a POST with a JSON object body")
        return POST_ROUTES[route](request)
    if route in GET_ROUTES:
        return GET_ROUTES[route](request)
    if route.startswith("/v1/models/"):
        return one_model(request, route.removeprefix("/v1/models/"))
    raise OpenAIError(f"Unknown route: {request.route}", status=404)


def answer(job_input: Any, *, request_id: str, created: int) -> Reply:
    """Answer a job's input `{"openai_route", "openai_input"}`; errors become an error body."""
    try:
        return respond(_request(job_input, request_id, created))
    except OpenAIError as err:
        return Reply([err.body()])


def _request(job_input: Any, request_id: str, created: int) -> Request:
    if not isinstance(job_input, dict) or not isinstance(job_input.get("openai_route"), str):
        raise OpenAIError("not an OpenAI request: the job input needs 'openai_route'")
    body = job_input.get("openai_input")
    if body is not None and not isinstance(body, dict):
        raise OpenAIError("'openai_input' must be a JSON object")
    return Request(job_input["openai_route"], body, request_id, created)
