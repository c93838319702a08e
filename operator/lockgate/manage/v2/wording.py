"""An operation's refusal in v2's words: the shared operations (the ones `/v1` calls) name
fields as RunPod's v1 does (`containerDiskInGb: …`); a v2 view renames them to its own
(`disk: …`) before the problem goes out, so a v2 client reads the field it sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from lockgate.gateway.errors import ApiError, BadRequest
from lockgate.manage.operations import Refused, Taken


def in_v2_words(message: str, words: Mapping[str, str]) -> str:
    """`message` with each whole word (or phrase) of `words` replaced by its v2 name."""
    if not words:
        return message
    pattern = re.compile(
        r"(?<![\w/])(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")\b"
    )
    return pattern.sub(lambda m: words[m.group(1)], message)


def reworded(err: ApiError, words: Mapping[str, str]) -> ApiError:
    """The same refusal (class, status, headers) with its message and `errors` reworded."""
    return type(err)(
        in_v2_words(err.message, words),
        headers=err.headers,
        errors=[in_v2_words(e, words) for e in err.errors],
    )


@contextmanager
def v2_words(words: Mapping[str, str]) -> Iterator[None]:
    """Re-raise an `ApiError` or an operation's refusal from the block in v2's words (the
    original as its cause)."""
    try:
        yield
    except ApiError as err:
        raise reworded(err, words) from err
    except Refused as err:
        raise type(err)(in_v2_words(str(err), words)) from err


@contextmanager
def in_use_is_a_400() -> Iterator[None]:
    """A delete refused because something still uses the thing (`Taken`, v1's 409) as the
    400 RunPod's v2 answers ("in use by a pod or serverless endpoint")."""
    try:
        yield
    except Taken as err:
        raise BadRequest(str(err)) from err
