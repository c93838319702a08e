"""The pieces `/openapi.json`'s operations are built from (`gateway/openapi.py`,
`gateway/openapi_batches.py`): a parameter, a 200 answer, an operation with its scope and
error responses."""

from __future__ import annotations

from typing import Any

REF = "#/components/schemas/{model}"
JSON = "application/json"
MB = 1024 * 1024


def error_responses(codes: str) -> dict[str, Any]:
    """`{"400": {"$ref": ...}, ...}` for the codes given (space-separated), plus 500 and 503."""
    return {c: {"$ref": f"#/components/responses/E{c}"} for c in [*codes.split(), "500", "503"]}


def param(name: str, where: str, schema: dict[str, Any], text: str, **kw: Any) -> dict[str, Any]:
    """An OpenAPI parameter object."""
    return {"name": name, "in": where, "schema": schema, "description": text, **kw}


def ok(schema: dict[str, Any], text: str = "success") -> dict[str, Any]:
    """A 200 answer with a JSON body of `schema`."""
    return {"200": {"description": text, "content": {JSON: {"schema": schema}}}}


def op(
    summary: str,
    scope: str,
    answers: dict[str, Any],
    errors: str,
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    tag: str | None = None,
) -> dict[str, Any]:
    """An operation needing a key with `scope`: its answers, and the error responses of
    `errors` (space-separated codes) plus 500 and 503. Its tag: `tag`, else `workers` or
    `jobs` by the scope."""
    out: dict[str, Any] = {
        "summary": summary,
        "description": f"Needs a key with the `{scope}` scope.",
        "tags": [tag or ("workers" if scope == "workers" else "jobs")],
        "parameters": params or [],
        "responses": {**answers, **error_responses(errors)},
    }
    if body is not None:
        out["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
    return out
