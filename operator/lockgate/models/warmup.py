"""An endpoint's warm-up: what each new worker runs before it takes real work.

A queue endpoint's warm-up is one or more job inputs, handed to a new worker as its first
jobs (no client sees them); a load-balancing endpoint's is one HTTP request, sent to a new
worker once its health path first answers 200. The worker is routable, or takes real
jobs, only when they all succeeded; a failing warm-up marks it unhealthy (models/unhealthy.py).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

WARMUP_INPUTS_MAX = 5  # job inputs one warm-up may hold
WARMUP_BYTES_MAX = 64 * 1024  # the whole warm-up's JSON, inputs or request, at most this
WARMUP_HEADERS_MAX = 32  # headers of a warm-up request
# Any JSON value, kept as written by the API server too (a CRD field of no fixed type).
_ANY_JSON: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}

HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
WORKER_PATH = r"^/[\x21-\x7e]*$"  # a path (and query) on a worker's HTTP server


class WarmupRequest(BaseModel):
    """The HTTP request a load-balancing endpoint's new worker is sent before it is routable."""

    model_config = ConfigDict(extra="forbid")

    method: HttpMethod = Field("POST", description="HTTP method")
    path: str = Field(
        "/",
        max_length=2048,
        pattern=WORKER_PATH,
        description="path (and query) on the worker's HTTP server, starting with /",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=WARMUP_HEADERS_MAX,
        description="request headers (Content-Type is application/json with a body)",
    )
    body: Any = Field(
        None, json_schema_extra=_ANY_JSON, description="JSON body; none when unset (null)"
    )

    @model_validator(mode="after")
    def _header_names(self) -> WarmupRequest:
        for name, value in self.headers.items():
            if not name or not all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in name):
                raise ValueError(f"headers: {name!r} is not a header name")
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"headers: {name!r}'s value has a line break")
        return self


class Warmup(BaseModel):
    """`inputs` (queue endpoints) or `request` (load-balancing endpoints): exactly one."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[dict[str, Any]] | None = Field(
        None,
        min_length=1,
        max_length=WARMUP_INPUTS_MAX,
        description="QUEUE: job inputs a new worker runs, in order, before its first real job",
    )
    request: WarmupRequest | None = Field(
        None, description="LB: the request a new worker answers (2xx) before it is routable"
    )

    @model_validator(mode="after")
    def _one_kind_bounded(self) -> Warmup:
        if (self.inputs is None) == (self.request is None):
            raise ValueError("set exactly one of inputs (QUEUE) and request (LB)")
        size = len(orjson.dumps(self.model_dump(mode="json", exclude_none=True)))
        if size > WARMUP_BYTES_MAX:
            raise ValueError(f"{size} bytes of JSON, at most {WARMUP_BYTES_MAX}")
        return self
