"""`/v1/containerregistryauth` and `/v1/networkvolumes`: RunPod's registry credential and
network volume APIs over a `Storage` (`manage.storage`).

A credential is created and deleted, never edited, and its password never shown; one a
template uses (`containerRegistryAuthId`) cannot be deleted (409 naming the templates).
A volume may be renamed or grown; one an endpoint uses (`networkVolumeId`) cannot be
deleted (409 naming the endpoints). Errors are `{"error": ...}` naming the field.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import ValidationError

from lockgate.gateway.errors import BadRequest, NotFound
from lockgate.gateway.http import json_object, json_response
from lockgate.manage.controlplane import CONTROL_PLANE, ControlPlane
from lockgate.manage.listing import EndpointQuery
from lockgate.manage.storage import (
    STORAGE,
    RecordExists,
    RecordNotFound,
    Storage,
    StorageRefused,
)
from lockgate.manage.templates import Conflict, delete_unused, new_template_id
from lockgate.models import EndpointRecord, describe_validation_error
from lockgate.models.registryauth import RegistryAuthSpec
from lockgate.models.volumes import (
    NetworkVolumeSpec,
    VolumeFieldError,
    changed_volume,
    new_volume,
    volume_record,
)

# Ids are RunPod's 10 lowercase letters and digits, as templates': each names a Secret or
# a PersistentVolumeClaim on a cluster.
new_record_id = new_template_id


# -- registry credentials -------------------------------------------------------------------


def parse_registry_auth(payload: dict[str, Any]) -> RegistryAuthSpec:
    try:
        return RegistryAuthSpec.model_validate(payload)
    except ValidationError as err:
        raise BadRequest(describe_validation_error(err)) from err


async def auth_users(plane: ControlPlane, auth_id: str) -> list[str]:
    """Ids of the templates that pull with this credential."""
    templates = await plane.list_templates()
    return [
        i
        for i, spec in templates.items()
        if auth_id == spec.imagePullSecret or auth_id in spec.imagePullSecrets
    ]


async def read_registry_auth(storage: Storage, auth_id: str) -> dict[str, Any]:
    record = (await storage.list_registry_auths()).get(auth_id)
    if record is None:
        raise NotFound(f"container registry auth {auth_id!r} not found")
    return record


async def create_registry_auth(storage: Storage, payload: dict[str, Any]) -> dict[str, Any]:
    """Keep a credential from a RunPod payload: `{id, name}`, as RunPod answers."""
    auth = parse_registry_auth(payload)
    auth_id = new_record_id()
    try:
        await storage.create_registry_auth(auth_id, auth)
    except RecordExists as err:  # a random id taken: as unlikely as it gets
        raise Conflict(f"id: container registry auth {auth_id!r} exists already") from err
    return {"id": auth_id, "name": auth.name}


async def remove_registry_auth(plane: ControlPlane, storage: Storage, auth_id: str) -> None:
    """Delete a credential no template uses; 409 naming the templates that do."""
    await delete_unused(
        f"container registry auth {auth_id!r}",
        lambda: read_registry_auth(storage, auth_id),
        lambda: auth_users(plane, auth_id),
        lambda: storage.delete_registry_auth(auth_id),
        RecordNotFound,
        "template",
        "containerRegistryAuthId",
    )


async def post_registry_auth(request: web.Request) -> web.Response:
    payload = await json_object(request)
    return json_response(await create_registry_auth(request.app[STORAGE], payload), status=201)


async def list_registry_auths(request: web.Request) -> web.Response:
    auths = await request.app[STORAGE].list_registry_auths()
    return json_response(list(auths.values()))


async def get_registry_auth(request: web.Request) -> web.Response:
    auth_id = request.match_info["auth_id"]
    return json_response(await read_registry_auth(request.app[STORAGE], auth_id))


async def delete_registry_auth(request: web.Request) -> web.Response:
    app = request.app
    await remove_registry_auth(app[CONTROL_PLANE], app[STORAGE], request.match_info["auth_id"])
    return web.Response(status=204)


# -- network volumes ------------------------------------------------------------------------


async def volume_users(plane: ControlPlane, volume_id: str) -> list[str]:
    """Ids of the endpoints that mount this volume."""
    page = await plane.page(EndpointQuery())
    return [
        r.id for r in page.items if isinstance(r, EndpointRecord) and r.networkVolumeId == volume_id
    ]


async def read_volume(storage: Storage, volume_id: str) -> NetworkVolumeSpec:
    spec = (await storage.list_volumes()).get(volume_id)
    if spec is None:
        raise NotFound(f"network volume {volume_id!r} not found")
    return spec


async def require_volume(storage: Storage, volume_id: str) -> None:
    """400 naming `networkVolumeId` when it names no volume (empty: none wanted)."""
    if volume_id and volume_id not in await storage.list_volumes():
        raise BadRequest(f"networkVolumeId: no network volume {volume_id!r}")


async def create_volume(storage: Storage, payload: dict[str, Any]) -> dict[str, Any]:
    """Make a volume from a create payload (`name`, `size`, `dataCenterId`); its record."""
    try:
        spec = new_volume(payload)
    except VolumeFieldError as err:
        raise BadRequest(str(err)) from err
    volume_id = new_record_id()
    try:
        await storage.create_volume(volume_id, spec)
    except RecordExists as err:
        raise Conflict(f"id: network volume {volume_id!r} exists already") from err
    return volume_record(volume_id, spec)


async def edit_volume(storage: Storage, volume_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    """A new `name`, a larger `size` (400 on a smaller one); its record."""
    if changes.pop("id", volume_id) != volume_id:
        raise BadRequest("id: a volume's id cannot change")
    current = await read_volume(storage, volume_id)
    try:
        spec = changed_volume(current, changes)
        await storage.replace_volume(volume_id, spec)
    except (VolumeFieldError, StorageRefused) as err:
        raise BadRequest(str(err)) from err
    except RecordNotFound as err:
        raise NotFound(f"network volume {volume_id!r} not found") from err
    return volume_record(volume_id, spec)


async def remove_volume(plane: ControlPlane, storage: Storage, volume_id: str) -> None:
    """Delete a volume no endpoint mounts; 409 naming the endpoints that do."""
    await delete_unused(
        f"network volume {volume_id!r}",
        lambda: read_volume(storage, volume_id),
        lambda: volume_users(plane, volume_id),
        lambda: storage.delete_volume(volume_id),
        RecordNotFound,
        "endpoint",
        "networkVolumeId",
    )


async def post_volume(request: web.Request) -> web.Response:
    payload = await json_object(request)
    return json_response(await create_volume(request.app[STORAGE], payload), status=201)


async def list_volumes(request: web.Request) -> web.Response:
    volumes = await request.app[STORAGE].list_volumes()
    return json_response([volume_record(i, spec) for i, spec in volumes.items()])


async def get_volume(request: web.Request) -> web.Response:
    volume_id = request.match_info["volume_id"]
    spec = await read_volume(request.app[STORAGE], volume_id)
    return json_response(volume_record(volume_id, spec))


async def patch_volume(request: web.Request) -> web.Response:
    """PATCH, and its synonym `POST …/update`: a new `name`, a larger `size`."""
    changes = await json_object(request)
    volume_id = request.match_info["volume_id"]
    return json_response(await edit_volume(request.app[STORAGE], volume_id, changes))


async def delete_volume(request: web.Request) -> web.Response:
    app = request.app
    await remove_volume(app[CONTROL_PLANE], app[STORAGE], request.match_info["volume_id"])
    return web.Response(status=204)


def add_storage_routes(app: web.Application, storage: Storage, *, prefix: str = "") -> None:
    """`{prefix}/containerregistryauth…` and `{prefix}/networkvolumes…` on the management
    app (its middleware checks the admin key)."""
    app[STORAGE] = storage
    auths, auth = f"{prefix}/containerregistryauth", f"{prefix}/containerregistryauth/{{auth_id}}"
    app.router.add_post(auths, post_registry_auth)
    app.router.add_get(auths, list_registry_auths)
    app.router.add_get(auth, get_registry_auth)
    app.router.add_delete(auth, delete_registry_auth)
    volumes, volume = f"{prefix}/networkvolumes", f"{prefix}/networkvolumes/{{volume_id}}"
    app.router.add_post(volumes, post_volume)
    app.router.add_get(volumes, list_volumes)
    app.router.add_get(volume, get_volume)
    app.router.add_patch(volume, patch_volume)
    app.router.add_post(f"{volume}/update", patch_volume)
    app.router.add_delete(volume, delete_volume)
