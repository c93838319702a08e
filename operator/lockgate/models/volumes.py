"""Network volumes (`/v1/networkvolumes`): RunPod's fields, checked.

A volume is mounted at `/runpod-volume` in every worker of an endpoint whose
`networkVolumeId` names it: a PersistentVolumeClaim on a cluster, a folder under the data
dir in dev mode. Its size may grow, never shrink (as on RunPod).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lockgate.models.errors import describe_validation_error

VOLUME_MOUNT_PATH = "/runpod-volume"  # where RunPod mounts an endpoint's network volume
# Where a worker finds its network volume: /runpod-volume in a pod, the folder in dev mode.
VOLUME_PATH_ENV = "RUNPOD_VOLUME_PATH"
MAX_SIZE_GB = 10_000


class NetworkVolumeSpec(BaseModel):
    """A network volume's settings."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=191, description="display name")
    size: int = Field(..., ge=1, le=MAX_SIZE_GB, description="GiB")
    dataCenterId: str = Field(
        "", max_length=63, description="data center (zone) it is in; kept and shown"
    )


class VolumeFieldError(ValueError):
    """A volume payload that cannot be used; the message names the field."""


def new_volume(payload: Mapping[str, Any]) -> NetworkVolumeSpec:
    """A volume from a create payload (`name` and `size` required)."""
    try:
        return NetworkVolumeSpec.model_validate(dict(payload))
    except ValidationError as err:
        raise VolumeFieldError(describe_validation_error(err)) from err


def changed_volume(current: NetworkVolumeSpec, changes: Mapping[str, Any]) -> NetworkVolumeSpec:
    """`current` with `changes` (`name`, a larger `size`); `dataCenterId` cannot change."""
    if "dataCenterId" in changes and changes["dataCenterId"] != current.dataCenterId:
        raise VolumeFieldError("dataCenterId: a volume cannot move to another data center")
    spec = new_volume({**current.model_dump(), **changes})
    if spec.size < current.size:
        raise VolumeFieldError(f"size: a volume cannot shrink (it has {current.size} GiB)")
    return spec


def volume_record(volume_id: str, spec: NetworkVolumeSpec) -> dict[str, Any]:
    """The record the API answers with: `id`, then the settings."""
    return {"id": volume_id, **spec.model_dump(mode="json")}
