"""Idle Endpoints in steady state make no Kubernetes call that fails by design (issue 32):
the resync (every second here) neither re-creates a worker-key Secret that exists (409:
it checks with a dry-run update, which writes nothing) nor deletes a flashboot DaemonSet
that is not there (404), and writes nothing unchanged.

The real operator (kopf, in a thread) against a real kube-apiserver (envtest); the calls
are seen where they leave `Cluster` (`Cluster._call`, wrapped to record them)."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import pytest
from redis.asyncio import Redis

from lockgate.kube.cluster import Cluster, ClusterError
from lockgate.kube.status import at_rest
from lockgate.store import Registry

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]

NAMES = ("ep-steady-a", "ep-steady-b", "ep-steady-c", "steady-tpl")  # and their Template
WRITES = ("create", "replace", "patch", "delete")


class Recorder:
    """Every call through `Cluster._call` naming one of `NAMES`: (method, failed status)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []
        self.lock = threading.Lock()
        self.on = False

    def wrap(self, call: Any) -> Any:
        recorder = self

        async def recorded(cluster: Cluster, fn: Any, *args: Any, **kwargs: Any) -> Any:
            ours = recorder.on and any(name in repr(args) for name in NAMES)
            name = getattr(fn, "__name__", str(fn)) + (
                " (dry run)" if kwargs.get("dry_run") else ""
            )
            try:
                result = await call(cluster, fn, *args, **kwargs)
            except ClusterError as err:
                if ours:
                    with recorder.lock:
                        recorder.calls.append((name, err.status))
                raise
            if ours:
                with recorder.lock:
                    recorder.calls.append((name, None))
            return result

        return recorded


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
    resources.template("steady-tpl")
    for name in NAMES:
        resources.endpoint(name, templateId="steady-tpl", workersMin=0)
    registry = Registry(redis)
    for name in NAMES:
        await resources.eventually(lambda name=name: registry.get_endpoint(name), "registered")
        await resources.eventually(
            lambda name=name: asyncio.to_thread(lambda: resources.deployment(f"{name}-workers")),
            "the Deployment",
        )
    for name in NAMES[:3]:
        await resources.eventually(
            lambda name=name: asyncio.to_thread(lambda: at_rest(resources.status(name)) or None),
            "at rest: Ready, no worker, no job",
        )
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
    # At rest, a resync reads the Deployment alone: the Template as kopf's watch delivered
    # it, the worker-key Secret not checked until the Endpoint leaves its rest.
    assert {name for name, _ in calls} == {"read_namespaced_deployment"}, calls
