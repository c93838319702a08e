"""`/v2/openapi.json`: the v2 management API as an OpenAPI 3.1 document, built from what is
mounted.

It walks the v2 collections mounted on the root application (`add_v2_routes`), reads each
handler's `Operation` (`documented`), and takes every schema from the pydantic models the
views validate bodies with and build answers through (`gateway.openapi.schemas_of`, as the
job API's `/openapi.json` does): closed request bodies come out with
`additionalProperties: false`. Errors are RunPod's `ErrorResponse` problems. A route
mounted without an `Operation` still appears (its answers unknown) and is listed by
`undocumented`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus
from importlib.metadata import version
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from lockgate.gateway.openapi import schemas_of
from lockgate.gateway.openapi_parts import REF, param
from lockgate.manage.v2.documented import Operation, operation_of
from lockgate.manage.v2.problems import PROBLEM_JSON, ErrorResponse

PATH = "/v2/openapi.json"
PREFIX = "/v2/"
JSON = "application/json"
ALWAYS = (401, 403, 429)  # every v2 route is admin-only and rate-limited
# What each problem status means on a v2 route (RunPod's wording where it has one).
ERRORS = {
    400: "malformed, or conflicts with a request rule (`detail` names the field)",
    401: "missing, unknown, revoked or expired API key",
    403: "a key without the admin scope",
    404: "not found",
    409: "taken: the id or name is in use",
    422: "the body failed validation: `errors` lists each violation",
    429: "rate limit exceeded for a window (`Retry-After`: seconds until it is over)",
    501: "this server does not do it (yet): `detail` says what to do instead",
}
# The rate-limit headers every authenticated answer carries (manage/v2/ratelimit.py).
RATE_HEADERS = {
    "RateLimit": "per window: `r` requests left, `t` seconds to its end",
    "RateLimit-Policy": "per window: `q` quota, `w` window seconds",
}
PATH_PARAM = re.compile(r"{([^}/:]+)")


@dataclass(frozen=True)
class Mounted:
    """A route of a v2 collection as mounted: method, full path, handler."""

    method: str
    path: str
    handler: Any
    collection: str


def mounted_routes(root: web.Application) -> list[Mounted]:
    """Every route of the sub-applications mounted under `/v2/` (HEAD, aiohttp's twin of
    each GET, left out)."""
    found = []
    for resource in root.router.resources():
        if not isinstance(resource, web.PrefixedSubAppResource):
            continue
        prefix = resource.get_info()["prefix"]
        if not prefix.startswith(PREFIX):
            continue
        for route in resource.get_info()["app"].router.routes():
            if route.method in ("HEAD", "*") or route.resource is None:
                continue
            path = route.resource.canonical
            found.append(Mounted(route.method, path, route.handler, prefix[len(PREFIX) :]))
    return found


def undocumented(root: web.Application) -> list[str]:
    """`METHOD path` of each mounted v2 route whose handler has no `Operation`."""
    return [f"{r.method} {r.path}" for r in mounted_routes(root) if operation_of(r.handler) is None]


def _error_name(status: int) -> str:
    return HTTPStatus(status).phrase.replace(" ", "").replace("-", "") + "Error"


def _problem(text: str) -> dict[str, Any]:
    return {"description": text, "content": {PROBLEM_JSON: {"schema": {"$ref": REF.format(
        model="ErrorResponse")}}}}  # fmt: skip


def _success(op: Operation, refs: dict[type[BaseModel], dict[str, str]]) -> dict[str, Any]:
    phrase = HTTPStatus(op.status).phrase
    if op.answer is None:
        return {str(op.status): {"description": phrase}}
    schema: dict[str, Any] = refs[op.answer]
    if op.listed_as:
        wrapped = {"type": "array", "items": schema}
        schema = {"type": "object", "required": [op.listed_as], "properties": {
            op.listed_as: wrapped}}  # fmt: skip
    return {str(op.status): {"description": phrase, "content": {JSON: {"schema": schema}}}}


def _operation(
    route: Mounted, refs: dict[Any, dict[type[BaseModel], dict[str, str]]]
) -> dict[str, Any]:
    path_params = [
        param(name, "path", {"type": "string", "minLength": 1}, f"the {name}", required=True)
        for name in PATH_PARAM.findall(route.path)
    ]
    op = operation_of(route.handler)
    if op is None:
        return {
            "summary": "undocumented",
            "tags": [route.collection],
            "parameters": path_params,
            "responses": {"default": {"$ref": "#/components/responses/Problem"}},
        }
    errors = sorted({*op.errors, *ALWAYS})
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "description": (op.description + " " if op.description else "") + "Needs an admin key.",
        "tags": [op.tag or route.collection],
        "parameters": [*path_params, *op.query],
        "responses": {
            **_success(op, refs["answer"]),
            **{str(s): {"$ref": f"#/components/responses/{_error_name(s)}"} for s in errors},
            "default": {"$ref": "#/components/responses/Problem"},
        },
    }
    if op.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {JSON: {"schema": refs["body"][op.body]}},
        }
    return out


def v2_document(root: web.Application) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every v2 route mounted on `root`."""
    routes = mounted_routes(root)
    ops = [op for r in routes if (op := operation_of(r.handler)) is not None]
    answers = [op.answer for op in ops if op.answer is not None]
    bodies = [op.body for op in ops if op.body is not None]
    schemas, refs = schemas_of([*answers, ErrorResponse], bodies)
    by_use: dict[Any, dict[type[BaseModel], dict[str, str]]] = {"answer": {}, "body": {}}
    for (model, mode), ref in refs.items():
        by_use["answer" if mode == "serialization" else "body"][model] = ref
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, by_use)
    responses = {_error_name(s): _problem(text) for s, text in ERRORS.items()}
    headers = {name: {"description": text, "schema": {"type": "string"}}
               for name, text in RATE_HEADERS.items()}  # fmt: skip
    retry = {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 0}}
    responses[_error_name(429)]["headers"] = {**headers, "Retry-After": retry}
    responses["Problem"] = _problem("any other error (500: an internal error, no detail given)")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lockgate management API (RunPod REST v2)",
            "version": version("lockgate"),
            "description": "RunPod's REST v2 management API served by lockgate: the same "
            "endpoints, templates, registries and network volumes `/v1`, `/graphql`, "
            "kubectl and the console see. Every error is an RFC 9457 problem "
            "(`application/problem+json`).",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": schemas,
            "responses": responses,
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "lockgate API key (admin scope)",
                }
            },
        },
        "security": [{"bearerAuth": []}],
    }


def add_openapi_route(root: web.Application) -> None:
    """`GET /v2/openapi.json` on `root` itself, outside the admin-only collections: no key
    needed (as RunPod's). Built at its first request, once everything is mounted."""
    built: list[bytes] = []

    async def openapi_json(request: web.Request) -> web.Response:
        if not built:
            built.append(orjson.dumps(v2_document(request.app)))
        return web.Response(body=built[0], content_type=JSON)

    root.router.add_get(PATH, openapi_json)
