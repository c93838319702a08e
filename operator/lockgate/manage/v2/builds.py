"""`/v2/serverless/{id}/builds`: an endpoint's builds in RunPod's v2 shapes (list, get),
and lockgate's start, cancel and log stream (docs/builds.md).

The records are read from the process's `BuildStore` (`Backends.builds`); starting,
cancelling and reading a log go through the `ControlPlane` (dev mode builds; a cluster
answers a start 501 until the in-cluster build exists). The log is a Server-Sent Events
stream made exactly as a worker's (`manage.v2.workers.LogStream`).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator

from lockgate.gateway.errors import ApiError, BadRequest, NotFound
from lockgate.gateway.http import json_response
from lockgate.gateway.openapi_parts import param
from lockgate.manage import builds as ops
from lockgate.manage.controlplane import (
    BuildEnded,
    BuildsUnavailable,
    ControlPlane,
    EndpointNotFound,
    NoSource,
)
from lockgate.manage.v2 import BACKENDS, Backends
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.paging import PageQuery, Pagination, below, pagination
from lockgate.manage.v2.problems import validated
from lockgate.manage.v2.workers import LOG_QUERY, serve_log_stream
from lockgate.manage.workersource import LogBatch, LogRead
from lockgate.models import EndpointRecord
from lockgate.models.build import Build, BuildReason
from lockgate.models.gitrefs import ref_problem
from lockgate.store.builds import BuildNotFound, BuildStore, HookSecrets


class Conflict(ApiError):
    """The build has ended: nothing to cancel."""

    status = 409


class NotBuilt(ApiError):
    """This control plane does not build yet."""

    status = 501


LIST_QUERY = (
    param("cursor", "query", {"type": "string", "minLength": 1},
          "pagination.nextCursor of the previous page, as given"),
    param("limit", "query", {"type": "integer", "minimum": 1, "maximum": ops.LIMIT_MAX,
                             "default": ops.LIMIT_DEFAULT}, "builds per page"),
)  # fmt: skip


class BuildsQuery(PageQuery):
    """The list's query: `cursor` and `limit`."""

    limit: int = Field(ops.LIMIT_DEFAULT, ge=1, le=ops.LIMIT_MAX)


class StartBuild(BaseModel):
    """lockgate's start body: the ref to build (a branch, tag or commit); omitted or null:
    the source's `ref`."""

    model_config = ConfigDict(extra="forbid")

    ref: str | None = Field(None, min_length=1, max_length=255)

    @field_validator("ref")
    @classmethod
    def _ref(cls, ref: str | None) -> str | None:
        if ref is not None and (problem := ref_problem(ref)):
            raise ValueError(problem)
        return ref


class EndpointBuilds(BaseModel):
    """RunPod's builds list: newest first, cursor-paged."""

    builds: list[Build]
    pagination: Pagination


def _store(backends: Backends) -> BuildStore:
    if backends.builds is None:  # a process wired without builds
        raise NotFound("builds are not kept by this server")
    return backends.builds


async def _endpoint(plane: ControlPlane, endpoint_id: str) -> EndpointRecord:
    try:
        return await plane.get(endpoint_id)
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err


def _missing(endpoint_id: str, build_id: str) -> NotFound:
    return NotFound(
        f"build {build_id!r} of endpoint {endpoint_id!r} not found "
        "(the newest 1000 builds of an endpoint are kept)"
    )


@documented(
    Operation(
        "listEndpointBuilds",
        "The endpoint's builds, newest first",
        answer=EndpointBuilds,
        query=LIST_QUERY,
        errors=(404, 422),
    )
)
async def list_builds(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id = request.match_info["id"]
    query = validated(BuildsQuery, dict(request.query))
    store = _store(backends)
    await _endpoint(backends.plane, endpoint_id)
    start = below(query, lambda cursor: ops.below_of(cursor, endpoint_id))
    page, more = await store.page(endpoint_id, below=start, limit=query.limit)
    following = ops.page_cursor(endpoint_id, page[-1][0]) if more and page else None
    return json_response(
        {"builds": [b.view() for _, b in page], "pagination": pagination(following)}
    )


@documented(
    Operation("getEndpointBuild", "One build, whatever its age", answer=Build, errors=(404,))
)
async def get_build(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id, build_id = request.match_info["id"], request.match_info["buildId"]
    store = _store(backends)
    await _endpoint(backends.plane, endpoint_id)
    try:
        return json_response((await store.get(endpoint_id, build_id)).view())
    except BuildNotFound as err:
        raise _missing(endpoint_id, build_id) from err


async def _start_body(request: web.Request) -> StartBuild:
    """The optional body: none (or an empty one) starts the source's ref."""
    if not request.can_read_body:
        return StartBuild()
    raw = await request.read()
    if not raw.strip():
        return StartBuild()
    try:
        payload = orjson.loads(raw)
    except ValueError as err:
        raise BadRequest("body: expected a JSON object (or no body)") from err
    if not isinstance(payload, dict):
        raise BadRequest("body: expected a JSON object (or no body)")
    return validated(StartBuild, payload)


@documented(
    Operation(
        "createEndpointBuild",
        "lockgate's: start a build of the endpoint's source, optionally at a ref",
        body=StartBuild,
        answer=Build,
        status=201,
        errors=(400, 404, 422, 501),
        description="The body is optional. 400 when the endpoint has no source; 501 on a "
        "cluster until the in-cluster build exists (docs/builds.md).",
    )
)
async def start_build(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id = request.match_info["id"]
    body = await _start_body(request)
    try:
        build = await backends.plane.start_build(endpoint_id, body.ref, BuildReason.MANUAL)
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err
    except NoSource as err:
        raise BadRequest(str(err)) from err
    except BuildsUnavailable as err:
        raise NotBuilt(str(err)) from err
    return json_response(build.view(), status=201)


@documented(
    Operation(
        "cancelEndpointBuild",
        "lockgate's: cancel a build that has not ended",
        answer=Build,
        errors=(404, 409),
    )
)
async def cancel_build(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id, build_id = request.match_info["id"], request.match_info["buildId"]
    await _endpoint(backends.plane, endpoint_id)
    try:
        build = await backends.plane.cancel_build(endpoint_id, build_id)
    except BuildNotFound as err:
        raise _missing(endpoint_id, build_id) from err
    except BuildEnded as err:
        raise Conflict(str(err)) from err
    return json_response(build.view())


@dataclass(frozen=True)
class PlaneBuildLogs:
    """A control plane's build logs as a log stream reads a source."""

    plane: ControlPlane

    async def read(self, endpoint_id: str, build_id: str, read: LogRead) -> LogBatch:
        return await self.plane.build_logs(endpoint_id, build_id, read)


@documented(
    Operation(
        "getEndpointBuildLogs",
        "A build's log as Server-Sent Events",
        query=LOG_QUERY,
        errors=(404, 422),
        description="`text/event-stream`, as a worker's log: each line one event, an `id:` "
        "(resume with Last-Event-ID) and a JSON `data:` line {ts, source, line}; source "
        "`system` is lockgate's steps, `container` the builder's output; live until the "
        "build has ended and its log is drained.",
    )
)
async def stream_build_logs(request: web.Request) -> web.StreamResponse:
    plane = request.app[BACKENDS].plane
    endpoint = await _endpoint(plane, request.match_info["id"])
    build_id = request.match_info["buildId"]
    return await serve_log_stream(
        request,
        PlaneBuildLogs(plane),
        (endpoint.id, build_id),
        (BuildNotFound,),
        _missing(endpoint.id, build_id),
    )


class WebhookSecret(BaseModel):
    """Where the endpoint's push webhook is, and its secret (shown this once)."""

    url: str = Field(description="POST /v1/hooks/git/{id}: give it to the git server")
    secret: str = Field(description="the webhook secret; the previous one stops working")


@documented(
    Operation(
        "createEndpointBuildWebhook",
        "lockgate's: a new push-webhook secret for the endpoint (shown once)",
        answer=WebhookSecret,
        status=201,
        errors=(404,),
        description="GitHub (X-Hub-Signature-256), GitLab (X-Gitlab-Token) and Gitea "
        "(X-Gitea-Signature) hooks at the URL are verified with it; the source's trigger "
        "says which events build (docs/builds.md).",
    )
)
async def renew_webhook_secret(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id = request.match_info["id"]
    store = _store(backends)
    await _endpoint(backends.plane, endpoint_id)
    secret = await HookSecrets(store.redis).renew(endpoint_id)
    url = f"{request.url.origin()}/v1/hooks/git/{endpoint_id}"
    return json_response(WebhookSecret(url=url, secret=secret).model_dump(), status=201)


def add_build_routes(app: web.Application) -> None:
    """`/{id}/builds…` on the `/v2/serverless` sub-application (`v2_app` holds the
    `Backends`)."""
    app.router.add_get("/{id}/builds", list_builds)
    app.router.add_post("/{id}/builds", start_build)
    app.router.add_post("/{id}/builds/webhook", renew_webhook_secret)
    app.router.add_get("/{id}/builds/{buildId}", get_build)
    app.router.add_post("/{id}/builds/{buildId}/cancel", cancel_build)
    app.router.add_get("/{id}/builds/{buildId}/logs", stream_build_logs)
