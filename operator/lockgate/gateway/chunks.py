"""Stream chunks of at most 1 MB (the spec's limit): larger output is split (pure functions).

A string output is split into shorter strings, a list output into shorter lists; metrics
ride on the last piece. Any other output over the limit cannot be split and is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

CHUNK_LIMIT = 1024 * 1024  # bytes of one stored chunk, its JSON as /stream returns it


class ChunkTooLarge(ValueError):
    """An output over the chunk limit that is neither a string nor a list."""


def _chunk(output: Any, metrics: dict | None) -> bytes:
    return orjson.dumps(
        {"output": output} if metrics is None else {"output": output, "metrics": metrics}
    )


def _string_pieces(text: str, fits: Callable[[Any], bool]) -> list[str]:
    """Greedy longest prefixes of `text` that fit; halving finds each one."""
    pieces, start = [], 0
    while start < len(text):
        size = len(text) - start
        while size > 1 and not fits(text[start : start + size]):
            size //= 2
        pieces.append(text[start : start + size])
        start += size
    return pieces


def _list_pieces(items: list, fits: Callable[[Any], bool]) -> list[list]:
    pieces: list[list] = [[]]
    for item in items:
        if not fits([item]):
            raise ChunkTooLarge("one element of the streamed list is over 1 MB")
        if not fits([*pieces[-1], item]):
            pieces.append([])
        pieces[-1].append(item)
    return pieces


def split_output(output: Any, metrics: dict | None, limit: int = CHUNK_LIMIT) -> list[bytes]:
    """The stored chunks for one job-stream post, each at most `limit` bytes."""
    whole = _chunk(output, metrics)
    if len(whole) <= limit:
        return [whole]
    room = limit - (len(_chunk(None, metrics)) - len(b"null"))  # what the output may use

    def fits(part: Any) -> bool:
        return len(orjson.dumps(part)) <= room

    if isinstance(output, str):
        pieces: list[Any] = _string_pieces(output, fits)
    elif isinstance(output, list):
        pieces = _list_pieces(output, fits)
    else:
        raise ChunkTooLarge("a streamed output over 1 MB must be a string or a list to be split")
    return [_chunk(p, metrics if i == len(pieces) - 1 else None) for i, p in enumerate(pieces)]
