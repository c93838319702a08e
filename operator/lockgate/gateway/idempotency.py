"""Safe retries of /run and /runsync: the `Idempotency-Key` header, and 503 answers that say
whether the job may exist.

A key names a job per endpoint, per key holder (the API key's name) and per route: a second
submit with the same key while the first job lives (its ttl) gets that job's id and state
and queues nothing. The store keeps a digest of the three, never the key itself.
"""

from __future__ import annotations

import hashlib
import logging

from aiohttp import web

from lockgate.gateway.errors import BadRequest
from lockgate.gateway.http import json_response

log = logging.getLogger("lockgate.gateway")

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"  # "true" on an answer about a job submitted earlier
MAX_KEY_CHARS = 255


class SubmitUncertain(Exception):
    """The store failed during or after a submit: the job may exist (under `job_id`)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


def key_digest(request: web.Request, holder: str, route: str) -> str:
    """The digest naming the request's idempotency key, its holder and route; "" without a
    key; 400 for a key that is empty, too long or not printable ASCII."""
    key = request.headers.get(HEADER)
    if key is None:
        return ""
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all("!" <= c <= "~" for c in key):
        raise BadRequest(
            f"{HEADER} must be 1 to {MAX_KEY_CHARS} printable ASCII characters without spaces"
        )
    return hashlib.sha256(f"{holder}\0{route}\0{key}".encode()).hexdigest()


def store_unavailable(request: web.Request, job_id: str | None) -> web.Response:
    """503 for a submit the store failed: `job_id` None when no job was created, else the id
    of the job that may exist (the write may have landed before the store failed)."""
    if job_id is None:
        body = {
            "error": "job store unavailable, retry shortly; no job was created",
            "jobMayExist": False,
        }
    else:
        body = {
            "error": (
                f"job store unavailable while submitting job {job_id!r}: it may exist. Retry "
                f"with the same {HEADER} header to get it without running it twice, or read "
                f"/status/{job_id} before submitting again"
            ),
            "jobMayExist": True,
            "id": job_id,
        }
    log.warning("store unavailable on %s %s: %s", request.method, request.path, body["error"])
    return json_response(body, status=503, headers={"Retry-After": "1"})
