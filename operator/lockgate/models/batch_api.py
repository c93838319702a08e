"""Wire shapes of the Batch Jobs API (issue 49; docs/batch-jobs.md), RunPod's field names,
for `/openapi.json` (`gateway/openapi_batches.py`). The request bodies' models are the ones
the handlers validate with (`gateway/batch_api.py`); the answers' models describe the
bodies `models.batch.summary` and the handlers build, and the fuzz test of the document
(tests/test_openapi.py) checks every answer against them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models.batch import DRAFT_REQUEST, BatchStatus
from lockgate.models.jobs import JobRequest, JobStatus

WebhookState = Literal["WAITING", "PENDING", "DELIVERED", "GAVE_UP"]


class BatchItem(JobRequest):
    """One request of a batch: `/run`'s body without a webhook of its own (the batch's is
    given at create, `?webhook=`). Unknown top-level keys are ignored, as on `/run`."""

    webhook: None = Field(None, description="none: a batch's requests have no webhook of their own")


class BatchUpload(BaseModel):
    """`POST …/batch/{id}/requests`'s body: more requests for a DRAFT batch."""

    model_config = ConfigDict(extra="forbid")

    requests: list[BatchItem]


class BatchCreated(BaseModel):
    """`POST …/batch`'s answer."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: Literal[BatchStatus.DRAFT]


class BatchSummary(BaseModel):
    """A batch as `GET …/batch/{id}` shows it (RunPod's summary, plus `name`, `doneAt` and
    `webhook`); also the answer of rename, finalize, cancel and a request's delete."""

    model_config = ConfigDict(extra="forbid")

    id: str
    endpointId: str
    status: BatchStatus
    name: str = Field(description="the display name (PUT …/batch/{id}); empty when none")
    requestTotal: int = Field(ge=0)
    requestInProgress: int = Field(ge=0)
    requestCompleted: int = Field(ge=0)
    requestFailed: int = Field(ge=0)
    createdAt: int = Field(ge=0, description="epoch milliseconds")
    doneAt: int | None = Field(description="lockgate only: epoch ms once done, else null")
    webhook: WebhookState | None = Field(
        description="lockgate only: how the batch's webhook stands; null without one"
    )


class BatchPage(BaseModel):
    """`GET …/batch`: the endpoint's batches, newest first, a page at a time."""

    model_config = ConfigDict(extra="forbid")

    batches: list[BatchSummary]
    total: int = Field(ge=0)
    offset: int = Field(ge=0)
    limit: int = Field(ge=1)
    hasMore: bool


class BatchAdded(BaseModel):
    """`POST …/batch/{id}/requests`'s answer: the new total and the new requests' ids."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: Literal[BatchStatus.DRAFT]
    requestTotal: int = Field(ge=0)
    requestIds: list[str]


class BatchChild(BaseModel):
    """One request of a batch and its result (times as ISO-8601 strings, null when none)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: JobStatus | Literal["DRAFT"] = Field(
        description=f"a job's status; `{DRAFT_REQUEST}` while its batch is a DRAFT"
    )
    output: Any = Field(None, description="the handler's output, once COMPLETED")
    error: str | None = Field(None, description="why it failed; only when it did")
    startedAt: str | None
    completedAt: str | None


class BatchRequestPage(BaseModel):
    """`GET …/batch/{id}/requests`: the requests in upload order, a page at a time."""

    model_config = ConfigDict(extra="forbid")

    requests: list[BatchChild]
    total: int = Field(ge=0)
    offset: int = Field(ge=0)
    limit: int = Field(ge=1)
    hasMore: bool
    poolEndpointId: str = Field(
        description="lockgate only: the hidden endpoint whose jobs the requests are"
    )
