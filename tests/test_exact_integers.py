"""Integers stay exact end to end (issue 30): beyond 64 bits, negative, and at the 64-bit
boundaries, in a job's input, its output, its streamed chunks, `/status` and its webhook,
with lockgate's worker runtime and with the runpod SDK's; floats stay floats.

The end-to-end tests run a real gateway and Redis and a worker process
(tests/workers/exact_numbers.py); the client decodes with the standard library, which
keeps integers exact, and compares JSON text, so 1 and 1.0 differ."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lockgate.gateway import jsonbody
from lockgate.gateway.chunks import CHUNK_LIMIT, stream_chunks
from lockgate.worker import codec
from lockgate.workerenv import WORKER_DEFAULTS, worker_env, worker_id_env
from tests.conftest import REPO, LiveGateway, eventually
from tests.test_job_api import get, post, submit
from tests.test_lifecycle import Receiver

GATEWAY_SETTINGS = {"webhook_allow_private": True}
WORKER = REPO / "tests" / "workers" / "exact_numbers.py"
RUNTIMES = ["lockgate", "runpod"]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}

NUMBERS = {
    "big": 123456789012345678901234567890,
    "negative": -123456789012345678901234567890,
    "two_to_63": 2**63,
    "u64_max": 2**64 - 1,
    "two_to_64": 2**64,
    "i64_min": -(2**63),
    "below_i64_min": -(2**63) - 1,
    "nested": [{"deep": [10**40, -(10**40), [2**100]]}],
    "one": 1.0,
    "huge_float": 1.5e300,
    "tiny_float": -2.5e-300,
    "digits": "123456789012345678901234567890",
}


def text(value: Any) -> str:
    """JSON text that tells 1 from 1.0 and an integer from a float near it."""
    return json.dumps(value, sort_keys=True)


# -- end to end: a real gateway, Redis and worker process


@contextlib.asynccontextmanager
async def running(gw: LiveGateway, tmp_path: Path, runtime: str, mode: str) -> AsyncIterator[None]:
    """tests/workers/exact_numbers.py as worker w1 of the gateway's endpoint."""
    env = {
        **os.environ, **WORKER_DEFAULTS, **worker_id_env("w1"),
        **worker_env(gw.url, gw.endpoint, gw.worker_key),
        "PYTHONPATH": str(REPO / "operator"),
    }  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as log:
        worker = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), runtime, mode, env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the runpod SDK's worker forks: its group
        await worker.wait()


async def read_stream(http, gw: LiveGateway, job_id: str) -> list[Any]:
    """Every chunk's output from `/stream`, read until the job ended and nothing is left."""
    outputs: list[Any] = []
    for _ in range(600):
        status, body = await get(http, gw, f"stream/{job_id}")
        assert status == 200, body
        outputs += [chunk["output"] for chunk in body["stream"]]
        if body["status"] in FINAL and not body["stream"]:
            return outputs
        await asyncio.sleep(0.1)
    raise AssertionError(f"the stream of job {job_id} did not end")


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_an_echoed_input_keeps_its_integers_in_runsync_status_and_webhook(
    http, gateway, tmp_path, runtime
):
    receiver = Receiver()
    url = await receiver.start()
    try:
        async with running(gateway, tmp_path, runtime, "echo"):
            body = {"input": NUMBERS, "webhook": url}
            status, finished = await post(http, gateway, "runsync", json=body)
        assert status == 200 and finished["status"] == "COMPLETED", finished
        assert text(finished["output"]) == text({"echo": NUMBERS})
        polled = (await get(http, gateway, f"status/{finished['id']}"))[1]
        assert text(polled["output"]) == text({"echo": NUMBERS})

        async def called() -> list:
            return receiver.calls

        await eventually(called, "the webhook", timeout=10)
        assert text(json.loads(receiver.calls[0][2])["output"]) == text({"echo": NUMBERS})
    finally:
        await receiver.runner.cleanup()


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_streamed_chunks_and_their_aggregate_keep_their_integers(
    http, gateway, tmp_path, runtime
):
    chunks = [{name: value} for name, value in NUMBERS.items()] + [2**70, -(2**70), 1.0]
    async with running(gateway, tmp_path, runtime, "stream"):
        job = await submit(http, gateway, {"input": {"chunks": chunks}})
        streamed = await read_stream(http, gateway, job["id"])
    assert text(streamed) == text(chunks)
    polled = (await get(http, gateway, f"status/{job['id']}"))[1]
    assert polled["status"] == "COMPLETED" and text(polled["output"]) == text(chunks)


async def test_a_number_too_large_for_a_float_is_a_400_with_or_without_big_integers(http, gateway):
    big = b'{"input": {"n": %d, "x": -1e400}}' % 2**70
    for raw in (b'{"input": {"x": 1e400}}', big):
        status, body = await post(http, gateway, "run", data=raw)
        assert status == 400 and "not valid JSON" in body["error"], body


# -- the worker runtime's codec


CODEC_CASES = [
    NUMBERS,
    [2**63, 2**64, 2**64 - 1, -(2**63), -(2**63) - 1, 10**19, -(10**19)],
    {"a": {"b": [{"c": 10**30}]}, "f": 1.0, "s": "9" * 40, "e": 1e300},
    "1234567890123456789012345",  # a string of digits stays a string
    12345678901234567890123,
    [1.0, 0.5, -0.0, 1e-300, 123.0],
]


@pytest.mark.parametrize("with_orjson", [True, False], ids=["orjson", "json"])
@pytest.mark.parametrize("value", CODEC_CASES)
def test_the_codec_decodes_and_encodes_integers_exactly(monkeypatch, with_orjson, value):
    if not with_orjson:
        monkeypatch.setattr(codec, "orjson", None)
    raw = json.dumps(value)
    assert text(codec.loads(raw.encode())) == text(value)
    assert text(codec.loads(raw)) == text(value)
    assert text(json.loads(codec.dumps(value))) == text(value)


@pytest.mark.parametrize("with_orjson", [True, False], ids=["orjson", "json"])
def test_the_codec_writes_non_finite_floats_as_null_beside_big_integers(monkeypatch, with_orjson):
    """As orjson does: `NaN` or `Infinity` in a result would make the gateway refuse it."""
    if not with_orjson:
        monkeypatch.setattr(codec, "orjson", None)
    value = {"n": 2**70, "x": [math.nan, math.inf, -math.inf, 1.5]}
    sent = codec.dumps(value)
    assert jsonbody.parse(sent) == {"n": 2**70, "x": [None, None, None, 1.5]}


# -- the gateway's stream chunks


def test_a_stream_chunk_keeps_its_big_integers_whole_or_split() -> None:
    small = {"n": 2**70, "m": -(2**64), "f": 1.0}
    assert text(json.loads(stream_chunks({"output": small})[0])["output"]) == text(small)
    large = {"rows": [2**70 + i for i in range(60_000)], "pad": "x" * CHUNK_LIMIT}
    chunks = stream_chunks({"output": large, "metrics": {"n": 2**65}})
    assert len(chunks) > 1 and all(len(c) <= CHUNK_LIMIT for c in chunks)
    joined = "".join(orjson.loads(c)["output"] for c in chunks)
    assert json.loads(joined) == large
    assert json.loads(chunks[-1])["metrics"] == {"n": 2**65}
