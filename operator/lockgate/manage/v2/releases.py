"""`/v2/serverless/{id}/releases` (RunPod's listEndpointReleases) and lockgate's
`POST /v2/serverless/{id}/releases/{releaseId}/rollback`: views over `manage.releases`.

`add_release_routes(app)` adds both to the `/v2/serverless` sub-application.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field, ValidationError

from lockgate.gateway.errors import ApiError, NotFound
from lockgate.gateway.http import json_response
from lockgate.manage.controlplane import EndpointNotFound, UnusableSettings
from lockgate.manage.releases import (
    LIMIT_DEFAULT,
    LIMIT_MAX,
    Releases,
    SharedTemplate,
    decode_cursor,
    page_of,
    rollback,
)
from lockgate.manage.v2 import BACKENDS, Backends
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.paging import PageQuery, Pagination, below, pagination
from lockgate.manage.v2.problems import validated
from lockgate.models import describe_validation_error
from lockgate.models.releases import (
    DiffEntry,
    Release,
    ReleaseSource,
    Rollout,
    rollout_of,
)


class Conflict(ApiError):
    """The rollback would change other endpoints too."""

    status = 409


class ReleasesQuery(PageQuery):
    """The list's query: `cursor` and `limit`."""

    limit: int = Field(LIMIT_DEFAULT, ge=1, le=LIMIT_MAX)


def _releases(backends: Backends) -> Releases:
    if backends.releases is None:  # a process wired without releases
        raise NotFound("releases are not kept by this server")
    return backends.releases


async def _version(backends: Backends, endpoint_id: str) -> int:
    """The endpoint's version; 404 when there is no such endpoint."""
    try:
        return (await backends.plane.get(endpoint_id)).version
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err


class ReleaseView(BaseModel):
    """RunPod's `Release` as an answer shows it."""

    id: str
    version: int | None
    source: ReleaseSource
    buildId: str | None
    createdByUserId: str | None
    workerCount: int
    createdAt: str
    diff: list[DiffEntry]


class EndpointReleases(BaseModel):
    """RunPod's `ListEndpointReleasesResponse`, with its cursor pagination."""

    endpointVersion: int | None
    rollout: Rollout
    releases: list[ReleaseView]
    pagination: Pagination


@documented(
    Operation(
        "listEndpointReleases",
        "The endpoint's releases, newest first, and how far its workers rolled out",
        answer=EndpointReleases,
        errors=(404, 422),
    )
)
async def list_releases(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id = request.match_info["id"]
    query = validated(ReleasesQuery, dict(request.query))
    releases = _releases(backends)
    version = await _version(backends, endpoint_id)
    start = below(query, lambda cursor: decode_cursor(cursor, endpoint_id))
    kept = await releases.store.all(endpoint_id)
    # The newest release is the endpoint's version: on a cluster the resource's annotation
    # is written after the release (a template edit rolls its endpoints), so a read in
    # between sees it one behind.
    version = max([version, *(r.version for r in kept[:1])])
    page, following = page_of(kept, endpoint_id, below=start, limit=query.limit)
    versions = await releases.worker_versions(endpoint_id)
    body: dict[str, Any] = {
        "endpointVersion": version,
        "rollout": rollout_of(versions, version).model_dump(),
        "releases": [r.view(versions.get(r.version, 0)) for r in page],
        "pagination": pagination(following),
    }
    return json_response(body)


async def _release(releases: Releases, endpoint_id: str, release_id: str) -> Release:
    for release in await releases.store.all(endpoint_id):
        if release.id == release_id:
            return release
    raise NotFound(
        f"release {release_id!r} of endpoint {endpoint_id!r} not found "
        "(the last 100 releases are kept)"
    )


@documented(
    Operation(
        "rollbackEndpointRelease",
        "lockgate's: make a release's configuration the newest version (a new release)",
        answer=ReleaseView,
        status=201,
        errors=(404, 409),
    )
)
async def post_rollback(request: web.Request) -> web.Response:
    backends = request.app[BACKENDS]
    endpoint_id, release_id = request.match_info["id"], request.match_info["releaseId"]
    releases = _releases(backends)
    before = await _version(backends, endpoint_id)
    target = await _release(releases, endpoint_id, release_id)
    try:
        newest = await rollback(backends.plane, releases.store, endpoint_id, target)
    except EndpointNotFound as err:
        raise NotFound(f"endpoint {endpoint_id!r} not found") from err
    except SharedTemplate as err:
        raise Conflict(str(err)) from err
    except UnusableSettings as err:
        raise Conflict(f"release {release_id!r} cannot run now: {err}") from err
    except ValidationError as err:  # its settings no longer fit the endpoint's others
        why = describe_validation_error(err)
        raise Conflict(f"release {release_id!r} cannot be restored: {why}") from err
    versions = await releases.worker_versions(endpoint_id)
    status = 201 if newest.version > before else 200  # 200: it was the configuration already
    return json_response(newest.view(versions.get(newest.version, 0)), status=status)


def add_release_routes(app: web.Application) -> None:
    """Add `/{id}/releases` and `/{id}/releases/{releaseId}/rollback` to the
    `/v2/serverless` sub-application (made by `v2_app`, which holds the backends)."""
    app.router.add_get("/{id}/releases", list_releases)
    app.router.add_post("/{id}/releases/{releaseId}/rollback", post_rollback)
