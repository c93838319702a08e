"""JSON of job inputs and worker results, kept exact: integers beyond 64 bits stay integers
(orjson would read them as floats and refuses to write them), and nesting deeper than the
gateway can store is a clear refusal, never a 500.

orjson does the work; the standard library takes over only where orjson cannot be exact: a
body that may hold an integer beyond 64 bits (`lockgate.bigints`) is read again with
`json`, and a value orjson cannot write is written by `json` when it is not too deep.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from lockgate.bigints import may_hold_big_int
from lockgate.gateway.errors import BadRequest

MAX_DEPTH = 254  # levels of nesting a stored value may have (orjson writes no deeper)


class TooDeep(BadRequest):
    """A JSON value nested deeper than the gateway stores."""


def parse(raw: bytes) -> Any:
    """A JSON body with its integers exact; 400 when it is empty or not JSON, TooDeep when it
    nests deeper than the parser goes (1024 levels)."""
    if not raw:
        raise BadRequest("request body is empty; expected a JSON object")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        if "depth" in str(err) or "recursion" in str(err):
            raise TooDeep("the JSON body is nested deeper than 1024 levels") from err
        raise BadRequest(f"request body is not valid JSON: {err}") from err
    if may_hold_big_int(raw):
        try:
            return json.loads(raw)  # orjson accepted it: no NaN or other non-JSON in it
        except RecursionError as err:
            raise TooDeep("the JSON body is nested too deeply") from err
    return value


def dumps(value: Any, what: str) -> bytes:
    """`value` as compact JSON; TooDeep naming `what` beyond MAX_DEPTH levels."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as err:
        if (levels := depth(value)) > MAX_DEPTH:
            raise TooDeep(
                f"{what} is nested {levels} levels deep; at most {MAX_DEPTH} are accepted"
            ) from err
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def depth(value: Any) -> int:
    """Levels of nesting: 0 for a scalar, 1 for a flat object or array."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            deepest = max(deepest, level)
            continue
        stack.extend((child, level + 1) for child in node)
        deepest = max(deepest, level + 1)
    return deepest
