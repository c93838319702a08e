"""API errors: each maps to one HTTP status; the middleware renders them."""

from __future__ import annotations


class ApiError(Exception):
    """A refusal with an HTTP status and a message for the client."""

    status = 400

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers


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


class Unavailable(ApiError):
    """The store cannot be reached right now; the client may retry."""

    status = 503


class TooManyRequests(ApiError):
    """Over a rate or concurrency limit; `Retry-After` says when to come back."""

    status = 429
