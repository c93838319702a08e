"""`/v2/network-volumes`: RunPod v2's network volumes, a view of the volumes
`/v1/networkvolumes` serves (the same operations: a PersistentVolumeClaim on a cluster, a
folder in dev mode).

List `{"networkVolumes": [...]}`, create `{name, size 10..4096, dataCenter, type?}` (201),
get, PATCH `{name?, size?}` (200; a smaller size is a 400) and delete (204). lockgate has
one storage tier, its StorageClass: `type` is `STANDARD` (`HIGH_PERFORMANCE` is a 400).
Deleting a volume an endpoint mounts is a 400 naming the endpoints (`/v1` says 409).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

from lockgate.gateway.errors import BadRequest
from lockgate.gateway.http import json_response
from lockgate.manage import operations as ops
from lockgate.manage.storage_api import create_volume, edit_volume
from lockgate.manage.v2 import Backends, add_collection_routes, v2_app
from lockgate.manage.v2.bodies import ClosedBody
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.problems import body_of
from lockgate.manage.v2.wording import in_use_is_a_400, v2_words
from lockgate.models.volumes import NetworkVolumeSpec, volume_record

MIN_SIZE_GB, MAX_SIZE_GB = 10, 4096  # RunPod's bounds of a v2 volume's size
V2_WORDS = {"dataCenterId": "dataCenter", "networkVolumeId": "networkVolumes"}


class VolumeType(StrEnum):
    """RunPod's storage tiers; lockgate has one, `STANDARD` (its StorageClass)."""

    STANDARD = "STANDARD"
    HIGH_PERFORMANCE = "HIGH_PERFORMANCE"


class NewNetworkVolume(ClosedBody):
    """CreateNetworkVolumeRequest."""

    name: str = Field(..., min_length=1)
    size: int = Field(..., ge=MIN_SIZE_GB, le=MAX_SIZE_GB, description="GB")
    dataCenter: str = Field(..., min_length=1, description="kept and shown; immutable")
    type: VolumeType | None = Field(None, description="lockgate: STANDARD only")


class NetworkVolumeChanges(ClosedBody):
    """UpdateNetworkVolumeRequest: a new name, a larger size; at least one."""

    name: str | None = Field(None, min_length=1)
    size: int | None = Field(None, ge=MIN_SIZE_GB, le=MAX_SIZE_GB, description="only grows")

    @model_validator(mode="after")
    def _something(self) -> NetworkVolumeChanges:
        if not self.model_fields_set:
            raise ValueError("send name, size or both")
        return self


class NetworkVolume(BaseModel):
    """RunPod v2's NetworkVolume."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    size: int
    dataCenter: str
    type: VolumeType


def volume_view(record: dict[str, Any]) -> dict[str, Any]:
    """The v2 NetworkVolume of a `/v1/networkvolumes` record."""
    view = NetworkVolume(
        id=record["id"],
        name=record["name"],
        size=record["size"],
        dataCenter=record["dataCenterId"],
        type=VolumeType.STANDARD,
    )
    return view.model_dump(mode="json")


def v1_payload(body: NewNetworkVolume) -> dict[str, Any]:
    """A create body as `/v1/networkvolumes` takes it; 400 for a tier lockgate lacks."""
    if body.type not in (None, VolumeType.STANDARD):
        raise BadRequest(
            f"type: lockgate has one storage tier, {VolumeType.STANDARD.value} (the "
            "cluster's StorageClass for volumes); send it or leave type out"
        )
    return {"name": body.name, "size": body.size, "dataCenterId": body.dataCenter}


class VolumeRoutes:
    """The collection's handlers over one process's backends."""

    def __init__(self, backends: Backends) -> None:
        self.plane, self.storage = backends.plane, backends.storage

    @documented(
        Operation(
            "listNetworkVolumes",
            "Every network volume",
            answer=NetworkVolume,
            listed_as="networkVolumes",
        )
    )
    async def list_all(self, _request: web.Request) -> web.Response:
        volumes = await self.storage.list_volumes()
        views = [volume_view(volume_record(i, spec)) for i, spec in volumes.items()]
        return json_response({"networkVolumes": views})

    @documented(
        Operation(
            "createNetworkVolume",
            "Create a network volume",
            body=NewNetworkVolume,
            answer=NetworkVolume,
            status=201,
            errors=(400, 422),
        )
    )
    async def create(self, request: web.Request) -> web.Response:
        payload = v1_payload(await body_of(request, NewNetworkVolume))
        with v2_words(V2_WORDS):
            record = await create_volume(self.storage, payload)
        return json_response(volume_view(record), status=201)

    @documented(
        Operation("getNetworkVolume", "One network volume", answer=NetworkVolume, errors=(404,))
    )
    async def get(self, request: web.Request) -> web.Response:
        volume_id = request.match_info["id"]
        spec: NetworkVolumeSpec = await ops.get_volume(self.storage, volume_id)
        return json_response(volume_view(volume_record(volume_id, spec)))

    @documented(
        Operation(
            "updateNetworkVolume",
            "Rename or grow a network volume",
            body=NetworkVolumeChanges,
            answer=NetworkVolume,
            errors=(400, 404, 422),
        )
    )
    async def patch(self, request: web.Request) -> web.Response:
        volume_id = request.match_info["id"]
        changes = (await body_of(request, NetworkVolumeChanges)).model_dump(exclude_unset=True)
        with v2_words(V2_WORDS):
            record = await edit_volume(self.storage, volume_id, changes)
        return json_response(volume_view(record))

    @documented(
        Operation(
            "deleteNetworkVolume",
            "Delete a network volume (400 while an endpoint mounts it)",
            status=204,
            errors=(400, 404),
        )
    )
    async def delete(self, request: web.Request) -> web.Response:
        with in_use_is_a_400(), v2_words(V2_WORDS):  # mounted by endpoints
            await ops.delete_volume(self.plane, self.storage, request.match_info["id"])
        return web.Response(status=204)


def create_app(backends: Backends) -> web.Application:
    """The `/v2/network-volumes` sub-application."""
    app, routes = v2_app(backends), VolumeRoutes(backends)
    add_collection_routes(
        app,
        list_all=routes.list_all,
        create=routes.create,
        get=routes.get,
        patch=routes.patch,
        delete=routes.delete,
    )
    return app
