"""Stream chunks: a worker's job-stream body as the `{"output": ...}` chunks `/stream` returns.

A chunk is at most `CHUNK_LIMIT` bytes of JSON (the spec's "one streamed chunk: 1 MB"). An
output over it is cut into consecutive chunks, each marked `"split": {"index": i, "count":
n, "format": f}` (i from 0), whose `output`s are strings that concatenate to:
- `format: "text"`: the output itself, when it is a string (cut on character boundaries);
- `format: "json"`: the JSON text of the output, when it is anything else (a client parses
  the joined text: `json.loads("".join(outputs))`).
`metrics`, when sent, go with the last piece. A chunk that fits is stored as sent, unmarked,
so small outputs look exactly as before; the runpod SDK's stream loop yields each piece.
"""

from __future__ import annotations

from typing import Any

import orjson

from lockgate.gateway import jsonbody
from lockgate.gateway.errors import BadRequest, PayloadTooLarge

CHUNK_LIMIT = 1024 * 1024  # bytes of one stored chunk's JSON
_MIN_BUDGET = 8  # bytes: room for the widest character (a 6-byte \u001f escape)
# The widest `split` marker a chunk may carry: reserved in every piece's budget.
_WIDEST_SPLIT = {"index": 10**9, "count": 10**9, "format": "text"}


def stream_chunks(body: Any, limit: int = CHUNK_LIMIT) -> list[bytes]:
    """Turn a job-stream body into stored chunks of at most `limit` bytes each."""
    if not isinstance(body, dict) or "output" not in body:
        raise BadRequest('stream body must be a JSON object with "output"')
    output = body["output"]
    metrics = body.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        raise BadRequest('stream "metrics" must be a JSON object')
    try:
        whole = _chunk(output, metrics)
    except jsonbody.TooDeep as err:
        raise BadRequest(f"stream chunk refused: it cannot be stored ({err.message})") from err
    if len(whole) <= limit:
        return [whole]
    budget = limit - len(_chunk("", metrics, _WIDEST_SPLIT))
    if budget < _MIN_BUDGET:
        raise PayloadTooLarge(f"stream chunk refused: its metrics alone exceed {limit} bytes")
    text, form = (output, "text") if isinstance(output, str) else (_json_text(output), "json")
    pieces = split_text(text, budget)
    count = len(pieces)
    return [
        _chunk(p, metrics if i == count - 1 else None, {"index": i, "count": count, "format": form})
        for i, p in enumerate(pieces)
    ]


def _json_text(output: Any) -> str:
    return jsonbody.dumps(output, "the stream chunk").decode()


def split_text(text: str, budget: int) -> list[str]:
    """Split `text` into consecutive pieces whose JSON string bodies (UTF-8, escapes
    included, quotes excluded) are at most `budget` bytes; never inside a character (one
    character wider than the budget is a piece of its own)."""
    raw = text.encode()
    pieces: list[str] = []
    start = 0
    while start < len(raw):
        end = _longest_fit(raw, start, budget)
        pieces.append(raw[start:end].decode())
        start = end
    return pieces


def _longest_fit(raw: bytes, start: int, budget: int) -> int:
    """The furthest character boundary after `start` whose piece fits `budget`."""
    hi = _boundary(raw, start, start + budget)
    over = _json_size(raw[start:hi]) - budget
    if over <= 0:
        return hi  # no escapes to speak of: the common case, one measurement
    # Each byte cut removes at least one byte of JSON, so cutting `over` bytes fits; an
    # escape-heavy text may fit more, found by bisection between the two.
    lo = _boundary(raw, start, hi - over)
    while (mid := _boundary(raw, start, (lo + hi) // 2)) > lo:
        if _json_size(raw[start:mid]) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def _boundary(raw: bytes, start: int, end: int) -> int:
    """`end` moved back to the start of a UTF-8 character, but past at least one character
    after `start`."""
    if end >= len(raw):
        return len(raw)
    back = end
    while back > start and raw[back] & 0xC0 == 0x80:  # 0b10xxxxxx continues a character
        back -= 1
    if back > start:
        return back
    end = max(end, start + 1)
    while end < len(raw) and raw[end] & 0xC0 == 0x80:
        end += 1
    return end


def _json_size(piece: bytes) -> int:
    return len(orjson.dumps(piece.decode())) - 2


def _chunk(
    output: Any, metrics: dict[str, Any] | None, split: dict[str, Any] | None = None
) -> bytes:
    chunk: dict[str, Any] = {"output": output}
    if metrics is not None:
        chunk["metrics"] = metrics
    if split is not None:
        chunk["split"] = split
    return jsonbody.dumps(chunk, "the stream chunk")  # integers beyond 64 bits exact
