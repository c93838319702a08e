"""`/v1/templates`: RunPod's template API (create, list, read, edit, delete) over the
`ControlPlane` (`manage.operations`), and the RunPod-payload parsing `manage.graphql`
shares with it.

Payloads and records use RunPod's field names (`models.templates` maps them onto
`TemplateSpec`); errors are `{"error": ...}` naming the field. A template some endpoint
uses cannot be deleted (409 naming them); editing one rolls those endpoints' workers.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lockgate.gateway.http import json_object, json_response
from lockgate.manage import operations as ops
from lockgate.manage.controlplane import CONTROL_PLANE, ControlPlane
from lockgate.manage.storage import STORAGE, Storage
from lockgate.models.templates import (
    TemplateFieldError,
    changed_template,
    new_template,
    runpod_template,
)


def _payload_parts(payload: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    fields = dict(payload)
    template_id = fields.pop("id", None)
    return None if template_id is None else ops.checked_id(template_id), fields


async def create_template(
    plane: ControlPlane, storage: Storage, payload: dict[str, Any]
) -> dict[str, Any]:
    """Create a template from a RunPod payload (lockgate's `id` optional); its record."""
    template_id, fields = _payload_parts(payload)
    try:
        spec = new_template(fields)
    except TemplateFieldError as err:
        raise ops.Invalid(str(err)) from err
    template_id = await ops.create_template(plane, storage, template_id, spec)
    return runpod_template(template_id, spec)


async def edit_template(
    plane: ControlPlane, storage: Storage, template_id: str, changes: dict[str, Any]
) -> dict[str, Any]:
    """Apply RunPod-named `changes`; the others keep their values."""
    if changes.pop("id", template_id) != template_id:
        raise ops.Invalid("id: a template's id cannot change")
    current = await ops.get_template(plane, template_id)
    try:
        spec = changed_template(current, changes)
    except TemplateFieldError as err:
        raise ops.Invalid(str(err)) from err
    await ops.replace_template(plane, storage, template_id, spec)
    return runpod_template(template_id, spec)


async def post_template(request: web.Request) -> web.Response:
    payload = await json_object(request)
    app = request.app
    return json_response(await create_template(app[CONTROL_PLANE], app[STORAGE], payload))


async def list_templates(request: web.Request) -> web.Response:
    """Every template, ordered by id (a JSON list, as RunPod answers)."""
    templates = await request.app[CONTROL_PLANE].list_templates()
    return json_response([runpod_template(i, spec) for i, spec in sorted(templates.items())])


async def get_template(request: web.Request) -> web.Response:
    template_id = request.match_info["template_id"]
    spec = await ops.get_template(request.app[CONTROL_PLANE], template_id)
    return json_response(runpod_template(template_id, spec))


async def patch_template(request: web.Request) -> web.Response:
    """PATCH, and its synonym `POST …/update`."""
    changes = await json_object(request)
    template_id = request.match_info["template_id"]
    app = request.app
    return json_response(
        await edit_template(app[CONTROL_PLANE], app[STORAGE], template_id, changes)
    )


async def delete_template(request: web.Request) -> web.Response:
    await ops.delete_template(request.app[CONTROL_PLANE], request.match_info["template_id"])
    return web.Response(status=204)


def add_template_routes(app: web.Application, *, prefix: str = "") -> None:
    """`{prefix}/templates…` on the management app (its middleware checks the admin key)."""
    one = f"{prefix}/templates/{{template_id}}"
    app.router.add_post(f"{prefix}/templates", post_template)
    app.router.add_get(f"{prefix}/templates", list_templates)
    app.router.add_get(one, get_template)
    app.router.add_patch(one, patch_template)
    app.router.add_post(f"{one}/update", patch_template)
    app.router.add_delete(one, delete_template)
