"""examples/openai: the responder's answers are what the openai SDK's own types accept,
the same request always gets the same answer, and the handler runs as a real worker
process (`python handler.py --test_input …`). The SDK against the gateway is
tests/test_openai_sdk.py; the example under `lockgate dev` is tests/test_examples.py."""

from __future__ import annotations

import base64
import importlib
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "openai"
CHAT = "/v1/chat/completions"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Tell me about queues"}]},
]


def example_module(name: str) -> ModuleType:
    """Import examples/openai/<name>.py as the handler does: its folder on sys.path."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLE))


responder = example_module("responder")
handler = example_module("handler")


def reply(route: str, body: dict[str, Any] | None = None) -> Any:
    job_input = {"openai_route": route} | ({} if body is None else {"openai_input": body})
    return responder.answer(job_input, request_id="job-1", created=1_800_000_000)


def one(route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = reply(route, body)
    assert not answer.stream and len(answer.items) == 1
    return answer.items[0]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "lockgate-toy", "messages": MESSAGES, **fields}


def error_of(route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    [item] = reply(route, body).items
    assert set(item) == {"error"}
    assert set(item["error"]) == {"message", "type", "code", "param"}
    assert item["error"]["type"] == "invalid_request_error"
    return item["error"]


# -- /v1/chat/completions ----------------------------------------------------------------


def test_chat_completion_is_an_sdk_chat_completion_and_deterministic() -> None:
    body = one(CHAT, chat())
    parsed = ChatCompletion.model_validate(body)
    assert parsed.object == "chat.completion" and parsed.id == "chatcmpl-job-1"
    assert parsed.created == 1_800_000_000 and parsed.model == "lockgate-toy"
    [choice] = parsed.choices
    assert choice.message.role == "assistant" and choice.message.content
    assert set(choice.message.content.split()) <= set(responder.VOCABULARY)
    assert one(CHAT, chat()) == body
    other = one(CHAT, chat(messages=[{"role": "user", "content": "something else"}]))
    assert other["choices"][0]["message"]["content"] != choice.message.content
    prompt_tokens = 7  # "You are terse." and "Tell me about queues", whitespace tokens
    assert parsed.usage.prompt_tokens == prompt_tokens
    completion_tokens = len(choice.message.content.split())
    assert parsed.usage.completion_tokens == completion_tokens
    assert parsed.usage.total_tokens == prompt_tokens + completion_tokens


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_chat_completion_stops_at_the_token_limit_with_finish_reason_length(field: str) -> None:
    full = ChatCompletion.model_validate(one(CHAT, chat(max_tokens=512)))
    assert full.choices[0].finish_reason == "stop"
    words = full.choices[0].message.content.split()
    cut = ChatCompletion.model_validate(one(CHAT, chat(**{field: 2})))
    assert cut.choices[0].message.content.split() == words[:2]
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage.completion_tokens == 2


def test_chat_stream_is_a_role_chunk_a_chunk_per_token_and_a_finish_chunk() -> None:
    answer = reply(CHAT, chat(stream=True, max_tokens=3))
    assert answer.stream and answer.tokens == 3
    chunks = [ChatCompletionChunk.model_validate(c) for c in answer.items]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.id for c in chunks} == {"chatcmpl-job-1"}
    first, *tokens, last = chunks
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert len(tokens) == 3 and all(t.choices[0].finish_reason is None for t in tokens)
    assert last.choices[0].finish_reason == "length" and last.choices[0].delta.content is None
    text = "".join(t.choices[0].delta.content for t in tokens)
    plain = one(CHAT, chat(max_tokens=3))
    assert text == plain["choices"][0]["message"]["content"]
    assert all(c.usage is None for c in chunks)


def test_chat_stream_with_include_usage_ends_with_a_usage_chunk_and_no_choices() -> None:
    body = chat(stream=True, stream_options={"include_usage": True})
    chunks = [ChatCompletionChunk.model_validate(c) for c in reply(CHAT, body).items]
    *rest, usage_chunk = chunks
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert all(c.usage is None for c in rest) and all("usage" in c for c in reply(CHAT, body).items)
    plain = ChatCompletion.model_validate(one(CHAT, chat()))
    assert usage_chunk.usage == plain.usage


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(n=2), "n"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(max_completion_tokens="many"), "max_completion_tokens"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": [{"content": "no role"}]}, "messages"),
    ],
)
def test_a_bad_chat_request_is_an_openai_400_naming_the_field(body: dict, param: str) -> None:
    error = error_of(CHAT, body)
    assert error["code"] == 400 and error["param"] == param


def test_a_bad_streamed_request_is_one_error_object_not_a_stream() -> None:
    answer = reply(CHAT, chat(stream=True, n=3))
    assert not answer.stream and answer.items[0]["error"]["param"] == "n"


# -- /v1/completions ---------------------------------------------------------------------


def test_text_completion_answers_each_prompt_as_the_sdk_expects() -> None:
    body = one("/v1/completions", {"model": "m", "prompt": ["one", "two"], "max_tokens": 3})
    parsed = Completion.model_validate(body)
    assert parsed.object == "text_completion" and parsed.id == "cmpl-job-1"
    assert [c.index for c in parsed.choices] == [0, 1]
    assert all(len(c.text.split()) <= 3 for c in parsed.choices)
    single = Completion.model_validate(one("/v1/completions", {"model": "m", "prompt": "two"}))
    assert single.choices[0].text.startswith(parsed.choices[1].text)


def test_text_completion_stream_joins_to_the_plain_answer() -> None:
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 4}
    chunks = reply("/v1/completions", body | {"stream": True}).items
    assert {c["object"] for c in chunks} == {"text_completion"}
    *tokens, last = chunks
    assert all(c["choices"][0]["finish_reason"] is None for c in tokens)
    plain = Completion.model_validate(one("/v1/completions", body))
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain.choices[0].text
    assert (
        Completion.model_validate(last).choices[0].finish_reason == plain.choices[0].finish_reason
    )


def test_a_completion_without_a_usable_prompt_is_refused() -> None:
    assert error_of("/v1/completions", {"model": "m", "prompt": [1, 2]})["param"] == "prompt"


# -- /v1/embeddings ----------------------------------------------------------------------


def test_embeddings_are_unit_vectors_of_the_asked_dimensions_in_input_order() -> None:
    body = {"model": "m", "input": ["alpha", "beta", [1, 2, 3]], "dimensions": 64}
    parsed = CreateEmbeddingResponse.model_validate(one("/v1/embeddings", body))
    assert [d.index for d in parsed.data] == [0, 1, 2]
    for item in parsed.data:
        assert len(item.embedding) == 64
        assert math.isclose(math.fsum(v * v for v in item.embedding), 1.0, rel_tol=1e-5)
    assert parsed.data[0].embedding != parsed.data[1].embedding
    alone = one("/v1/embeddings", {"model": "m", "input": "beta", "dimensions": 64})
    assert alone["data"][0]["embedding"] == parsed.data[1].embedding
    default = one("/v1/embeddings", {"model": "m", "input": "beta"})
    assert len(default["data"][0]["embedding"]) == responder.EMBEDDING_DIMENSIONS
    assert parsed.usage.prompt_tokens == parsed.usage.total_tokens == 5


def test_base64_embeddings_decode_to_the_float_vectors() -> None:
    """The openai SDK asks for base64 by default and decodes little-endian float32."""
    body = {"model": "m", "input": "gamma", "dimensions": 16}
    floats = one("/v1/embeddings", body)["data"][0]["embedding"]
    encoded = one("/v1/embeddings", body | {"encoding_format": "base64"})["data"][0]["embedding"]
    assert isinstance(encoded, str)
    assert list(struct.unpack("<16f", base64.b64decode(encoded))) == floats


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"input": []}, "input"),
        ({"input": [{"text": "x"}]}, "input"),
    ],
)
def test_a_bad_embeddings_request_is_an_openai_400(body: dict, param: str) -> None:
    error = error_of("/v1/embeddings", body)
    assert error["code"] == 400 and error["param"] == param


# -- /v1/models and routing --------------------------------------------------------------


def test_models_lists_the_responders_model_and_retrieves_it() -> None:
    listing = one("/v1/models")
    assert listing["object"] == "list"
    [card] = [Model.model_validate(m) for m in listing["data"]]
    assert card.id == responder.MODEL and card.owned_by == "lockgate"
    assert Model.model_validate(one(f"/v1/models/{responder.MODEL}")) == card
    assert error_of("/v1/models/gpt-9")["code"] == 404


@pytest.mark.parametrize(
    ("route", "body", "code"),
    [
        ("/v1/audio/speech", {"input": "hi"}, 404),
        ("/v2/chat/completions", chat(), 404),
        (CHAT, None, 400),  # a GET: no openai_input
    ],
)
def test_unknown_routes_are_404_and_a_bodyless_post_route_is_400(
    route: str, body: dict | None, code: int
) -> None:
    assert error_of(route, body)["code"] == code


@pytest.mark.parametrize(
    "job_input", [{"prompt": "hi"}, "text", {"openai_route": "/v1/models", "openai_input": [1]}]
)
def test_a_job_that_is_not_an_openai_request_is_refused(job_input: Any) -> None:
    [item] = responder.answer(job_input, request_id="j", created=0).items
    assert item["error"]["code"] == 400


# -- pacing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "default_ms", "seconds"),
    [
        ({}, "0", 0.0),
        ({}, "20", 0.02),
        ({"delay_ms": 5}, "20", 0.005),
        ({"delay_ms": -5}, "0", 0.0),
        ({"delay_ms": 10**9}, "0", handler.MAX_DELAY_MS / 1000),
        (None, "junk", 0.0),
    ],
)
def test_token_delay_comes_from_the_request_then_the_environment(
    body: Any, default_ms: str, seconds: float
) -> None:
    assert handler.token_delay_s(body, default_ms) == pytest.approx(seconds)


# -- the handler as a worker process -----------------------------------------------------


def run_handler(job_input: dict[str, Any]) -> dict[str, Any]:
    """`python handler.py --test_input …` with no gateway: the job the runtime prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKGATE_", "RUNPOD_"))}
    env |= {"PYTHONPATH": str(REPO / "operator")}
    command = [sys.executable, "handler.py", "--test_input", json.dumps({"input": job_input})]
    result = subprocess.run(
        command, cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_handler_yields_a_chat_completion_once_as_a_one_element_output() -> None:
    job = run_handler({"openai_route": CHAT, "openai_input": chat(max_tokens=4)})
    assert job["status"] == "COMPLETED"
    [response] = job["output"]
    parsed = ChatCompletion.model_validate(response)
    assert parsed.id == "chatcmpl-local_test" and parsed.created > 0
    assert (
        parsed.choices[0].message.content
        == one(CHAT, chat(max_tokens=4))["choices"][0]["message"]["content"]
    )


def test_handler_streams_chunks_the_sdk_accepts() -> None:
    body = chat(max_tokens=5, stream=True, stream_options={"include_usage": True})
    job = run_handler({"openai_route": CHAT, "openai_input": body})
    assert job["status"] == "COMPLETED"
    chunks = [ChatCompletionChunk.model_validate(c) for c in job["stream"]]
    assert len(chunks) == 1 + 5 + 1 + 1  # role, tokens, finish, usage
    assert job["output"] == job["stream"]  # return_aggregate_stream


def test_handler_answers_a_get_of_the_models() -> None:
    job = run_handler({"openai_route": "/v1/models"})
    assert job["status"] == "COMPLETED"
    assert job["output"][0]["data"][0]["id"] == responder.MODEL


def test_handler_yields_an_openai_error_for_an_unknown_route() -> None:
    """lockgate's runtime ends a job whose generator yields `{"error": …}` FAILED, with the
    error object as JSON text (the runpod SDK streams it as output instead)."""
    job = run_handler({"openai_route": "/v1/nothing", "openai_input": {}})
    assert job["status"] == "FAILED"
    error = json.loads(job["error"])
    assert error == {
        "message": "Unknown route: /v1/nothing",
        "type": "invalid_request_error",
        "code": 404,
        "param": None,
    }
