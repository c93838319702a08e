"""`/v1/templates`: RunPod's template API (create, list, read, edit, delete) over the
`ControlPlane`, and the operations `manage.graphql` shares with it.

Payloads and records use RunPod's field names (`models.templates` maps them onto
`TemplateSpec`); errors are `{"error": ...}` naming the field. A template some endpoint
uses cannot be deleted (409 naming them); editing one rolls those endpoints' workers.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from lockgate.gateway.errors import ApiError, BadRequest, NotFound
from lockgate.gateway.http import json_object, json_response
from lockgate.manage.controlplane import (
    CONTROL_PLANE,
    ControlPlane,
    TemplateExists,
    TemplateNotFound,
    UnusableSettings,
)
from lockgate.manage.listing import EndpointQuery
from lockgate.manage.storage import STORAGE, Storage
from lockgate.models import ENDPOINT_ID_PATTERN, EndpointRecord
from lockgate.models.templates import (
    TemplateFieldError,
    changed_template,
    new_template,
    runpod_template,
)

TEMPLATE_ID_LENGTH = 10  # RunPod's template ids: 10 lowercase letters and digits
ID_ALPHABET = string.ascii_lowercase + string.digits
ID_RE = re.compile(ENDPOINT_ID_PATTERN)  # a DNS label: it names a Template resource


class Conflict(ApiError):
    """The template id is taken, or the template is in use."""

    status = 409


def in_use(thing: str, users: list[str], kind: str, field: str) -> Conflict:
    """409 for `thing` (e.g. "template 'abc'") used by `users`, naming them and what to
    change on them (`field`)."""
    return Conflict(
        f"{thing} is used by {kind}(s) {', '.join(users)}: "
        f"delete them or give them another {field} first"
    )


async def delete_unused(
    thing: str,
    read: Callable[[], Awaitable[object]],
    users: Callable[[], Awaitable[list[str]]],
    delete: Callable[[], Awaitable[None]],
    gone: type[Exception],
    kind: str,
    field: str,
) -> None:
    """Delete `thing` (e.g. "template 'abc'") unless something uses it: 404 when `read`
    finds none (asked first), 409 naming the `kind`s whose `field` names it, 404 when it
    vanished between the check and `delete` (`delete` raising `gone`)."""
    await read()
    in_use_by = await users()
    if in_use_by:
        raise in_use(thing, in_use_by, kind, field)
    try:
        await delete()
    except gone as err:
        raise NotFound(f"{thing} not found") from err


def new_template_id() -> str:
    """A RunPod-style template id: 10 random lowercase letters and digits."""
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(TEMPLATE_ID_LENGTH))


def _template_id(payload: dict[str, Any]) -> str:
    """The payload's `id` (lockgate's addition), else a new one."""
    template_id = payload.pop("id", None)
    if template_id is None:
        return new_template_id()
    if not isinstance(template_id, str) or not ID_RE.fullmatch(template_id):
        raise BadRequest(
            "id: use at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return template_id


async def template_users(plane: ControlPlane, template_id: str) -> list[str]:
    """Ids of the endpoints whose `templateId` is this template."""
    page = await plane.page(EndpointQuery())
    return [
        r.id for r in page.items if isinstance(r, EndpointRecord) and r.templateId == template_id
    ]


async def require_registry_auth(storage: Storage, auth_id: str | None) -> None:
    """400 naming `containerRegistryAuthId` when it names no credential (empty: none)."""
    if auth_id and auth_id not in await storage.list_registry_auths():
        raise BadRequest(
            f"containerRegistryAuthId: no container registry auth {auth_id!r} "
            "(create one with POST /v1/containerregistryauth)"
        )


async def create_template(
    plane: ControlPlane, storage: Storage, payload: dict[str, Any]
) -> dict[str, Any]:
    """Create a template from a RunPod payload; its record. Raises `ApiError`."""
    template_id = _template_id(payload)
    try:
        spec = new_template(payload)
        await require_registry_auth(storage, payload.get("containerRegistryAuthId"))
        await plane.create_template(template_id, spec)
    except (TemplateFieldError, UnusableSettings) as err:
        raise BadRequest(str(err)) from err
    except TemplateExists as err:
        raise Conflict(f"id: template {template_id!r} exists already") from err
    return runpod_template(template_id, spec)


async def read_template(plane: ControlPlane, template_id: str) -> dict[str, Any]:
    try:
        return runpod_template(template_id, await plane.get_template(template_id))
    except TemplateNotFound as err:
        raise NotFound(f"template {template_id!r} not found") from err


async def edit_template(
    plane: ControlPlane, storage: Storage, template_id: str, changes: dict[str, Any]
) -> dict[str, Any]:
    """Apply RunPod-named `changes`; the others keep their values. Raises `ApiError`."""
    if changes.pop("id", template_id) != template_id:
        raise BadRequest("id: a template's id cannot change")
    try:
        current = await plane.get_template(template_id)
        spec = changed_template(current, changes)
        if spec.imagePullSecret != current.imagePullSecret:
            await require_registry_auth(storage, changes.get("containerRegistryAuthId"))
        await plane.replace_template(template_id, spec)
    except TemplateNotFound as err:
        raise NotFound(f"template {template_id!r} not found") from err
    except (TemplateFieldError, UnusableSettings) as err:
        raise BadRequest(str(err)) from err
    return runpod_template(template_id, spec)


async def remove_template(plane: ControlPlane, template_id: str) -> None:
    """Delete a template no endpoint uses; 409 naming the endpoints that do."""
    await delete_unused(
        f"template {template_id!r}",
        lambda: read_template(plane, template_id),
        lambda: template_users(plane, template_id),
        lambda: plane.delete_template(template_id),
        TemplateNotFound,
        "endpoint",
        "templateId",
    )


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
    return json_response(await read_template(request.app[CONTROL_PLANE], template_id))


async def patch_template(request: web.Request) -> web.Response:
    """PATCH, and its synonym `POST …/update`."""
    changes = await json_object(request)
    template_id = request.match_info["template_id"]
    app = request.app
    return json_response(
        await edit_template(app[CONTROL_PLANE], app[STORAGE], template_id, changes)
    )


async def delete_template(request: web.Request) -> web.Response:
    await remove_template(request.app[CONTROL_PLANE], request.match_info["template_id"])
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
