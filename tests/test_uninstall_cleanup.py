"""`lockgate uninstall-cleanup` (kube/uninstall.py), run as a user runs it (the command, a
kubeconfig) against the real kube-apiserver and controller-manager of tests/envtest.py.
The chart's pre-delete hook on a real node: tests/test_node_uninstall.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from lockgate.kube.crds import GROUP, VERSION
from lockgate.kube.handlers import FINALIZER
from lockgate.kube.manifests import names
from lockgate.kube.manifests.build import build_job
from lockgate.kube.manifests.names import Owner
from lockgate.kube.settings import OperatorSettings
from lockgate.kube.uninstall import finalizers_without_ours, namespaces_to_clean, owned_by_endpoint
from lockgate.models.build import new_build
from lockgate.models.source import GitSource
from tests.conftest import wait_until
from tests.test_chart import CHART, find_helm

pytest_plugins = ["kube_fixtures"]

REPO = Path(__file__).resolve().parent.parent
OPERATOR = {"app.kubernetes.io/name": "lockgate", "app.kubernetes.io/component": "operator"}


# -- decisions --------------------------------------------------------------------------------


def test_only_the_operators_finalizer_is_removed() -> None:
    obj = {"metadata": {"finalizers": ["other.io/keep", FINALIZER]}}
    assert finalizers_without_ours(obj) == ["other.io/keep"]
    assert finalizers_without_ours({"metadata": {"finalizers": ["other.io/keep"]}}) is None


def test_only_objects_an_endpoint_owns_are_workloads_to_delete() -> None:
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Endpoint", "name": "e", "uid": "u"}
    assert owned_by_endpoint({"metadata": {"ownerReferences": [ref]}})
    assert not owned_by_endpoint({"metadata": {"ownerReferences": [{**ref, "kind": "Other"}]}})
    assert not owned_by_endpoint({"metadata": {}})


def test_namespaces_are_the_watched_ones_plus_the_endpoint_namespace_or_all() -> None:
    assert namespaces_to_clean(["a", "b"], "c") == ("a", "b", "c")
    assert namespaces_to_clean(["a"], "a") == ("a",)
    assert namespaces_to_clean([], "c") == ()  # cluster-wide: every namespace


# -- against the API server -------------------------------------------------------------------


class World:
    """An operator Deployment, Endpoints holding the finalizer, their workloads."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api
        self.apps = k8s.AppsV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        suffix = uuid.uuid4().hex[:6]
        self.release_ns = f"rel-{suffix}"
        self.ns_a, self.ns_b = f"team-a-{suffix}", f"team-b-{suffix}"
        for ns in (self.release_ns, self.ns_a, self.ns_b):
            self.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))

    def operator(self, replicas: int = 1) -> None:
        pod = {"containers": [{"name": "operator", "image": "example.test/lockgate:1"}]}
        self.apps.create_namespaced_deployment(self.release_ns, self._deployment(
            "lockgate-operator", OPERATOR, replicas, pod
        ))  # fmt: skip

    def operator_pods(self) -> list[Any]:
        selector = "app.kubernetes.io/component=operator"
        return self.core.list_namespaced_pod(self.release_ns, label_selector=selector).items

    def _deployment(self, name: str, labels: dict, replicas: int, pod: dict, **meta: Any) -> dict:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels, **meta},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        }

    def endpoint(self, namespace: str, name: str) -> dict:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Endpoint",
            "metadata": {"name": name, "finalizers": [FINALIZER]},
            "spec": {"templateId": "echo", "computeType": "CPU"},
        }
        ep = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "endpoints", body
        )
        ref = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Endpoint",
            "name": name,
            "uid": ep["metadata"]["uid"],
            "controller": True,
        }
        pod = {"containers": [{"name": "worker", "image": "example.test/echo:1"}]}
        for component, create in (
            ("worker", self.apps.create_namespaced_deployment),
            ("flashboot", self.apps.create_namespaced_daemon_set),
        ):
            labels = names.labels(name, component)
            obj = self._deployment(
                f"{name}-{component}", labels, 1, pod, ownerReferences=[ref]
            )  # fmt: skip
            if component == "flashboot":
                obj["kind"] = "DaemonSet"
                del obj["spec"]["replicas"]
            create(namespace, obj)
        return ep

    def lookalike(self, namespace: str) -> None:
        """A user's Deployment with the workers' labels but no Endpoint owning it."""
        pod = {"containers": [{"name": "c", "image": "example.test/mine:1"}]}
        labels = names.labels("mine", "worker")
        self.apps.create_namespaced_deployment(
            namespace, self._deployment("mine-workers", labels, 1, pod)
        )

    def workloads(self, namespace: str) -> set[str]:
        deploys = self.apps.list_namespaced_deployment(namespace).items
        daemons = self.apps.list_namespaced_daemon_set(namespace).items
        return {f"Deployment/{d.metadata.name}" for d in deploys} | {
            f"DaemonSet/{d.metadata.name}" for d in daemons
        }

    def finalizers(self, namespace: str, name: str) -> list[str]:
        ep = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "endpoints", name)
        return ep["metadata"].get("finalizers") or []

    def gone(self, namespace: str, name: str) -> bool:
        try:
            self.finalizers(namespace, name)
        except ApiException as err:
            return err.status == 404
        return False

    def delete_endpoint(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "endpoints", name)

    def tear_down(self) -> None:
        for ns in (self.ns_a, self.ns_b):
            eps = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "endpoints")
            for ep in eps["items"]:
                patch = {"metadata": {"finalizers": None}}
                with contextlib.suppress(ApiException):
                    self.custom.patch_namespaced_custom_object(
                        GROUP, VERSION, ns, "endpoints", ep["metadata"]["name"], patch,
                        _content_type="application/merge-patch+json",
                    )  # fmt: skip
        for ns in (self.release_ns, self.ns_a, self.ns_b):
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(ns)


@pytest.fixture
def world(kube: k8s.ApiClient) -> Iterator[World]:
    made = World(kube)
    yield made
    made.tear_down()


def cleanup(envtest: Any, world: World, *args: str) -> subprocess.CompletedProcess[str]:
    """`lockgate uninstall-cleanup …` with the envtest kubeconfig, as a person runs it."""
    env = {**os.environ, "KUBECONFIG": str(envtest.kubeconfig)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "operator"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "lockgate.cli", "uninstall-cleanup"]
    cmd += ["--release-namespace", world.release_ns, "--operator-deployment", "lockgate-operator"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_cleanup_stops_the_operator_deletes_workloads_and_frees_endpoints(
    envtest: Any, world: World
) -> None:
    world.operator()
    world.endpoint(world.ns_a, "alpha")
    world.lookalike(world.ns_a)
    wait_until(world.operator_pods, "the operator's pod", 60)

    done = cleanup(envtest, world, "--timeout", "60")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "operator stopped" in done.stdout and "done:" in done.stdout, done.stdout
    operator = world.apps.read_namespaced_deployment("lockgate-operator", world.release_ns)
    assert operator.spec.replicas == 0 and not world.operator_pods()
    assert world.workloads(world.ns_a) == {"Deployment/mine-workers"}, "only the look-alike"
    assert world.finalizers(world.ns_a, "alpha") == []
    world.delete_endpoint(world.ns_a, "alpha")
    wait_until(lambda: world.gone(world.ns_a, "alpha"), "the Endpoint to be deleted", 30)


def test_cleanup_with_builds_deletes_the_build_jobs_only(envtest: Any, world: World) -> None:
    """`--builds` (the chart passes it with builds.registry): the operator's build Jobs
    go (a running build stops), another Job of the namespace stays."""
    batch = k8s.BatchV1Api(world.apps.api_client)
    settings = OperatorSettings(builds_registry="registry.example.test/b")
    source = GitSource(url="https://git.example.test/o/r.git")
    job = build_job(Owner("alpha", world.ns_a, "uid-a"), new_build(), source, settings)
    del job["metadata"]["ownerReferences"]  # no Endpoint in this test
    batch.create_namespaced_job(world.ns_a, job)
    other = {
        "metadata": {"name": "theirs"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "example.test/x:1"}],
                }
            }
        },
    }
    batch.create_namespaced_job(world.ns_a, other)

    done = cleanup(envtest, world, "--namespace", world.ns_a, "--builds", "--timeout", "30")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 build Job(s) deleted" in done.stdout, done.stdout
    names = [j.metadata.name for j in batch.list_namespaced_job(world.ns_a).items]
    assert names == ["theirs"]


def test_cleanup_with_namespaces_leaves_other_namespaces_alone(envtest: Any, world: World) -> None:
    world.endpoint(world.ns_a, "alpha")
    world.endpoint(world.ns_b, "beta")

    done = cleanup(envtest, world, "--namespace", world.ns_a, "--timeout", "30")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "operator Deployment" in done.stdout and "not found" in done.stdout
    assert world.workloads(world.ns_a) == set()
    assert world.finalizers(world.ns_a, "alpha") == []
    assert world.workloads(world.ns_b) == {"Deployment/beta-worker", "DaemonSet/beta-flashboot"}
    assert world.finalizers(world.ns_b, "beta") == [FINALIZER]


def test_cleanup_ends_with_a_clear_message_when_the_operator_does_not_stop(
    envtest: Any, world: World
) -> None:
    world.operator(replicas=0)
    stuck = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stuck", "labels": OPERATOR, "finalizers": ["test.lockgate.dev/hold"]},
        "spec": {"containers": [{"name": "c", "image": "example.test/lockgate:1"}]},
    }
    world.core.create_namespaced_pod(world.release_ns, stuck)
    world.endpoint(world.ns_a, "alpha")
    try:
        done = cleanup(envtest, world, "--timeout", "3")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "FAILED: operator pods still there after the timeout: stuck" in done.stdout
        assert world.finalizers(world.ns_a, "alpha") == [FINALIZER], "nothing done half-way"
    finally:
        world.core.patch_namespaced_pod(
            "stuck", world.release_ns, {"metadata": {"finalizers": None}}
        )


# -- the chart's pre-delete hook (helm template) -------------------------------------------------

HOOK = "app.kubernetes.io/component"


def render_chart(values: dict | None = None) -> list[dict]:
    """`helm template lockgate -n lockgate` of the chart with `values` (real helm)."""
    helm = find_helm()
    if helm is None:
        pytest.skip("helm missing: `make tools` installs it")
    done = subprocess.run(
        [helm, "template", "lockgate", str(CHART), "-n", "lockgate", "-f", "-"],
        input=json.dumps(values or {}), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def hook_objects(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["metadata"].get("labels", {}).get(HOOK) == "uninstall-cleanup"]


def test_hook_objects_are_pre_delete_hooks_created_in_order_and_deleted_after_success() -> None:
    objs = hook_objects(render_chart())
    kinds = {d["kind"] for d in objs}
    assert kinds == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "NetworkPolicy",
        "Job",
    }
    weight = {}
    for obj in objs:
        notes = obj["metadata"]["annotations"]
        assert notes["helm.sh/hook"] == "pre-delete"
        assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weight[obj["kind"]] = int(notes["helm.sh/hook-weight"])
    assert weight["ServiceAccount"] < weight["Role"] == weight["ClusterRole"] < weight["Job"]
    assert weight["NetworkPolicy"] < weight["Job"]


def test_hook_job_runs_the_command_under_pod_security_restricted() -> None:
    [job] = [d for d in hook_objects(render_chart()) if d["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"][:3] == [
        "uninstall-cleanup",
        "--release-namespace=lockgate",
        "--operator-deployment=lockgate-operator",
    ]
    assert pod["serviceAccountName"] == "lockgate-uninstall-cleanup"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert job["spec"]["activeDeadlineSeconds"] > int(container["args"][-1].split("=")[1])


def test_hook_rbac_grants_only_what_the_command_uses() -> None:
    objs = hook_objects(render_chart())
    rules = [r for d in objs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    granted = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
    assert not {res for res, _ in granted} & {"secrets", "configmaps", "*"}
    assert ("deployments", "delete") in granted and ("endpoints", "patch") in granted
    assert ("deployments", "create") not in granted and ("pods", "delete") not in granted
    [scale] = [r for r in rules if r["resources"] == ["deployments/scale"]]
    assert scale["resourceNames"] == ["lockgate-operator"]


def test_with_builds_the_hook_deletes_build_jobs() -> None:
    """builds.registry set: the hook runs with `--builds` and may list and delete Jobs;
    unset (above), it may not."""
    objs = hook_objects(render_chart({"builds": {"registry": "registry.example.test/b"}}))
    rules = [r for d in objs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    assert {"list", "delete"} == {
        v for r in rules if r["resources"] == ["jobs"] for v in r["verbs"]
    }
    [job] = [d for d in objs if d["kind"] == "Job"]
    assert "--builds" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    plain = hook_objects(render_chart())
    assert not [r for d in plain if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]
                if "jobs" in r["resources"]]  # fmt: skip


def test_namespaced_hook_gets_a_role_per_watched_namespace_and_no_cluster_role() -> None:
    values = {"operator": {"namespaces": ["team-a", "team-b"], "peering": True}}
    objs = hook_objects(render_chart(values))
    assert not [d for d in objs if d["kind"].startswith("Cluster")]
    roles = {
        (d["metadata"].get("namespace"), d["metadata"]["name"]) for d in objs if d["kind"] == "Role"
    }
    assert {("team-a", "lockgate-uninstall-cleanup-workloads"),
            ("team-b", "lockgate-uninstall-cleanup-workloads")} <= roles  # fmt: skip
    [job] = [d for d in objs if d["kind"] == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--namespace=team-a", "--namespace=team-b"} <= set(args)
    assert any(a.startswith("--peering-selector=") for a in args)


def test_hook_can_be_switched_off() -> None:
    assert hook_objects(render_chart({"uninstallHook": {"enabled": False}})) == []
