"""RFC 9457 problems: how every error under the v2 management paths looks.

`application/problem+json` with RunPod's members: `title` (the status's phrase), `status`,
`detail` (what was wrong, naming the field) and, for a 422, `errors[]` (each violation).
The gateway's one error middleware (`gateway.middleware.error_middleware`) decides the
status of every failure; a v2 app only sets `problem` as its renderer.
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus
from typing import TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lockgate.gateway.errors import Unprocessable
from lockgate.gateway.http import json_object
from lockgate.models.errors import error_message

PROBLEM_JSON = "application/problem+json"
M = TypeVar("M", bound=BaseModel)


def title_of(status: int) -> str:
    """The status's reason phrase ("Not Found"), as RunPod's `title`."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class ErrorResponse(BaseModel):
    """RunPod's problem object (RFC 9457): every error under the v2 management paths."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(..., description="the status's reason phrase")
    status: int
    detail: str = Field(..., description="what was wrong, naming the field")
    errors: list[str] | None = Field(None, description="each violation of a 422")


def problem(
    status: int, message: str, *, headers: dict[str, str] | None = None, errors: Sequence[str] = ()
) -> web.Response:
    """The problem answer for `status` with `message` as its `detail`."""
    shown = ErrorResponse(title=title_of(status), status=status, detail=message)
    if errors:
        shown.errors = list(errors)
    body = shown.model_dump(exclude_none=True)
    return web.Response(
        body=orjson.dumps(body), status=status, content_type=PROBLEM_JSON, headers=headers
    )


def violations(err: ValidationError) -> list[str]:
    """Each violation of a validation error, naming its field by its dotted path."""
    out = []
    for e in err.errors(include_url=False):
        where = ".".join(str(p) for p in e["loc"]) or "body"
        what = "not a field of this request" if e["type"] == "extra_forbidden" else error_message(e)
        out.append(f"{where}: {what}")
    return out


def validated(model: type[M], payload: object) -> M:
    """`payload` as `model` (a closed v2 request body); 422 listing every violation."""
    try:
        return model.model_validate(payload)
    except ValidationError as err:
        found = violations(err)
        raise Unprocessable(
            "Request validation failed: " + "; ".join(found[:5]), errors=found
        ) from err


async def body_of(request: web.Request, model: type[M]) -> M:
    """The request's JSON object body as `model`: 400 when it is no JSON object, 422
    listing every violation."""
    return validated(model, await json_object(request))
