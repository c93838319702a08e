"""Endpoint and Template settings: the spec's creation payload, also the CRDs' `spec`."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lockgate.models.jobs import (
    EXECUTION_TIMEOUT_DEFAULT_MS,
    EXECUTION_TIMEOUT_MIN_MS,
    MAX_DURATION_MS,
)


class ComputeType(StrEnum):
    GPU = "GPU"
    CPU = "CPU"


class ScalerType(StrEnum):
    QUEUE_DELAY = "QUEUE_DELAY"
    REQUEST_COUNT = "REQUEST_COUNT"


class EndpointSpec(BaseModel):
    """Settings of one endpoint, field for field the spec's creation payload.

    Defaults follow RunPod's documented ones where the spec is silent.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=191)
    computeType: ComputeType = ComputeType.GPU
    gpuTypeIds: list[str] = Field(default_factory=list)
    gpuCount: int = Field(1, ge=0, le=16)
    cpuFlavorIds: list[str] = Field(default_factory=list)
    vcpuCount: int = Field(2, ge=1, le=512)
    allowedCudaVersions: list[str] = Field(default_factory=list)
    dataCenterIds: list[str] = Field(default_factory=list)
    templateId: str = ""
    executionTimeoutMs: int = Field(
        EXECUTION_TIMEOUT_DEFAULT_MS, ge=EXECUTION_TIMEOUT_MIN_MS, le=MAX_DURATION_MS
    )
    flashboot: bool = False
    idleTimeout: int = Field(5, ge=0, le=3600, description="seconds")
    scalerType: ScalerType = ScalerType.QUEUE_DELAY
    scalerValue: int = Field(4, ge=1, le=10_000)
    workersMin: int = Field(0, ge=0, le=1000)
    workersMax: int = Field(3, ge=0, le=1000)

    @model_validator(mode="after")
    def _min_not_above_max(self) -> EndpointSpec:
        if self.workersMin > self.workersMax:
            raise ValueError(
                f"workersMin ({self.workersMin}) must not exceed workersMax ({self.workersMax})"
            )
        return self


class TemplateSpec(BaseModel):
    """Worker template: what runs in each worker container."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(..., min_length=1)
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    ports: list[str] = Field(default_factory=list, description="'8000/http' or '22/tcp'")
    containerDiskInGb: int = Field(20, ge=1, le=10_000)
    modelUrl: str = ""
    imagePullSecret: str = ""
