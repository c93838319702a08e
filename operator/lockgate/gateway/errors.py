"""API errors: each maps to one HTTP status; the middleware renders them."""

from __future__ import annotations

from collections.abc import Sequence

# Client-supplied text (a 5 MB webhook URL, a long path) is cut to this many characters in
# error bodies and log lines, so one request cannot put megabytes into either.
CLIP_CHARS = 512
# aiohttp's status for "the client closed the connection before the answer" (nginx's 499).
CLIENT_CLOSED = 499
# At most this many parts of one validation failure are listed (`errors[]` of a problem).
MAX_ERRORS = 50


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters, cut)"


class ApiError(Exception):
    """A refusal with an HTTP status and a message for the client; `reason`, when set, is
    a machine-readable word beside the message (`{"error": ..., "reason": ...}`)."""

    status = 400
    reason: str | None = None

    def __init__(
        self,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        errors: Sequence[str] = (),
    ) -> None:
        message = clip(message, 4 * CLIP_CHARS)
        super().__init__(message)
        self.message = message
        self.headers = headers
        self.errors = [clip(e) for e in errors[:MAX_ERRORS]]


class BadRequest(ApiError):
    """The request is malformed or names an invalid value."""

    status = 400


class Unauthorized(ApiError):
    """Missing, unknown or insufficient API key."""

    status = 401


class Forbidden(ApiError):
    """A valid key used beyond what it may do: another worker's id, or a write a read-only
    scope does not allow (`?ttl=` on /status)."""

    status = 403


class NotFound(ApiError):
    """Unknown endpoint or job."""

    status = 404


class PayloadTooLarge(ApiError):
    """Body over the route's size limit."""

    status = 413


class RequestTimeout(ApiError):
    """The request body did not arrive within the body timeout."""

    status = 408


class Unavailable(ApiError):
    """The store cannot be reached right now; the client may retry."""

    status = 503


class TooManyRequests(ApiError):
    """Over a rate or concurrency limit; `Retry-After` says when to come back."""

    status = 429


class Unprocessable(ApiError):
    """A well-formed body that fails validation: `errors` lists each violation."""

    status = 422
