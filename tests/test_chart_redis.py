"""The chart's Redis as `helm template` renders it: bounded by maxmemory, its password on no
command line, a headless governing Service and a PodDisruptionBudget (the real node runs
the same in tests/test_node_redis.py)."""

# ruff: noqa: F811 - the fixtures of tests/test_chart.py, imported, are test arguments here
from __future__ import annotations

import base64
import json

import pytest

from tests.test_chart import RenderError, by_kind, helm, render_chart  # noqa: F401 - fixtures

REDIS = "lockgate-redis"


def redis_conf(docs: list[dict]) -> list[str]:
    return by_kind(docs, "ConfigMap")[REDIS]["data"]["redis.conf"].splitlines()


@pytest.mark.parametrize(
    ("values", "maxmemory"),
    [
        ({}, "644245094"),  # 60 % of the default 1Gi limit
        ({"resources": {"limits": {"memory": "512Mi"}}, "maxmemoryPercent": 50}, "268435456"),
        ({"resources": {"limits": {"memory": "2G"}}}, "1200000000"),
        ({"resources": {"limits": None}, "maxmemory": "300mb"}, "300mb"),
    ],
)
def test_maxmemory_is_a_share_of_the_memory_limit_with_noeviction(
    render_chart, values: dict, maxmemory: str
) -> None:
    conf = redis_conf(render_chart({"redis": values}))
    assert f"maxmemory {maxmemory}" in conf
    assert "maxmemory-policy noeviction" in conf


def test_redis_without_a_memory_limit_or_maxmemory_fails_with_a_message(render_chart) -> None:
    with pytest.raises(RenderError, match=r"redis\.resources\.limits\.memory is required"):
        render_chart({"redis": {"resources": {"limits": None}}})


def test_the_redis_password_is_in_no_command_args_probe_or_config(render_chart) -> None:
    docs = render_chart({"redis": {"auth": {"password": "s3cret-Passw0rd"}}})
    settings = by_kind(docs, "Secret")["lockgate-settings"]["data"]
    assert base64.b64decode(settings["REDIS_PASSWORD"]).decode() == "s3cret-Passw0rd"
    sts = by_kind(docs, "StatefulSet")[REDIS]
    [container] = sts["spec"]["template"]["spec"]["containers"]
    started = json.dumps([container.get("command"), container.get("args")])
    assert "s3cret" not in started and "$(" not in started.replace("$$(", "")
    assert "s3cret" not in json.dumps([container["readinessProbe"], container["livenessProbe"]])
    assert "include /run/redis-auth/auth.conf" in redis_conf(docs)
    assert {"name": "auth", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in sts["spec"][
        "template"
    ]["spec"]["volumes"]


def test_the_statefulset_is_governed_by_a_headless_service(render_chart) -> None:
    docs = render_chart()
    sts = by_kind(docs, "StatefulSet")[REDIS]
    headless = by_kind(docs, "Service")[sts["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]


def test_redis_has_a_disruption_budget_that_blocks_voluntary_eviction(render_chart) -> None:
    docs = render_chart()
    pdb = by_kind(docs, "PodDisruptionBudget")[REDIS]
    assert pdb["spec"]["maxUnavailable"] == 0
    sts = by_kind(docs, "StatefulSet")[REDIS]
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert REDIS not in by_kind(
        render_chart({"redis": {"pdb": {"enabled": False}}}), "PodDisruptionBudget"
    )
