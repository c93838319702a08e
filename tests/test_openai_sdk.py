"""The official `openai` SDK, unchanged, against the OpenAI route of a real `lockgate dev`:
with a runpod-SDK worker that follows RunPod's worker-vllm conventions (raw SSE text), and
with a lockgate-runtime worker that streams chunk objects (vLLM's non-raw mode)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import requests

from tests.devproc import REPO, DevProcess
from tests.test_dev_mode import wait_until
from tests.workers import toy_llm

VLLM = "tests/workers/runpod_vllm.py"
OBJECTS = "tests/workers/lockgate_openai.py"
JOB_HEADER = "X-Lockgate-Job-Id"
HELLO = [{"role": "user", "content": "hello from the queue"}]
ECHO = "echo: hello from the queue"


def _dev(tmp_path_factory, worker: str, *args: str, env=None) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    with DevProcess(str(REPO / worker), *args, data_dir=data, env=env) as dev:
        yield dev


@pytest.fixture(scope="module")
def vllm_dev(tmp_path_factory) -> Iterator[DevProcess]:
    yield from _dev(tmp_path_factory, VLLM, "--workers-min", "1")


@pytest.fixture(scope="module")
def objects_dev(tmp_path_factory) -> Iterator[DevProcess]:
    yield from _dev(tmp_path_factory, OBJECTS, "--workers-min", "1")


@pytest.fixture(scope="module")
def cold_dev(tmp_path_factory) -> Iterator[DevProcess]:
    """No worker until a job comes, one OpenAI request in flight at a time, and a stream
    that waits gets a keep-alive comment every 50 ms (the SDK must skip them)."""
    limits = '{"openai": {"concurrency": 1}}'
    env = {"LOCKGATE_RATE_LIMITS": limits, "LOCKGATE_OPENAI_KEEPALIVE_S": "0.05"}
    yield from _dev(tmp_path_factory, OBJECTS, "--workers-min", "0", env=env)


class Seen:
    """The HTTP statuses a client received, in order (an event hook of the SDK's httpx)."""

    def __init__(self) -> None:
        self.statuses: list[int] = []

    def __call__(self, response: Any) -> None:
        self.statuses.append(response.status_code)


def client(dev: DevProcess, *, seen: Seen | None = None, **options: Any) -> openai.OpenAI:
    """An OpenAI client for `dev`'s endpoint, as its docs show it."""
    hooks = {"response": [seen]} if seen else {}
    return openai.OpenAI(
        base_url=f"{dev.url}/v2/{dev.endpoint}/openai/v1",
        api_key=dev.key,
        http_client=openai.DefaultHttpxClient(event_hooks=hooks),
        **options,
    )


def job_api(dev: DevProcess, path: str) -> dict[str, Any]:
    """A GET on the endpoint's job API (`status/{id}`, `health`, `requests`)."""
    response = requests.get(dev.job_url(path), headers=dev.headers(), timeout=30)
    response.raise_for_status()
    return response.json()


def streamed_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# -- RunPod's worker-vllm conventions: a runpod-SDK worker, raw SSE text -----------------


def test_chat_completion_answers_the_whole_response(vllm_dev):
    completion = client(vllm_dev).chat.completions.create(model=toy_llm.MODEL, messages=HELLO)
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == ECHO
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == len(ECHO.split())


def test_chat_stream_of_raw_sse_text_arrives_chunk_by_chunk(vllm_dev):
    words = " ".join(f"word{i}" for i in range(40))  # ~40 events: several reads, cut mid-line
    raw = client(vllm_dev).chat.completions.with_raw_response.create(
        model=toy_llm.MODEL, messages=[{"role": "user", "content": words}], stream=True
    )
    chunks = list(raw.parse())
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len(chunks) == len(words.split()) + 3  # the role, one per word of "echo: ...", end
    assert chunks[0].choices[0].delta.role == "assistant"
    assert streamed_text(chunks) == f"echo: {words}"
    assert chunks[-1].choices[0].finish_reason == "stop"
    # The client stops at the worker's own `data: [DONE]`, which may come before the worker
    # reports the job done: wait for that (`?wait=`) before reading the output.
    done = job_api(vllm_dev, f"status/{raw.headers[JOB_HEADER]}?wait=30000")
    assert done["status"] == "COMPLETED"
    reads = done["output"]  # as yielded
    assert any(read.count("data: ") > 1 for read in reads)
    assert any(not read.endswith("\n\n") for read in reads)
    assert reads[-1].endswith("data: [DONE]\n\n")


def test_completion_answers_text(vllm_dev):
    completion = client(vllm_dev).completions.create(
        model=toy_llm.MODEL, prompt="one two three four", max_tokens=3
    )
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "echo: one two"
    assert completion.choices[0].finish_reason == "length"


def test_completion_stream(vllm_dev):
    stream = client(vllm_dev).completions.create(model=toy_llm.MODEL, prompt="one two", stream=True)
    assert "".join(c.choices[0].text for c in stream) == "echo: one two"


def test_models_list_is_a_get_without_openai_input(vllm_dev):
    models = client(vllm_dev).models.list()
    assert [m.id for m in models] == [toy_llm.MODEL]


@pytest.mark.parametrize("stream", [False, True])
def test_a_worker_error_is_an_api_error_with_its_message(vllm_dev, stream):
    seen = Seen()
    with pytest.raises(openai.APIError) as caught:
        client(vllm_dev, seen=seen).chat.completions.create(
            model="no-such-model", messages=HELLO, stream=stream
        )
    assert caught.value.body == {
        "message": "vLLM returned HTTP 404: The model `no-such-model` does not exist.",
        "type": "worker_error",
        "code": None,
    }
    assert caught.value.message.endswith(caught.value.body["message"])
    assert seen.statuses == [500]  # not retried: the worker said no


def test_a_stream_closed_by_its_client_cancels_the_job(vllm_dev):
    words = " ".join(f"w{i}" for i in range(60))
    raw = client(vllm_dev).chat.completions.with_raw_response.create(
        model=toy_llm.MODEL,
        messages=[{"role": "user", "content": words}],
        stream=True,
        extra_body={"delay_ms": 100},  # 6 s of events: the client leaves long before
    )
    job_id = raw.headers[JOB_HEADER]
    stream = raw.parse()
    assert next(iter(stream)).choices[0].delta.role == "assistant"
    stream.close()
    wait_until(lambda: job_api(vllm_dev, f"status/{job_id}")["status"] != "IN_PROGRESS", 30)
    assert job_api(vllm_dev, f"status/{job_id}")["status"] == "CANCELLED"


def test_a_stream_read_to_its_done_leaves_the_job_completed_though_the_worker_lingers(vllm_dev):
    raw = client(vllm_dev).chat.completions.with_raw_response.create(
        model=toy_llm.MODEL,
        messages=HELLO,
        stream=True,
        extra_body={"linger_ms": 3000},  # done 3 s after its `data: [DONE]`
    )
    assert streamed_text(raw.parse()) == ECHO  # the SDK closes its connection at [DONE]
    done = job_api(vllm_dev, f"status/{raw.headers[JOB_HEADER]}?wait=30000")
    assert done["status"] == "COMPLETED"  # not cancelled for a client that left at [DONE]


# -- a lockgate-runtime worker that yields chunk objects and lists of them -----------------


def test_chat_stream_of_chunk_objects_and_lists(objects_dev):
    words = "a b c d e f g h i j"
    raw = client(objects_dev).chat.completions.with_raw_response.create(
        model=toy_llm.MODEL, messages=[{"role": "user", "content": words}], stream=True
    )
    chunks = list(raw.parse())
    assert len(chunks) == len(words.split()) + 3
    assert streamed_text(chunks) == f"echo: {words}"
    assert chunks[-1].choices[0].finish_reason == "stop"
    yields = job_api(objects_dev, f"status/{raw.headers[JOB_HEADER]}")["output"]
    assert [type(y).__name__ for y in yields[:3]] == ["dict", "list", "list"]


def test_embeddings_in_base64_as_the_sdk_asks(objects_dev):
    texts = ["first text", "second text"]
    result = client(objects_dev).embeddings.create(model=toy_llm.MODEL, input=texts)
    assert [d.embedding for d in result.data] == [toy_llm.embedding(t) for t in texts]


def test_a_raising_handler_is_one_api_error_and_one_job(objects_dev):
    failed = job_api(objects_dev, "health")["jobs"]["failed"]
    seen = Seen()
    with pytest.raises(openai.InternalServerError) as caught:
        client(objects_dev, seen=seen).chat.completions.create(
            model=toy_llm.MODEL, messages=[{"role": "user", "content": "raise: out of memory"}]
        )
    assert caught.value.body["message"] == "RuntimeError: out of memory"
    assert caught.value.body["type"] == "handler_error"
    assert seen.statuses == [500]  # x-should-retry: false, so the SDK did not resubmit
    assert job_api(objects_dev, "health")["jobs"]["failed"] == failed + 1


def test_a_handler_that_raises_mid_stream_ends_it_with_an_api_error(objects_dev):
    stream = client(objects_dev).chat.completions.create(
        model=toy_llm.MODEL, messages=[{"role": "user", "content": "raise: lost GPU"}], stream=True
    )
    chunks = []
    with pytest.raises(openai.APIError) as caught:
        chunks.extend(stream)
    assert [c.choices[0].delta.role for c in chunks] == ["assistant"]
    assert caught.value.message == "RuntimeError: lost GPU"


@pytest.mark.parametrize("stream", [False, True])
def test_a_refused_request_keeps_the_workers_status_and_error(objects_dev, stream):
    with pytest.raises(openai.NotFoundError) as caught:
        client(objects_dev).chat.completions.create(model="gpt-nope", messages=HELLO, stream=stream)
    assert caught.value.body == {
        "message": "The model `gpt-nope` does not exist.",
        "type": "invalid_request_error",
        "code": 404,
    }


def test_an_openai_request_is_a_job_in_status_requests_and_health(objects_dev):
    completed = job_api(objects_dev, "health")["jobs"]["completed"]
    raw = client(objects_dev).chat.completions.with_raw_response.create(
        model=toy_llm.MODEL, messages=HELLO
    )
    job_id = raw.headers[JOB_HEADER]
    assert raw.parse().choices[0].message.content == ECHO
    status = job_api(objects_dev, f"status/{job_id}")
    assert status["status"] == "COMPLETED"
    assert status["output"][0]["choices"][0]["message"]["content"] == ECHO
    assert job_id in [item["id"] for item in job_api(objects_dev, "requests")["items"]]
    assert job_api(objects_dev, "health")["jobs"]["completed"] == completed + 1


# -- scaling and limits ----------------------------------------------------------------


def test_from_zero_workers_the_first_request_waits_for_a_cold_start(cold_dev):
    wait_until(lambda: not cold_dev.workers(), 60)  # idle workers stop after 5 s
    stream = client(cold_dev).chat.completions.create(
        model=toy_llm.MODEL, messages=HELLO, stream=True
    )  # keep-alive comments flow while the worker starts
    assert streamed_text(stream) == ECHO
    assert cold_dev.workers()


def test_over_the_concurrency_limit_the_sdk_retries_a_429_and_succeeds(cold_dev):
    first = client(cold_dev).chat.completions.create(
        model=toy_llm.MODEL,
        messages=[{"role": "user", "content": " ".join(["slow"] * 10)}],
        stream=True,
        extra_body={"delay_ms": 300},  # 5 yields 300 ms apart: the route's one slot is held
    )
    started = next(iter(first))  # the first request holds the slot until its stream ends
    rest = threading.Thread(target=lambda: list(first))
    rest.start()
    seen = Seen()
    second = client(cold_dev, seen=seen, max_retries=10).chat.completions.create(
        model=toy_llm.MODEL, messages=HELLO
    )
    rest.join()
    assert started.choices[0].delta.role == "assistant"
    assert seen.statuses[0] == 429 and seen.statuses[-1] == 200
    assert second.choices[0].message.content == ECHO


# -- examples/openai/handler.py, as its docs run it ----------------------------------------


@pytest.fixture(scope="module")
def example_dev(tmp_path_factory) -> Iterator[DevProcess]:
    yield from _dev(tmp_path_factory, "examples/openai/handler.py", "--workers-min", "1")


def test_the_example_answers_every_documented_call(example_dev):
    """docs/openai.md's SDK lines against the example: chat (plain and streamed: the same
    words), completions, embeddings (base64, as the SDK asks), models, and a refusal."""
    api = client(example_dev, max_retries=0)
    ask = [{"role": "user", "content": "What is a queue?"}]
    plain = api.chat.completions.create(model="lockgate-toy", messages=ask, max_tokens=8)
    words = plain.choices[0].message.content
    assert len(words.split()) == 8 and plain.choices[0].finish_reason == "length"
    stream = api.chat.completions.create(
        model="lockgate-toy", messages=ask, max_tokens=8, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    assert streamed_text(chunks) == words  # deterministic: the same request, the same text
    assert chunks[-1].usage.completion_tokens == 8
    completion = api.completions.create(model="lockgate-toy", prompt="Once upon a time")
    assert completion.object == "text_completion" and completion.choices[0].text
    vectors = api.embeddings.create(model="lockgate-toy", input=["a", "b"], dimensions=64)
    assert [len(v.embedding) for v in vectors.data] == [64, 64]
    assert abs(sum(x * x for x in vectors.data[0].embedding) - 1) < 1e-4  # unit vectors
    assert [m.id for m in api.models.list()] == ["lockgate-toy"]
    with pytest.raises(openai.BadRequestError, match="n=1"):
        api.chat.completions.create(model="lockgate-toy", messages=ask, n=2)
