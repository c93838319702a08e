"""`/v2/serverless`: RunPod's v2 endpoint API (list, create, get, PATCH, delete), a view
over `manage.operations` in the shapes of `endpoint_shape`.

A v2 endpoint's container settings live in its bound template (`bound_template_id`): a
create makes it, a PATCH of a container setting edits it (or, for an endpoint made through
v1 whose template others may share, makes it first: copy on write), a delete removes it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aiohttp import web

from lockgate.gateway.errors import BadRequest
from lockgate.gateway.http import json_response
from lockgate.manage import operations as ops
from lockgate.manage.controlplane import TemplateNotFound
from lockgate.manage.listing import EndpointQuery
from lockgate.manage.v2 import BACKENDS, Backends, add_collection_routes, v2_app
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.endpoint_shape import (
    ANY_CPU,
    CpuChoice,
    CreateEndpoint,
    Cross,
    Endpoint,
    UpdateEndpoint,
    bound_template_id,
    create_parts,
    update_parts,
    v2_endpoint,
)
from lockgate.manage.v2.problems import body_of
from lockgate.models import EndpointRecord, EndpointSpec, TemplateSpec


def _template(fields: dict[str, Any]) -> TemplateSpec:
    """The bound template's settings; `Invalid` naming the v2 field at fault."""
    if not fields.get("image"):
        raise ops.Invalid("image: required unless templateId names a template with one")
    try:
        return TemplateSpec.model_validate(fields)
    except ValueError as err:
        raise ops.Invalid(f"container settings: {err}") from err


async def _template_of(b: Backends, record: EndpointRecord) -> TemplateSpec | None:
    if not record.templateId:
        return None
    try:
        return await b.plane.get_template(record.templateId)
    except TemplateNotFound:
        return None


async def require_cpu_flavors(b: Backends, cpu: list[CpuChoice] | None) -> None:
    """400 naming a `cpu[].id` that is no CPU flavor of the catalog (when the catalog knows
    flavors at all: dev mode's machine, a cluster whose nodes carry the flavor label)."""
    if not cpu or b.catalog is None:
        return
    known = {m.cpu_flavor for m in await b.catalog.machines() if m.cpu_flavor}
    unknown = [c.id for c in cpu if c.id != ANY_CPU and c.id not in known]
    if known and unknown:
        raise BadRequest(
            f"cpu.id: {', '.join(unknown)} is no CPU flavor here (GET /v2/catalog/cpus lists "
            f'them: {", ".join(sorted(known))}; or "{ANY_CPU}" for any)'
        )


@documented(Operation("listEndpoints", "Every endpoint", answer=Endpoint, listed_as="endpoints"))
async def list_endpoints(request: web.Request) -> web.Response:
    b = request.app[BACKENDS]
    page = await b.plane.page(EndpointQuery())
    templates = await b.plane.list_templates()
    endpoints = [
        v2_endpoint(r, templates.get(r.templateId))
        for r in page.items
        if isinstance(r, EndpointRecord)
    ]
    return json_response({"endpoints": endpoints})


@documented(
    Operation(
        "createEndpoint",
        "Create an endpoint from a templateId or an image",
        body=CreateEndpoint,
        answer=Endpoint,
        status=201,
        errors=(400, 404, 409, 422),
    )
)
async def create_endpoint(request: web.Request) -> web.Response:
    """201 with the new endpoint; its bound template is made first, and removed again when
    the endpoint cannot be."""
    b = request.app[BACKENDS]
    body = await body_of(request, CreateEndpoint)
    await require_cpu_flavors(b, body.cpu)
    base = await ops.get_template(b.plane, body.templateId) if body.templateId else None
    try:
        spec_fields, template_fields = create_parts(body, base)
    except Cross as err:
        raise BadRequest(str(err)) from err
    spec = ops.endpoint_spec(spec_fields)
    template = _template(template_fields)
    endpoint_id = ops.new_id(ops.ENDPOINT_ID_LENGTH)
    template_id = await ops.create_template(
        b.plane, b.storage, bound_template_id(endpoint_id), template
    )
    spec = spec.model_copy(update={"templateId": template_id})
    try:
        record = await ops.create_endpoint(b.plane, b.storage, endpoint_id, spec)
    except ops.Refused:
        await b.plane.delete_template(template_id)
        raise
    return json_response(v2_endpoint(record, template), status=201)


@documented(Operation("getEndpoint", "One endpoint", answer=Endpoint, errors=(404,)))
async def get_endpoint(request: web.Request) -> web.Response:
    b = request.app[BACKENDS]
    record = await ops.get_endpoint(b.plane, request.match_info["id"])
    return json_response(v2_endpoint(record, await _template_of(b, record)))


@documented(
    Operation(
        "updateEndpoint",
        "Change the fields sent; the whole endpoint back",
        body=UpdateEndpoint,
        answer=Endpoint,
        errors=(400, 404, 422),
    )
)
async def patch_endpoint(request: web.Request) -> web.Response:
    """200 with the whole endpoint. A container setting edits its bound template (made
    first when the endpoint has none of its own): its workers roll to the new version."""
    b = request.app[BACKENDS]
    endpoint_id = request.match_info["id"]
    body = await body_of(request, UpdateEndpoint)
    await require_cpu_flavors(b, body.cpu)
    record = await ops.get_endpoint(b.plane, endpoint_id)
    base: TemplateSpec | None
    if body.templateId:
        base = await ops.get_template(b.plane, body.templateId)
    else:
        base = await _template_of(b, record)
    try:
        changes, template_fields = update_parts(body, record, base)
    except Cross as err:
        raise BadRequest(str(err)) from err
    # Checked whole before the template changes, so a refused PATCH changes nothing.
    ops.endpoint_spec({**record.model_dump(include=set(EndpointSpec.model_fields)), **changes})
    if template_fields is not None:
        template = _template(template_fields)
        bound = bound_template_id(endpoint_id)
        if record.templateId == bound:
            await ops.replace_template(b.plane, b.storage, bound, template)
        else:
            await ops.create_template(b.plane, b.storage, bound, template)
            changes["templateId"] = bound
    record = await ops.edit_endpoint(b.plane, b.storage, endpoint_id, changes)
    return json_response(v2_endpoint(record, await _template_of(b, record)))


@documented(
    Operation(
        "deleteEndpoint",
        "Delete an endpoint and its bound template",
        status=204,
        errors=(404,),
    )
)
async def delete_endpoint(request: web.Request) -> web.Response:
    """204; the endpoint's bound template goes with it (RunPod's rule)."""
    b = request.app[BACKENDS]
    endpoint_id = request.match_info["id"]
    record = await ops.get_endpoint(b.plane, endpoint_id)
    await ops.delete_endpoint(b.plane, endpoint_id)
    if record.templateId == bound_template_id(endpoint_id):
        with contextlib.suppress(TemplateNotFound):
            await b.plane.delete_template(record.templateId)
    return web.Response(status=204)


def create_app(backends: Backends) -> web.Application:
    """The `/v2/serverless` sub-application."""
    app = v2_app(backends)
    add_collection_routes(
        app,
        list_all=list_endpoints,
        create=create_endpoint,
        get=get_endpoint,
        patch=patch_endpoint,
        delete=delete_endpoint,
    )
    return app
