"""Idle Endpoints in steady state make no Kubernetes call that fails by design (issue 32):
the resync (every second here) neither re-creates a worker-key Secret that exists (409:
it checks with a dry-run update, which writes nothing) nor deletes a flashboot DaemonSet
that is not there (404), and writes nothing unchanged.

The real operator (kopf, in a thread) against a real kube-apiserver (envtest); the calls
are seen where they leave `Cluster` (`Cluster._call`, wrapped to record them), and each
resync's apply of the worker Deployment where it enters `Cluster.apply`."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import pytest
from redis.asyncio import Redis

from lockgate.kube.cluster import Cluster, ClusterError
from lockgate.kube.scaler import ScalingLoop
from lockgate.kube.status import at_rest
from lockgate.kube.watched import ENDPOINT_LABEL, WORKERS
from lockgate.store import JobStore, NewJob, Registry

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]

NAMES = ("ep-steady-a", "ep-steady-b", "ep-steady-c", "steady-tpl")  # and their Template
WRITES = ("create", "replace", "patch", "delete")


class Recorder:
    """Every call through `Cluster._call` naming one of `names`: (method, failed status),
    and the name it was for in `targets`."""

    def __init__(self, names: tuple[str, ...] = NAMES) -> None:
        self.names = names
        self.calls: list[tuple[str, int | None]] = []
        self.targets: list[str] = []
        self.args: list[str] = []  # each call's arguments, as repr()
        self.lock = threading.Lock()
        self.on = False

    def _ours(self, text: str) -> str | None:
        return next((n for n in self.names if n in text), None) if self.on else None

    def _record(self, target: str, name: str, status: int | None, args: str = "") -> None:
        with self.lock:
            self.calls.append((name, status))
            self.targets.append(target)
            self.args.append(args)

    def wrap(self, call: Any) -> Any:
        recorder = self

        async def recorded(cluster: Cluster, fn: Any, *args: Any, **kwargs: Any) -> Any:
            text = repr(args)
            target = recorder._ours(text)
            name = getattr(fn, "__name__", str(fn)) + (
                " (dry run)" if kwargs.get("dry_run") else ""
            )
            try:
                result = await call(cluster, fn, *args, **kwargs)
            except ClusterError as err:
                if target:
                    recorder._record(target, name, err.status, text)
                raise
            if target:
                recorder._record(target, name, None, text)
            return result

        return recorded

    def wrap_apply(self, apply: Any) -> Any:
        """`Cluster.apply`, recorded as `apply <name>` whether or not it calls the API."""
        recorder = self

        async def recorded(cluster: Cluster, desired: Any, *args: Any, **kwargs: Any) -> Any:
            name = desired["metadata"]["name"]
            if target := recorder._ours(name):
                recorder._record(target, f"apply {name}", None)
            return await apply(cluster, desired, *args, **kwargs)

        return recorded


async def endpoints_at_rest(
    resources: Resources, redis: Redis, names: tuple[str, ...], *, template: bool = True
) -> None:
    """Endpoints of these names and a Template named after the last one (made here unless
    `template` is False), registered, each with its Deployment, all at rest."""
    template_name = names[-1]
    if template:
        resources.template(template_name)
    for name in names:
        resources.endpoint(name, templateId=template_name, workersMin=0)
    registry = Registry(redis)
    for name in names:
        await resources.eventually(lambda name=name: registry.get_endpoint(name), "registered")
        await resources.eventually(
            lambda name=name: asyncio.to_thread(lambda: resources.deployment(f"{name}-workers")),
            "the Deployment",
        )

    def resting(name: str) -> bool | None:  # and seen by the scaler, which reported on it
        status = resources.status(name)
        kinds = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        return (at_rest(status) and "MetricsAvailable" in kinds) or None

    for name in names:
        await resources.eventually(
            lambda name=name: asyncio.to_thread(resting, name),
            "at rest (Ready, no worker, no job) and reported on by the scaler",
        )


async def test_idle_endpoints_resync_without_failing_calls_or_writes(
    operator: RunningOperator,
    metrics_served: None,  # the scaler reads /metrics: the endpoints are Ready, at rest
    resources: Resources,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert operator.settings.resync_s <= 1.0
    recorder = Recorder()
    monkeypatch.setattr(Cluster, "_call", recorder.wrap(Cluster._call))
    monkeypatch.setattr(Cluster, "apply", recorder.wrap_apply(Cluster.apply))
    await endpoints_at_rest(resources, redis, NAMES)
    await asyncio.sleep(2.5)  # the first resyncs after creation (random phase, <= 1 s)
    recorder.on = True
    await asyncio.sleep(4.0)  # three or more resyncs of each
    recorder.on = False
    calls = list(recorder.calls)
    assert calls, "no call of these Endpoints was seen: the resync did not run"
    failed = [c for c in calls if c[1] is not None]
    # A dry-run update (the worker-key Secret is still there) writes nothing.
    writes = [c for c in calls if c[0].split("_", 1)[0] in WRITES and "dry run" not in c[0]]
    assert not failed, f"calls that failed in steady state: {failed}"
    assert not writes, f"writes in steady state: {writes}"
    # At rest, a resync makes no API call: the Template and the worker Deployment as kopf's
    # watches delivered them (the Deployment carries the desired hash: not even a GET), the
    # worker-key Secret not checked until the Endpoint leaves its rest.
    seen = {name for name, _ in calls}
    assert {f"apply {n}-workers" for n in NAMES[:3]} <= seen, calls
    assert seen <= {f"apply {n}-workers" for n in NAMES}, calls


async def test_the_scaler_reads_nothing_while_endpoints_rest_then_only_the_one_with_a_job(
    operator: RunningOperator,
    metrics_served: None,
    resources: Resources,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's watches index the worker Deployments and pods (`kube.watched`): resting
    endpoints cost the scaler no list of the namespace's workers, and a job at one of them
    makes it read that endpoint's objects alone (its Deployment by name, its pods
    label-selected), then scale it, before any scrape of `/metrics` (the job's endpoint
    read from its store snapshot)."""
    names = ("ep-rest-a", "ep-rest-b", "ep-rest-c", "rest-tpl")
    lists: list[str] = []
    reads: list[str] = []  # Deployments read by name
    order: list[str] = []  # scrapes and scale writes, as they happen
    call, read = Cluster._call, ScalingLoop._read

    async def record(cluster: Cluster, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", "").startswith("list_namespaced_"):
            lists.append(f"{fn.__name__} {kwargs.get('label_selector', '')}")
        if getattr(fn, "__name__", "") == "read_namespaced_deployment":
            reads.append(args[0])
        if getattr(fn, "__name__", "") == "patch_namespaced_deployment_scale":
            order.append(f"scale {args[0]}")
        return await call(cluster, fn, *args, **kwargs)

    async def scrape(loop: ScalingLoop) -> Any:
        order.append("scrape")
        return await read(loop)

    await endpoints_at_rest(resources, redis, names)
    monkeypatch.setattr(Cluster, "_call", record)
    monkeypatch.setattr(ScalingLoop, "_read", scrape)
    await asyncio.sleep(2.0)  # ten scaler ticks (every 0.2 s here)
    ours = [c for c in lists if any(name in c for name in names) or c.endswith(WORKERS)]
    assert not ours, f"the scaler listed worker objects of resting endpoints: {ours}"
    name = names[0]
    order.clear()
    reads.clear()
    await JobStore(redis).submit(name, NewJob(id="wake", input=b"{}", ttl_ms=60_000))

    def scaled() -> bool | None:
        return (resources.deployment(f"{name}-workers").spec.replicas or 0) >= 1 or None

    await resources.eventually(lambda: asyncio.to_thread(scaled), "the Deployment scaled up")
    assert order[0] == f"scale {name}-workers", order
    selected = {c.split()[0] for c in lists if c.endswith(f"{WORKERS},{ENDPOINT_LABEL}={name}")}
    assert selected == {"list_namespaced_pod"}, lists
    assert not [c for c in lists if c.startswith("list_namespaced_deployment")], lists
    assert reads and set(reads) == {f"{name}-workers"}, reads
    assert not [c for c in lists if c.endswith(WORKERS)], lists


async def test_creating_endpoints_makes_no_call_that_fails_and_reads_nothing_it_knows(
    operator: RunningOperator,
    metrics_served: None,
    resources: Resources,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new Endpoint: its Template as kopf's watch delivered it (no GET), its Deployment
    created without a GET first (the index shows none), no delete of a flashboot DaemonSet
    or NetworkPolicy it never had (at a thousand creations these were ~5 calls each, four
    of them 404s)."""
    names = ("ep-born-a", "ep-born-b", "born-tpl")
    recorder = Recorder(names)
    monkeypatch.setattr(Cluster, "_call", recorder.wrap(Cluster._call))
    resources.template(names[-1])

    def handled() -> bool | None:  # kopf's watch delivered it (its create was handled)
        annotations = (resources.get("templates", names[-1]) or {})["metadata"].get("annotations")
        return any(k.startswith("operator.lockgate.dev/") for k in annotations or {}) or None

    await resources.eventually(lambda: asyncio.to_thread(handled), "the Template handled")
    recorder.on = True
    await endpoints_at_rest(resources, redis, names, template=False)
    recorder.on = False
    calls = list(zip(recorder.targets, recorder.calls, recorder.args, strict=True))
    assert calls, "no call of these Endpoints was seen"
    failed = [c for c in calls if c[1][1] is not None]
    assert not failed, f"calls that failed while creating: {failed}"
    # A Deployment read after its create is the scaler's look at a new endpoint (it reads
    # a few endpoints' Deployments by name); one before it would be a GET-first create.
    made: set[str] = set()
    reads = []
    for call in calls:
        target, (method, _), args = call
        if method.startswith("create_namespaced_deployment"):
            made.add(target)
        elif (
            (method.startswith("read_namespaced_deployment") and target not in made)
            or method.startswith("delete_")
            or (method.startswith("get_") and "'templates'" in args)
        ):
            reads.append(call)
    assert not reads, f"reads or deletes of what the operator knows: {reads}"
    created = {(t, m) for t, (m, _), _ in calls if m.startswith("create_namespaced_deployment")}
    assert created == {(n, "create_namespaced_deployment") for n in names}, calls
