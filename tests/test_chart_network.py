"""The chart's network side, rendered by real helm: NetworkPolicies whose selectors match
the pods the chart writes and the worker pods the operator's own builder writes, the
worker API's port handed to workers, the operator's disruption budget, and what
NOTES.txt prints to reach the gateway and about the placeholder image."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.kube.manifests.names import Owner
from lockgate.kube.manifests.workloads import worker_deployment
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, TemplateSpec
from tests import test_chart
from tests.test_chart import OLDEST, RenderError, by_kind, env_of

# test_chart's fixtures: real helm and `helm template` of the chart.
helm = test_chart.helm
render_chart = test_chart.render_chart

Labels = dict[str, str]


def selects(selector: dict[str, Any], labels: Labels) -> bool:
    """Kubernetes label-selector semantics: matchLabels and matchExpressions, all ANDed."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def admits(rule: dict[str, Any], labels: Labels, *, same_namespace: bool) -> bool:
    """An ingress rule lets in a pod with `labels` (no `from`: every source)."""
    if "from" not in rule:
        return True
    for peer in rule["from"]:
        if "ipBlock" in peer:
            continue
        in_namespace = "namespaceSelector" in peer or same_namespace  # {}: every namespace
        if in_namespace and selects(peer.get("podSelector", {}), labels):
            return True
    return False


def pod_labels(docs: list[dict[str, Any]]) -> dict[str, Labels]:
    """Pod labels of every workload the chart writes, by object name."""
    workloads = by_kind(docs, "Deployment") | by_kind(docs, "StatefulSet") | by_kind(docs, "Job")
    pods = {name: w["spec"]["template"]["metadata"]["labels"] for name, w in workloads.items()}
    pods |= {name: p["metadata"]["labels"] for name, p in by_kind(docs, "Pod").items()}
    return pods


def operator_settings(docs: list[dict[str, Any]]) -> OperatorSettings:
    """The operator's settings as its Deployment's environment gives them."""
    operator = by_kind(docs, "Deployment")["lockgate-operator"]
    env = env_of(operator["spec"]["template"]["spec"]["containers"][0])
    return OperatorSettings(gateway_url=env["LOCKGATE_GATEWAY_URL"])


def worker_pod(settings: OperatorSettings, endpoint: str, namespace: str) -> dict[str, Any]:
    """The pod template of an Endpoint's workers, from the operator's own builder."""
    deployment = worker_deployment(
        Owner(name=endpoint, namespace=namespace, uid="uid-1"),
        EndpointSpec(),
        TemplateSpec(image="img:1"),
        "tpl",
        settings,
        replicas=0,
    )
    return deployment["spec"]["template"]


def rules_by_port(policy: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {port["port"]: rule for rule in policy["spec"]["ingress"] for port in rule["ports"]}


def ports_of(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container["ports"]}


# -- Redis ---------------------------------------------------------------------------------


def test_redis_admits_the_release_pods_and_no_worker(render_chart) -> None:
    docs = render_chart()
    policy = by_kind(docs, "NetworkPolicy")["lockgate-redis"]
    pods = pod_labels(docs)
    assert selects(policy["spec"]["podSelector"], pods["lockgate-redis"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = rules_by_port(policy).values()
    assert list(rules_by_port(policy)) == [6379]
    for name in ("lockgate-gateway", "lockgate-operator"):
        assert admits(rule, pods[name], same_namespace=True), name
    settings = operator_settings(docs)
    # Even a worker of an endpoint named like the release, in the release's namespace.
    for endpoint in ("echo", "lockgate"):
        worker = worker_pod(settings, endpoint, "lockgate")["metadata"]["labels"]
        assert not admits(rule, worker, same_namespace=True), endpoint
    assert not admits(rule, {"app": "something-else"}, same_namespace=True)


def test_redis_admits_extra_peers_and_has_no_policy_when_external(render_chart) -> None:
    exporter = {"podSelector": {"matchLabels": {"app": "redis-exporter"}}}
    docs = render_chart({"networkPolicy": {"redisFrom": [exporter]}})
    [rule] = by_kind(docs, "NetworkPolicy")["lockgate-redis"]["spec"]["ingress"]
    assert admits(rule, {"app": "redis-exporter"}, same_namespace=True)
    external = {"redis": {"enabled": False}, "externalRedis": {"url": "redis://r:6379/0"}}
    assert "lockgate-redis" not in by_kind(render_chart(external), "NetworkPolicy")


# -- the gateway's two ports ---------------------------------------------------------------


def test_the_gateway_serves_workers_on_their_own_port_and_the_operator_hands_it_out(
    render_chart,
) -> None:
    docs = render_chart()
    gateway = by_kind(docs, "Deployment")["lockgate-gateway"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert ports_of(container) == {"http": 8080, "worker": 8081}
    assert env_of(container)["LOCKGATE_WORKER_PORT"] == "8081"
    service = by_kind(docs, "Service")["lockgate-gateway"]
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"http": (8080, "http"), "worker": (8081, "worker")}
    assert service["spec"]["ports"][0]["name"] == "http"  # the first port stays the job API
    worker = worker_pod(operator_settings(docs), "echo", "ml")["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in worker["env"]}
    url = "http://lockgate-gateway.lockgate.svc.cluster.local:8081/v2/echo/"
    assert env["RUNPOD_WEBHOOK_GET_JOB"].startswith(f"{url}job-take/")
    assert env["RUNPOD_WEBHOOK_PING"].startswith(f"{url}ping/")


def test_the_worker_port_admits_only_operator_built_workers_of_any_namespace(
    render_chart,
) -> None:
    docs = render_chart()
    policy = by_kind(docs, "NetworkPolicy")["lockgate-gateway"]
    pods = pod_labels(docs)
    assert selects(policy["spec"]["podSelector"], pods["lockgate-gateway"])
    rules = rules_by_port(policy)
    assert set(rules) == {8080, 8081}
    assert "from" not in rules[8080]  # clients, the Ingress controller, Prometheus
    settings = operator_settings(docs)
    for namespace in ("lockgate", "ml"):
        worker = worker_pod(settings, "echo", namespace)["metadata"]["labels"]
        assert admits(rules[8081], worker, same_namespace=False), namespace
    for name in ("lockgate-operator", "lockgate-redis", "lockgate-test"):
        assert not admits(rules[8081], pods[name], same_namespace=True), name


def test_workers_outside_the_cluster_open_the_worker_port(render_chart) -> None:
    docs = render_chart({"networkPolicy": {"workersOutside": True}})
    rules = rules_by_port(by_kind(docs, "NetworkPolicy")["lockgate-gateway"])
    assert "from" not in rules[8081]


def test_extra_worker_peers_are_admitted_to_the_worker_port(render_chart) -> None:
    peer = {"ipBlock": {"cidr": "10.20.0.0/16"}}
    docs = render_chart({"networkPolicy": {"workerFrom": [peer]}})
    rules = rules_by_port(by_kind(docs, "NetworkPolicy")["lockgate-gateway"])
    assert peer in rules[8081]["from"]


def test_worker_port_zero_keeps_one_port_for_both_apis(render_chart) -> None:
    docs = render_chart({"gateway": {"workerPort": 0}})
    gateway = by_kind(docs, "Deployment")["lockgate-gateway"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert ports_of(container) == {"http": 8080}
    assert "LOCKGATE_WORKER_PORT" not in env_of(container)
    service = by_kind(docs, "Service")["lockgate-gateway"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    url = operator_settings(docs).gateway_url
    assert url == "http://lockgate-gateway.lockgate.svc.cluster.local:8080"
    assert list(rules_by_port(by_kind(docs, "NetworkPolicy")["lockgate-gateway"])) == [8080]


def test_a_worker_port_equal_to_the_job_api_port_fails_with_a_message(render_chart) -> None:
    with pytest.raises(RenderError, match=r"gateway\.workerPort must differ from gateway\.port"):
        render_chart({"gateway": {"workerPort": 8080}})


def test_network_policies_are_one_value_away_from_off(render_chart) -> None:
    assert set(by_kind(render_chart(), "NetworkPolicy")) == {
        "lockgate-gateway",
        "lockgate-redis",
        "lockgate-manage",
        *CLOSED,
    }
    docs = render_chart({"networkPolicy": {"enabled": False}})
    assert by_kind(docs, "NetworkPolicy") == {}


# -- every other pod ------------------------------------------------------------------------

# The pods that serve nothing: the operator (its probes only), `helm test`, the uninstall hook.
CLOSED = ("lockgate-operator", "lockgate-test", "lockgate-uninstall-cleanup")


@pytest.mark.parametrize(
    "values",
    [{}, {"redis": {"sentinel": {"enabled": True}}}, {"operator": {"namespaces": ["team-a"]}}],
    ids=str,
)
def test_every_pod_of_the_chart_is_selected_by_its_own_policy(render_chart, values) -> None:
    docs = render_chart(values)
    policies = by_kind(docs, "NetworkPolicy")
    for name, labels in pod_labels(docs).items():
        chosen = [
            p for p, policy in policies.items() if selects(policy["spec"]["podSelector"], labels)
        ]
        assert chosen == [name], name


def test_the_pods_that_serve_nothing_admit_no_one(render_chart) -> None:
    policies = by_kind(render_chart(), "NetworkPolicy")
    for name in CLOSED:
        assert policies[name]["spec"]["policyTypes"] == ["Ingress"], name
        assert policies[name]["spec"]["ingress"] == [], name
    without_hook = render_chart({"uninstallHook": {"enabled": False}})
    assert "lockgate-uninstall-cleanup" not in by_kind(without_hook, "NetworkPolicy")


def test_the_management_api_admits_every_source_unless_told_whom(render_chart) -> None:
    docs = render_chart()
    pods = pod_labels(docs)
    [rule] = rules_by_port(by_kind(docs, "NetworkPolicy")["lockgate-manage"]).values()
    assert list(rules_by_port(by_kind(docs, "NetworkPolicy")["lockgate-manage"])) == [8081]
    assert admits(rule, {"app": "anyone"}, same_namespace=False)
    console = {"podSelector": {"matchLabels": {"app": "admin-console"}}}
    docs = render_chart({"networkPolicy": {"manageFrom": [console]}})
    [rule] = by_kind(docs, "NetworkPolicy")["lockgate-manage"]["spec"]["ingress"]
    assert admits(rule, {"app": "admin-console"}, same_namespace=True)
    assert admits(rule, pods["lockgate-test"], same_namespace=True)  # `helm test` asks it
    assert not admits(rule, {"app": "anyone"}, same_namespace=True)
    assert not admits(rule, pods["lockgate-gateway"], same_namespace=True)


# -- the operator's disruption budget ------------------------------------------------------


@pytest.mark.parametrize(("replicas", "expected"), [(1, False), (2, True), (3, True)])
def test_the_operator_has_a_disruption_budget_only_with_several_replicas(
    render_chart, replicas: int, expected: bool
) -> None:
    docs = render_chart({"operator": {"replicaCount": replicas}})
    budget = by_kind(docs, "PodDisruptionBudget").get("lockgate-operator")
    assert (budget is not None) == expected
    if budget:
        assert budget["spec"]["maxUnavailable"] == 1
        assert selects(budget["spec"]["selector"], pod_labels(docs)["lockgate-operator"])
        assert not selects(budget["spec"]["selector"], pod_labels(docs)["lockgate-gateway"])


def test_the_operators_disruption_budget_is_policy_v1beta1_on_kubernetes_1_20(
    render_chart,
) -> None:
    docs = render_chart({"operator": {"replicaCount": 2}}, kube_version=OLDEST)
    assert by_kind(docs, "PodDisruptionBudget")["lockgate-operator"]["apiVersion"] == (
        "policy/v1beta1"
    )


# -- NOTES.txt -----------------------------------------------------------------------------


def test_notes_step_5_port_forwards_the_gateway_and_curls_the_forwarded_url(
    render_chart,
) -> None:
    notes = render_chart(notes=True)
    step5 = notes[notes.index("5. Run a job") :]
    assert "kubectl -n lockgate port-forward svc/lockgate-gateway 8080:8080 &" in step5
    assert "URL=http://127.0.0.1:8080" in step5
    assert "$URL/v2/echo/runsync" in step5
    assert "svc.cluster.local" not in step5  # not an address a laptop can reach


def test_notes_step_5_uses_the_public_url_when_there_is_one(render_chart) -> None:
    notes = render_chart({"baseUrl": "https://gpu.example.com"}, notes=True)
    step5 = notes[notes.index("5. Run a job") :]
    assert "URL=https://gpu.example.com" in step5
    assert "port-forward" not in step5


def test_notes_warn_while_the_image_repository_is_the_placeholder(render_chart) -> None:
    assert "image.repository is still the chart's placeholder" in render_chart(notes=True)
    mine = {"image": {"repository": "ghcr.io/acme/lockgate-control-plane"}}
    assert "placeholder" not in render_chart(mine, notes=True)
