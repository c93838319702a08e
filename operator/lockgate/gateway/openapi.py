"""`/openapi.json`: the client job API and the worker API as an OpenAPI 3.1 document.

Schemas come from the pydantic models (`models_json_schema`, refs into
`components/schemas`); paths, parameters, limits and error responses come from the
constants the handlers use, so the document cannot drift from what the gateway enforces.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib.metadata import version
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from lockgate.gateway import openapi_batches as batches
from lockgate.gateway.client_api import (
    RUN_LIMIT,
    RUNSYNC_LIMIT,
    WAIT_DEFAULT_MS,
    WAIT_MAX_MS,
    WAIT_MIN_MS,
)
from lockgate.gateway.idempotency import HEADER, MAX_KEY_CHARS
from lockgate.gateway.listing import CURSOR_RE, EPOCH_MS_DIGITS, LIMIT_DEFAULT, LIMIT_MAX
from lockgate.gateway.openapi_parts import JSON, MB, REF, param
from lockgate.gateway.openapi_parts import ok as _ok
from lockgate.gateway.openapi_parts import op as _op
from lockgate.gateway.worker_api import BATCH_MAX
from lockgate.models import ENDPOINT_ID_PATTERN, Health, JobRequest, JobStatus, PurgeResult
from lockgate.models.api import (
    Accepted,
    DoneAccepted,
    Empty,
    ErrorBody,
    Job,
    JobHandout,
    JobPage,
    JobResult,
    JobState,
    JobsToStop,
    StreamPost,
    StreamRead,
)
from lockgate.models.jobs import MAX_DURATION_MS, TTL_MIN_MS
from lockgate.store.keys import JOB_ID_RE, WORKER_ID_RE

# Error responses; each operation lists the ones it can give (all give 500 and 503).
ERRORS: dict[str, str] = {
    "400": "malformed request or parameter; or a job or batch in an ineligible state",
    "401": "missing, unknown, revoked or expired API key, or a key without the permission",
    "403": "a worker id other than the key's own or than the one bound to the caller's "
    "address; or `?ttl=` on /status without the `jobs` scope",
    "404": "unknown endpoint, job, batch or batch request (a job is gone once its ttl "
    "expires, a done batch once its retention does)",
    "408": "the request body did not arrive within the body timeout",
    "413": "request body over the operation's size limit",
    "429": "over a rate limit (per 10-second window) or a concurrency limit, or the "
    "endpoint's queue quota is full (`queue full: ...`)",
    "500": "internal error (no detail is given)",
    "503": "the job store is unavailable or full (`store full: ...`), or the gateway holds "
    "its budget of request bodies; retry shortly (a submit's answer says in `jobMayExist` "
    "whether its job may exist, and then gives its `id`)",
}
RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before retrying",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


Refs = dict[tuple[type[BaseModel], str], dict[str, str]]


def schemas_of(
    outputs: Sequence[type[BaseModel]], inputs: Sequence[type[BaseModel]]
) -> tuple[dict[str, Any], Refs]:
    """The component schemas of `outputs` (as answers) and `inputs` (as request bodies) and
    of every model they use, and the `{"$ref": ...}` of each given model by `(model,
    "serialization")` or `(model, "validation")`."""
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in outputs]
    pairs += [(m, "validation") for m in inputs]
    refs, top = models_json_schema(list(dict.fromkeys(pairs)), ref_template=REF)
    return top.get("$defs", {}), {pair: refs[pair] for pair in pairs}


def _schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """Component schemas of every model, and the ref of each model by name."""
    models: list[type[BaseModel]] = [
        Job,
        JobState,
        StreamRead,
        Health,
        PurgeResult,
        ErrorBody,
        JobHandout,
        Accepted,
        DoneAccepted,
        JobsToStop,
        Empty,
        JobPage,
    ]
    schemas, refs = schemas_of(
        [*models, *batches.OUTPUTS], [JobRequest, JobResult, StreamPost, *batches.INPUTS]
    )
    return schemas, {model.__name__: ref for (model, _mode), ref in refs.items()}


def _error_components() -> dict[str, Any]:
    out = {}
    for code, text in ERRORS.items():
        response: dict[str, Any] = {
            "description": text,
            "content": {JSON: {"schema": {"$ref": REF.format(model="ErrorBody")}}},
        }
        if code in ("429", "503"):
            response["headers"] = RETRY_AFTER
        out[f"E{code}"] = response
    return out


ENDPOINT = param(
    "endpoint",
    "path",
    {"type": "string", "pattern": ENDPOINT_ID_PATTERN},
    "endpoint id",
    required=True,
)
JOB = param(
    "job", "path", {"type": "string", "pattern": JOB_ID_RE.pattern}, "job id", required=True
)
WORKER = param(
    "worker",
    "path",
    {"type": "string", "pattern": WORKER_ID_RE.pattern},
    "worker id (the pod name)",
    required=True,
)


def _client_paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    job_body = ref["JobRequest"]
    wait = param(
        "wait",
        "query",
        {
            "type": "integer",
            "minimum": WAIT_MIN_MS,
            "maximum": WAIT_MAX_MS,
            "default": WAIT_DEFAULT_MS,
        },
        "milliseconds to wait for the job to finish",
    )
    status_wait = param(
        "wait",
        "query",
        {"type": "integer", "minimum": 0, "maximum": WAIT_MAX_MS, "default": 0},
        "milliseconds to wait for the job to be final before answering (0: answer now)",
    )
    ttl = param(
        "ttl",
        "query",
        {"type": "integer", "minimum": TTL_MIN_MS, "maximum": MAX_DURATION_MS},
        "new ttl of the job (ms, from submission)",
    )
    with_input = param(
        "input",
        "query",
        {"type": "string", "enum": ["0", "1", "true", "false"]},
        "lockgate only: 1 adds the job's `input` (admin or `jobs` scope; else 403)",
    )
    details = param(
        "details",
        "query",
        {"type": "string", "enum": ["0", "1", "true", "false"]},
        "lockgate only: 1 adds `attempts` (times a worker took the job), `attemptHistory` "
        "(its last 10 takes: workerId, takenAt, endedAt, ended) and `stream` (its chunks no "
        "/stream read has taken yet)",
    )
    position = param(
        "position",
        "query",
        {"type": "string", "enum": ["0", "1", "true", "false"]},
        "lockgate only: 1 adds, while the job is IN_QUEUE, `position` (its place in the "
        "queue, 1 next) and `waiting` (why it waits, with that place)",
    )
    either = {"anyOf": [ref["Job"], ref["JobState"]]}
    idempotency = param(
        HEADER,
        "header",
        {"type": "string", "pattern": f"^[!-~]{{1,{MAX_KEY_CHARS}}}$"},
        "a retry with the same key, while the first job lives, gets that job instead of a "
        "new one (per endpoint, key holder and route)",
    )
    return {
        "/v2/{endpoint}/run": {
            "post": _op(
                f"Queue a job (body at most {RUN_LIMIT // MB} MB)",
                "jobs",
                _ok(ref["JobState"]),
                "400 401 404 408 413 429",
                params=[idempotency],
                body=job_body,
            )
        },
        "/v2/{endpoint}/runsync": {
            "post": _op(
                f"Run a job and wait for it (body at most {RUNSYNC_LIMIT // MB} MB); when `wait` "
                "elapses first, its `{id, status}`",
                "jobs",
                _ok(either),
                "400 401 404 408 413 429",
                params=[wait, idempotency],
                body=job_body,
            )
        },
        "/v2/{endpoint}/status/{job}": {
            "get": _op(
                "A job's status and, once completed, its output (while running, its latest "
                "progress report, if any); `ttl` needs the `jobs` scope; `wait` (lockgate "
                "only) answers as soon as the job is final, or when `wait` ms passed",
                "jobs:read",
                _ok(ref["Job"]),
                "400 401 403 404 429",
                params=[JOB, ttl, status_wait, with_input, details, position],
            )
        },
        "/v2/{endpoint}/stream/{job}": {
            "get": _op(
                "Stream chunks produced since the previous read",
                "jobs:read",
                _ok(ref["StreamRead"]),
                "401 404 429",
                params=[JOB],
            )
        },
        "/v2/{endpoint}/cancel/{job}": {
            "post": _op(
                "Cancel a queued or running job",
                "jobs",
                _ok(ref["JobState"]),
                "400 401 404 429",
                params=[JOB],
            )
        },
        "/v2/{endpoint}/retry/{job}": {
            "post": _op(
                "Queue a FAILED or TIMED_OUT job again",
                "jobs",
                _ok(ref["JobState"]),
                "400 401 404 429",
                params=[JOB],
            )
        },
        "/v2/{endpoint}/purge-queue": {
            "post": _op("Remove every queued job", "jobs", _ok(ref["PurgeResult"]), "401 404 429")
        },
        "/v2/{endpoint}/requests": {
            "get": _op(
                "The endpoint's jobs whose record lives, newest first, a page at a time "
                "(never their input, output, webhook or s3Config)",
                "jobs:read",
                _ok(ref["JobPage"]),
                "400 401 404 429",
                params=_listing_params(),
            )
        },
        "/v2/{endpoint}/health": {
            "get": _op("Job and worker counts", "jobs:read", _ok(ref["Health"]), "401 404 429")
        },
    }


OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {},
                "code": {},
            },
        }
    },
}


def _openai_paths() -> dict[str, Any]:
    """The OpenAI route (docs/openai.md): the common paths, and the catch-all."""
    errors = {
        code: {"description": text, "content": {JSON: {"schema": OPENAI_ERROR}}}
        for code, text in ERRORS.items()
        if code in ("400", "401", "404", "408", "413", "429", "500", "503")
    }
    errors["504"] = {
        "description": "no answer within the longest wait (the job is cancelled), or the "
        "job ran past its execution timeout",
        "content": {JSON: {"schema": OPENAI_ERROR}},
    }
    for code in ("429", "503"):
        errors[code] = {**errors[code], "headers": RETRY_AFTER}
    answer = {
        "description": 'the worker\'s answer (a JSON object); with `"stream": true`, '
        "Server-Sent Events ending with `data: [DONE]`",
        "headers": {
            "X-Lockgate-Job-Id": {"description": "the job's id", "schema": {"type": "string"}}
        },
        "content": {JSON: {"schema": {}}, "text/event-stream": {"schema": {}}},
    }
    path = param("path", "path", {"type": "string"}, "the rest of the OpenAI path", required=True)

    def op(
        summary: str, *, body: bool, params: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "summary": summary,
            "description": "Runs as a job on the endpoint's queue (input `openai_route`, "
            "`openai_input`). Needs a key with the `jobs` scope, as `Bearer <key>`. Errors "
            "are OpenAI-shaped.",
            "tags": ["openai"],
            "parameters": params or [],
            "responses": {"200": answer, **errors},
        }
        if body:
            schema = {"type": "object", "properties": {"stream": {"type": "boolean"}}}
            out["requestBody"] = {"required": True, "content": {JSON: {"schema": schema}}}
        return out

    base = "/v2/{endpoint}/openai/v1"
    limit = f"(body at most {RUNSYNC_LIMIT // MB} MB)"
    named = {"chat/completions": "chat completions", "completions": "completions"}
    named |= {"embeddings": "embeddings", "models": "models", "{path}": "any other path"}
    # Every path takes both methods: the worker decides what it supports (a GET carries no
    # `openai_input`).
    return {
        f"{base}/{rest}": {
            "get": op(f"OpenAI {what}, GET", body=False, params=[path] if "{" in rest else None),
            "post": op(f"OpenAI {what} {limit}", body=True, params=[path] if "{" in rest else None),
        }
        for rest, what in named.items()
    }


def _listing_params() -> list[dict[str, Any]]:
    """Query parameters of `/requests` (docs/job-api.md, "Listing jobs")."""
    when = {
        "anyOf": [
            {"type": "string", "format": "date-time"},
            {"type": "string", "pattern": f"^[0-9]{{1,{EPOCH_MS_DIGITS}}}$"},
        ]
    }
    states = {"type": "array", "items": {"type": "string", "enum": list(JobStatus)}}
    return [
        param(
            "status",
            "query",
            states,
            "only jobs in these states (repeat it, or separate states with commas)",
            style="form",
            explode=True,
        ),
        param("from", "query", when, "only jobs created at or after (ISO-8601 or epoch ms)"),
        param("to", "query", when, "only jobs created before (ISO-8601 or epoch ms)"),
        param(
            "limit",
            "query",
            {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX, "default": LIMIT_DEFAULT},
            "jobs per page",
        ),
        param(
            "cursor",
            "query",
            {"type": "string", "pattern": f"^{CURSOR_RE.pattern}$"},
            "the previous page's `nextCursor` (opaque)",
        ),
    ]


def _worker_paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    none = {"204": {"description": "nothing for this worker before the long-poll ended"}}
    batch = param(
        "batch_size",
        "query",
        {"type": "integer", "minimum": 1, "maximum": BATCH_MAX, "default": 1},
        "most jobs to take",
    )
    listed = param(
        "job_id", "query", {"type": "string"}, "comma-separated ids of the jobs the worker runs"
    )
    status = param(
        "status",
        "query",
        {"type": "string"},
        "`unhealthy`: the worker's fitness check failed (runpod SDK >= 1.11): it is marked "
        "unhealthy for good, gets no job again and is replaced; other values: a heartbeat",
    )
    check = param(
        "check",
        "query",
        {"type": "string"},
        "with `status=unhealthy`: the failed fitness check's name (at most 128 printable "
        "characters, else 400)",
    )
    reason = param(
        "reason", "query", {"type": "string"}, "why it failed (kept: its first 512 characters)"
    )
    take = param(
        "take",
        "query",
        {"type": "integer", "minimum": 0, "maximum": 1, "default": 0},
        "`1`: also hand this worker the next queued job, if one is queued now, as `job` in "
        "the answer (beyond RunPod's protocol; never waits; not with `stopPod`)",
    )
    return {
        "/v2/{endpoint}/job-take/{worker}": {
            "get": _op(
                "Long-poll for a job",
                "workers",
                {**_ok(ref["JobHandout"]), **none},
                "400 401 403 404",
                params=[WORKER],
            )
        },
        "/v2/{endpoint}/job-take-batch/{worker}": {
            "get": _op(
                "Long-poll for up to `batch_size` jobs",
                "workers",
                {**_ok({"type": "array", "items": ref["JobHandout"]}), **none},
                "400 401 403 404",
                params=[WORKER, batch],
            )
        },
        "/v2/{endpoint}/job-done/{worker}/{job}": {
            "post": _op(
                "Report a job's output or error (a result over the size cap, or nested too "
                "deep to store, fails the job); or, with `status: IN_PROGRESS`, a progress "
                "report (at most 1 MB) shown in /status while the job runs",
                "workers",
                _ok(ref["DoneAccepted"]),
                "400 401 403 404 408 413",
                params=[WORKER, JOB, take],
                body=ref["JobResult"],
            )
        },
        "/v2/{endpoint}/job-return/{worker}/{job}": {
            "post": _op(
                "Give back a job taken ahead of a free slot and never started (beyond "
                "RunPod's protocol; lockgate's runtime): it goes back to the front of its "
                "queue without using an attempt",
                "workers",
                _ok(ref["Accepted"]),
                "400 401 403 404",
                params=[WORKER, JOB],
            )
        },
        "/v2/{endpoint}/job-stream/{worker}/{job}": {
            "post": _op(
                "Append a chunk to a job's stream",
                "workers",
                _ok(ref["Accepted"]),
                "400 401 403 404 408 413",
                params=[WORKER, JOB],
                body=ref["StreamPost"],
            )
        },
        "/v2/{endpoint}/ping/{worker}": {
            "get": _op(
                "Heartbeat, optionally listing the jobs the worker runs; or, with "
                "`status=unhealthy`, the worker's failed fitness check",
                "workers",
                _ok(ref["Empty"]),
                "400 401 403 404",
                params=[WORKER, listed, status, check, reason],
            )
        },
        "/v2/{endpoint}/job-stop/{worker}": {
            "get": _op(
                "Long-poll for jobs to stop",
                "workers",
                {**_ok(ref["JobsToStop"]), **none},
                "400 401 403 404",
                params=[WORKER],
            )
        },
    }


@cache
def openapi_document() -> dict[str, Any]:
    """The whole document (built once per process)."""
    schemas, ref = _schemas()
    refs = {name: {"$ref": r["$ref"]} for name, r in ref.items()}
    paths = {**_client_paths(refs), **batches.batch_paths(refs), **_openai_paths()}
    paths |= _worker_paths(refs)
    for item in paths.values():
        item["parameters"] = [ENDPOINT]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lockgate job API",
            "version": version("lockgate"),
            "description": "Queue-based serverless endpoints with the RunPod job API: the "
            "client job API, Batch Jobs, the OpenAI-compatible route and the worker API. "
            'Every error is `{"error": message}` (on the OpenAI route, OpenAI\'s '
            '`{"error": {"message", "type", ...}}`).',
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": _error_components(),
            "securitySchemes": {
                "apiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "authorization",
                    "description": "the API key, or `Bearer <key>`",
                },
            },
        },
        "security": [{"apiKey": []}],
    }


@cache
def _body() -> bytes:
    return orjson.dumps(openapi_document())


async def openapi_json(request: web.Request) -> web.Response:
    """GET /openapi.json (no key needed)."""
    return web.Response(body=_body(), content_type=JSON)
