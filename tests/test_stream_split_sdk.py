"""Stream chunks over 1 MB, read by the official runpod SDK client: its stream loop yields
each piece, and the pieces rejoin into the output the worker yielded (docs/job-api.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import runpod

from tests.devproc import REPO, DevProcess


@pytest.fixture(scope="module")
def streamer(tmp_path_factory) -> Iterator[runpod.Endpoint]:
    data = tmp_path_factory.mktemp("dev")
    handler = str(REPO / "tests/workers/runpod_stream.py")
    with DevProcess(handler, "--workers-min", "1", data_dir=data) as dev:
        runpod.endpoint_url_base, runpod.api_key = f"{dev.url}/v2", dev.key
        yield runpod.Endpoint(dev.endpoint)


def test_an_object_chunk_over_1_mb_arrives_as_json_text_pieces_that_rejoin(streamer):
    rows = 80_000  # about 3 MB of JSON in one chunk from the worker
    pieces = list(streamer.run({"rows": rows}).stream())
    assert len(pieces) >= 3 and all(isinstance(p, str) for p in pieces)
    assert all(len(p.encode()) <= 1024 * 1024 for p in pieces)
    output = json.loads("".join(pieces))
    assert output["n"] == rows and output["rows"][-1] == {
        "i": rows - 1,
        "text": f"row {rows - 1} é🚀",
    }
