"""Job request, policy, storage configuration, job states and the health / purge shapes."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

# Durations are milliseconds, as in the spec's "Time limits and retention".
EXECUTION_TIMEOUT_DEFAULT_MS = 600_000
EXECUTION_TIMEOUT_MIN_MS = 5_000
TTL_DEFAULT_MS = 86_400_000
TTL_MIN_MS = 10_000
MAX_DURATION_MS = 604_800_000  # 7 days, the bound of both executionTimeout and ttl


def _integral(value: Any) -> Any:
    """JSON has one number type: 5000.0 is the integer 5000 (as JSON Schema says)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class JobStatus(StrEnum):
    """The job states of the spec."""

    IN_QUEUE = "IN_QUEUE"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"


FINAL_STATES = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class JobPolicy(_Strict):
    """Execution policy of one job; `None` means "the endpoint's setting, else the default"."""

    executionTimeout: int | None = Field(
        None, ge=EXECUTION_TIMEOUT_MIN_MS, le=MAX_DURATION_MS, description="milliseconds"
    )
    lowPriority: bool = False
    ttl: int = Field(TTL_DEFAULT_MS, ge=TTL_MIN_MS, le=MAX_DURATION_MS, description="milliseconds")

    # In strict validation (no "5000", no true) an integral 5000.0 is still the integer 5000.
    _integral = field_validator("executionTimeout", "ttl", mode="before")(_integral)


class S3Config(_Strict):
    """Bucket credentials handed to the worker with the job; never echoed in responses."""

    accessId: str
    accessSecret: str
    bucketName: str
    endpointUrl: str


# An http(s) URL with a host name, an IPv4 address or an IPv6 literal: the document says
# what the validator below checks. The IPv6 forms are the standard ones (no zone id, no
# embedded IPv4), spelled out so that no string the pattern admits is refused by urlsplit.
_H = "[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join(
    [
        f"({_H}:){{7}}{_H}",
        f"({_H}:){{1,7}}:",
        *(f"({_H}:){{1,{7 - n}}}(:{_H}){{1,{n}}}" for n in range(1, 7)),
        f":((:{_H}){{1,7}}|:)",
    ]
)
_PORT = "[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]"
# After the host and port: no control character and no space, as the same explicit class
# in every regex engine (`\S` differs: ECMA's, which OpenAPI clients use, admits U+0085,
# Python's and pydantic's do not).
_URL_CHAR = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_HOST = rf"([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*|\[({_IPV6})\])"
WEBHOOK_PATTERN = rf"^https?://{_HOST}(:({_PORT}))?([/?#]{_URL_CHAR}*)?$"
# Matched by pydantic's regex engine, as the pattern was before it moved into the validator.
_WEBHOOK_SHAPE = TypeAdapter(Annotated[str, Field(pattern=WEBHOOK_PATTERN)])


WebhookUrl = Annotated[str, WithJsonSchema({"type": "string", "pattern": WEBHOOK_PATTERN})]


def _nullable(schema: dict[str, Any]) -> None:
    """Let a field's JSON schema admit null too (the validator reads null as absent)."""
    ref = schema.pop("$ref", None) or schema.pop("allOf")[0]["$ref"]
    schema["anyOf"] = [{"$ref": ref}, {"type": "null"}]


class JobRequest(BaseModel):
    """Body of `/run` and `/runsync`. Unknown top-level keys are ignored, as RunPod does."""

    input: dict[str, Any]
    # The validator checks the pattern and says what failed in words: pydantic's own message
    # would quote the whole 1 KB pattern (the OpenAPI document still shows it).
    webhook: WebhookUrl | None = Field(None, description="http(s) URL")
    policy: JobPolicy = Field(
        default_factory=JobPolicy,
        description="null or absent: every default",
        json_schema_extra=lambda schema: _nullable(schema),
    )
    s3Config: S3Config | None = None

    @field_validator("policy", mode="before")
    @classmethod
    def _null_policy_is_absent(cls, value: Any) -> Any:
        return JobPolicy() if value is None else value

    @field_validator("webhook")
    @classmethod
    def _webhook_is_http_url(cls, value: str | None) -> str | None:
        if value is not None and (problem := webhook_problem(value)):
            raise ValueError(problem)
        return value


WEBHOOK_RULE = (
    "must be an http:// or https:// URL with a host name, an IPv4 address or a bracketed "
    "IPv6 address, an optional port from 1 to 65535, and no spaces"
)


def webhook_problem(url: str) -> str | None:
    """Why `url` is no acceptable webhook URL, in words; None when it is one."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a broken [IPv6] literal
        return WEBHOOK_RULE
    try:
        port = parts.port
    except ValueError:  # over 65535
        port = 0
    if port is not None and not 1 <= port <= 65535:
        return "its port must be from 1 to 65535"
    try:
        _WEBHOOK_SHAPE.validate_python(url)
    except ValidationError:
        return WEBHOOK_RULE
    if not parts.hostname:
        return WEBHOOK_RULE
    return None


class HealthJobs(BaseModel):
    completed: int = 0
    failed: int = 0
    inProgress: int = 0
    inQueue: int = 0
    retried: int = 0


class HealthWorkers(BaseModel):
    """The spec's `idle` and `running`, and the states that explain a waiting queue:
    `initializing` (started, not yet taking jobs), `throttled` (wanted but unschedulable:
    no node or GPU of the endpoint's types) and `unhealthy` (crash-looping, failing
    readiness, image pull errors). The endpoint's conditions say why."""

    idle: int = Field(0, description="Workers alive and holding no job")
    running: int = Field(0, description="Workers holding at least one job")
    initializing: int = Field(0, description="Workers started but not yet taking jobs")
    throttled: int = Field(
        0, description="Workers wanted but unschedulable (no node or GPU of the endpoint's types)"
    )
    unhealthy: int = Field(
        0,
        description="Workers crash-looping, failing readiness or failing to pull their image, "
        "and those marked unhealthy (a failed fitness check) whose pod or process is still there",
    )


class HealthUnhealthyWorker(BaseModel):
    """One worker marked unhealthy in the last hour, and why (beyond the spec)."""

    id: str
    kind: str = Field(description="`fitness`, `startup` or `warmup`")
    check: str | None = Field(None, description="the failed fitness check's name")
    reason: str
    at: int = Field(description="when it was marked (epoch ms)")
    present: bool = Field(
        description="its pod or process is still there (counted in `workers.unhealthy`)"
    )


class Health(BaseModel):
    """`GET /health` body."""

    jobs: HealthJobs
    workers: HealthWorkers
    unhealthyWorkers: list[HealthUnhealthyWorker] | None = Field(
        None,
        description="Beyond the spec, only when a worker was marked unhealthy in the last "
        "hour: the newest 20, newest first",
    )


class PurgeResult(BaseModel):
    """`POST /purge-queue` body."""

    removed: int
    status: str = "completed"
