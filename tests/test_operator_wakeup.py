"""Endpoints at rest woken by a job each (issue 51, "scale first"), through the real
operator (kopf, in a thread) and a real kube-apiserver (envtest).

Every API call the operator's client makes is recorded where it leaves `Cluster` (its
method, what it names, whether a dry run), in order with the scaler's own note of each
wake-up (`ScaleFirst.waking` / `decided`); a watch of the Endpoints and one of the
Secrets, from the test's own client, see every write whoever makes it (a kopf handler's
patch too). The assertions are on what was written and in what order, never on how long
anything took: the waits are for states (each Deployment scaled, the woken Endpoints'
resyncs run twice after it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube import reconcile as rc
from lockgate.kube.cluster import Cluster
from lockgate.kube.crds import GROUP, VERSION
from lockgate.kube.scale_first import ScaleFirst
from lockgate.kube.settings import OperatorSettings
from lockgate.store import JobStore, NewJob, Registry
from tests.conftest import eventually, make_settings, start_gateway
from tests.test_operator_leader import (  # noqa: F401 - fixtures
    LEASE_TIMING,
    NAMESPACE,
    QUIET_ENDPOINTS,
    lease_name,
    quiet_namespace,
)
from tests.test_operator_steady import endpoints_at_rest

if TYPE_CHECKING:
    from kube_fixtures import OperatorThread, Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]

NAMES = ("ep-wake-a", "ep-wake-b", "ep-wake-c", "ep-wake-d", "wake-tpl")  # + their Template
WOKEN = NAMES[:4]
SCALE = "patch_namespaced_deployment_scale"
READS = ("read_", "list_", "get_")
NOTES = ("waking", "decided", "resync")  # the scaler's notes of wake-ups, the resyncs
REPORTS = ("create_namespaced_event", "patch_namespaced_custom_object_status")


class Calls:
    """The operator's API calls naming one of `names`, and the scaler's wake-up notes, in
    the order they happened: (what, name, dry run)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.seen: list[tuple[str, str, bool]] = []
        self.lock = threading.Lock()
        self.on = False

    def note(self, what: str, name: str, dry_run: bool = False) -> None:
        if self.on:
            with self.lock:
                self.seen.append((what, name, dry_run))

    def target(self, args: tuple[Any, ...]) -> str | None:
        text = repr(args)
        return next((n for n in sorted(self.names, key=len, reverse=True) if n in text), None)

    def wrap(self, call: Any) -> Any:
        calls = self

        async def recorded(cluster: Cluster, fn: Any, *args: Any, **kwargs: Any) -> Any:
            name = calls.target(args)
            if name is not None:
                method = getattr(fn, "__name__", str(fn))
                calls.note(method, name, bool(kwargs.get("dry_run")))
            return await call(cluster, fn, *args, **kwargs)

        return recorded

    def snapshot(self) -> list[tuple[str, str, bool]]:
        with self.lock:
            return list(self.seen)

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Record the calls leaving `Cluster`, the scaler's wake-up notes, and each
        refresh of an Endpoint (`reconcile.refresh`: its resync, a Template's roll)."""
        monkeypatch.setattr(Cluster, "_call", self.wrap(Cluster._call))
        waking, decided, refresh = ScaleFirst.waking, ScaleFirst.decided, rc.refresh
        calls = self

        def noted_waking(first: ScaleFirst, endpoint_id: str) -> None:
            calls.note("waking", endpoint_id)
            waking(first, endpoint_id)

        def noted_decided(first: ScaleFirst, endpoint_id: str) -> None:
            if endpoint_id in first.pending:
                calls.note("decided", endpoint_id)
            decided(first, endpoint_id)

        async def noted_refresh(ctx: rc.Context, body: Any, **kwargs: Any) -> Any:
            calls.note("resync", body["metadata"]["name"])
            return await refresh(ctx, body, **kwargs)

        monkeypatch.setattr(ScaleFirst, "waking", noted_waking)
        monkeypatch.setattr(ScaleFirst, "decided", noted_decided)
        monkeypatch.setattr(rc, "refresh", noted_refresh)  # kopf's resync daemons call it


class Writes:
    """Every change of one kind's objects in the namespace (a watch from the test's own
    client): the objects' names, one per resourceVersion seen."""

    def __init__(self, list_call: Any, *args: Any) -> None:
        listing = list_call(*args)
        meta = listing["metadata"] if isinstance(listing, dict) else listing.metadata
        self.version = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
        self.names: list[str] = []
        self.lock = threading.Lock()
        self.watch = k8s_watch.Watch()
        self.args = (list_call, *args)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        call, *args = self.args
        stream = self.watch.stream(call, *args, resource_version=self.version, timeout_seconds=120)
        with contextlib.suppress(Exception):  # the API server stopped at the session's end
            for event in stream:
                obj = event["object"]
                meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata.to_dict()
                with self.lock:
                    self.names.append(meta["name"])

    def stop(self) -> list[str]:
        self.watch.stop()
        with self.lock:
            return list(self.names)


def written_while_waking(seen: list[tuple[str, str, bool]]) -> list[str]:
    """The status, Event and Secret writes made while a woken endpoint (the scaler's
    `waking` note) had not yet had its decision applied (`decided`)."""
    pending: set[str] = set()
    early = []
    for what, name, _ in seen:
        if what == "waking":
            pending.add(name)
        elif what == "decided":
            pending.discard(name)
        elif pending and (what in REPORTS or "secret" in what):
            early.append(f"{what} {name} while {sorted(pending)} waited")
    return early


def first_writes(seen: list[tuple[str, str, bool]], endpoint: str) -> list[str]:
    """The endpoint's writes (its Deployment's, its Endpoint's), in order, by method."""
    ours = (endpoint, f"{endpoint}-workers")
    return [w for w, n, _ in seen if n in ours and w not in NOTES and not w.startswith(READS)]


def template_handled(kube: k8s.ApiClient, namespace: str, name: str) -> bool | None:
    """kopf ran the Template's create handler (it refreshes every Endpoint using it; one
    still running at a stop is cut, logged, and retried at the next start)."""
    custom = k8s.CustomObjectsApi(kube)
    template = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "templates", name)
    annotations = template["metadata"].get("annotations")
    return any(k.startswith("operator.lockgate.dev/") for k in annotations or {}) or None


async def test_a_wake_up_scales_first_and_writes_no_secret(
    operator: RunningOperator,
    metrics_served: None,
    resources: Resources,
    redis: Redis,
    kube: k8s.ApiClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four endpoints at rest get a job each: each Deployment gets one scale patch, its
    endpoint's first write, and no status, Event or Secret write goes out while a woken
    endpoint waits for its decision; the Endpoints' status writes
    come after (no kopf handler runs again for them), and no Secret is called on, neither
    during the wake-up nor in the woken Endpoints' resyncs after it (their worker-key
    Secrets keep their resourceVersions)."""
    assert operator.settings.resync_s <= 1.0  # several resyncs of each woken Endpoint below
    await endpoints_at_rest(resources, redis, NAMES)
    template = lambda: asyncio.to_thread(template_handled, kube, resources.namespace, NAMES[-1])  # noqa: E731
    await resources.eventually(template, "the Template's handler done")
    keys = tuple(f"{n}-worker-key" for n in WOKEN)
    core, custom, ns = k8s.CoreV1Api(kube), k8s.CustomObjectsApi(kube), resources.namespace
    versions = {k: core.read_namespaced_secret(k, ns).metadata.resource_version for k in keys}
    calls = Calls((*keys, *(f"{n}-workers" for n in WOKEN), *WOKEN))
    calls.patch(monkeypatch)
    secrets = Writes(core.list_namespaced_secret, ns)
    endpoints = Writes(custom.list_namespaced_custom_object, GROUP, VERSION, ns, "endpoints")
    try:
        calls.on = True
        store = JobStore(redis)
        await asyncio.gather(
            *(store.submit(n, NewJob(id=f"wake-{n}", input=b"{}", ttl_ms=120_000)) for n in WOKEN)
        )

        def scaled() -> bool | None:
            counts = [resources.deployment(f"{n}-workers").spec.replicas or 0 for n in WOKEN]
            return all(c >= 1 for c in counts) or None

        await resources.eventually(lambda: asyncio.to_thread(scaled), "every Deployment scaled")

        async def resynced_twice() -> bool:  # each woken Endpoint's, since its scale patch
            seen = calls.snapshot()
            since = {n: max(i for i, c in enumerate(seen) if c[:2] == (SCALE, f"{n}-workers"))
                     for n in WOKEN}  # fmt: skip
            resyncs = [(i, n) for i, (what, n, _) in enumerate(seen) if what == "resync"]
            runs = Counter(n for i, n in resyncs if n in since and i > since[n])
            return all(runs[n] >= 2 for n in WOKEN)

        await resources.eventually(resynced_twice, "two resyncs of each woken Endpoint")
    finally:
        calls.on = False
        secret_writes, endpoint_writes = secrets.stop(), endpoints.stop()
    seen = calls.snapshot()
    # No Secret call at all: no write, no dry-run update, not even a read.
    assert [c for c in seen if c[1] in keys] == []
    assert not set(secret_writes) & set(keys), secret_writes
    assert {
        k: core.read_namespaced_secret(k, ns).metadata.resource_version for k in keys
    } == versions
    # One scale patch per woken endpoint, its first write, and no status, Event or Secret
    # write while a woken endpoint waited for its decision.
    assert set(WOKEN) <= {name for what, name, _ in seen if what == "waking"}, seen
    for name in WOKEN:
        written = first_writes(seen, name)
        assert written[0] == SCALE and written.count(SCALE) == 1, (name, written)
    assert written_while_waking(seen) == [], seen
    # Every write to these Endpoints is one of the operator's status patches: no kopf
    # handler ran again for a status patch.
    patched = Counter(n for w, n, _ in seen if w == "patch_namespaced_custom_object_status")
    assert Counter(n for n in endpoint_writes if n in WOKEN) <= patched, (endpoint_writes, seen)


async def test_stopping_the_operator_after_a_wake_up_logs_one_line(
    start_operator: Callable[[OperatorSettings], OperatorThread],
    redis_server: EmbeddedRedis,
    quiet_namespace: str,  # noqa: F811 - the fixture
    lease_name: str,  # noqa: F811 - the fixture
    kube: k8s.ApiClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator of its own, whose Endpoints were all just woken (their resyncs running,
    not resting), stops with one INFO line of its own: no line per Endpoint's daemon (kopf's
    "Daemon 'resync_endpoint' succeeded." at each, 998 of them at a thousand Endpoints) and
    no WARNING."""
    caplog.set_level(logging.DEBUG, logger="kopf")
    caplog.set_level(logging.INFO, logger="lockgate")
    metrics_port = free_port()
    settings = OperatorSettings(
        redis_url=redis_server.url, namespaces=[quiet_namespace], manage_host="127.0.0.1",
        manage_port=free_port(), liveness_port=0, resync_s=0.5, resync_rest_s=0.5,
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
        scale_interval_s=0.2, lease_name=lease_name, lease_namespace=NAMESPACE, **LEASE_TIMING,
    )  # fmt: skip
    names = [f"quiet-{n}" for n in range(QUIET_ENDPOINTS)]
    api = k8s.AppsV1Api(kube)
    gateway = await start_gateway(make_settings(redis_server.url, metrics_port))  # its /metrics
    running = start_operator(settings)
    redis = Redis.from_url(redis_server.url)
    try:
        registry, store = Registry(redis), JobStore(redis)

        async def registered() -> bool:
            return all([await registry.get_endpoint(n) is not None for n in names])

        await eventually(registered, "every Endpoint registered", 60)

        def deployed() -> bool:
            return len(api.list_namespaced_deployment(quiet_namespace).items) == len(names)

        await eventually(lambda: asyncio.to_thread(deployed), "every Deployment created", 60)
        template = lambda: asyncio.to_thread(template_handled, kube, quiet_namespace, "quiet")  # noqa: E731
        await eventually(template, "the Template's handler done", 60)
        await asyncio.gather(
            *(store.submit(n, NewJob(id=f"wake-{n}", input=b"{}", ttl_ms=60_000)) for n in names)
        )

        def scaled() -> bool:
            found = api.list_namespaced_deployment(quiet_namespace).items
            return sum((d.spec.replicas or 0) >= 1 for d in found) == len(names)

        await eventually(lambda: asyncio.to_thread(scaled), "every Deployment scaled", 60)
    finally:
        await redis.aclose()
        await gateway.cleanup()
    before = len(caplog.records)
    running.stop()
    assert not running.thread.is_alive() and not running.errors, running.errors
    at_stop = caplog.records[before:]
    ours = [r for r in at_stop if r.name.startswith(("kopf", "lockgate"))]
    warned = [
        f"{r.name} {r.levelname} {r.getMessage()}" for r in ours if r.levelno >= logging.WARNING
    ]
    assert warned == []
    ns = quiet_namespace
    per_endpoint = [
        r.getMessage() for r in ours
        if r.levelno >= logging.INFO and getattr(r, "k8s_ref", {}).get("namespace") == ns
        and "resync_endpoint" in r.getMessage()
    ]  # fmt: skip
    assert per_endpoint == []
    stopped = [r.getMessage() for r in ours if r.getMessage().startswith("operator stopped")]
    assert stopped == [f"operator stopped: {QUIET_ENDPOINTS} Endpoint resync(s) ended"]
