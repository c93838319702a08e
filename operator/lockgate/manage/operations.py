"""The management operations, whatever API asks for them: endpoints, templates, registry
credentials and network volumes, created, edited and deleted over a `ControlPlane` and a
`Storage`.

Every surface (`/v1`, `/v2`, `/graphql`, the console's API, the CLI through them) is a view:
it maps its own shapes onto the models (`EndpointSpec`, `TemplateSpec`,
`RegistryAuthSpec`, `NetworkVolumeSpec`) and calls these. They raise `Refused` errors
(`Invalid`, `Missing`, `Taken`) whose message names the field by the models' names (which
are v1's); `refusal_statuses` turns them into the HTTP status every REST view answers with.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import string
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import ValidationError

from lockgate.gateway.errors import ApiError
from lockgate.manage.controlplane import (
    BuildsUnavailable,
    ControlPlane,
    EndpointExists,
    EndpointNotFound,
    TemplateExists,
    TemplateNotFound,
    UnusableSettings,
)
from lockgate.manage.listing import EndpointQuery
from lockgate.manage.storage import RecordExists, RecordNotFound, Storage, StorageRefused
from lockgate.models import (
    ENDPOINT_ID_PATTERN,
    EndpointRecord,
    EndpointSpec,
    TemplateSpec,
    describe_validation_error,
)
from lockgate.models.batch import BATCH_POOL_PREFIX
from lockgate.models.build import BuildReason, first_build_reason
from lockgate.models.canary import CANARY_PREFIX
from lockgate.models.registryauth import RegistryAuthSpec
from lockgate.models.source import source_of
from lockgate.models.volumes import NetworkVolumeSpec

ID_ALPHABET = string.ascii_lowercase + string.digits
ENDPOINT_ID_LENGTH = 14  # RunPod's endpoint ids: 14 lowercase letters and digits
RECORD_ID_LENGTH = 10  # RunPod's template, credential and volume ids: 10
ID_RE = re.compile(ENDPOINT_ID_PATTERN)  # a DNS label: it names Kubernetes objects
ID_RULE = (
    "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
)
# The first path segment of every v2 management collection RunPod has: an endpoint with
# such an id would shadow it under `/v2/{endpoint_id}/…` (the job API on the same origin).
RESERVED_IDS = frozenset(
    {
        "serverless", "templates", "registries", "network-volumes", "catalog", "account",
        "billing", "openapi.json", "pods", "clusters", "user", "users", "graphql",
    }
)  # fmt: skip


class Refused(Exception):
    """An operation refused; the message says why, naming the field."""


class Invalid(Refused):
    """A value the operation cannot take (400)."""


class Missing(Refused):
    """The thing operated on does not exist (404)."""


class Taken(Refused):
    """An id already taken, or a thing still in use (409)."""


STATUSES: Mapping[type[Refused], int] = {Invalid: 400, Missing: 404, Taken: 409}


def api_error(err: Refused) -> ApiError:
    """The REST answer to a refusal: its status, its message."""
    error = ApiError(str(err))
    error.status = next(s for kind, s in STATUSES.items() if isinstance(err, kind))
    return error


@web.middleware
async def refusal_statuses(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A REST app's refusals as `ApiError`s of their status (inside its error middleware)."""
    try:
        return await handler(request)
    except Refused as err:
        raise api_error(err) from err


def new_id(length: int = RECORD_ID_LENGTH) -> str:
    """A RunPod-style id: `length` random lowercase letters and digits."""
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(length))


def checked_id(value: object, *, endpoint: bool = False) -> str:
    """A client-chosen id (lockgate's addition to RunPod's payloads); `Invalid` naming `id`
    unless it is a DNS label, and, for an endpoint, one no v2 collection uses."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise Invalid(f"id: {ID_RULE}")
    if endpoint and value in RESERVED_IDS:
        raise Invalid(
            f"id: {value!r} is reserved: it names a v2 management collection "
            f"(/v2/{value}), which its job API URL /v2/{value}/… would shadow"
        )
    if endpoint and (prefix := reserved_prefix(value)):
        raise Invalid(
            f"id: {value!r} is reserved: ids starting with {prefix!r} name {OWN_PREFIXES[prefix]}"
        )
    return value


# Endpoint ids lockgate gives endpoints of its own: a user's endpoint of such an id would
# share its registry entry, queues and usage with one of them.
OWN_PREFIXES = {
    BATCH_POOL_PREFIX: "an endpoint's batch pool (docs/batch-jobs.md)",
    CANARY_PREFIX: "a build's canary (docs/builds.md)",
}


def reserved_prefix(endpoint_id: str) -> str | None:
    """The prefix of lockgate's own endpoints that `endpoint_id` starts with, if any."""
    return next((p for p in OWN_PREFIXES if endpoint_id.startswith(p)), None)


def endpoint_spec(fields: Mapping[str, Any]) -> EndpointSpec:
    """`EndpointSpec` from spec-named fields; `Invalid` naming each bad field."""
    try:
        return EndpointSpec.model_validate(dict(fields))
    except ValidationError as err:
        raise Invalid(describe_validation_error(err)) from err


def in_use(thing: str, users: list[str], kind: str, field: str) -> Taken:
    """`Taken` for `thing` (e.g. "template 'abc'") used by `users`, naming them and what to
    change on them (`field`)."""
    return Taken(
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
    """Delete `thing` unless something uses it: `Missing` when `read` finds none (asked
    first), `Taken` naming the `kind`s whose `field` names it, `Missing` when it vanished
    between the check and `delete` (`delete` raising `gone`)."""
    await read()
    in_use_by = await users()
    if in_use_by:
        raise in_use(thing, in_use_by, kind, field)
    try:
        await delete()
    except gone as err:
        raise Missing(f"{thing} not found") from err


async def _endpoints(plane: ControlPlane) -> list[EndpointRecord]:
    page = await plane.page(EndpointQuery())
    return [r for r in page.items if isinstance(r, EndpointRecord)]


# -- endpoints ------------------------------------------------------------------------------


async def get_endpoint(plane: ControlPlane, endpoint_id: str) -> EndpointRecord:
    """The endpoint's record; `Missing` when there is none."""
    try:
        return await plane.get(endpoint_id)
    except EndpointNotFound as err:
        raise Missing(f"endpoint {endpoint_id!r} not found") from err


async def create_endpoint(
    plane: ControlPlane, storage: Storage, endpoint_id: str | None, spec: EndpointSpec
) -> EndpointRecord:
    """Create an endpoint (a new RunPod-style id when `endpoint_id` is None); `Invalid`
    for an id or volume it cannot take, `Taken` when the id is. One created with a
    source whose trigger is not MANUAL starts its first build at once (`CREATE`)."""
    endpoint_id = new_id(ENDPOINT_ID_LENGTH) if endpoint_id is None else endpoint_id
    checked_id(endpoint_id, endpoint=True)
    await require_volume(storage, spec.networkVolumeId)
    try:
        record = await plane.create(endpoint_id, spec)
    except EndpointExists as err:
        raise Taken(f"id: endpoint {endpoint_id!r} exists already") from err
    except UnusableSettings as err:
        raise Invalid(str(err)) from err
    await _build_at_once(plane, endpoint_id, first_build_reason(None, spec.source, created=True))
    return record


async def _build_at_once(plane: ControlPlane, endpoint_id: str, reason: BuildReason | None) -> None:
    """Start the build `first_build_reason` asked for (None: none). A control plane that
    does not build (a cluster with no `builds.registry`) starts none: the endpoint runs
    its template, as it would with `trigger: MANUAL`."""
    if reason is None:
        return
    with contextlib.suppress(BuildsUnavailable):
        await plane.start_build(endpoint_id, None, reason)


async def edit_endpoint(
    plane: ControlPlane, storage: Storage, endpoint_id: str, changes: Mapping[str, Any]
) -> EndpointRecord:
    """Apply spec-named `changes` (the others keep their values). An edit that gives a
    source to an endpoint that had none builds at once (`SOURCE_SET`), as a create does."""
    changes = dict(changes)
    if changes.pop("id", endpoint_id) != endpoint_id:
        raise Invalid("id: an endpoint's id cannot change")
    current = await get_endpoint(plane, endpoint_id)
    settings = current.model_dump(include=set(EndpointSpec.model_fields))
    spec = endpoint_spec({**settings, **changes})
    if spec.networkVolumeId != current.networkVolumeId:
        await require_volume(storage, spec.networkVolumeId)
    try:
        record = await plane.patch(endpoint_id, spec)
    except EndpointNotFound as err:
        raise Missing(f"endpoint {endpoint_id!r} not found") from err
    except UnusableSettings as err:
        raise Invalid(str(err)) from err
    before = source_of(current.source)
    await _build_at_once(plane, endpoint_id, first_build_reason(before, spec.source, created=False))
    return record


async def delete_endpoint(plane: ControlPlane, endpoint_id: str) -> None:
    """Delete an endpoint with its configuration and job history."""
    try:
        await plane.delete(endpoint_id)
    except EndpointNotFound as err:
        raise Missing(f"endpoint {endpoint_id!r} not found") from err


# -- templates ------------------------------------------------------------------------------


async def get_template(plane: ControlPlane, template_id: str) -> TemplateSpec:
    """The template; `Missing` when there is none."""
    try:
        return await plane.get_template(template_id)
    except TemplateNotFound as err:
        raise Missing(f"template {template_id!r} not found") from err


async def template_users(plane: ControlPlane, template_id: str) -> list[str]:
    """Ids of the endpoints whose `templateId` is this template."""
    return [r.id for r in await _endpoints(plane) if r.templateId == template_id]


async def require_registry_auth(storage: Storage, auth_id: str | None) -> None:
    """`Invalid` naming `containerRegistryAuthId` when it names no credential."""
    if auth_id and auth_id not in await storage.list_registry_auths():
        raise Invalid(
            f"containerRegistryAuthId: no container registry auth {auth_id!r} "
            "(create one with POST /v1/containerregistryauth)"
        )


async def create_template(
    plane: ControlPlane, storage: Storage, template_id: str | None, spec: TemplateSpec
) -> str:
    """Keep a new template (a new RunPod-style id when `template_id` is None); its id."""
    template_id = new_id() if template_id is None else checked_id(template_id)
    await require_registry_auth(storage, spec.imagePullSecret)
    try:
        await plane.create_template(template_id, spec)
    except UnusableSettings as err:
        raise Invalid(str(err)) from err
    except TemplateExists as err:
        raise Taken(f"id: template {template_id!r} exists already") from err
    return template_id


async def replace_template(
    plane: ControlPlane, storage: Storage, template_id: str, spec: TemplateSpec
) -> TemplateSpec:
    """Replace a template's settings with `spec`; the endpoints using it roll their workers."""
    current = await get_template(plane, template_id)
    if spec.imagePullSecret != current.imagePullSecret:
        await require_registry_auth(storage, spec.imagePullSecret)
    try:
        return await plane.replace_template(template_id, spec)
    except TemplateNotFound as err:
        raise Missing(f"template {template_id!r} not found") from err
    except UnusableSettings as err:
        raise Invalid(str(err)) from err


async def delete_template(plane: ControlPlane, template_id: str) -> None:
    """Delete a template no endpoint uses; `Taken` naming the endpoints that do."""
    await delete_unused(
        f"template {template_id!r}",
        lambda: get_template(plane, template_id),
        lambda: template_users(plane, template_id),
        lambda: plane.delete_template(template_id),
        TemplateNotFound,
        "endpoint",
        "templateId",
    )


# -- registry credentials -------------------------------------------------------------------


def registry_auth_spec(fields: Mapping[str, Any]) -> RegistryAuthSpec:
    """`RegistryAuthSpec` from its fields; `Invalid` naming each bad field."""
    try:
        return RegistryAuthSpec.model_validate(dict(fields))
    except ValidationError as err:
        raise Invalid(describe_validation_error(err)) from err


async def get_registry_auth(storage: Storage, auth_id: str) -> dict[str, Any]:
    """The kept credential's record (never its password); `Missing` when there is none."""
    record = (await storage.list_registry_auths()).get(auth_id)
    if record is None:
        raise Missing(f"container registry auth {auth_id!r} not found")
    return record


async def auth_users(plane: ControlPlane, auth_id: str) -> list[str]:
    """Ids of the templates that pull with this credential."""
    templates = await plane.list_templates()
    return [
        i
        for i, spec in templates.items()
        if auth_id == spec.imagePullSecret or auth_id in spec.imagePullSecrets
    ]


async def create_registry_auth(storage: Storage, auth: RegistryAuthSpec) -> str:
    """Keep a credential; its new id."""
    auth_id = new_id()
    try:
        await storage.create_registry_auth(auth_id, auth)
    except RecordExists as err:  # a random id taken: as unlikely as it gets
        raise Taken(f"id: container registry auth {auth_id!r} exists already") from err
    return auth_id


async def delete_registry_auth(plane: ControlPlane, storage: Storage, auth_id: str) -> None:
    """Delete a credential no template uses; `Taken` naming the templates that do."""
    await delete_unused(
        f"container registry auth {auth_id!r}",
        lambda: get_registry_auth(storage, auth_id),
        lambda: auth_users(plane, auth_id),
        lambda: storage.delete_registry_auth(auth_id),
        RecordNotFound,
        "template",
        "containerRegistryAuthId",
    )


# -- network volumes ------------------------------------------------------------------------


async def get_volume(storage: Storage, volume_id: str) -> NetworkVolumeSpec:
    """The volume; `Missing` when there is none."""
    spec = (await storage.list_volumes()).get(volume_id)
    if spec is None:
        raise Missing(f"network volume {volume_id!r} not found")
    return spec


async def require_volume(storage: Storage, volume_id: str) -> None:
    """`Invalid` naming `networkVolumeId` when it names no volume (empty: none wanted)."""
    if volume_id and volume_id not in await storage.list_volumes():
        raise Invalid(f"networkVolumeId: no network volume {volume_id!r}")


async def volume_users(plane: ControlPlane, volume_id: str) -> list[str]:
    """Ids of the endpoints that mount this volume."""
    return [r.id for r in await _endpoints(plane) if r.networkVolumeId == volume_id]


async def create_volume(storage: Storage, spec: NetworkVolumeSpec) -> str:
    """Keep a new volume; its new id."""
    volume_id = new_id()
    try:
        await storage.create_volume(volume_id, spec)
    except RecordExists as err:
        raise Taken(f"id: network volume {volume_id!r} exists already") from err
    return volume_id


async def replace_volume(storage: Storage, volume_id: str, spec: NetworkVolumeSpec) -> None:
    """Replace a volume's settings (the caller checked they may change)."""
    try:
        await storage.replace_volume(volume_id, spec)
    except StorageRefused as err:
        raise Invalid(str(err)) from err
    except RecordNotFound as err:
        raise Missing(f"network volume {volume_id!r} not found") from err


async def delete_volume(plane: ControlPlane, storage: Storage, volume_id: str) -> None:
    """Delete a volume no endpoint mounts; `Taken` naming the endpoints that do."""
    await delete_unused(
        f"network volume {volume_id!r}",
        lambda: get_volume(storage, volume_id),
        lambda: volume_users(plane, volume_id),
        lambda: storage.delete_volume(volume_id),
        RecordNotFound,
        "endpoint",
        "networkVolumeId",
    )
