"""What `/v2/openapi.json` says of each v2 route, written next to the route's handler.

A v2 handler carries its `Operation` (`@documented(Operation(...))`): RunPod's operationId,
a summary, the request and answer models, the success status and the problems it answers.
`manage.v2.openapi` walks the mounted routes and reads it from each handler; a route
mounted without one is listed by `undocumented` (tests/test_v2_openapi.py fails on it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

H = TypeVar("H", bound=Callable[..., Any])
MARK = "v2_operation"  # the attribute a documented handler carries


@dataclass(frozen=True)
class Operation:
    """One route in the OpenAPI document.

    `answer` is the model of the success body (None: no body, e.g. a 204); `listed_as` wraps
    it in a list under that key (`{"endpoints": [Endpoint, ...]}`); `errors` are the problem
    statuses the route answers beside 401 and 403, which every admin-only route gives."""

    operation_id: str
    summary: str
    body: type[BaseModel] | None = None
    answer: type[BaseModel] | None = None
    listed_as: str | None = None
    status: int = 200
    errors: tuple[int, ...] = ()
    query: tuple[dict[str, Any], ...] = ()  # OpenAPI query parameter objects
    tag: str = ""
    description: str = ""


def documented(operation: Operation) -> Callable[[H], H]:
    """Mark a handler (a function or a method) with its `Operation`."""

    def mark(handler: H) -> H:
        setattr(handler, MARK, operation)
        return handler

    return mark


def operation_of(handler: Any) -> Operation | None:
    """The `Operation` a handler was marked with (a bound method reads its function's)."""
    found = getattr(handler, MARK, None)
    return found if isinstance(found, Operation) else None
