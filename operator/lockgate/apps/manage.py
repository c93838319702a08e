"""`lockgate manage`: the management API (`/v1/endpoints`) on its own, for Kubernetes.

It writes Endpoint and Template resources, registry credential Secrets (create and delete
only: it reads none) and network volume claims in one namespace, and reads admin keys
from Redis (and the key file); the operator does the rest. Apart from the operator, it
runs with its own ServiceAccount, which may touch nothing else (docs/security.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from lockgate.gateway.auth import Authenticator
from lockgate.gateway.errors import Unavailable
from lockgate.gateway.keyfile import KeyFile
from lockgate.gateway.notify import Notifier
from lockgate.kube.catalog import KubernetesCatalog
from lockgate.kube.cluster import Cluster, ClusterError, cluster_for
from lockgate.kube.controlplane import KubernetesControlPlane
from lockgate.kube.podworkers import KubernetesWorkers
from lockgate.kube.secret_values import KubernetesSecretValues
from lockgate.kube.settings import OperatorSettings
from lockgate.kube.storage import KubernetesStorage
from lockgate.manage.about import About
from lockgate.manage.api import create_manage_app
from lockgate.manage.catalog import Catalog
from lockgate.manage.console import add_console, origin_of
from lockgate.manage.controlplane import ControlPlane
from lockgate.manage.graphql import add_graphql_route
from lockgate.manage.history import HistorySampler, add_history_routes, history_sampler
from lockgate.manage.hooks_api import add_git_hook_route
from lockgate.manage.releases import Releases
from lockgate.manage.secrets import AccountSecrets, SecretValues
from lockgate.manage.storage import Storage
from lockgate.manage.v2 import Backends, add_v2_routes
from lockgate.manage.v2.billing import Billing
from lockgate.manage.workersource import WorkerSource
from lockgate.settings import ConsoleSettings, Prices, catalogue_of
from lockgate.store import JobStore, Registry, connect
from lockgate.store.builds import BuildStore, HookSecrets
from lockgate.store.releases import ReleaseStore
from lockgate.store.usage import UsageLedger


def _watching(key_file: KeyFile) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context that re-reads the key file while the management API serves."""

    async def watch(_app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(key_file.watch(), name="lockgate-key-file")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    return watch


@web.middleware
async def cluster_refusals(request: web.Request, handler: Any) -> web.StreamResponse:
    """A Kubernetes API error no route has a rule for: 503 saying what the API server
    said, not a 500. A 403 is this process's account lacking a right (e.g. `lockgate
    operator --manage-port` runs with the operator's account, which may not write
    Endpoints or claims: the chart runs `lockgate manage` with its own)."""
    try:
        return await handler(request)
    except ClusterError as err:
        if err.status == 403:
            raise Unavailable(
                f"the Kubernetes API refused the management API's account: {err} "
                "(its RBAC lacks this right: run `lockgate manage` with the chart's "
                "ServiceAccount, docs/security.md)"
            ) from err
        raise Unavailable(f"the Kubernetes API failed: {err}") from err


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def control_plane_for(
    settings: OperatorSettings, cluster: Cluster, registry: Registry
) -> KubernetesControlPlane:
    """Endpoint resources in the management API's namespace; releases in Redis."""
    return KubernetesControlPlane(
        cluster,
        namespace=settings.manage_namespace(),
        job_api_url=settings.job_api_url,
        reserved_secrets=settings.reserved_secrets,
        releases=ReleaseStore(registry.redis),
        builds=BuildStore(registry.redis),
        builds_enabled=bool(settings.builds_registry),
    )


def storage_for(settings: OperatorSettings, cluster: Cluster, registry: Registry) -> Storage:
    """Registry credential Secrets and network volume claims in the management API's
    namespace."""
    namespace = settings.manage_namespace()
    return KubernetesStorage(cluster, registry, namespace=namespace, settings=settings)


def workers_for(
    settings: OperatorSettings, cluster: Cluster, registry: Registry
) -> KubernetesWorkers:
    """The worker pods of the management API's namespace, with their nodes' GPU type and
    zone labels as this cluster names them; one worker's stop or restart is asked in the
    job store, for the operator to carry out."""
    namespace = settings.manage_namespace()
    return KubernetesWorkers(
        cluster, namespace, settings.gpu_labelling(), settings.datacenter_label,
        JobStore(registry.redis),
    )  # fmt: skip


def secret_values_for(settings: OperatorSettings, cluster: Cluster) -> SecretValues:
    """Account secrets' values as Secrets in the management API's namespace (where the
    Endpoints and their workers are)."""
    return KubernetesSecretValues(cluster, namespace=settings.manage_namespace())


def create_app(
    settings: OperatorSettings,
    control_plane: ControlPlane,
    storage: Storage,
    registry: Registry,
    secret_values: SecretValues | None = None,
    catalog: Catalog | None = None,
    releases: Releases | None = None,
    workers: WorkerSource | None = None,
) -> web.Application:
    """`/v1/endpoints…`, `/v1/templates…`, `/v1/containerregistryauth…`,
    `/v1/networkvolumes…`, `/graphql` and `/v2/…` (admin keys only) writing through
    `control_plane` and `storage` (`/v2/catalog` reading `catalog`), and an unauthenticated
    `/healthz` for probes."""
    key_file = None
    if settings.keys_file:
        key_file = KeyFile(settings.keys_file, reload_s=settings.keys_file_reload_s)
    authenticator = Authenticator(registry, cache_s=5.0, key_file=key_file)
    about = About(catalogue=catalogue_of(ConsoleSettings()))  # LOCKGATE_CONSOLE_CATALOGUE
    manage = create_manage_app(control_plane, storage, authenticator, prefix="", about=about)
    manage.middlewares.append(cluster_refusals)  # inside its error middleware
    sampler = HistorySampler(JobStore(registry.redis), registry)
    add_history_routes(manage, sampler)
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(history_sampler(sampler, Notifier(registry.redis)))
    app.add_subapp("/v1", manage)
    add_graphql_route(app, manage)  # the runpod SDK's management calls
    account = None
    if secret_values is not None:
        account = AccountSecrets(registry, secret_values, control_plane)
    billing = Billing(UsageLedger(registry.redis), Prices())  # LOCKGATE_*_PRICE(S)
    backends = Backends(
        control_plane,
        storage,
        authenticator,
        middlewares=(cluster_refusals,),
        secrets=account,
        catalog=catalog,
        releases=releases,
        billing=billing,
        workers=workers,
        builds=BuildStore(registry.redis),
    )
    add_v2_routes(app, backends)  # RunPod's REST v2 (its MCP server's calls)
    add_git_hook_route(app, control_plane, HookSecrets(registry.redis))  # no key: signed
    add_console(app, connect_src=origin_of(settings.base_url))  # the job API's origin
    if key_file is not None:
        key_file.load()  # after the authenticator hooked it; a broken file stops the process
        app.cleanup_ctx.append(_watching(key_file))
    return app


async def start(settings: OperatorSettings, cluster: Cluster, registry: Registry) -> web.AppRunner:
    """Serve the management API on `manage_host:manage_port`; `cleanup()` the runner to stop."""
    plane = control_plane_for(settings, cluster, registry)
    releases = Releases(plane.releases or ReleaseStore(registry.redis), plane.worker_versions)
    storage = storage_for(settings, cluster, registry)
    values = secret_values_for(settings, cluster)
    catalog = KubernetesCatalog(cluster, settings)  # the nodes (a ClusterRole's list)
    workers = workers_for(settings, cluster, registry)
    app = create_app(settings, plane, storage, registry, values, catalog, releases, workers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.manage_host, settings.manage_port).start()
    return runner


async def serve(settings: OperatorSettings, *, api_client: Any = None) -> None:
    """Run until SIGTERM or SIGINT."""
    redis = connect(settings, max_connections=16)
    cluster = cluster_for(settings, api_client)
    runner = await start(settings, cluster, Registry(redis))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await redis.aclose()


def main(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.port is not None:
        overrides["manage_port"] = args.port
    if args.host:
        overrides["manage_host"] = args.host
    if args.endpoint_namespace:
        overrides["endpoint_namespace"] = args.endpoint_namespace
    asyncio.run(serve(OperatorSettings(**overrides)))
    return 0
