"""Leader election for the scaler against a real kube-apiserver (envtest): electors in one
process stand for operator replicas, each with its own identity, sharing one Lease.

Durations are test-sized (a 2 s Lease renewed every 0.5 s); the assertions are about who
leads, never about how fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client as k8s

from lockgate.apps.operator import scaling
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube.cluster import Cluster
from lockgate.kube.crds import GROUP, VERSION
from lockgate.kube.leader import LeaderElector, holder_of, parse_time
from lockgate.kube.reconcile import Context
from lockgate.kube.scaler import ScalingLoop
from lockgate.kube.settings import OperatorSettings
from lockgate.kube.status import METRICS_AVAILABLE, WORKERS_HEALTHY, Check
from tests.conftest import eventually, wait_until

if TYPE_CHECKING:
    from kube_fixtures import OperatorThread

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]

NAMESPACE = "lockgate-test"  # kube_fixtures creates it
LEASE_TIMING = {"lease_duration_s": 2, "lease_renew_s": 0.5}
_names = itertools.count()


@pytest.fixture
def lease_name() -> str:
    """A Lease of its own for each test (the session's operator holds `lockgate-scaler`)."""
    return f"test-scaler-{next(_names)}"


@pytest.fixture
def cluster(kube: k8s.ApiClient) -> Cluster:
    return Cluster(kube)


def elector(cluster: Cluster, lease_name: str, me: str) -> LeaderElector:
    return LeaderElector(
        cluster, name=lease_name, namespace=NAMESPACE, me=me, duration_s=2, renew_s=0.5
    )


class Replica:
    """One elector campaigning in a task, counting the terms its work ran."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.working = False
        self.terms = 0
        self.task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        self.terms += 1
        self.working = True
        try:
            await asyncio.Event().wait()
        finally:
            self.working = False

    def start(self) -> Replica:
        self.task = asyncio.create_task(self.elector.run(self.work))
        return self

    async def stop(self) -> None:
        """Shut down as a replica does: cancel, which stops the work and releases."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None


@pytest.fixture
async def replicas(cluster: Cluster, lease_name: str) -> AsyncIterator[Callable[[str], Replica]]:
    started: list[Replica] = []

    def start(me: str) -> Replica:
        started.append(Replica(elector(cluster, lease_name, me)).start())
        return started[-1]

    yield start
    for replica in started:
        await replica.stop()


async def until(check: Callable[[], Any], what: str) -> Any:
    async def once() -> Any:
        return check()

    return await eventually(once, what, timeout=20)


async def holder(cluster: Cluster, lease_name: str) -> str:
    return holder_of(await cluster.get_lease(NAMESPACE, lease_name))


async def test_of_two_electors_on_one_lease_exactly_one_leads(
    cluster: Cluster, lease_name: str, replicas: Callable[[str], Replica]
) -> None:
    a, b = replicas("replica-a"), replicas("replica-b")
    await until(lambda: a.working or b.working, "a leader")
    leader, standby = (a, b) if a.working else (b, a)
    for _ in range(8):  # a few renewals: the leader keeps the Lease, the other never works
        await asyncio.sleep(0.5)
        assert leader.working and not standby.working and standby.terms == 0
    assert await holder(cluster, lease_name) == leader.elector.me
    assert leader.terms == 1  # renewals do not restart the work


async def test_when_the_leader_shuts_down_the_standby_takes_over(
    cluster: Cluster, lease_name: str, replicas: Callable[[str], Replica]
) -> None:
    a = replicas("replica-a")
    await until(lambda: a.working, "a leading")
    b = replicas("replica-b")
    await asyncio.sleep(1)
    assert not b.working
    await a.stop()
    assert not a.working
    assert await holder(cluster, lease_name) in {"", b.elector.me}  # released, or taken
    await until(lambda: b.working, "b leading")
    assert await holder(cluster, lease_name) == b.elector.me


async def test_when_the_leader_stops_renewing_the_standby_takes_over_after_expiry(
    cluster: Cluster, lease_name: str, replicas: Callable[[str], Replica]
) -> None:
    silent = elector(cluster, lease_name, "replica-hung")
    assert await silent.try_once()  # holds the Lease, then never renews (a hung replica)
    held = (await cluster.get_lease(NAMESPACE, lease_name))["spec"]
    b = replicas("replica-b")
    await until(lambda: b.working, "b leading once the Lease expired")
    lease = await cluster.get_lease(NAMESPACE, lease_name)
    assert holder_of(lease) == b.elector.me and lease["spec"]["leaseTransitions"] == 1
    # taken only once expired: the Lease's own times, not a sleep (a loaded machine's
    # sleep can outlast the Lease)
    renewed, acquired = parse_time(held["renewTime"]), parse_time(lease["spec"]["acquireTime"])
    assert renewed is not None and acquired is not None
    lasted = timedelta(seconds=held["leaseDurationSeconds"])
    assert acquired >= renewed + lasted, (held, lease["spec"])
    assert await silent.try_once() is False  # the hung replica, back, stands by


@pytest.fixture
async def contexts(
    cluster: Cluster, redis_server: EmbeddedRedis, lease_name: str
) -> AsyncIterator[list[Context]]:
    """Two operator contexts sharing the cluster and Redis, as two replicas would."""
    settings = OperatorSettings(
        redis_url=redis_server.url, namespaces=[NAMESPACE], scale_interval_s=0.1,
        lease_name=lease_name, lease_namespace=NAMESPACE, **LEASE_TIMING,
    )  # fmt: skip
    made = [Context.open(settings, cluster) for _ in range(2)]
    yield made
    for ctx in made:
        await ctx.close()


async def test_the_scaling_loop_runs_only_in_the_replica_holding_the_lease(
    contexts: list[Context], monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks: list[int] = []  # whose loop ticked, by index into contexts

    async def tick(self: ScalingLoop) -> None:
        ticks.append(contexts.index(self.ctx))

    monkeypatch.setattr(ScalingLoop, "tick", tick)
    first, second = contexts
    async with contextlib.AsyncExitStack() as second_replica:
        async with contextlib.AsyncExitStack() as first_replica:
            await first_replica.enter_async_context(scaling(first))
            await until(lambda: 0 in ticks, "the first replica scaling")
            await second_replica.enter_async_context(scaling(second))
            await asyncio.sleep(1.5)  # three renewals: the second replica stands by
            assert 1 not in ticks
            first.scaling["ep"] = Check(METRICS_AVAILABLE, True, "Scraped")  # a term's state
            first.pods["ep"] = Check(WORKERS_HEALTHY, True, "PodsRunning")
        # The first replica shut down: its loop stopped and its state went with it (a
        # reconcile there must not write its stale conditions over the new leader's).
        assert first.scaling == {} and first.pods == {}
        ticks.clear()
        await until(lambda: 1 in ticks, "the second replica scaling")
        await asyncio.sleep(0.5)
        assert 0 not in ticks


def test_a_stopped_operator_leaves_kopf_no_task_of_its_own_to_cancel(
    start_operator: Callable[[OperatorSettings], OperatorThread],
    kube: k8s.ApiClient,
    redis_server: EmbeddedRedis,
    lease_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The whole operator (kopf, the scaler leading its own Lease, the management API) told to
    stop, as SIGTERM does: the scaler's term and the API's tasks end in kopf's cleanup. kopf
    waits 5 s for tasks it did not start to end by themselves before it cancels them; an
    operator that left it some would wait that long on every rollout and uninstall."""
    caplog.set_level(logging.DEBUG, logger="kopf")
    settings = OperatorSettings(
        redis_url=redis_server.url, namespaces=[NAMESPACE], manage_host="127.0.0.1",
        manage_port=free_port(), liveness_port=0, scale_interval_s=0.2, lease_name=lease_name,
        lease_namespace=NAMESPACE, **LEASE_TIMING,
    )  # fmt: skip
    running = start_operator(settings)
    cluster = Cluster(kube)
    wait_until(lambda: asyncio.run(holder(cluster, lease_name)), "the scaler to lead", 20)

    running.stop()

    assert not running.thread.is_alive() and not running.errors, running.errors
    hung = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Hung tasks")]
    assert hung == ["Hung tasks stopping is skipped: no tasks given."], hung


QUIET_ENDPOINTS = 20


@pytest.fixture
def quiet_namespace(kube: k8s.ApiClient) -> Iterator[str]:
    """A namespace of its own with QUIET_ENDPOINTS Endpoints (and their Template), which only
    the test's operator watches; at the end, their finalizers dropped (that operator has
    stopped) and the namespace deleted."""
    namespace = f"lockgate-quiet-{next(_names)}"
    core, custom = k8s.CoreV1Api(kube), k8s.CustomObjectsApi(kube)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    api_version = f"{GROUP}/{VERSION}"
    template = {"apiVersion": api_version, "kind": "Template", "metadata": {"name": "quiet"}}
    template["spec"] = {"image": "example.test/echo:1"}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "templates", template)
    for n in range(QUIET_ENDPOINTS):
        endpoint = {"apiVersion": api_version, "kind": "Endpoint"}
        endpoint |= {"metadata": {"name": f"quiet-{n}"}}
        endpoint["spec"] = {"templateId": "quiet", "workersMin": 0}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "endpoints", endpoint)
    yield namespace
    for n in range(QUIET_ENDPOINTS):
        with contextlib.suppress(k8s.ApiException):
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "endpoints", f"quiet-{n}",
                {"metadata": {"finalizers": None}},
                _content_type="application/merge-patch+json",
            )  # fmt: skip
    core.delete_namespace(namespace)


def test_a_stopped_operator_ends_its_endpoints_daemons_without_a_warning(
    start_operator: Callable[[OperatorSettings], OperatorThread],
    redis_server: EmbeddedRedis,
    quiet_namespace: str,
    lease_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping the operator (SIGTERM, or a leader handover) stops each Endpoint's resync
    daemon: kopf sets its `stopped` flag, then cancels it in its sleep. That end is not a
    fault: once logged as one WARNING per Endpoint ("Daemon 'resync_endpoint' is cancelled.
    Will escalate."), now each daemon returns and kopf notes it (DEBUG) as exited on
    request."""
    caplog.set_level(logging.DEBUG, logger="kopf")
    settings = OperatorSettings(
        redis_url=redis_server.url, namespaces=[quiet_namespace], manage_host="127.0.0.1",
        manage_port=free_port(), liveness_port=0, resync_s=60.0, resync_rest_s=60.0,
        lease_name=lease_name, lease_namespace=NAMESPACE, **LEASE_TIMING,
    )  # fmt: skip

    def daemon_logs(text: str) -> list[logging.LogRecord]:
        """The kopf records of the quiet namespace's resync daemons that contain `text`."""
        return [
            r for r in caplog.records
            if getattr(r, "k8s_ref", {}).get("namespace") == quiet_namespace
            and "resync_endpoint" in r.getMessage() and text in r.getMessage()
        ]  # fmt: skip

    def settled() -> bool:
        """Every daemon running, every Endpoint's and the Template's handler done (a
        handler cut by the stop is retried at the next start: kopf warns of that one)."""
        done = {
            r.k8s_ref.get("name") for r in caplog.records
            if getattr(r, "k8s_ref", {}).get("namespace") == quiet_namespace
            and r.getMessage().endswith(("'create_endpoint' succeeded.",
                                         "'roll_template_users' succeeded."))
        }  # fmt: skip
        daemons = len(daemon_logs("is invoked")) == QUIET_ENDPOINTS
        return daemons and len(done) == QUIET_ENDPOINTS + 1

    running = start_operator(settings)
    wait_until(settled, "every Endpoint handled and its daemon running", 60)

    running.stop()

    assert not running.thread.is_alive() and not running.errors, running.errors
    warned = [
        f"{r.levelname} {r.getMessage()}"
        for r in daemon_logs("") + [r for r in caplog.records if "Will escalate" in r.getMessage()]
        if r.levelno >= logging.WARNING
    ]
    assert warned == []
    assert len(daemon_logs("has exited on request")) == QUIET_ENDPOINTS
