"""Load-balancing endpoints on Kubernetes without a cluster: the worker pods the operator
builds (pure manifests), and how their pods become routing records in Redis
(`kube.lb_pods`, against the tests' Redis) and are drained before a scale-down removes
them (`DeploymentPool.resize`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis.asyncio import Redis

from lockgate.kube.deployment_pool import DeploymentPool
from lockgate.kube.lb_pods import (
    PARKED_UNTIL,
    REREAD_S,
    LbPods,
    changes,
    lb_worker_of,
    parked_until,
    wanted_workers,
)
from lockgate.kube.manifests.lb import LB_ANNOTATION, lb_network_policy
from lockgate.kube.manifests.names import SERVING_CONDITION, Owner, selector
from lockgate.kube.manifests.workloads import worker_pod_template
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, TemplateSpec
from lockgate.store.lb_workers import LbWorker, LbWorkers

OWNER = Owner(name="chat", namespace="ml", uid="uid-1")
SETTINGS = OperatorSettings(gateway_url="http://gw:8080", base_url="https://jobs.example")
LB = {"type": "LB", "scalerType": "REQUEST_COUNT"}


def pod_template(spec: dict | None = None, template: dict | None = None) -> dict[str, Any]:
    return worker_pod_template(
        OWNER,
        EndpointSpec(**{**LB, **(spec or {})}),
        TemplateSpec(**{"image": "img:1", **(template or {})}),
        "tpl",
        SETTINGS,
    )


def container(spec: dict | None = None, template: dict | None = None) -> dict[str, Any]:
    return pod_template(spec, template)["spec"]["containers"][0]


def env(spec: dict | None = None, template: dict | None = None) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(spec, template)["env"]}


# -- manifests -----------------------------------------------------------------------------


def test_an_lb_worker_gets_the_templates_http_port_and_runpods_variables() -> None:
    c = container(template={"ports": ["8000/http", "22/tcp"]})
    assert {"name": "http-8000", "containerPort": 8000, "protocol": "TCP"} in c["ports"]
    assert {p["containerPort"] for p in c["ports"]} == {8000, 22}
    values = env(template={"ports": ["8000/http"]})
    assert (values["PORT"], values["PORT_HEALTH"], values["HEALTH_CHECK_PATH"]) == (
        "8000", "8000", "/ping",
    )  # fmt: skip


def test_without_an_http_port_an_lb_worker_listens_on_80_as_on_runpod() -> None:
    c = container()
    assert c["ports"] == [{"name": "http-80", "containerPort": 80, "protocol": "TCP"}]
    assert env()["PORT"] == "80"


def test_the_templates_env_overrides_port_health_port_and_path() -> None:
    variables = {"PORT": "9000", "PORT_HEALTH": "9001", "HEALTH_CHECK_PATH": "/ready"}
    template = {"ports": ["8000/http"], "env": variables}
    c = container(template=template)
    values = env(template=template)
    assert (values["PORT"], values["PORT_HEALTH"], values["HEALTH_CHECK_PATH"]) == (
        "9000", "9001", "/ready",
    )  # fmt: skip
    assert [e["name"] for e in c["env"]].count("PORT") == 1
    assert {p["containerPort"] for p in c["ports"]} == {8000, 9000, 9001}
    probe = c["readinessProbe"]["httpGet"]
    assert (probe["port"], probe["path"]) == (9001, "/ready")


def test_an_lb_worker_has_a_readiness_probe_on_its_health_path() -> None:
    probe = container(template={"ports": ["8000/http"]})["readinessProbe"]
    assert probe["httpGet"] == {"path": "/ping", "port": 8000, "scheme": "HTTP"}


def test_the_grace_period_covers_the_request_limit() -> None:
    assert pod_template()["spec"]["terminationGracePeriodSeconds"] == 330 + 15
    assert pod_template({"requestTimeoutS": 60})["spec"]["terminationGracePeriodSeconds"] == 75
    capped = pod_template({"requestTimeoutS": 3600})["spec"]["terminationGracePeriodSeconds"]
    assert capped == SETTINGS.termination_grace_cap_s


def test_an_lb_pod_says_where_it_listens() -> None:
    meta = pod_template(template={"ports": ["8000/http"]})["metadata"]
    assert json.loads(meta["annotations"][LB_ANNOTATION]) == {
        "port": 8000, "healthPort": 8000, "path": "/ping",
    }  # fmt: skip


def test_a_queue_worker_gets_none_of_it() -> None:
    tpl = worker_pod_template(
        OWNER, EndpointSpec(), TemplateSpec(image="img:1", ports=["8000/http"]), "tpl", SETTINGS
    )
    c = tpl["spec"]["containers"][0]
    assert "readinessProbe" not in c
    assert not {"PORT", "PORT_HEALTH", "HEALTH_CHECK_PATH"} & {e["name"] for e in c["env"]}
    assert LB_ANNOTATION not in tpl["metadata"]["annotations"]


GATEWAY = {"app.kubernetes.io/name": "lockgate", "app.kubernetes.io/component": "gateway"}


def test_the_network_policy_admits_only_gateway_pods_to_the_http_and_health_ports() -> None:
    settings = OperatorSettings(lb_gateway_labels=GATEWAY)
    template = TemplateSpec(image="img:1", ports=["8000/http"], env={"PORT_HEALTH": "8001"})
    policy = lb_network_policy(OWNER, template, settings)
    assert policy["metadata"]["name"] == "chat-lb-workers"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == selector("chat", "worker")
    assert spec["policyTypes"] == ["Ingress"]
    [rule] = spec["ingress"]
    assert rule["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": GATEWAY}}]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}, {"port": 8001, "protocol": "TCP"}]


def test_the_gateway_labels_come_from_the_environment_as_json(monkeypatch) -> None:
    monkeypatch.setenv("LOCKGATE_LB_GATEWAY_LABELS", json.dumps(GATEWAY))
    assert OperatorSettings().lb_gateway_labels == GATEWAY
    monkeypatch.delenv("LOCKGATE_LB_GATEWAY_LABELS")
    assert OperatorSettings().lb_gateway_labels == {}


# -- pods to records (pure) ----------------------------------------------------------------

WHERE = json.dumps({"port": 8000, "healthPort": 8001, "path": "/ping"})


def pod(
    name: str,
    ip: str | None = "10.88.0.5",
    *,
    deleting: bool = False,
    serving: str | None = None,
    state: str = "running",
    where: str | None = WHERE,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {LB_ANNOTATION: where} if where else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    worker = {"name": "worker", "state": {state: {}}}
    status: dict[str, Any] = {"containerStatuses": [worker]}
    if ip:
        status["podIP"] = ip
    if serving:
        status["conditions"] = [{"type": SERVING_CONDITION, "status": serving}]
    return {"metadata": meta, "status": status}


def test_a_pod_with_an_ip_is_a_routable_worker_at_its_ports() -> None:
    assert lb_worker_of(pod("a")) == LbWorker("10.88.0.5:8000", "10.88.0.5:8001", "/ping")
    assert lb_worker_of(pod("a", "fd00::5")).address == "[fd00::5]:8000"


@pytest.mark.parametrize(
    "kw", [{"ip": None}, {"state": "waiting"}, {"state": "terminated"}, {"where": None},
           {"where": "{not json"}],
)  # fmt: skip
def test_pods_without_an_ip_a_running_worker_or_lb_settings_have_no_record(kw) -> None:
    assert lb_worker_of(pod("a", **kw)) is None


@pytest.mark.parametrize("kw", [{"deleting": True}, {"serving": "False"}])
def test_a_deleted_or_taken_out_pod_is_draining(kw) -> None:
    worker = lb_worker_of(pod("a", **kw))
    assert worker is not None and worker.draining
    assert not lb_worker_of(pod("a", serving="True")).draining


def test_a_routed_pod_not_ready_is_counted_by_the_gateways_not_twice() -> None:
    from lockgate.kube.podstates import pod_states

    pods = [pod("a"), pod("b", state="waiting")]  # a: registered, its probe not passed yet
    assert pod_states(pods, {}).initializing == 2
    assert pod_states(pods, {}, wanted_workers(pods)).initializing == 1  # b: image pulling


def test_changes_write_only_what_differs() -> None:
    known = wanted_workers([pod("a"), pod("b")])
    assert changes(known, wanted_workers([pod("a"), pod("b")])) == ({}, [])
    register, remove = changes(known, wanted_workers([pod("a", deleting=True), pod("c")]))
    assert set(register) == {"a", "c"} and register["a"].draining
    assert remove == ["b"]


# -- records in Redis ----------------------------------------------------------------------


class CountingLbWorkers(LbWorkers):
    """`LbWorkers` counting its Redis writes."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self.writes = 0

    async def apply(self, endpoint_id, register, unregister=()) -> None:
        self.writes += 1
        await super().apply(endpoint_id, register, unregister)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_pods_are_registered_once_and_unchanged_pods_cost_no_write(redis: Redis) -> None:
    lb = CountingLbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [pod("a"), pod("b", None)])
    assert await lb.workers("chat") == {"a": LbWorker("10.88.0.5:8000", "10.88.0.5:8001")}
    for _ in range(5):
        await pods.sync("chat", [pod("a"), pod("b", None)])
    assert lb.writes == 1
    await pods.sync("chat", [pod("a"), pod("b", "10.88.0.6")])  # b got its IP
    assert set(await lb.workers("chat")) == {"a", "b"} and lb.writes == 2


async def test_a_terminating_pod_drains_and_a_gone_pod_is_unregistered(redis: Redis) -> None:
    lb = LbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [pod("a"), pod("b", "10.88.0.6")])
    await lb.report_health("chat", "a", "healthy", 200, 1)
    await pods.sync("chat", [pod("a", deleting=True), pod("b", "10.88.0.6")])
    assert (await lb.workers("chat"))["a"].draining
    await pods.sync("chat", [pod("b", "10.88.0.6")])
    assert set(await lb.workers("chat")) == {"b"}
    assert "a" not in await lb.health("chat")


async def test_a_change_publishes_the_l_event_gateways_reload_on(redis: Redis) -> None:
    pubsub = redis.pubsub()
    await pubsub.subscribe("lg:events")
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    await LbPods(LbWorkers(redis)).sync("chat", [pod("a")])
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
    await pubsub.aclose()
    assert message is not None and message["data"] == b"l:chat"


async def test_records_left_by_an_earlier_term_are_read_and_corrected(redis: Redis) -> None:
    lb = LbWorkers(redis)
    await lb.register("chat", "old-pod", LbWorker("10.88.0.9:80", "10.88.0.9:80"))
    await LbPods(lb).sync("chat", [pod("a")])
    assert set(await lb.workers("chat")) == {"a"}


async def test_records_redis_lost_are_written_again_within_a_reread(redis: Redis) -> None:
    lb = CountingLbWorkers(redis)
    clock = Clock()
    pods = LbPods(lb, clock=clock)
    await pods.sync("chat", [pod("a")])
    await redis.flushall()  # a Redis restart without persistence
    await pods.sync("chat", [pod("a")])
    assert await lb.workers("chat") == {}  # not read again yet: no Redis call per tick
    clock.now += REREAD_S
    await pods.sync("chat", [pod("a")])
    assert set(await lb.workers("chat")) == {"a"}


async def test_drain_takes_registered_workers_out_of_routing(redis: Redis) -> None:
    lb = CountingLbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [pod("a"), pod("b", "10.88.0.6")])
    await pods.drain("chat", ["a", "unknown"])
    found = await lb.workers("chat")
    assert found["a"].draining and not found["b"].draining
    await pods.drain("chat", ["a"])  # already draining: nothing to write
    await pods.sync("chat", [pod("a", serving="False"), pod("b", "10.88.0.6")])
    assert lb.writes == 2


async def test_a_worker_that_starts_is_registered_from_its_watch_event(redis: Redis) -> None:
    pubsub = redis.pubsub()
    await pubsub.subscribe("lg:events")
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    lb = LbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [pod("a", state="waiting")])  # the tick: not running yet
    assert await lb.workers("chat") == {}
    await pods.seen("chat", pod("a"))  # the watch: its worker runs
    assert await lb.workers("chat") == {"a": LbWorker("10.88.0.5:8000", "10.88.0.5:8001")}
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
    await pubsub.aclose()
    assert message is not None and message["data"] == b"l:chat"  # gateways reload now


async def test_a_routed_pod_being_deleted_is_drained_from_its_watch_event(redis: Redis) -> None:
    lb = LbWorkers(redis)
    clock = Clock()
    pods = LbPods(lb, clock=clock)
    await pods.sync("chat", [pod("a")])
    listed_at = clock.now  # a tick lists a, not deleted yet
    clock.now += 0.1
    await pods.seen("chat", pod("a", deleting=True))  # `kubectl delete`: the watch sees it
    assert (await lb.workers("chat"))["a"].draining
    await pods.sync("chat", [pod("a")], listed_at=listed_at)  # that older list
    assert (await lb.workers("chat"))["a"].draining  # not routed again
    await pods.seen("chat", pod("a"))  # a stale event: a known worker is left to the tick
    assert (await lb.workers("chat"))["a"].draining


@pytest.mark.parametrize(
    "kw", [{"state": "waiting"}, {"ip": None}, {"deleting": True}, {"serving": "False"}]
)
async def test_a_watch_event_registers_only_a_running_worker_that_is_not_leaving(
    redis: Redis, kw
) -> None:
    lb = LbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [])
    await pods.seen("chat", pod("a", **kw))
    assert await lb.workers("chat") == {}


async def test_a_watch_event_of_an_endpoint_not_synced_this_term_is_left_to_the_tick(
    redis: Redis,
) -> None:
    lb = LbWorkers(redis)
    await LbPods(lb).seen("chat", pod("a"))  # whether it is ours: the tick decides
    assert await lb.workers("chat") == {}


async def test_a_pod_list_older_than_the_watch_event_does_not_unregister_the_worker(
    redis: Redis,
) -> None:
    lb = LbWorkers(redis)
    clock = Clock()
    pods = LbPods(lb, clock=clock)
    await pods.sync("chat", [])
    listed_at = clock.now  # a tick lists the pods: a not running yet
    clock.now += 0.1
    await pods.seen("chat", pod("a"))  # then the watch: a runs
    clock.now += 0.1
    await pods.sync("chat", [pod("a", state="waiting")], listed_at=listed_at)  # that tick
    assert set(await lb.workers("chat")) == {"a"}
    await pods.sync("chat", [], listed_at=clock.now)  # a list after it: a is gone
    assert await lb.workers("chat") == {}


class RecordingCluster:
    """The two cluster calls a resize of ungated pods makes, recorded in order."""

    def __init__(self, lb: LbWorkers) -> None:
        self.lb = lb
        self.calls: list[tuple[str, Any]] = []

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        draining = {w for w, rec in (await self.lb.workers("chat")).items() if rec.draining}
        self.calls.append(("scale", (replicas, draining)))


async def test_a_scale_down_drains_its_victims_before_the_replica_count_drops(
    redis: Redis,
) -> None:
    lb = LbWorkers(redis)
    pods = LbPods(lb)
    listed = [pod("a"), pod("b", "10.88.0.6")]
    await pods.sync("chat", listed)
    cluster = RecordingCluster(lb)
    deployment = {"metadata": {"namespace": "ml", "name": "chat-workers"}, "spec": {"replicas": 2}}
    pool = DeploymentPool(cluster, deployment, listed, endpoint_id="chat", lb=pods)  # type: ignore[arg-type]
    await pool.resize(1, idle_first=["b", "a"])
    assert cluster.calls == [("scale", (1, {"b"}))]


# -- parked pods (strict-resume) -------------------------------------------------------------


def parked_pod(name: str, until_ms: int = 9_000) -> dict[str, Any]:
    listed = pod(name, serving="False")
    listed["metadata"]["annotations"][PARKED_UNTIL] = str(until_ms)
    return listed


def test_a_parked_pod_has_no_routing_record() -> None:
    assert lb_worker_of(parked_pod("a")) is None
    assert parked_until(parked_pod("a", 1234)) == 1234
    assert parked_until(pod("a")) is None


async def test_a_parked_pod_moves_to_the_parked_records_and_back(redis: Redis) -> None:
    lb = LbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [pod("a", serving="False")])  # drained by the scale-down
    assert await pods.park("chat", "a", 9_000)
    assert not await pods.park("chat", "never-routed", 9_000)
    roster = await lb.roster("chat")
    assert (set(roster.workers), roster.parked["a"].until_ms) == (set(), 9_000)
    await pods.sync("chat", [parked_pod("a")])  # listed parked: left as it is
    assert set((await lb.roster("chat")).parked) == {"a"}
    await pods.unpark("chat", "a")
    roster = await lb.roster("chat")
    assert roster.parked == {} and not roster.workers["a"].draining


async def test_a_parked_pod_no_longer_listed_is_no_longer_resumable(redis: Redis) -> None:
    lb = LbWorkers(redis)
    pods = LbPods(lb)
    await pods.sync("chat", [pod("a", serving="False")])
    await pods.park("chat", "a", 9_000)
    await pods.sync("chat", [])  # deleted by hand, or by a rollout's old ReplicaSet
    assert (await lb.roster("chat")).parked == {}


async def test_resume_asks_are_taken_once(redis: Redis) -> None:
    lb = LbWorkers(redis)
    await lb.ask_resume("chat", "a")
    await lb.ask_resume("chat", "a")
    await lb.ask_resume("chat", "b")
    assert await LbPods(lb).resumes("chat") == ["a", "b"]
    assert await lb.take_resumes("chat") == []
