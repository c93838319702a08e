"""Turn pydantic validation errors into one line a client can act on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

# pydantic's prefixes before the text a validator raised: a person reads the text alone.
VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")


def error_message(e: Any) -> str:
    """One pydantic error's message without pydantic's prefix (`Value error, …`): the
    text our validator raised, or pydantic's own sentence."""
    message = str(e["msg"])
    for prefix in VALIDATOR_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def describe_validation_error(err: ValidationError) -> str:
    """Name each offending field with its dotted path and pydantic's message.

    >>> describe_validation_error(...)  # doctest: +SKIP
    'policy.ttl: Input should be greater than or equal to 10000'
    """
    parts = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "body"
        parts.append(f"{loc}: {error_message(e)}")
    return "; ".join(parts)
