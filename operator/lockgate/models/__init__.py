"""Pydantic models of the spec's resources: one definition for the API, the store and the CRDs."""

from lockgate.models.endpoint import (
    ComputeType,
    EndpointSpec,
    EndpointType,
    ScalerType,
    TemplateCategory,
    TemplateSpec,
)
from lockgate.models.errors import describe_validation_error
from lockgate.models.jobs import (
    FINAL_STATES,
    Health,
    HealthJobs,
    HealthWorkers,
    JobPolicy,
    JobRequest,
    JobStatus,
    PurgeResult,
    S3Config,
)
from lockgate.models.resources import (
    ENDPOINT_ID_PATTERN,
    Condition,
    ConditionStatus,
    EndpointRecord,
    EndpointStatus,
    JobCounts,
    Phase,
    WorkerCounts,
)

__all__ = [
    "ENDPOINT_ID_PATTERN",
    "FINAL_STATES",
    "ComputeType",
    "Condition",
    "ConditionStatus",
    "EndpointRecord",
    "EndpointSpec",
    "EndpointStatus",
    "EndpointType",
    "Health",
    "HealthJobs",
    "HealthWorkers",
    "JobCounts",
    "JobPolicy",
    "JobRequest",
    "JobStatus",
    "Phase",
    "PurgeResult",
    "S3Config",
    "ScalerType",
    "TemplateCategory",
    "TemplateSpec",
    "WorkerCounts",
    "describe_validation_error",
]
