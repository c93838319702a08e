"""The Kubernetes API edge: reads and writes objects as plain dicts.

The official client is synchronous; every call runs in a thread of the cluster's own pool
(`concurrency` threads, and as many kept-alive connections) so the operator's event loop
(kopf, the management API) never blocks and calls do not queue behind asyncio's small
default pool. Calls are paced by a client-side rate limit (`qps`, `burst`), as client-go
paces controllers, so hundreds of endpoints never flood the API server. Errors come out
as this module's exceptions, so callers outside `kube/` never import `kubernetes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import kopf
import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from lockgate.kube.crds import ENDPOINT, GROUP, TEMPLATE, VERSION
from lockgate.kube.manifests.keys import worker_key_secret
from lockgate.kube.manifests.merge import hash_of, updated, with_hash
from lockgate.kube.manifests.names import Owner
from lockgate.kube.settings import OperatorSettings
from lockgate.store import key_digest

Obj = dict[str, Any]
T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"
CONFLICT_RETRIES = 3
# How long one request may take (connecting, then each read): a connection that hangs
# (an API server gone without closing it) must not hold a thread, and its caller, forever.
REQUEST_TIMEOUT_S = 30.0
# What a metadata-only GET asks for (the API server answers PartialObjectMetadata).
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# Leases go through the generic (custom objects) API: it sends dict bodies as they are,
# where the typed client parses renewTime into a datetime and writes it back without
# microseconds when they are 0, a MicroTime the API server refuses (400).
LEASES = ("coordination.k8s.io", "v1", "leases")


class ClusterError(Exception):
    """The API server refused or failed a request."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotFound(ClusterError):
    """The object does not exist."""


class Conflict(ClusterError):
    """The object exists already, or changed since it was read."""


class Gone(ClusterError):
    """A list's continue token is too old: etcd compacted the revision it was read at."""


def _wrap(err: ApiException) -> ClusterError:
    try:
        message = json.loads(err.body or "{}").get("message") or err.reason
    except (ValueError, AttributeError):
        message = err.reason or str(err)
    kind = {404: NotFound, 409: Conflict, 410: Gone}.get(err.status or 0, ClusterError)
    return kind(str(message), err.status or 0)


def api_client_from_environment(connections: int = 32) -> k8s.ApiClient:
    """In a pod: its service account; elsewhere: the kubeconfig ($KUBECONFIG). Up to
    `connections` kept-alive connections (size it to the `Cluster`'s concurrency: urllib3
    warns "Connection pool is full" and opens a throw-away connection past it)."""
    configuration = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return k8s.ApiClient(configuration)


def _whole(call: Callable[[], T]) -> T:
    """Run an API call; a raw answer (`_preload_content=False`) is read whole here, in the
    caller's thread, and its connection given back to the pool: the event loop never waits
    on a socket (a list of a thousand Deployments arrives over a second or more)."""
    resp = call()
    if isinstance(resp, urllib3.HTTPResponse):
        _ = resp.data  # kept by the response: `resp.data` returns it again at once
        resp.release_conn()
    return resp


class RateLimit:
    """Client-side pacing of API calls: `qps` a second on average, up to `burst` at once
    after a quiet spell (the generic cell rate algorithm: each call reserves the next slot,
    so waiting callers go in the order they came). `qps` 0: no limit."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.clock = clock
        self._next = 0.0  # when the next call would go, were the calls evenly spaced

    def reserve(self) -> float:
        """Seconds the caller must wait before its call (0: at once); the slot is taken."""
        if self.qps <= 0:
            return 0.0
        now = self.clock()
        slot = max(self._next, now)
        self._next = slot + 1 / self.qps
        return max(0.0, slot - now - (self.burst - 1) / self.qps)

    async def wait(self) -> None:
        if delay := self.reserve():
            await asyncio.sleep(delay)


def cluster_for(settings: OperatorSettings, api_client: k8s.ApiClient | None = None) -> Cluster:
    """The `Cluster` of the operator or management API: `api_client`, or one from the
    environment, with the concurrency and rate limit of `settings`."""
    client = api_client or api_client_from_environment(settings.kube_concurrency)
    return Cluster(
        client,
        concurrency=settings.kube_concurrency,
        qps=settings.kube_qps,
        burst=settings.kube_burst,
    )


@dataclass(frozen=True)
class _Kind:
    api: type
    suffix: str  # as in read_namespaced_<suffix>
    model: type


_KINDS = {
    "Deployment": _Kind(k8s.AppsV1Api, "deployment", k8s.V1Deployment),
    "DaemonSet": _Kind(k8s.AppsV1Api, "daemon_set", k8s.V1DaemonSet),
    "Secret": _Kind(k8s.CoreV1Api, "secret", k8s.V1Secret),
    "Pod": _Kind(k8s.CoreV1Api, "pod", k8s.V1Pod),
    "PersistentVolumeClaim": _Kind(
        k8s.CoreV1Api, "persistent_volume_claim", k8s.V1PersistentVolumeClaim
    ),
    "NetworkPolicy": _Kind(k8s.NetworkingV1Api, "network_policy", k8s.V1NetworkPolicy),
    "Job": _Kind(k8s.BatchV1Api, "job", k8s.V1Job),  # build Jobs (kube/builds.py)
}


@dataclass(frozen=True)
class WorkerKey:
    """An endpoint's worker key: its digest, and the key itself when it was just written."""

    digest: str
    new_key: str | None


class Cluster:
    """Async access to the few kinds lockgate reads and writes."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        concurrency: int = 32,
        qps: float = 0.0,
        burst: int = 1,
    ) -> None:
        """`concurrency` calls in flight at once (threads); `qps`/`burst`: `RateLimit`."""
        self.api_client = api_client
        self.custom = k8s.CustomObjectsApi(api_client)
        self._apis = {cls: cls(api_client) for cls in {k.api for k in _KINDS.values()}}
        self.concurrency = concurrency
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="lockgate-kube")
        self.rate = RateLimit(qps, burst)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        await self.rate.wait()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._threads, _whole, partial(fn, *args, **kwargs))
        except ApiException as err:
            raise _wrap(err) from err
        except urllib3.exceptions.HTTPError as err:  # unreachable, timed out
            raise ClusterError(f"the API server did not answer: {err}") from err

    def connection_info(self) -> kopf.ConnectionInfo:
        """This client's credentials, for kopf's own API connections."""
        cfg = self.api_client.configuration
        # Recent clients keep the token under "BearerToken", older ones under "authorization";
        # asking refreshes it when it comes from an exec plugin or a projected token file.
        token = cfg.get_api_key_with_prefix("BearerToken", alias="authorization") or ""
        scheme, _, value = token.partition(" ")
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            scheme=scheme if value else None,
            token=value or None,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            default_namespace=None,
        )

    # -- built-in kinds, as dicts ---------------------------------------------------------

    def _method(self, kind: str, verb: str) -> Callable[..., Any]:
        spec = _KINDS[kind]
        return getattr(self._apis[spec.api], f"{verb}_namespaced_{spec.suffix}")

    async def read(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object as JSON, or None when it does not exist."""
        try:
            resp = await self._call(
                self._method(kind, "read"), name, namespace, _preload_content=False
            )
        except NotFound:
            return None
        return orjson.loads(resp.data)

    async def read_metadata(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object's `metadata` only (a PartialObjectMetadata GET: a Secret's data never
        reaches this process), or None when it does not exist."""
        try:
            resp = await self._call(
                self._method(kind, "read"), name, namespace, _preload_content=False,
                _headers={"Accept": METADATA_ONLY},
            )  # fmt: skip
        except NotFound:
            return None
        return orjson.loads(resp.data).get("metadata") or {}

    async def create(self, obj: Obj) -> Obj:
        body = _KINDS[obj["kind"]].model.from_dict(obj)
        meta = obj["metadata"]
        resp = await self._call(
            self._method(obj["kind"], "create"), meta["namespace"], body, _preload_content=False
        )
        return orjson.loads(resp.data)

    async def replace(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        """Update the object to `obj`; `dry_run`: only validated, nothing is written."""
        body = _KINDS[obj["kind"]].model.from_dict(obj)
        meta = obj["metadata"]
        resp = await self._call(
            self._method(obj["kind"], "replace"),
            meta["name"],
            meta["namespace"],
            body,
            _preload_content=False,
            **({"dry_run": "All"} if dry_run else {}),
        )
        return orjson.loads(resp.data)

    async def delete(self, kind: str, namespace: str, name: str, **options: Any) -> bool:
        """Delete an object; False when it was not there. `options` are the delete call's
        (`grace_period_seconds`)."""
        try:
            await self._call(self._method(kind, "delete"), name, namespace, **options)
        except NotFound:
            return False
        return True

    async def list_objects(self, kind: str, namespace: str, selector: str) -> list[Obj]:
        """Objects of a kind in a namespace matching a label selector, as JSON."""
        resp = await self._call(
            self._method(kind, "list"), namespace, label_selector=selector, _preload_content=False
        )
        return list(orjson.loads(resp.data).get("items") or [])  # each scaler tick: all of them

    async def list_events(self, namespace: str, field_selector: str) -> list[Obj]:
        """Core Events of a namespace matching a field selector (`involvedObject.name=…`)."""
        resp = await self._call(
            self._apis[k8s.CoreV1Api].list_namespaced_event, namespace,
            field_selector=field_selector, _preload_content=False,
        )  # fmt: skip
        return list(orjson.loads(resp.data).get("items") or [])

    async def pod_log(self, namespace: str, name: str, **options: Any) -> str:
        """A pod's log as text; `options` are `read_namespaced_pod_log`'s (container,
        timestamps, since_seconds, tail_lines). Raises `ClusterError` (400: no container
        has started yet)."""
        read = self._apis[k8s.CoreV1Api].read_namespaced_pod_log
        resp = await self._call(read, name, namespace, _preload_content=False, **options)
        return resp.data.decode(errors="replace")

    def pod_log_stream(self, namespace: str, name: str, quiet_s: float, **options: Any) -> Any:
        """A pod's log, followed: an open (blocking) urllib3 response whose body grows as
        the pod writes; read it in a thread, `shutdown()` it to stop. A read raises once
        nothing came for `quiet_s` seconds. Raises `ClusterError`."""
        read = self._apis[k8s.CoreV1Api].read_namespaced_pod_log
        timeout = (REQUEST_TIMEOUT_S, quiet_s)  # (connect, each read)
        try:
            return read(
                name, namespace, follow=True, _preload_content=False, _request_timeout=timeout,
                **options,
            )  # fmt: skip
        except ApiException as err:
            raise _wrap(err) from err
        except urllib3.exceptions.HTTPError as err:
            raise ClusterError(f"the API server did not answer: {err}") from err

    async def annotate(self, kind: str, namespace: str, name: str, annotations: Obj) -> None:
        """Merge `annotations` into an object's (a None value removes one)."""
        await self.merge_patch(kind, namespace, name, {"metadata": {"annotations": annotations}})

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: Obj) -> None:
        """Apply a JSON merge patch to an object; `NotFound` when it is gone."""
        await self._call(
            self._method(kind, "patch"), name, namespace, patch, _content_type=MERGE_PATCH
        )

    async def set_pod_condition(self, namespace: str, name: str, condition: Obj) -> None:
        """Set one condition of a pod's status (conditions merge by `type`)."""
        core = self._apis[k8s.CoreV1Api]
        patch = {"status": {"conditions": [condition]}}
        await self._call(core.patch_namespaced_pod_status, name, namespace, patch)

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Set a Deployment's replicas through its scale subresource (touches nothing else)."""
        apps = self._apis[k8s.AppsV1Api]
        await self._call(
            apps.patch_namespaced_deployment_scale, name, namespace,
            {"spec": {"replicas": replicas}}, _content_type=MERGE_PATCH,
        )  # fmt: skip

    async def create_event(self, event: Obj) -> None:
        """Post a core/v1 Event (built by `kube.events`)."""
        core = self._apis[k8s.CoreV1Api]
        namespace = event["metadata"]["namespace"]
        await self._call(core.create_namespaced_event, namespace, event)

    async def apply(self, desired: Obj, known: Obj | None = None, *, absent: bool = False) -> Obj:
        """Create the object, or bring an existing one to `desired` (see `manifests.merge.updated`).

        Skips the write when the object already carries the desired content hash; retries
        when another writer (the scaler) changed it between read and write. `known`: the
        object as a watch delivered it; when it carries the desired hash, not even a read.
        `absent`: a watch shows no such object, so it is created without a read first (a
        409, when the watch was behind, falls back to read and update)."""
        desired = with_hash(desired)
        if known is not None and hash_of(known) == hash_of(desired):
            return known
        meta = desired["metadata"]
        if absent and known is None:
            with contextlib.suppress(Conflict):
                return await self.create(desired)
        for _ in range(CONFLICT_RETRIES):
            existing = await self.read(desired["kind"], meta["namespace"], meta["name"])
            try:
                if existing is None:
                    return await self.create(desired)
                if hash_of(existing) == hash_of(desired):
                    return existing
                return await self.replace(updated(existing, desired))
            except Conflict:
                continue
        raise kopf.TemporaryError(f"{desired['kind']} {meta['name']} keeps changing", delay=1)

    async def worker_key(
        self, owner: Owner, known_digest: str | None, *, may_rotate: bool = True
    ) -> WorkerKey:
        """The endpoint's worker key, without reading its Secret (the operator may not).

        Creates the Secret with a new key; when it exists already (409) the key it holds is
        the one whose digest is known (`known_digest`). With none known (Redis flushed and
        no worker Deployment), replaces the Secret unconditionally with a new key, unless
        `may_rotate` is false: then another reconcile (or replica) may have just created it
        and not yet recorded its digest, so this one retries later."""
        fresh_key = "lgw_" + secrets.token_urlsafe(32)
        fresh = worker_key_secret(owner, fresh_key)
        try:
            await self.create(fresh)
        except Conflict:
            if known_digest:
                return WorkerKey(known_digest, None)
            if not may_rotate:
                message = f"Secret {fresh['metadata']['name']} is being registered elsewhere"
                raise kopf.TemporaryError(message, delay=2) from None
            await self.replace(fresh)  # no resourceVersion: an unconditional update
        return WorkerKey(key_digest(fresh_key), fresh_key)

    async def worker_key_exists(self, owner: Owner) -> bool:
        """Whether the endpoint's worker-key Secret exists, without reading it (the operator
        may not) and without a call that fails while it does: a dry-run update, which
        writes nothing and answers 404 only when the Secret is gone."""
        placeholder = worker_key_secret(owner, "lgw_dry-run-writes-nothing")
        try:
            await self.replace(placeholder, dry_run=True)
        except NotFound:
            return False
        return True

    # -- Leases (leader election, see `kube.leader`) ------------------------------------

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The Lease as JSON, or None when it does not exist."""
        return await self._get_custom(LEASES, namespace, name)

    async def create_lease(self, lease: Obj) -> Obj:
        """Create a Lease; `Conflict` when another writer created it first."""
        group, version, plural = LEASES
        namespace = lease["metadata"]["namespace"]
        create = self.custom.create_namespaced_custom_object
        return await self._call(create, group, version, namespace, plural, lease)

    async def replace_lease(self, lease: Obj) -> Obj:
        """Write a Lease read before; `Conflict` when it changed since (resourceVersion)."""
        group, version, plural = LEASES
        meta = lease["metadata"]
        replace = self.custom.replace_namespaced_custom_object
        return await self._call(
            replace, group, version, meta["namespace"], plural, meta["name"], lease
        )

    # -- lockgate.dev resources -----------------------------------------------------------

    async def get_template(self, namespace: str, name: str) -> Obj | None:
        return await self._get_custom((GROUP, VERSION, TEMPLATE.plural), namespace, name)

    async def list_templates(self, namespace: str) -> list[Obj]:
        got = await self._call(
            self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, TEMPLATE.plural
        )
        return list(got.get("items") or [])

    async def create_template(self, namespace: str, body: Obj) -> Obj:
        """Create a Template; `Conflict` when its name is taken."""
        create = self.custom.create_namespaced_custom_object
        return await self._call(create, GROUP, VERSION, namespace, TEMPLATE.plural, body)

    async def replace_template_spec(self, namespace: str, name: str, spec: Obj) -> Obj:
        """Replace a Template's whole `spec` (a JSON patch: maps such as `env` lose the
        keys `spec` does not have); `NotFound` when it is gone."""
        patch = [{"op": "replace", "path": "/spec", "value": spec}]
        return await self._call(
            self.custom.patch_namespaced_custom_object, GROUP, VERSION, namespace,
            TEMPLATE.plural, name, patch, _content_type="application/json-patch+json",
        )  # fmt: skip

    async def delete_template(self, namespace: str, name: str) -> None:
        """Delete a Template; `NotFound` when it is not there."""
        delete = self.custom.delete_namespaced_custom_object
        await self._call(delete, GROUP, VERSION, namespace, TEMPLATE.plural, name)

    async def get_endpoint(self, namespace: str, name: str) -> Obj | None:
        return await self._get_custom((GROUP, VERSION, ENDPOINT.plural), namespace, name)

    async def _get_custom(
        self, resource: tuple[str, str, str], namespace: str, name: str
    ) -> Obj | None:
        group, version, plural = resource
        try:
            return await self._call(
                self.custom.get_namespaced_custom_object, group, version, namespace, plural, name
            )
        except NotFound:
            return None

    async def list_endpoints(self, namespace: str) -> list[Obj]:
        got = await self._call(
            self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, ENDPOINT.plural
        )
        return list(got.get("items") or [])

    async def list_endpoints_page(
        self, namespace: str, *, limit: int, resume: str = "", selector: str = ""
    ) -> tuple[list[Obj], str]:
        """At most `limit` Endpoints (0: all) matching the label `selector`, in name
        order, from where the apiserver's continue token `resume` points ("": the start
        of a new list); and the token for the rest ("" when none follow). An expired
        `resume` raises `Gone`."""
        options: dict[str, Any] = {"limit": limit} if limit else {}
        if selector:
            options["label_selector"] = selector
        if resume:
            options["_continue"] = resume
        got = await self._call(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            ENDPOINT.plural,
            **options,
        )
        return list(got.get("items") or []), (got.get("metadata") or {}).get("continue") or ""

    async def create_endpoint(self, namespace: str, body: Obj) -> Obj:
        return await self._call(
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            ENDPOINT.plural,
            body,
        )

    async def patch_endpoint(self, namespace: str, name: str, patch: Obj) -> Obj:
        return await self._call(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            ENDPOINT.plural,
            name,
            patch,
            _content_type=MERGE_PATCH,
        )

    async def patch_endpoint_status(self, namespace: str, name: str, status: Obj) -> None:
        with contextlib.suppress(NotFound):  # deleted meanwhile: nothing to report on
            await self._call(
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                ENDPOINT.plural,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
            )

    async def delete_endpoint(self, namespace: str, name: str) -> None:
        await self._call(
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            ENDPOINT.plural,
            name,
        )

    # -- cluster-wide reads: the catalog's machines (kube/catalog.py) -------------------------

    async def list_nodes(self) -> list[Obj]:
        """Every node, as JSON."""
        core = self._apis[k8s.CoreV1Api]
        resp = await self._call(core.list_node, _preload_content=False)
        return list(orjson.loads(resp.data).get("items") or [])

    async def list_bound_pods(self) -> list[Obj]:
        """Every pod of every namespace that is bound to a node and not finished: what holds
        the nodes' GPUs and CPUs now."""
        core = self._apis[k8s.CoreV1Api]
        selector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
        resp = await self._call(
            core.list_pod_for_all_namespaces, field_selector=selector, _preload_content=False
        )
        return list(orjson.loads(resp.data).get("items") or [])
