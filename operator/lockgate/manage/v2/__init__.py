"""RunPod's REST v2 management API (`/v2/serverless`, `/v2/templates`, …): thin views over
the same control plane as `/v1` and `/graphql`.

Each collection is a sub-application mounted at its own prefix (`/v2/serverless`…), so in
dev mode, where the job API's `/v2/{endpoint_id}/…` shares the port, a request under a
collection's prefix never reaches the job API (aiohttp resolves the longest prefix first),
and endpoint ids that would shadow one are refused (`operations.RESERVED_IDS`). Every
sub-application answers errors as RFC 9457 problems (`problems.problem`) and lets only
admin keys in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from lockgate.gateway.auth import Authenticator
from lockgate.gateway.middleware import ERROR_RENDERER, error_middleware
from lockgate.manage.admin import AUTHENTICATOR, admin_only
from lockgate.manage.catalog import Catalog
from lockgate.manage.controlplane import ControlPlane
from lockgate.manage.operations import RESERVED_IDS, refusal_statuses
from lockgate.manage.releases import Releases
from lockgate.manage.secrets import AccountSecrets
from lockgate.manage.storage import Storage
from lockgate.manage.v2.problems import problem
from lockgate.manage.v2.ratelimit import rate_limits
from lockgate.manage.workersource import WorkerSource
from lockgate.store.builds import BuildStore

__all__ = ["RESERVED_IDS", "Backends", "add_collection_routes", "add_v2_routes", "v2_app"]

if TYPE_CHECKING:
    from lockgate.manage.v2.billing import Billing


@dataclass(frozen=True)
class Backends:
    """What the v2 views read and write: the process's backends (Kubernetes, or dev
    mode's local ones)."""

    plane: ControlPlane
    storage: Storage
    authenticator: Authenticator
    # Inside the error middleware of each sub-application (`lockgate manage`'s
    # `cluster_refusals`: a Kubernetes API error no route has a rule for is a 503).
    middlewares: Sequence[Any] = ()
    # Account secrets (`/v2/account/secrets`): records in Redis, values in the backend.
    secrets: AccountSecrets | None = None
    # The machines workers may run on (`/v2/catalog`): the cluster's nodes, dev mode's own.
    catalog: Catalog | None = None
    # Usage and prices for `/v2/billing` (None: the process records no usage).
    billing: Billing | None = None
    releases: Releases | None = None  # endpoints' releases (None: not kept)
    # Workers and worker logs (`/v2/serverless/{id}/workers`): pods on a cluster
    # (`kube.podworkers`), local processes in dev mode (`dev.worker_source`).
    workers: WorkerSource | None = None
    # Builds of endpoints' sources (`/v2/serverless/{id}/builds`; None: not kept).
    builds: BuildStore | None = None


# The backends, in every v2 sub-application (for route modules added to one).
BACKENDS = web.AppKey("v2_backends", Backends)


def v2_app(backends: Backends) -> web.Application:
    """A sub-application for one v2 collection: admin keys only, errors as problems, the
    caller's rate limits counted and shown (`ratelimit`)."""
    limits = rate_limits(backends.authenticator.registry.redis)
    middlewares = [error_middleware, admin_only, limits, refusal_statuses, *backends.middlewares]
    app = web.Application(middlewares=middlewares)
    app[ERROR_RENDERER] = problem
    app[AUTHENTICATOR] = backends.authenticator
    app[BACKENDS] = backends
    return app


def add_collection_routes(
    app: web.Application,
    *,
    list_all: Handler,
    create: Handler,
    get: Handler,
    delete: Handler,
    patch: Handler | None = None,
) -> None:
    """A collection's routes as RunPod lays them out: `GET`, `POST` on the collection,
    `GET`, `PATCH` (when it has one) and `DELETE` on `/{id}`."""
    app.router.add_get("", list_all)
    app.router.add_post("", create)
    app.router.add_get("/{id}", get)
    if patch is not None:
        app.router.add_patch("/{id}", patch)
    app.router.add_delete("/{id}", delete)


def add_v2_routes(root: web.Application, backends: Backends) -> None:
    """Mount every v2 management collection on `root` (at `/v2/<collection>`), and
    `/v2/openapi.json`, their OpenAPI document."""
    from lockgate.manage.v2 import (
        billing,
        builds,
        catalog,
        network_volumes,
        openapi,
        registries,
        releases,
        secrets,
        serverless,
        templates,
        workers,
    )

    openapi.add_openapi_route(root)  # no key needed: on the root, not in a collection
    endpoints = serverless.create_app(backends)
    releases.add_release_routes(endpoints)  # /{id}/releases, …/{releaseId}/rollback
    workers.add_worker_routes(endpoints)  # /{id}/workers, …/{workerId}/logs
    builds.add_build_routes(endpoints)  # /{id}/builds, …/{buildId}, …/cancel, …/logs
    root.add_subapp("/v2/serverless", endpoints)
    root.add_subapp("/v2/templates", templates.create_app(backends))
    root.add_subapp("/v2/registries", registries.create_app(backends))
    root.add_subapp("/v2/network-volumes", network_volumes.create_app(backends))
    if backends.secrets is not None:
        root.add_subapp("/v2/account/secrets", secrets.create_app(backends))
    root.add_subapp("/v2/catalog", catalog.create_app(backends))
    root.add_subapp("/v2/billing", billing.create_app(backends))
