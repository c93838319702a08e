"""The Batch Jobs routes of `/openapi.json` (issue 49; docs/batch-jobs.md): the nine
operations under `/v2/{endpoint}/batch` with their bodies (`models/batch_api.py`), scopes
(`jobs:read` reads, `jobs` writes), limits and error responses, from the constants
`gateway/batch_api.py` enforces."""

from __future__ import annotations

from typing import Any

from lockgate.gateway.batch_api import (
    BATCH_ID_RE,
    CALL_LIMIT,
    OFFSET_MAX,
    PAGE_DEFAULT,
    PAGE_MAX,
    SMALL_LIMIT,
)
from lockgate.gateway.openapi_parts import MB, ok, op, param
from lockgate.models.batch import BatchRename
from lockgate.models.batch_api import (
    BatchAdded,
    BatchCreated,
    BatchItem,
    BatchPage,
    BatchRequestPage,
    BatchSummary,
    BatchUpload,
)
from lockgate.models.jobs import WEBHOOK_PATTERN
from lockgate.store.keys import JOB_ID_RE

OUTPUTS = (BatchCreated, BatchSummary, BatchPage, BatchAdded, BatchRequestPage)
INPUTS = (BatchItem, BatchUpload, BatchRename)
TAG = "batches"
READ, WRITE = "jobs:read", "jobs"
# Every batch route: 400 (a malformed request, a load-balancing endpoint, a batch in the
# wrong state), 401 (key or scope), 404 (endpoint, batch or request), 429 (rate limits).
BASE_ERRORS = "400 401 404 429"
BODY_ERRORS = "400 401 404 408 413 429"  # and a body: 408 (too slow), 413 (too large)
LIMITS_TEXT = (
    "Limits per endpoint (settable, docs/batch-jobs.md): 10 batches not yet done (429), "
    "5,000 requests per batch (400), 50,000 requests of finalized batches not yet ended "
    "(429 at finalize), 256 MiB of request JSON per batch (413)."
)

BATCH = param(
    "batch", "path", {"type": "string", "pattern": BATCH_ID_RE.pattern}, "batch id", required=True
)
REQUEST = param(
    "request",
    "path",
    {"type": "string", "pattern": JOB_ID_RE.pattern},
    "request id (as `requestIds` of an upload gave it)",
    required=True,
)
WEBHOOK = param(
    "webhook",
    "query",
    {"type": "string", "pattern": WEBHOOK_PATTERN},
    "an http(s) URL that gets the batch's summary once it is done (FINALIZED, FAILED or "
    "CANCELLED), once, signed like a job's webhook",
)


def _page(what: str) -> list[dict[str, Any]]:
    """`offset` and `limit` of a paged list of `what`."""
    return [
        param(
            "offset",
            "query",
            {"type": "integer", "minimum": 0, "maximum": OFFSET_MAX, "default": 0},
            f"{what} to skip",
        ),
        param(
            "limit",
            "query",
            {"type": "integer", "minimum": 1, "maximum": PAGE_MAX, "default": PAGE_DEFAULT},
            f"{what} per page",
        ),
    ]


def batch_paths(ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The Batch Jobs paths, with `ref` the `{"$ref": …}` of each model by name."""
    items = {"type": "array", "items": ref["BatchItem"]}
    summary = ok(ref["BatchSummary"])
    base = "/v2/{endpoint}/batch"
    return {
        base: {
            "post": op(
                f"Create a DRAFT batch with its first requests (a JSON array of `{{input}}`, "
                f"`[]` allowed; body at most {CALL_LIMIT // MB} MiB). {LIMITS_TEXT}",
                WRITE, ok(ref["BatchCreated"]), BODY_ERRORS,
                params=[WEBHOOK], body=items, tag=TAG,
            ),
            "get": op(
                "The endpoint's batches, newest first, a page at a time",
                READ, ok(ref["BatchPage"]), BASE_ERRORS, params=_page("batches"), tag=TAG,
            ),
        },
        base + "/{batch}": {
            "get": op("A batch's summary", READ, summary, BASE_ERRORS, params=[BATCH], tag=TAG),
            "put": op(
                f"Set a batch's display name (body at most {SMALL_LIMIT // 1024} KiB)",
                WRITE, summary, BODY_ERRORS, params=[BATCH], body=ref["BatchRename"], tag=TAG,
            ),
        },
        base + "/{batch}/requests": {
            "post": op(
                f"Add requests to a DRAFT batch (body at most {CALL_LIMIT // MB} MiB; 400 "
                "once it is finalized or cancelled)",
                WRITE, ok(ref["BatchAdded"]), BODY_ERRORS,
                params=[BATCH], body=ref["BatchUpload"], tag=TAG,
            ),
            "get": op(
                "A batch's requests in upload order with their results, a page at a time",
                READ, ok(ref["BatchRequestPage"]), BASE_ERRORS,
                params=[BATCH, *_page("requests")], tag=TAG,
            ),
        },
        base + "/{batch}/requests/{request}": {
            "delete": op(
                "Remove one request from a DRAFT batch (400 once it is finalized)",
                WRITE, summary, BASE_ERRORS, params=[BATCH, REQUEST], tag=TAG,
            )
        },
        base + "/{batch}/finalize": {
            "post": op(
                "DRAFT → FINALIZED: the batch's requests run on the endpoint's batch pool "
                "(400 when it is not a DRAFT; 429 past the endpoint's queued requests)",
                WRITE, summary, BASE_ERRORS, params=[BATCH], tag=TAG,
            )
        },
        base + "/{batch}/cancel": {
            "post": op(
                "Cancel a DRAFT or running batch: its queued requests are cancelled, the "
                "running ones finish, then it is CANCELLED (400 once it is done)",
                WRITE, summary, BASE_ERRORS, params=[BATCH], tag=TAG,
            )
        },
    }  # fmt: skip
