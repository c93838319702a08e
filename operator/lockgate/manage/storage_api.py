"""`/v1/containerregistryauth` and `/v1/networkvolumes`: RunPod's registry credential and
network volume APIs over a `Storage` (`manage.storage`, through `manage.operations`).

A credential is created and deleted, never edited, and its password never shown; one a
template uses (`containerRegistryAuthId`) cannot be deleted (409 naming the templates).
A volume may be renamed or grown; one an endpoint uses (`networkVolumeId`) cannot be
deleted (409 naming the endpoints). Errors are `{"error": ...}` naming the field.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lockgate.gateway.http import json_object, json_response
from lockgate.manage import operations as ops
from lockgate.manage.controlplane import CONTROL_PLANE
from lockgate.manage.storage import STORAGE, Storage
from lockgate.models.volumes import (
    VolumeFieldError,
    changed_volume,
    new_volume,
    volume_record,
)

# -- registry credentials -------------------------------------------------------------------


async def create_registry_auth(storage: Storage, payload: dict[str, Any]) -> dict[str, Any]:
    """Keep a credential from a RunPod payload: `{id, name}`, as RunPod answers."""
    auth = ops.registry_auth_spec(payload)
    return {"id": await ops.create_registry_auth(storage, auth), "name": auth.name}


async def post_registry_auth(request: web.Request) -> web.Response:
    payload = await json_object(request)
    return json_response(await create_registry_auth(request.app[STORAGE], payload), status=201)


async def list_registry_auths(request: web.Request) -> web.Response:
    auths = await request.app[STORAGE].list_registry_auths()
    return json_response(list(auths.values()))


async def get_registry_auth(request: web.Request) -> web.Response:
    auth_id = request.match_info["auth_id"]
    return json_response(await ops.get_registry_auth(request.app[STORAGE], auth_id))


async def delete_registry_auth(request: web.Request) -> web.Response:
    app = request.app
    await ops.delete_registry_auth(app[CONTROL_PLANE], app[STORAGE], request.match_info["auth_id"])
    return web.Response(status=204)


# -- network volumes ------------------------------------------------------------------------


async def create_volume(storage: Storage, payload: dict[str, Any]) -> dict[str, Any]:
    """Make a volume from a create payload (`name`, `size`, `dataCenterId`); its record."""
    try:
        spec = new_volume(payload)
    except VolumeFieldError as err:
        raise ops.Invalid(str(err)) from err
    return volume_record(await ops.create_volume(storage, spec), spec)


async def edit_volume(storage: Storage, volume_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    """A new `name`, a larger `size` (`Invalid` for a smaller one); its record."""
    if changes.pop("id", volume_id) != volume_id:
        raise ops.Invalid("id: a volume's id cannot change")
    current = await ops.get_volume(storage, volume_id)
    try:
        spec = changed_volume(current, changes)
    except VolumeFieldError as err:
        raise ops.Invalid(str(err)) from err
    await ops.replace_volume(storage, volume_id, spec)
    return volume_record(volume_id, spec)


async def post_volume(request: web.Request) -> web.Response:
    payload = await json_object(request)
    return json_response(await create_volume(request.app[STORAGE], payload), status=201)


async def list_volumes(request: web.Request) -> web.Response:
    volumes = await request.app[STORAGE].list_volumes()
    return json_response([volume_record(i, spec) for i, spec in volumes.items()])


async def get_volume(request: web.Request) -> web.Response:
    volume_id = request.match_info["volume_id"]
    spec = await ops.get_volume(request.app[STORAGE], volume_id)
    return json_response(volume_record(volume_id, spec))


async def patch_volume(request: web.Request) -> web.Response:
    """PATCH, and its synonym `POST …/update`: a new `name`, a larger `size`."""
    changes = await json_object(request)
    storage, volume_id = request.app[STORAGE], request.match_info["volume_id"]
    return json_response(await edit_volume(storage, volume_id, changes))


async def delete_volume(request: web.Request) -> web.Response:
    """Delete a volume no endpoint mounts; 409 naming the endpoints that do."""
    app = request.app
    await ops.delete_volume(app[CONTROL_PLANE], app[STORAGE], request.match_info["volume_id"])
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
