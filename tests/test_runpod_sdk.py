"""The official runpod SDK, unchanged, as a client and as a worker against `lockgate dev`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import runpod

from tests.devproc import REPO, DevProcess
from tests.test_dev_mode import wait_until


def _dev(tmp_path_factory, handler: str, *args: str) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    with DevProcess(str(REPO / handler), "--workers-min", "1", *args, data_dir=data) as dev:
        runpod.endpoint_url_base = f"{dev.url}/v2"
        runpod.api_key = dev.key
        yield dev


@pytest.fixture(scope="module")
def echo_dev(tmp_path_factory) -> Iterator[DevProcess]:
    yield from _dev(tmp_path_factory, "tests/workers/runpod_echo.py")


@pytest.fixture(scope="module")
def stream_dev(tmp_path_factory) -> Iterator[DevProcess]:
    yield from _dev(tmp_path_factory, "tests/workers/runpod_stream.py")


@pytest.fixture
def echo(echo_dev: DevProcess) -> runpod.Endpoint:
    runpod.endpoint_url_base, runpod.api_key = f"{echo_dev.url}/v2", echo_dev.key
    return runpod.Endpoint(echo_dev.endpoint)


@pytest.fixture
def streamer(stream_dev: DevProcess) -> runpod.Endpoint:
    runpod.endpoint_url_base, runpod.api_key = f"{stream_dev.url}/v2", stream_dev.key
    return runpod.Endpoint(stream_dev.endpoint)


def test_run_sync_returns_the_output(echo):
    assert echo.run_sync({"input": {"x": 1}}, timeout=30) == {"echo": {"x": 1}}


def test_run_then_status_and_output(echo):
    job = echo.run({"x": 2})
    assert job.status() in {"IN_QUEUE", "IN_PROGRESS", "COMPLETED"}
    assert job.output(timeout=30) == {"echo": {"x": 2}}
    assert job.status() == "COMPLETED"


def test_a_failing_handler_shows_failed_with_its_error(echo, echo_dev):
    job = echo.run({"fail": "no good"})
    wait_until(lambda: job.status() == "FAILED", timeout_s=30)
    body = job.rp_client.get(f"{echo_dev.endpoint}/status/{job.job_id}")
    assert "no good" in body["error"]


def test_cancel_a_queued_job(echo):
    echo.run({"sleep": 2})  # keeps the one worker busy
    job = echo.run({"x": 3})
    assert job.cancel()["status"] == "CANCELLED"
    assert job.status() == "CANCELLED"


def test_health_and_purge_queue(echo):
    for _ in range(3):
        echo.run({"sleep": 1})
    health = echo.health()
    assert set(health) == {"jobs", "workers"}
    assert set(health["jobs"]) == {"completed", "failed", "inProgress", "inQueue", "retried"}
    purged = echo.purge_queue()
    assert purged["status"] == "completed" and purged["removed"] >= 1


def test_stream_yields_each_chunk_of_a_generator_worker(streamer):
    job = streamer.run({"n": 4, "gap": 0.2})
    chunks = list(job.stream())
    assert chunks == [{"text": [f"token-{i}"], "output_tokens": i + 1} for i in range(4)]


def test_a_streamed_string_over_1_mb_arrives_split_in_order(streamer):
    job = streamer.run({"big": 1_500_000})  # 3 MB of UTF-8 in one chunk from the worker
    pieces = list(job.stream())
    assert len(pieces) == 3
    assert "".join(pieces) == "é" * 1_500_000


def test_a_generator_worker_with_aggregate_stream_returns_every_chunk(streamer):
    output = streamer.run_sync({"input": {"n": 2}}, timeout=30)
    assert output == [
        {"text": ["token-0"], "output_tokens": 1},
        {"text": ["token-1"], "output_tokens": 2},
    ]


def test_an_unknown_key_is_refused(echo_dev):
    runpod.api_key = "wrong"
    with pytest.raises(RuntimeError, match="Unauthorized"):
        runpod.Endpoint(echo_dev.endpoint).health()
