"""Endpoint status and the endpoint record: what the operator reports and the API returns."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models.endpoint import EndpointSpec

# An endpoint id is a DNS label: it names Kubernetes objects, Redis keys and URL paths.
ENDPOINT_ID_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class Phase(StrEnum):
    """Where an endpoint is in its life, as `kubectl get` shows it."""

    PENDING = "Pending"  # waiting for something outside its spec (e.g. its Template)
    INITIALIZING = "Initializing"  # resources written, workers not ready yet
    READY = "Ready"  # accepts jobs; a worker is ready or none is wanted yet
    # Workers may serve, but the scaler cannot read this endpoint's metrics (the gateway's
    # /metrics): its worker count is held, so queued jobs may wait for a worker that is
    # never started. Never reported in dev mode, whose scaler reads Redis directly.
    DEGRADED = "Degraded"
    FAILED = "Failed"  # its spec (or its Template) must change before it can work
    # Its workers failed to start `crashLoopThreshold` times in a row: no worker is started
    # until a new release or a restart (`POST /v2/serverless/{id}/workers/restart`); queued
    # jobs wait.
    CRASH_LOOP = "CrashLoop"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(BaseModel):
    """One observation, Kubernetes-style: a type, its status and why."""

    type: str
    status: ConditionStatus
    reason: str = ""
    message: str = ""
    lastTransitionTime: str = Field("", description="RFC 3339")


class WorkerCounts(BaseModel):
    desired: int = Field(0, ge=0, description="replicas the scaler asked for")
    ready: int = Field(0, ge=0, description="worker pods ready")
    idle: int = Field(0, ge=0, description="workers polling for jobs")
    running: int = Field(0, ge=0, description="workers running a job")


class JobCounts(BaseModel):
    inQueue: int = Field(0, ge=0)
    inProgress: int = Field(0, ge=0)


class EndpointStatus(BaseModel):
    """`status` of an Endpoint resource; also the `status` of an endpoint record."""

    phase: Phase = Phase.PENDING
    endpointId: str = ""
    jobApiUrl: str = Field("", description="{base_url}/v2/{endpoint_id}/")
    workers: WorkerCounts = Field(default_factory=WorkerCounts)
    jobs: JobCounts = Field(default_factory=JobCounts)
    conditions: list[Condition] = Field(default_factory=list)
    observedGeneration: int = Field(0, ge=0)
    # For the scale subresource (`kubectl scale`, HPA, KEDA): its status replicas and the
    # worker pods' label selector, in the string form an HPA reads.
    replicas: int = Field(0, ge=0, description="worker pods the Deployment has (any state)")
    selector: str = Field("", description="label selector of the worker pods")


class EndpointRecord(EndpointSpec):
    """What the management API returns: the id, every setting, status and job API URL."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., pattern=ENDPOINT_ID_PATTERN)
    jobApiUrl: str = ""
    version: int = Field(1, ge=1, description="goes up when its template or env changes")
    createdAt: str = Field("", description="RFC 3339")
    status: EndpointStatus = Field(default_factory=EndpointStatus)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON, `id` first; `networkVolumeId` null without a volume, as
        RunPod shows it."""
        body = self.model_dump(mode="json")
        body["networkVolumeId"] = body["networkVolumeId"] or None
        return {"id": body.pop("id"), **body}
