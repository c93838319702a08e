"""The worker runtime without a real gateway: `--test_input` runs, handler kinds, settings,
and what only a stand-in for the gateway's worker API can show (the exact calls a worker
makes, a gateway answering 5xx). Stopping jobs and SIGTERM against the real gateway are
in test_worker_gateway.py."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lockgate.worker import codec, config, handlers
from lockgate.worker.client import GatewayClient
from lockgate.worker.handlers import HandlerKind, Outcome

REPO = Path(__file__).resolve().parent.parent
HANDLERS = REPO / "tests" / "handlers"
GATEWAY_VARS = ("LOCKGATE_", "RUNPOD_")


def worker_env(**extra: str) -> dict[str, str]:
    """The test's environment without any gateway settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(GATEWAY_VARS)}
    return env | {"PYTHONPATH": str(REPO / "operator")} | extra


def run_local(script: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(script), *args]
    return subprocess.run(
        command, cwd=cwd, env=worker_env(), capture_output=True, text=True, timeout=30
    )


def printed_job(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(result.stdout)


# -- `python handler.py --test_input …`


def test_sync_handler_prints_its_completed_job_and_exits_0() -> None:
    result = run_local(HANDLERS / "sync_echo.py", "--test_input", '{"input": {"x": 1}}')
    assert result.returncode == 0, result.stderr
    assert printed_job(result) == {
        "id": "local_test",
        "status": "COMPLETED",
        "output": {"echo": {"x": 1}},
    }
    assert "lockgate.worker | job local_test started" in result.stderr


def test_async_handler_prints_its_completed_job() -> None:
    result = run_local(HANDLERS / "async_echo.py", "--test_input", '{"input": "hi"}')
    assert result.returncode == 0, result.stderr
    assert printed_job(result)["output"] == {"echo": "hi"}


def test_generator_prints_every_chunk_and_the_aggregate_when_asked() -> None:
    result = run_local(HANDLERS / "generator.py", "--test_input", '{"input": {"text": "a b"}}')
    assert result.returncode == 0, result.stderr
    words = [{"word": "a"}, {"word": "b"}]
    assert printed_job(result) == {
        "id": "local_test",
        "status": "COMPLETED",
        "output": words,
        "stream": words,
    }


def test_generator_without_aggregate_completes_with_an_empty_output() -> None:
    test_input = '{"input": {"text": "a b"}}'
    result = run_local(HANDLERS / "generator.py", "--no-aggregate", "--test_input", test_input)
    assert result.returncode == 0, result.stderr
    assert printed_job(result)["output"] == []
    assert printed_job(result)["stream"] == [{"word": "a"}, {"word": "b"}]


def test_async_generator_streams_in_order() -> None:
    result = run_local(HANDLERS / "async_generator.py", "--test_input", '{"input": {"n": 4}}')
    assert result.returncode == 0, result.stderr
    assert printed_job(result)["stream"] == [0, 1, 2, 3]
    assert printed_job(result)["output"] == [0, 1, 2, 3]


def test_raising_handler_fails_with_a_one_line_error_and_exits_1() -> None:
    result = run_local(HANDLERS / "raising.py", "--test_input", '{"input": {}}')
    assert result.returncode == 1
    assert printed_job(result) == {
        "id": "local_test",
        "status": "FAILED",
        "error": "ValueError: bad input",
    }
    assert "Traceback" in result.stderr  # the traceback stays in the local log


def test_error_key_fails_the_job_and_keeps_the_rest_as_output() -> None:
    result = run_local(HANDLERS / "error_dict.py", "--test_input", '{"input": 7}')
    assert result.returncode == 1
    assert printed_job(result) == {
        "id": "local_test",
        "status": "FAILED",
        "output": {"partial": 7},
        "error": "model not loaded",
    }


def test_test_input_keeps_an_id_it_brings() -> None:
    result = run_local(HANDLERS / "sync_echo.py", "--test_input", '{"id": "j1", "input": 1}')
    assert printed_job(result)["id"] == "j1"


@pytest.mark.parametrize("test_input", ['{"prompt": "hi"}', '{"input": null}', "[1]"])
def test_test_input_without_an_input_object_is_refused_clearly(test_input: str) -> None:
    result = run_local(HANDLERS / "sync_echo.py", "--test_input", test_input)
    assert result.returncode == 1
    assert result.stdout == ""
    assert '{"input": {...}}' in result.stderr


def test_test_input_that_is_not_json_is_refused() -> None:
    result = run_local(HANDLERS / "sync_echo.py", "--test_input", "{input: 1}")
    assert result.returncode == 1
    assert "not JSON" in result.stderr


def test_test_input_json_in_the_working_directory_is_used(tmp_path: Path) -> None:
    (tmp_path / "test_input.json").write_text('{"input": {"from": "file"}}')
    result = run_local(HANDLERS / "sync_echo.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert printed_job(result)["output"] == {"echo": {"from": "file"}}


def test_without_gateway_or_test_input_the_worker_explains_both_ways_to_run(
    tmp_path: Path,
) -> None:
    result = run_local(HANDLERS / "sync_echo.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "--test_input" in result.stderr
    assert "LOCKGATE_GATEWAY_URL" in result.stderr


def test_echo_example_echoes_after_its_sleep() -> None:
    test_input = '{"input": {"sleep": 0.05, "a": 1}}'
    result = run_local(REPO / "examples" / "echo" / "handler.py", "--test_input", test_input)
    assert result.returncode == 0, result.stderr
    assert printed_job(result)["output"] == {"echo": {"sleep": 0.05, "a": 1}}


# -- handler kinds and what their results become


def plain(job: dict[str, Any]) -> Any:
    return job["input"]


async def coroutine(job: dict[str, Any]) -> Any:
    return job["input"]


def generator(job: dict[str, Any]) -> Iterator[Any]:
    yield from job["input"]


async def async_generator(job: dict[str, Any]) -> AsyncIterator[Any]:
    for item in job["input"]:
        yield item


class AsyncCallable:
    async def __call__(self, job: dict[str, Any]) -> Any:
        return job["input"]


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        (plain, HandlerKind.SYNC),
        (coroutine, HandlerKind.ASYNC),
        (generator, HandlerKind.GENERATOR),
        (async_generator, HandlerKind.ASYNC_GENERATOR),
        (functools.partial(coroutine), HandlerKind.ASYNC),
        (AsyncCallable(), HandlerKind.ASYNC),
        (lambda job: job, HandlerKind.SYNC),
    ],
)
def test_handler_kind_is_recognised(handler: Callable[..., Any], kind: HandlerKind) -> None:
    assert handlers.kind_of(handler) is kind


def test_only_sync_kinds_run_in_a_thread_and_only_generators_stream() -> None:
    assert [k for k in HandlerKind if k.in_thread] == [HandlerKind.SYNC, HandlerKind.GENERATOR]
    assert [k for k in HandlerKind if k.streams] == [
        HandlerKind.GENERATOR,
        HandlerKind.ASYNC_GENERATOR,
    ]


@pytest.mark.parametrize(
    ("value", "body", "refresh"),
    [
        ({"a": 1}, {"output": {"a": 1}}, False),
        ("text", {"output": "text"}, False),
        (None, {"output": None}, False),
        (False, {"output": False}, False),
        ([1, 2], {"output": [1, 2]}, False),
        ({"error": "boom"}, {"error": "boom"}, False),
        ({"error": "boom", "a": 1}, {"output": {"a": 1}, "error": "boom"}, False),
        ({"error": None, "a": 1}, {"output": {"a": 1}}, False),
        ({"error": {"code": 3}}, {"error": '{"code":3}'}, False),
        ({"error": ValueError("x")}, {"error": "x"}, False),
        ({"refresh_worker": True, "a": 1}, {"output": {"a": 1}}, True),
        ({}, {}, False),
    ],
)
def test_handler_return_value_becomes_the_runpod_job_done_body(
    value: Any, body: dict[str, Any], refresh: bool
) -> None:
    assert handlers.normalise(value) == (body, refresh)


def test_normalising_leaves_the_handlers_own_dict_alone() -> None:
    returned = {"error": "boom", "a": 1}
    handlers.normalise(returned)
    assert returned == {"error": "boom", "a": 1}


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (ValueError("bad input"), "ValueError: bad input"),
        (RuntimeError("line one\n  line two\n"), "RuntimeError: line one line two"),
        (KeyError("prompt"), "KeyError: 'prompt'"),
        (TimeoutError(), "TimeoutError"),
    ],
)
def test_exception_becomes_a_one_line_error(exc: Exception, message: str) -> None:
    assert handlers.error_message(exc) == message


class Chunks(list[Any]):
    async def __call__(self, chunk: Any) -> None:
        self.append(chunk)


async def run(handler: Callable[..., Any], job_input: Any, aggregate: bool = False) -> Outcome:
    return await handlers.run(
        handler, {"id": "j", "input": job_input}, send_chunk=Chunks(), aggregate=aggregate
    )


async def test_sync_handler_runs_in_a_thread_and_async_handler_on_the_loop() -> None:
    def where(job: dict[str, Any]) -> str:
        return threading.current_thread().name

    async def where_async(job: dict[str, Any]) -> str:
        return threading.current_thread().name

    main = threading.current_thread().name
    assert (await run(where, None)).body["output"] != main
    assert (await run(where_async, None)).body["output"] == main


@pytest.mark.parametrize("handler", [generator, async_generator])
async def test_generators_send_each_chunk_in_order(handler: Callable[..., Any]) -> None:
    chunks = Chunks()
    job = {"id": "j", "input": [1, {"b": 2}, "c"]}
    outcome = await handlers.run(handler, job, send_chunk=chunks, aggregate=True)
    assert chunks == [1, {"b": 2}, "c"]
    assert outcome == Outcome({"output": [1, {"b": 2}, "c"]}, is_stream=True)


@pytest.mark.parametrize("handler", [generator, async_generator])
async def test_a_yielded_error_ends_the_stream_and_fails_the_job(
    handler: Callable[..., Any],
) -> None:
    chunks = Chunks()
    job = {"id": "j", "input": [1, {"error": "out of memory"}, 3]}
    outcome = await handlers.run(handler, job, send_chunk=chunks)
    assert chunks == [1]
    assert outcome == Outcome({"error": "out of memory"}, is_stream=True)


async def test_a_generator_that_raises_fails_the_job_as_a_stream() -> None:
    def broken(job: dict[str, Any]) -> Iterator[int]:
        yield 1
        raise OSError("disk full")

    assert await run(broken, None) == Outcome({"error": "OSError: disk full"}, is_stream=True)


async def test_a_chunk_that_is_not_json_fails_the_job() -> None:
    def unsendable(job: dict[str, Any]) -> Iterator[object]:
        yield object()

    client = GatewayClient(
        config.load({"LOCKGATE_GATEWAY_URL": "http://gw", "LOCKGATE_ENDPOINT_ID": "e"})
    )
    job = {"id": "j", "input": None}
    outcome = await handlers.run(unsendable, job, send_chunk=lambda c: client.stream("j", c))
    assert outcome.failed
    assert outcome.body["error"].startswith("TypeError")


def test_json_falls_back_to_the_standard_library_without_orjson(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(codec, "orjson", None)
    assert codec.loads(codec.dumps({"text": "é", "n": 2**70})) == {"text": "é", "n": 2**70}


# -- settings from the environment

LOCKGATE_ENV = {
    "LOCKGATE_GATEWAY_URL": "http://gw:8080/",
    "LOCKGATE_ENDPOINT_ID": "ep",
    "LOCKGATE_WORKER_ID": "w1",
    "LOCKGATE_WORKER_KEY": "key",
}
RUNPOD_ENV = {
    "RUNPOD_WEBHOOK_GET_JOB": "http://gw/v2/ep/job-take/$ID?endpoint=ep",
    "RUNPOD_WEBHOOK_POST_OUTPUT": "http://gw/v2/ep/job-done/$RUNPOD_POD_ID/$ID?endpoint=ep",
    "RUNPOD_WEBHOOK_POST_STREAM": "http://gw/v2/ep/job-stream/$RUNPOD_POD_ID/$ID?endpoint=ep",
    "RUNPOD_WEBHOOK_PING": "http://gw/v2/ep/ping/$RUNPOD_POD_ID?endpoint=ep",
    "RUNPOD_AI_API_KEY": "rp-key",
    "RUNPOD_POD_ID": "pod-1",
    "RUNPOD_ENDPOINT_ID": "ep",
}


def test_lockgate_settings_build_the_worker_api_urls() -> None:
    settings = config.load(LOCKGATE_ENV)
    assert settings.take_url == "http://gw:8080/v2/ep/job-take/w1"
    assert settings.take_batch_url == "http://gw:8080/v2/ep/job-take-batch/w1"
    assert settings.done_url == "http://gw:8080/v2/ep/job-done/w1/$ID"
    assert settings.stream_url == "http://gw:8080/v2/ep/job-stream/w1/$ID"
    assert settings.ping_url == "http://gw:8080/v2/ep/ping/w1"
    assert settings.stop_url == "http://gw:8080/v2/ep/job-stop/w1"
    assert (settings.worker_key, settings.ping_interval_s) == ("key", 10.0)


def test_runpod_settings_fill_the_worker_id_into_runpods_url_templates() -> None:
    settings = config.load(RUNPOD_ENV)
    assert settings.take_url == "http://gw/v2/ep/job-take/pod-1?endpoint=ep"
    assert settings.take_batch_url == "http://gw/v2/ep/job-take-batch/pod-1?endpoint=ep"
    assert settings.done_url == "http://gw/v2/ep/job-done/pod-1/$ID?endpoint=ep"
    assert settings.stream_url == "http://gw/v2/ep/job-stream/pod-1/$ID?endpoint=ep"
    assert settings.ping_url == "http://gw/v2/ep/ping/pod-1?endpoint=ep"
    assert settings.stop_url == "http://gw/v2/ep/job-stop/pod-1?endpoint=ep"
    assert (settings.worker_id, settings.worker_key) == ("pod-1", "rp-key")


def test_runpod_urls_missing_beside_job_take_are_derived_from_it() -> None:
    settings = config.load({"RUNPOD_WEBHOOK_GET_JOB": RUNPOD_ENV["RUNPOD_WEBHOOK_GET_JOB"]})
    worker = settings.worker_id
    assert settings.done_url == f"http://gw/v2/ep/job-done/{worker}/$ID?endpoint=ep"
    assert settings.ping_url == f"http://gw/v2/ep/ping/{worker}?endpoint=ep"


def test_lockgate_settings_win_over_runpod_ones() -> None:
    settings = config.load(RUNPOD_ENV | LOCKGATE_ENV)
    assert settings.take_url == "http://gw:8080/v2/ep/job-take/w1"
    assert settings.worker_key == "key"


def test_a_missing_worker_id_is_generated() -> None:
    settings = config.load({"LOCKGATE_GATEWAY_URL": "http://gw", "LOCKGATE_ENDPOINT_ID": "e"})
    assert len(settings.worker_id) == 12
    assert settings.take_url.endswith(f"/job-take/{settings.worker_id}")


def test_lockgate_gateway_without_an_endpoint_is_a_config_error() -> None:
    with pytest.raises(config.ConfigError, match="LOCKGATE_ENDPOINT_ID"):
        config.load({"LOCKGATE_GATEWAY_URL": "http://gw"})


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({"RUNPOD_PING_INTERVAL": "4000"}, 4.0),
        ({"RUNPOD_PING_INTERVAL": "4000", "LOCKGATE_PING_INTERVAL_MS": "250"}, 0.25),
        ({}, 10.0),
    ],
)
def test_ping_interval_is_read_in_milliseconds(env: dict[str, str], seconds: float) -> None:
    assert config.load(LOCKGATE_ENV | env).ping_interval_s == seconds


def test_gateway_is_configured_by_either_family_of_variables() -> None:
    assert config.gateway_configured(LOCKGATE_ENV)
    assert config.gateway_configured(RUNPOD_ENV)
    assert not config.gateway_configured({"RUNPOD_POD_ID": "x"})


# -- the worker's calls, as a stand-in gateway sees them


class StandInGateway:
    """Just enough of the worker API to watch a worker: a queue, and what it was sent."""

    def __init__(self) -> None:
        self.queue: list[dict[str, Any]] = []
        self.done: dict[str, tuple[dict[str, Any], str]] = {}
        self.takes: list[dict[str, str]] = []
        self.pings: list[dict[str, str]] = []
        self.failing_done = 0
        app = web.Application()
        app.add_routes(
            [
                web.get("/v2/ep/job-take/w1", self.take),
                web.get("/v2/ep/job-take-batch/w1", self.take),
                web.post("/v2/ep/job-done/w1/{job}", self.job_done),
                web.get("/v2/ep/ping/w1", self.ping),
                web.get("/v2/ep/job-stop/w1", self.stop),
            ]
        )
        self.runner = web.AppRunner(app)

    async def take(self, request: web.Request) -> web.StreamResponse:
        self.takes.append(dict(request.query) | {"auth": request.headers["Authorization"]})
        for _ in range(10):  # a short long-poll: 0.2 s
            if self.queue:
                count = int(request.query.get("batch_size", "1"))
                jobs, self.queue[:count] = self.queue[:count], []
                return web.json_response(jobs if "batch_size" in request.query else jobs[0])
            await asyncio.sleep(0.02)
        return web.Response(status=204)

    async def job_done(self, request: web.Request) -> web.Response:
        if self.failing_done > 0:
            self.failing_done -= 1
            return web.Response(status=503)
        self.done[request.match_info["job"]] = (await request.json(), request.query["isStream"])
        return web.json_response({})

    async def ping(self, request: web.Request) -> web.Response:
        self.pings.append(dict(request.query))
        return web.json_response({})

    async def stop(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.05)  # a short long-poll that never has a job to stop
        return web.Response(status=204)


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[StandInGateway, str]]:
    stand_in = StandInGateway()
    await stand_in.runner.setup()
    site = web.TCPSite(stand_in.runner, "127.0.0.1", 0)
    await site.start()
    host, port = stand_in.runner.addresses[0][:2]
    yield stand_in, f"http://{host}:{port}"
    await stand_in.runner.cleanup()


async def start_worker(url: str, *args: str) -> asyncio.subprocess.Process:
    env = worker_env(
        LOCKGATE_GATEWAY_URL=url,
        LOCKGATE_ENDPOINT_ID="ep",
        LOCKGATE_WORKER_ID="w1",
        LOCKGATE_WORKER_KEY="secret-key",
        LOCKGATE_PING_INTERVAL_MS="100",
    )
    script = str(HANDLERS / "sleeper.py")
    return await asyncio.create_subprocess_exec(sys.executable, script, *args, env=env)


async def until(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def exit_status(worker: asyncio.subprocess.Process, timeout_s: float = 10.0) -> int:
    return await asyncio.wait_for(worker.wait(), timeout_s)


async def test_worker_takes_a_batch_reports_results_and_pings_with_job_ids(gateway) -> None:
    stand_in, url = gateway
    stand_in.queue += [{"id": f"j{i}", "input": {"sleep": 0.3, "i": i}} for i in range(3)]
    worker = await start_worker(url, "async", "3")
    await until(lambda: len(stand_in.done) == 3)
    worker.send_signal(signal.SIGTERM)
    assert await exit_status(worker) == 0
    assert stand_in.done["j2"] == ({"output": {"echo": {"sleep": 0.3, "i": 2}}}, "false")
    first_take = stand_in.takes[0]
    assert first_take == {"job_in_progress": "0", "batch_size": "3", "auth": "secret-key"}
    assert any(set(p.get("job_id", "").split(",")) == {"j0", "j1", "j2"} for p in stand_in.pings)


async def test_result_is_retried_while_the_gateway_answers_5xx(gateway) -> None:
    stand_in, url = gateway
    stand_in.failing_done = 2
    stand_in.queue.append({"id": "j", "input": {}})
    worker = await start_worker(url, "async")
    await until(lambda: "j" in stand_in.done)
    worker.send_signal(signal.SIGTERM)
    assert await exit_status(worker) == 0
