"""Splitting a worker's job-stream body into `/stream` chunks of at most 1 MB (pure)."""

from __future__ import annotations

import orjson
import pytest

from lockgate.gateway.chunks import CHUNK_LIMIT, split_text, stream_chunks
from lockgate.gateway.errors import BadRequest, PayloadTooLarge


def outputs(chunks: list[bytes]) -> list:
    return [orjson.loads(c)["output"] for c in chunks]


def rejoin(chunks: list[bytes]):
    """What a client does: join the pieces of a split output back into it."""
    parsed = [orjson.loads(c) for c in chunks]
    count = len(parsed)
    assert [c["split"] | {"format": None} for c in parsed] == [
        {"index": i, "count": count, "format": None} for i in range(count)
    ]
    text = "".join(c["output"] for c in parsed)
    return orjson.loads(text) if parsed[0]["split"]["format"] == "json" else text


@pytest.mark.parametrize("output", ["short", "", 0, None, [1, 2], {"text": ["a"]}])
def test_a_small_output_is_one_chunk(output) -> None:
    assert stream_chunks({"output": output}) == [orjson.dumps({"output": output})]


def test_metrics_are_kept_and_other_keys_dropped() -> None:
    body = {"output": "a", "metrics": {"stream_index": 1}, "status": "x"}
    assert orjson.loads(stream_chunks(body)[0]) == {"output": "a", "metrics": {"stream_index": 1}}


@pytest.mark.parametrize("body", [[], "text", {"metrics": {}}, None])
def test_a_body_without_output_is_refused(body) -> None:
    with pytest.raises(BadRequest, match="output"):
        stream_chunks(body)


@pytest.mark.parametrize(
    "text",
    [
        "a" * (2 * CHUNK_LIMIT + 5),
        "é" * CHUNK_LIMIT,  # 2 bytes each
        "🚀" * (CHUNK_LIMIT // 2),  # 4 bytes each
        "ab€🚀" * (CHUNK_LIMIT // 3),  # mixed widths, so cuts land inside characters
        '"\\\n\x01' * (CHUNK_LIMIT // 3),  # escapes make the JSON longer than the UTF-8
    ],
)
def test_a_long_string_is_split_into_chunks_within_the_limit_that_join_back(text: str) -> None:
    chunks = stream_chunks({"output": text})
    assert len(chunks) > 1
    assert all(len(c) <= CHUNK_LIMIT for c in chunks)
    assert rejoin(chunks) == text
    # Chunks are filled: only the last may be much shorter than the limit (less the room
    # reserved for the widest split marker).
    assert all(len(c) > CHUNK_LIMIT - 64 for c in chunks[:-1])  # 64: the split marker


def test_a_string_just_at_the_limit_is_one_chunk_and_one_byte_more_is_two() -> None:
    fits = "x" * (CHUNK_LIMIT - len(b'{"output":""}'))
    assert stream_chunks({"output": fits}) == [orjson.dumps({"output": fits})]
    chunks = stream_chunks({"output": fits + "y"})
    assert len(chunks) == 2 and rejoin(chunks) == fits + "y"
    assert orjson.loads(chunks[0])["split"] == {"index": 0, "count": 2, "format": "text"}


def test_metrics_of_a_split_output_go_with_its_last_chunk() -> None:
    metrics = {"output_tokens": 7, "scenario": "s"}
    body = {"output": "z" * 3_000_000, "metrics": metrics}
    chunks = [orjson.loads(c) for c in stream_chunks(body)]
    assert [c.get("metrics") for c in chunks] == [None, None, metrics]
    assert all(len(orjson.dumps(c)) <= CHUNK_LIMIT for c in chunks)


@pytest.mark.parametrize(
    "output", [["a" * 700_000, "b" * 700_000], {"image": "x" * 1_500_000}, list(range(300_000))]
)
def test_an_output_over_the_limit_that_is_not_a_string_is_split_as_json_text(output) -> None:
    chunks = stream_chunks({"output": output, "metrics": {"n": 1}})
    assert len(chunks) > 1 and all(len(c) <= CHUNK_LIMIT for c in chunks)
    assert all(isinstance(o, str) for o in outputs(chunks))
    assert orjson.loads(chunks[0])["split"]["format"] == "json"
    assert rejoin(chunks) == output
    assert [orjson.loads(c).get("metrics") for c in chunks][-1] == {"n": 1}


def test_metrics_too_large_for_any_chunk_are_refused() -> None:
    with pytest.raises(PayloadTooLarge, match="metrics"):
        stream_chunks({"output": "x" * 10, "metrics": {"m": "y" * CHUNK_LIMIT}})


def test_an_output_nested_too_deep_to_store_is_refused_with_400() -> None:
    deep: list = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(BadRequest, match="cannot be stored"):
        stream_chunks({"output": deep})


@pytest.mark.parametrize(
    ("text", "budget", "pieces"),
    [
        ("abcdef", 4, ["abcd", "ef"]),
        ("aé€", 3, ["aé", "€"]),  # é is 2 bytes, € is 3
        ("€€", 4, ["€", "€"]),
        ('a"b', 2, ["a", '"', "b"]),  # the quote costs 2 bytes escaped
        ("\x01\x01", 6, ["\x01", "\x01"]),  # \u0001: 6 bytes
        ("\x01\x01", 3, ["\x01", "\x01"]),  # wider than the budget: alone
        ("", 4, []),
    ],
)
def test_split_text_cuts_between_characters_within_the_budget(
    text: str, budget: int, pieces: list[str]
) -> None:
    assert split_text(text, budget) == pieces
