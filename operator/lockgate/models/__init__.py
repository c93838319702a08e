"""Pydantic models of the spec's resources: one definition for the API, the store and the CRDs."""

from lockgate.models.endpoint import ComputeType, EndpointSpec, ScalerType, TemplateSpec
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

__all__ = [
    "FINAL_STATES",
    "ComputeType",
    "EndpointSpec",
    "Health",
    "HealthJobs",
    "HealthWorkers",
    "JobPolicy",
    "JobRequest",
    "JobStatus",
    "PurgeResult",
    "S3Config",
    "ScalerType",
    "TemplateSpec",
    "describe_validation_error",
]
