"""RFC 9457 problems: how every error under the v2 management paths looks.

`application/problem+json` with RunPod's members: `title` (the status's phrase), `status`,
`detail` (what was wrong, naming the field) and, for a 422, `errors[]` (each violation).
The gateway's one error middleware (`gateway.middleware.error_middleware`) decides the
status of every failure; a v2 app only sets `problem` as its renderer.
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus

import orjson
from aiohttp import web

PROBLEM_JSON = "application/problem+json"


def title_of(status: int) -> str:
    """The status's reason phrase ("Not Found"), as RunPod's `title`."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int, message: str, *, headers: dict[str, str] | None = None, errors: Sequence[str] = ()
) -> web.Response:
    """The problem answer for `status` with `message` as its `detail`."""
    body: dict[str, object] = {"title": title_of(status), "status": status, "detail": message}
    if errors:
        body["errors"] = list(errors)
    return web.Response(
        body=orjson.dumps(body), status=status, content_type=PROBLEM_JSON, headers=headers
    )
