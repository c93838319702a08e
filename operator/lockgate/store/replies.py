"""Redis replies as Python values. Our clients never decode replies (`decode_responses` is
off), so a reply's strings are bytes; redis-py types them `bytes | str` for both modes."""

from __future__ import annotations


def text(value: bytes | str) -> str:
    """A reply's string (a hash field, a member) as `str`."""
    return value.decode() if isinstance(value, bytes) else value
