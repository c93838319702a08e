"""JSON to and from bytes, integers exact: orjson when it is installed, else the standard
library.

orjson reads an integer beyond 64 bits as a float and refuses to write one: a text that may
hold one (`lockgate.bigints`) is read again with `json`, and a value orjson cannot write is
written by `json`, as orjson would write it otherwise (compact; NaN and infinities as null,
which the gateway would refuse as `NaN` or `Infinity`).
"""

from __future__ import annotations

import json
import math
from types import ModuleType
from typing import Any

from lockgate.bigints import may_hold_big_int

orjson: ModuleType | None
try:
    import orjson
except ImportError:  # pragma: no cover - depends on the image
    orjson = None


def dumps(value: Any) -> bytes:
    """Encode `value` as UTF-8 JSON; raise TypeError or ValueError if it cannot be encoded."""
    if orjson is not None:
        try:
            encoded: bytes = orjson.dumps(
                value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
            )
            return encoded
        except orjson.JSONEncodeError:
            pass  # orjson is stricter (e.g. integers over 64 bits); let json decide
    try:
        return _json_dumps(value)
    except RecursionError as err:
        raise ValueError("the value is nested too deeply to encode as JSON") from err


def loads(data: bytes | str) -> Any:
    """Decode JSON, integers beyond 64 bits exact; raise ValueError if it is not JSON."""
    if orjson is None:
        return json.loads(data)
    value = orjson.loads(data)
    raw = data.encode() if isinstance(data, str) else data
    if not may_hold_big_int(raw):
        return value
    try:
        return json.loads(raw)  # orjson accepted it: no NaN or other non-JSON in it
    except RecursionError:  # deeper than json reads; the gateway sends at most 254 levels
        return value


def _json_dumps(value: Any) -> bytes:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as err:
        if "Out of range float" not in str(err):
            raise
        text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"))
    return text.encode()


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None (orjson writes them as null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
