"""Turn pydantic validation errors into one line a client can act on."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(err: ValidationError) -> str:
    """Name each offending field with its dotted path and pydantic's message.

    >>> describe_validation_error(...)  # doctest: +SKIP
    'policy.ttl: Input should be greater than or equal to 10000'
    """
    parts = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "body"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)
