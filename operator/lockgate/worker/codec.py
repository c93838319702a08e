"""JSON to and from bytes: orjson when it is installed, else the standard library."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

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
    return json.dumps(value, ensure_ascii=False).encode()


def loads(data: bytes | str) -> Any:
    """Decode JSON; raise ValueError if it is not JSON."""
    if orjson is not None:
        return orjson.loads(data)
    return json.loads(data)
