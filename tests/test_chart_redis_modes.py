"""The chart's Redis connection in every mode, as `helm template` renders it: the chart's
one pod, its Sentinel set, and an external standalone, Cluster or Sentinel Redis. The
gateway, the operator and the management API get the same LOCKGATE_REDIS_* environment
(one helper), which lockgate's own settings accept; passwords from a user's Secret are
read by reference and never copied; contradictions fail with a message."""

# ruff: noqa: F811 - the fixtures of tests/test_chart.py, imported, are test arguments here
from __future__ import annotations

import base64
from typing import Any

import pytest

from lockgate.store.connection import RedisSettings, check
from tests.test_chart import (  # noqa: F401 - fixtures
    RenderError,
    by_kind,
    env_of,
    helm,
    render_chart,
)
from tests.test_chart_network import admits, pod_labels, rules_by_port

COMPONENTS = ("lockgate-gateway", "lockgate-operator", "lockgate-manage")
EXTERNAL = {"redis": {"enabled": False}}
SENTINELS = "s1.redis:26379,s2.redis:26379,s3.redis:26379"
CHART_SENTINEL = {"redis": {"sentinel": {"enabled": True}}}


def external(**values: Any) -> dict[str, Any]:
    return {**EXTERNAL, "externalRedis": values}


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    deployments = by_kind(docs, "Deployment")
    return {name: deployments[name]["spec"]["template"]["spec"] for name in COMPONENTS}


def redis_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The LOCKGATE_REDIS_* environment, the same in the three components (asserted)."""
    envs = []
    for spec in pod_specs(docs).values():
        env = env_of(spec["containers"][0])
        envs.append({k: v for k, v in env.items() if k.startswith("LOCKGATE_REDIS_")})
    assert envs[0] == envs[1] == envs[2]
    return envs[0]


def settings_data(docs: list[dict[str, Any]]) -> dict[str, str]:
    secret = by_kind(docs, "Secret")["lockgate-settings"]["data"]
    return {key: base64.b64decode(value).decode() for key, value in secret.items()}


def lockgate_settings(env: dict[str, Any]) -> RedisSettings:
    """lockgate's settings from the plain values of `env` (a secret stands for itself)."""
    fields = {
        k.removeprefix("LOCKGATE_").lower(): v if isinstance(v, str) else "from-a-secret"
        for k, v in env.items()
    }
    settings = RedisSettings.of(**fields)
    check(settings)
    return settings


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({}, {"LOCKGATE_REDIS_URL"}),
        (external(url="redis://r:6379/0"), {"LOCKGATE_REDIS_URL"}),
        (
            external(clusterNodes="c0:6379,c1:6379", username="lg", password="pw"),
            {"LOCKGATE_REDIS_CLUSTER_NODES", "LOCKGATE_REDIS_USERNAME", "LOCKGATE_REDIS_PASSWORD"},
        ),
        (
            external(sentinels=SENTINELS, sentinelMaster="mymaster", minReplicasAck=1),
            {
                "LOCKGATE_REDIS_SENTINELS",
                "LOCKGATE_REDIS_SENTINEL_MASTER",
                "LOCKGATE_REDIS_MIN_REPLICAS_ACK",
            },
        ),
        (
            CHART_SENTINEL,
            {
                "LOCKGATE_REDIS_SENTINELS",
                "LOCKGATE_REDIS_SENTINEL_MASTER",
                "LOCKGATE_REDIS_PASSWORD",
                "LOCKGATE_REDIS_SENTINEL_PASSWORD",
            },
        ),
    ],
    ids=["chart", "url", "cluster", "sentinel", "chart-sentinel"],
)
def test_every_mode_gives_the_three_components_one_redis_environment(
    render_chart, values: dict, names: set[str]
) -> None:
    env = redis_env(render_chart(values))
    assert set(env) == names
    lockgate_settings(env)  # what lockgate itself accepts


def test_an_external_cluster_and_sentinel_reach_lockgate_as_written(render_chart) -> None:
    cluster = redis_env(render_chart(external(clusterNodes="c0:6379,c1:6379", minReplicasAck=1)))
    assert lockgate_settings(cluster).describe() == "Redis Cluster via c0:6379,c1:6379"
    assert cluster["LOCKGATE_REDIS_MIN_REPLICAS_ACK"] == "1"  # each master's own replicas
    sentinel = redis_env(
        render_chart(external(sentinels=SENTINELS, sentinelMaster="mymaster", minReplicasAck=1))
    )
    assert lockgate_settings(sentinel).describe() == f"Sentinel master 'mymaster' via {SENTINELS}"
    assert sentinel["LOCKGATE_REDIS_MIN_REPLICAS_ACK"] == "1"


def test_a_password_in_an_existing_secret_is_read_by_reference_and_never_copied(
    render_chart,
) -> None:
    values = external(
        sentinels=SENTINELS,
        sentinelMaster="mymaster",
        existingSecret="redis-auth",
        existingSecretPasswordKey="redis-password",
        existingSecretSentinelPasswordKey="sentinel-password",
    )
    docs = render_chart(values)
    env = redis_env(docs)
    assert env["LOCKGATE_REDIS_PASSWORD"] == {
        "secretKeyRef": {"name": "redis-auth", "key": "redis-password"}
    }
    assert env["LOCKGATE_REDIS_SENTINEL_PASSWORD"] == {
        "secretKeyRef": {"name": "redis-auth", "key": "sentinel-password"}
    }
    data = settings_data(docs)
    assert not {k for k in data if "REDIS" in k}, data  # no URL, no password
    assert "redis-auth" not in by_kind(docs, "Secret")


def test_a_password_given_in_values_is_kept_in_the_settings_secret(render_chart) -> None:
    docs = render_chart(external(url="redis://r:6379/0", password="pw", sentinelPassword=""))
    env = redis_env(docs)
    ref = {"secretKeyRef": {"name": "lockgate-settings", "key": "LOCKGATE_REDIS_PASSWORD"}}
    assert env["LOCKGATE_REDIS_PASSWORD"] == ref
    data = settings_data(docs)
    assert data["LOCKGATE_REDIS_PASSWORD"] == "pw"
    assert data["LOCKGATE_REDIS_URL"] == "redis://r:6379/0"


def test_the_ca_bundle_is_mounted_read_only_in_the_three_components(render_chart) -> None:
    tls = {"enabled": True, "existingSecret": "redis-ca", "caKey": "bundle.pem"}
    docs = render_chart(external(clusterNodes="c0:6379", tls=tls))
    env = redis_env(docs)
    assert env["LOCKGATE_REDIS_TLS"] == "true"
    assert env["LOCKGATE_REDIS_TLS_CA_FILE"] == "/etc/lockgate/redis-tls/bundle.pem"
    for name, spec in pod_specs(docs).items():
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["redis-tls"]["secret"] == {
            "secretName": "redis-ca",
            "items": [{"key": "bundle.pem", "path": "bundle.pem"}],
        }, name
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["redis-tls"] == {
            "name": "redis-tls",
            "mountPath": "/etc/lockgate/redis-tls",
            "readOnly": True,
        }, name


def test_without_tls_no_ca_volume_is_mounted(render_chart) -> None:
    for spec in pod_specs(render_chart(external(clusterNodes="c0:6379"))).values():
        assert "redis-tls" not in {v["name"] for v in spec["volumes"]}


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (external(url="redis://r:6379/0", clusterNodes="c:6379"), "not externalRedis.url and"),
        (external(clusterNodes="c:6379", sentinels=SENTINELS), "give one external Redis mode"),
        (external(sentinels=SENTINELS), "needs externalRedis.sentinelMaster"),
        (external(url="redis://r:6379/0", sentinelMaster="m"), "needs externalRedis.sentinels"),
        (external(url="redis://r/0", password="a", existingSecret="s"), "not both"),
        (external(url="redis://r/0", tls={"enabled": True}), "needs a rediss:// URL"),
        (external(url="rediss://r/0", tls={"existingSecret": "ca"}), "needs externalRedis.tls"),
        (external(url="redis://r/0", sentinelPassword="x"), "are for externalRedis.sentinels"),
        (
            {**external(clusterNodes="c:6379", password="p"), "settings": {"existingSecret": "s"}},
            "give externalRedis.existingSecret instead",
        ),
        (
            {**external(url="redis://r/0"), "settings": {"existingSecret": "s"}},
            "put LOCKGATE_REDIS_URL in that Secret",
        ),
        ({"externalRedis": {"clusterNodes": "c:6379"}}, "only with redis.enabled=false"),
        (EXTERNAL, r"externalRedis\.url"),  # the schema says it first
        ({"redis": {"sentinel": {"enabled": True, "quorum": 4}}}, "quorum cannot exceed"),
    ],
)
def test_contradicting_redis_values_fail_with_a_message(
    render_chart, values: dict, complaint: str
) -> None:
    with pytest.raises(RenderError, match=complaint):
        render_chart(values)


# -- the chart's Sentinel set


def test_the_default_redis_stays_one_pod_without_sentinel(render_chart) -> None:
    docs = render_chart()
    statefulset = by_kind(docs, "StatefulSet")["lockgate-redis"]["spec"]
    assert statefulset["replicas"] == 1
    assert [c["name"] for c in statefulset["template"]["spec"]["containers"]] == ["redis"]
    assert by_kind(docs, "PodDisruptionBudget")["lockgate-redis"]["spec"]["maxUnavailable"] == 0


def test_sentinel_runs_three_pods_each_a_server_and_a_sentinel(render_chart) -> None:
    docs = render_chart(CHART_SENTINEL)
    statefulset = by_kind(docs, "StatefulSet")["lockgate-redis"]["spec"]
    assert statefulset["replicas"] == 3
    pod = statefulset["template"]["spec"]
    redis, sentinel = pod["containers"]
    assert redis["command"] == ["sh", "/etc/redis/start-redis.sh"]
    assert sentinel["command"] == ["sh", "/etc/redis/start-sentinel.sh"]
    assert sentinel["ports"] == [{"name": "sentinel", "containerPort": 26379, "protocol": "TCP"}]
    for container in (redis, sentinel):  # Pod Security `restricted`, as the single pod
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        env = env_of(container)
        assert env["ME"] == "$(POD_NAME).$(PEERS)"
        assert env["PEERS"] == "lockgate-redis-headless.lockgate.svc.cluster.local"
        assert env["REDISCLI_AUTH"]["secretKeyRef"]["key"] == "REDIS_PASSWORD"
    assert pod["securityContext"]["runAsNonRoot"] is True
    config = by_kind(docs, "ConfigMap")["lockgate-redis"]["data"]
    sentinel_script = config["start-sentinel.sh"]
    for line in (
        "sentinel resolve-hostnames yes",
        "sentinel announce-hostnames yes",
        "sentinel monitor lockgate $master 6379 2",
        "sentinel auth-pass lockgate",
        "sentinel sentinel-pass",
    ):
        assert line in sentinel_script, line
    assert "masterauth" in config["start-redis.sh"]
    assert "include /run/redis-auth/auth.conf" in config["redis.conf"]


def test_sentinel_pods_are_named_for_the_components_and_served_headless(render_chart) -> None:
    docs = render_chart(CHART_SENTINEL)
    env = redis_env(docs)
    pods = [
        f"lockgate-redis-{i}.lockgate-redis-headless.lockgate.svc.cluster.local" for i in (0, 1, 2)
    ]
    assert env["LOCKGATE_REDIS_SENTINELS"] == ",".join(f"{p}:26379" for p in pods)
    assert env["LOCKGATE_REDIS_SENTINEL_MASTER"] == "lockgate"
    assert "LOCKGATE_REDIS_URL" not in settings_data(docs)
    headless = by_kind(docs, "Service")["lockgate-redis-headless"]["spec"]
    assert {p["name"]: p["port"] for p in headless["ports"]} == {"redis": 6379, "sentinel": 26379}
    assert headless["publishNotReadyAddresses"] is True


def test_sentinel_allows_one_pod_out_at_a_time(render_chart) -> None:
    pdb = by_kind(render_chart(CHART_SENTINEL), "PodDisruptionBudget")["lockgate-redis"]
    assert pdb["spec"]["maxUnavailable"] == 1


def test_the_sentinel_port_admits_the_release_and_the_redis_pods_only(render_chart) -> None:
    docs = render_chart(CHART_SENTINEL)
    rules = rules_by_port(by_kind(docs, "NetworkPolicy")["lockgate-redis"])
    assert set(rules) == {6379, 26379}
    pods = pod_labels(docs)
    for name in ("lockgate-gateway", "lockgate-operator", "lockgate-manage", "lockgate-redis"):
        assert admits(rules[26379], pods[name], same_namespace=True), name
    worker = {**pods["lockgate-gateway"], "app.kubernetes.io/managed-by": "lockgate-operator"}
    assert not admits(rules[26379], worker, same_namespace=True)
