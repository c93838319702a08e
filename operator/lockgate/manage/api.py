"""The management API, `{rest_url}/v1/endpoints`: create, list, read, edit, delete.

Every route needs an admin key (`authorization: Bearer <key>`). Payloads are the spec's
creation payload in RunPod's shapes (`templateId` required, `id` optional: generated when
absent; `PATCH` or `POST …/update` to edit; `includeTemplate`, `includeWorkers` when
reading); errors are `{"error": ...}` naming the offending field. `/v1/templates` is
`manage.templates`; `/v1/containerregistryauth` and `/v1/networkvolumes` are
`manage.storage_api`; `/graphql` (the runpod SDK's calls) is `manage.graphql`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from lockgate.gateway.auth import Authenticator
from lockgate.gateway.errors import ApiError, BadRequest
from lockgate.gateway.http import json_object, json_response
from lockgate.gateway.middleware import error_middleware
from lockgate.manage import operations as ops
from lockgate.manage.about import About, add_about_route
from lockgate.manage.admin import AUTHENTICATOR, admin_only
from lockgate.manage.controlplane import CONTROL_PLANE, ControlPlane, TemplateNotFound
from lockgate.manage.hubrepo import add_hub_route
from lockgate.manage.keys_api import add_keys_routes
from lockgate.manage.listing import ContinueExpired, ContinueInvalid, parse_query
from lockgate.manage.logs import add_logs_routes
from lockgate.manage.storage import STORAGE, Storage
from lockgate.manage.storage_api import add_storage_routes
from lockgate.manage.templates import add_template_routes
from lockgate.models import EndpointRecord, EndpointSpec, TemplateSpec
from lockgate.models.templates import runpod_template
from lockgate.store import JobStore

WORKER_STORE = web.AppKey("worker_store", JobStore)  # workers of `includeWorkers`
FLAGS = {"true": True, "1": True, "false": False, "0": False}


class Gone(ApiError):
    """A list's continue token has expired: the list starts again without it."""

    status = 410


def flag(query: Any, name: str) -> bool:
    """A boolean query parameter (`true`/`false`, `1`/`0`); 400 naming it otherwise."""
    value = query.get(name)
    if value is None:
        return False
    if value.lower() not in FLAGS:
        raise BadRequest(f"{name}: true or false")
    return FLAGS[value.lower()]


async def endpoint_json(
    app: web.Application,
    record: EndpointRecord,
    *,
    include_template: bool = False,
    include_workers: bool = False,
    templates: dict[str, TemplateSpec] | None = None,
) -> dict[str, Any]:
    """The record as JSON, with its `template` (RunPod's shape; null when its templateId
    names no template, as a dev-mode handler file) and `workers` when asked."""
    body = record.to_json()
    if include_template:
        spec = None
        if templates is not None:
            spec = templates.get(record.templateId)
        elif record.templateId:
            try:
                spec = await app[CONTROL_PLANE].get_template(record.templateId)
            except TemplateNotFound:
                spec = None
        body["template"] = None if spec is None else runpod_template(record.templateId, spec)
    if include_workers:
        snap = await app[WORKER_STORE].snapshot(record.id)
        body["workers"] = [
            {"id": worker, "status": "RUNNING" if jobs else "IDLE", "jobsInProgress": jobs}
            for worker, jobs in sorted(snap.worker_jobs.items())
        ] + [  # polling, but still warming up (docs/warm-up.md)
            {"id": worker, "status": "INITIALIZING", "jobsInProgress": 0}
            for worker in sorted(snap.workers_warming)
        ]
    return body


def payload_parts(payload: dict[str, Any]) -> tuple[str | None, EndpointSpec]:
    """A v1 creation payload's `id` (None: a new one) and settings."""
    fields = dict(payload)
    return fields.pop("id", None), ops.endpoint_spec(fields)


async def create_endpoint(request: web.Request) -> web.Response:
    endpoint_id, spec = payload_parts(await json_object(request))
    app = request.app
    record = await ops.create_endpoint(app[CONTROL_PLANE], app[STORAGE], endpoint_id, spec)
    return json_response(record.to_json())


async def list_endpoints(request: web.Request) -> web.Response:
    """Every endpoint (a JSON list, as RunPod answers), or with `limit` one page of them:
    the same list, with the next page's token in `X-Continue` and its URL in `Link`."""
    query = parse_query(request.query)
    with_template = flag(request.query, "includeTemplate")
    with_workers = flag(request.query, "includeWorkers")
    try:
        page = await request.app[CONTROL_PLANE].page(query)
    except ContinueInvalid as err:
        raise BadRequest("continue: not a token from this API; start again without it") from err
    except ContinueExpired as err:
        raise Gone(
            "continue: the token has expired (the list changed too long ago); "
            "start again without continue"
        ) from err
    headers = {}
    if page.next is not None:
        token = page.next.encode()
        following = request.rel_url.query.copy()  # the same filters and limit
        following["continue"] = token
        headers = {"X-Continue": token, "Link": f'<?{urlencode(following)}>; rel="next"'}
    templates = None
    if with_template and not query.summary:
        templates = await request.app[CONTROL_PLANE].list_templates()
    items = [
        await endpoint_json(
            request.app,
            item,
            include_template=with_template,
            include_workers=with_workers,
            templates=templates,
        )
        if isinstance(item, EndpointRecord)
        else item.to_json()
        for item in page.items
    ]
    return json_response(items, headers=headers)


async def get_endpoint(request: web.Request) -> web.Response:
    endpoint_id = request.match_info["endpoint_id"]
    with_template = flag(request.query, "includeTemplate")
    with_workers = flag(request.query, "includeWorkers")
    record = await ops.get_endpoint(request.app[CONTROL_PLANE], endpoint_id)
    body = await endpoint_json(
        request.app, record, include_template=with_template, include_workers=with_workers
    )
    return json_response(body)


async def patch_endpoint(request: web.Request) -> web.Response:
    """Edit (PATCH, or its synonym `POST …/update`): the given fields change, the others
    keep their values."""
    endpoint_id = request.match_info["endpoint_id"]
    changes = await json_object(request)
    app = request.app
    record = await ops.edit_endpoint(app[CONTROL_PLANE], app[STORAGE], endpoint_id, changes)
    return json_response(record.to_json())


async def delete_endpoint(request: web.Request) -> web.Response:
    await ops.delete_endpoint(request.app[CONTROL_PLANE], request.match_info["endpoint_id"])
    return web.Response(status=204)


def create_manage_app(
    control_plane: ControlPlane,
    storage: Storage,
    authenticator: Authenticator,
    *,
    prefix: str = "/v1",
    about: About | None = None,
) -> web.Application:
    """The management API over any control plane (Kubernetes, or local in dev mode).

    Routes are `{prefix}/endpoints…`; dev mode passes `prefix=""` and mounts the app as a
    sub-application at `/v1` of the gateway, so admin auth covers only these routes.
    `about` is what `{prefix}/about` tells the console (default: a cluster)."""
    app = web.Application(middlewares=[error_middleware, admin_only, ops.refusal_statuses])
    app[CONTROL_PLANE] = control_plane
    app[AUTHENTICATOR] = authenticator
    app[WORKER_STORE] = JobStore(authenticator.registry.redis)
    app.router.add_post(f"{prefix}/endpoints", create_endpoint)
    app.router.add_get(f"{prefix}/endpoints", list_endpoints)
    app.router.add_get(f"{prefix}/endpoints/{{endpoint_id}}", get_endpoint)
    app.router.add_patch(f"{prefix}/endpoints/{{endpoint_id}}", patch_endpoint)
    app.router.add_post(f"{prefix}/endpoints/{{endpoint_id}}/update", patch_endpoint)
    app.router.add_delete(f"{prefix}/endpoints/{{endpoint_id}}", delete_endpoint)
    add_template_routes(app, prefix=prefix)
    add_storage_routes(app, storage, prefix=prefix)
    add_keys_routes(app, authenticator.registry, prefix=prefix)
    add_logs_routes(app, prefix=prefix)
    add_about_route(app, about or About(), prefix=prefix)
    add_hub_route(app, prefix=prefix)
    return app
