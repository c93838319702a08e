"""The OpenAI route's benchmark (`make bench`, `--only openai`) runs against a real
`lockgate dev` and prints its rows; its SSE reading and arithmetic are right."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.openai_route import StreamTimes, add_stream, split_events

REPO = Path(__file__).resolve().parent.parent


def test_split_events_keeps_the_incomplete_rest_and_drops_comments() -> None:
    data = b': keep-alive\n\ndata: {"a": 1}\n\ndata: {"b"'
    payloads, rest = split_events(data)
    assert payloads == [b'{"a": 1}'] and rest == b'data: {"b"'
    payloads, rest = split_events(rest + b": 2}\n\ndata: [DONE]\n\n")
    assert payloads == [b'{"b": 2}', b"[DONE]"] and rest == b""


def test_a_stream_gives_each_chunks_delay_and_the_time_to_first_token() -> None:
    first = orjson.dumps({"bench_started": 10.0, "bench_emitted": 10.5})
    second = orjson.dumps({"bench_emitted": 11.0})
    times = StreamTimes()
    add_stream(times, 9.0, [(10.75, first), (11.25, second), (11.25, b"[DONE]")])
    assert times.chunk == [0.25, 0.25]
    assert times.first == [1.75] and times.direct == [0.5] and times.queued == [1.0]


def test_a_stream_without_done_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="DONE"):
        add_stream(StreamTimes(), 0.0, [(1.0, orjson.dumps({"bench_emitted": 0.5}))])


def figure(output: str, name: str) -> str:
    """The value cell of the table row (or detail line) named `name`."""
    found = re.search(rf"^{re.escape(name)}:?\s+(\S+ \S+)", output, re.MULTILINE)
    assert found, f"no row {name!r} in:\n{output}"
    return found[1]


def test_make_bench_openai_prints_stream_and_throughput_rows() -> None:
    command = ["-m", "bench.core", "--only", "openai", "--scale", "0.05", "--rounds", "1"]
    run = subprocess.run(
        [sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=100
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for name in (
        "OpenAI stream, worker yield -> SSE event p50",
        "OpenAI stream, worker yield -> SSE event p99",
        "OpenAI stream, time to first token p50",
        "OpenAI stream, time to first token p99",
    ):
        value, unit = figure(out, name).split()
        assert unit == "ms" and float(value) > 0
    for route in ("/openai", "/runsync"):
        rate = figure(out, f"chat completions/s via {route}, 32 clients, 4 workers")
        assert rate.endswith(" /s") and float(rate.split()[0].replace(",", "")) > 0
    assert re.search(r">= 90% of /runsync \(is \d+%\)\s+(PASS|MISS)", out)
    assert "CPU us per chat completion via /openai: gateway" in out
    assert "CPU us per streamed chunk: gateway" in out
