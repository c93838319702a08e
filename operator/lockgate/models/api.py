"""Wire shapes of the job API and worker API beyond the spec's resources, for `/openapi.json`.

The handlers build these bodies directly (orjson, raw JSON fragments); the models describe
them, so the OpenAPI document and the responses come from one definition of each field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models.jobs import JobStatus, S3Config


class ErrorBody(BaseModel):
    """Every refusal and failure: one message a person can act on."""

    error: str


class JobState(BaseModel):
    """`{id, status}`: /run, /cancel, /retry, and /runsync when `wait` elapsed first."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: JobStatus


class Job(BaseModel):
    """`/status`, a finished `/runsync`, and the webhook body."""

    id: str
    status: JobStatus
    delayTime: int = Field(ge=0, description="milliseconds queued")
    executionTime: int = Field(ge=0, description="milliseconds running")
    output: Any = Field(
        None,
        description="the handler's output when COMPLETED; while IN_PROGRESS, its latest "
        "progress report (runpod's progress_update), if any",
    )
    error: str | None = Field(None, description="why the job failed; only when it did")
    input: Any = Field(
        None,
        description="lockgate only, on `/status?input=1`: the job's input (never s3Config), "
        "for an admin key or a `jobs` key of the endpoint",
    )
    position: int | None = Field(
        None,
        ge=1,
        description="lockgate only, on `/status?position=1` of an IN_QUEUE job: its place "
        "in the queue (1: taken next; a lowPriority job waits behind every normal one)",
    )
    waiting: str | None = Field(
        None,
        description="lockgate only, on `/status?position=1` of an IN_QUEUE job that no "
        "free worker takes: why it waits, with its position (as /health's `waiting`)",
    )


class StreamSplit(BaseModel):
    """Marks a piece of an output cut to fit 1 MB chunks: the `output`s of pieces 0 to
    count - 1 concatenate to the output itself (`text`) or to its JSON text (`json`)."""

    index: int = Field(ge=0)
    count: int = Field(ge=2)
    format: Literal["text", "json"]


class StreamChunk(BaseModel):
    """One piece of a job's streamed output (at most 1 MB of JSON)."""

    output: Any
    metrics: dict[str, Any] | None = None
    split: StreamSplit | None = Field(None, description="only on a piece of a larger output")


class StreamRead(BaseModel):
    """`/stream`: the chunks since the previous read; final `status` and no chunks: ended."""

    id: str
    status: JobStatus
    stream: list[StreamChunk]


class JobHandout(BaseModel):
    """A job handed to a worker by job-take."""

    id: str
    input: dict[str, Any]
    s3Config: S3Config | None = None


class JobResult(BaseModel):
    """job-done body: the output, or an error; the runpod SDK adds fields of its own."""

    model_config = ConfigDict(extra="allow")

    output: Any = None
    error: Any = None


class StreamPost(BaseModel):
    """job-stream body: one chunk of output, with optional metrics."""

    model_config = ConfigDict(extra="allow")

    output: Any
    metrics: dict[str, Any] | None = None


class Accepted(BaseModel):
    """Whether the gateway recorded a worker's result or chunk (False: the job moved on)."""

    accepted: bool


class DoneAccepted(Accepted):
    """job-done's answer: whether the result was recorded, and, when the worker asked with
    `take=1` and a job was queued, that next job for the same worker, and `more` when
    jobs were still queued behind it (lockgate's runtime then takes jobs ahead)."""

    job: JobHandout | None = None
    more: bool | None = None


class JobsToStop(BaseModel):
    """job-stop: ids of jobs the worker must stop (cancelled or timed out)."""

    jobsToStop: list[str]


class Empty(BaseModel):
    """An empty JSON object (ping)."""

    model_config = ConfigDict(extra="forbid")


class ListedJob(BaseModel):
    """One job of `/requests`: its state and times, never its input, output, webhook or
    s3Config."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: JobStatus
    createdAt: str = Field(description="submission time, ISO-8601 UTC with milliseconds")
    delayTime: int = Field(ge=0, description="milliseconds queued")
    executionTime: int = Field(ge=0, description="milliseconds running")
    workerId: str | None = Field(None, description="the worker that holds or ran the job")
    error: str | None = Field(None, description="why the job failed; only when it did")


class JobPage(BaseModel):
    """`/requests`: a page of jobs, newest first, and the cursor of the next (older) page."""

    model_config = ConfigDict(extra="forbid")

    items: list[ListedJob]
    nextCursor: str | None = Field(description="`cursor` of the next page; null on the last")
