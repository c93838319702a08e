"""Integers orjson cannot keep exact, found in JSON text without parsing it.

orjson reads an integer outside [-2**63, 2**64) as a float, and refuses to write one. The
gateway (`gateway/jsonbody.py`) and the worker runtime (`worker/codec.py`) both decode with
orjson and read a text again with the standard library when it may hold such an integer.
Standard library only, like `signing`: the worker's base install has neither orjson nor
pydantic (which `lockgate.models` imports), and the gateway must not import worker code.
"""

from __future__ import annotations

# 2**63 has 19 digits: a text without a run of 19 digits holds no integer orjson reads
# inexactly. Found by mapping every digit to 0 and searching for nineteen 0s: a C-speed
# pass over the text (a regular expression takes ten times longer on a 10 MB body).
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def may_hold_big_int(raw: bytes) -> bool:
    """False when the JSON text `raw` surely holds no integer beyond 64 bits (no run of 19
    digits); True when it may (a long number, or digits inside a string)."""
    return _LONG_RUN in raw.translate(_DIGITS_TO_ZERO)
