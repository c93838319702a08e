"""The chart's RBAC, for real: the operator runs as the chart's ServiceAccount (an x509
client certificate naming it) against an API server that enforces
OwnerReferencesPermissionEnforcement, and real `helm install`s of several releases meet
on one API server.

One envtest of its own (not the session one of kube_fixtures: a cluster-wide operator here
would fight the session operator over its Endpoints). Issue 12, items 1-4.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from envtest import EnvTest, binaries_dir, sign_client_cert
from lockgate.apps.operator import run
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube.crds import GROUP, VERSION
from lockgate.kube.settings import OperatorSettings
from lockgate.models import secrets
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry, connect, key_digest
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "lockgate"
TOOLS = Path.home() / ".cache" / "lockgate-tools" / "bin"
RELEASE = "lockgate"
OPERATOR_SA = "lockgate-operator"  # the chart's default for release "lockgate"


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{TOOLS}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.skip(f"{name} not found (make tools)")
    return found


@pytest.fixture(scope="module")
def env() -> Iterator[EnvTest]:
    """A control plane of this module's own, with the CRDs applied by `kubectl apply -f crds/`
    (as a user who installs them apart from the chart does)."""
    if binaries_dir() is None:
        pytest.skip("envtest binaries missing: `make envtest`")
    api = EnvTest()
    api.start()
    try:
        kubectl(api, "apply", "-f", str(REPO / "crds"))
        kubectl(api, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        yield api
    finally:
        api.stop()


def kubectl(env: EnvTest, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [tool("kubectl"), "--kubeconfig", str(env.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def helm(env: EnvTest, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("helm"), "--kubeconfig", str(env.kubeconfig), *args], capture_output=True, text=True
    )


def namespaces(env: EnvTest, *names: str) -> None:
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
    kubectl(env, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


@contextlib.contextmanager
def chart_rbac(
    env: EnvTest, namespace: str, values: dict[str, Any], component: str = "operator"
) -> Iterator[None]:
    """A component's ServiceAccount and RBAC (`templates/<component>/`) exactly as the chart
    renders them, applied; deleted afterwards."""
    values_file = Path(env.dir or "/tmp") / f"rbac-{component}-{namespace}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    done = helm(
        env, "template", RELEASE, str(CHART), "--namespace", namespace, "--values",
        str(values_file), "--show-only", f"templates/{component}/rbac.yaml",
        "--show-only", f"templates/{component}/serviceaccount.yaml",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kubectl(env, "apply", "-f", "-", stdin=done.stdout)
    try:
        yield
    finally:  # a ClusterRole left behind would count as another release (test below)
        kubectl(env, "delete", "--ignore-not-found", "-f", "-", stdin=done.stdout)


def service_account_client(env: EnvTest, namespace: str, name: str) -> k8s.ApiClient:
    """An API client that authenticates as the ServiceAccount (what its token would do)."""
    assert env.dir is not None and env.ca_file is not None
    cert = f"sa-{namespace}-{name}"
    subject = f"/O=system:serviceaccounts/CN=system:serviceaccount:{namespace}:{name}"
    sign_client_cert(env.dir, cert, subject)
    cfg = k8s.Configuration()
    cfg.host = env.server
    cfg.ssl_ca_cert = str(env.ca_file)
    cfg.cert_file = str(env.dir / f"{cert}.crt")
    cfg.key_file = str(env.dir / f"{cert}.key")
    return k8s.ApiClient(cfg)


class Refusals(logging.Handler):
    """Every log record that tells of a request the API server refused (401/403)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if any(word in text.lower() for word in ("forbidden", "403", "unauthorized")):
            self.seen.append(f"{record.name}: {text}")


@contextlib.contextmanager
def operator_as(api_client: k8s.ApiClient, settings: OperatorSettings) -> Iterator[Refusals]:
    """The real operator (kopf, reconcile, scaler) in a thread, as `api_client`."""
    refusals = Refusals()
    logging.getLogger().addHandler(refusals)
    stop, ready = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(run(settings, api_client=api_client, stop_flag=stop, ready_flag=ready))
        except BaseException as err:
            errors.append(err)
            ready.set()

    thread = threading.Thread(target=serve, name="lockgate-operator-rbac", daemon=True)
    thread.start()
    try:
        assert ready.wait(60), "the operator did not become ready"
        assert not errors, f"the operator failed to start: {errors[0]!r}"
        yield refusals
    finally:
        stop.set()
        thread.join(30)
        logging.getLogger().removeHandler(refusals)


def operator_settings(redis_url: str, release_ns: str, watched: list[str]) -> OperatorSettings:
    return OperatorSettings(
        redis_url=redis_url,
        namespaces=watched,
        gateway_url="http://gateway.example.test:8080",
        manage_port=0,
        liveness_port=0,
        resync_s=1.0,
        resync_rest_s=1.0,
        metrics_url="http://127.0.0.1:9/metrics",  # nothing answers: the scaler just waits
        scale_interval_s=0.5,
        lease_name="lockgate-operator-scaler",  # the chart's Role names this Lease only
        lease_namespace=release_ns,
        worker_key_settle_s=0,  # a lost key is replaced at once (the test below loses one)
    )


def reconciles_with_the_charts_rights(
    env: EnvTest, redis_url: str, release_ns: str, watched_ns: str, values: dict
) -> list[str]:
    """Run the operator as the chart's ServiceAccount; an Endpoint in `watched_ns` becomes its
    Deployment and worker-key Secret, whose key is the one registered; deleting it cleans up.
    Returns the refusals the operator logged."""
    namespaces(env, release_ns, watched_ns)
    admin = env.api_client()
    custom, apps, core = k8s.CustomObjectsApi(admin), k8s.AppsV1Api(admin), k8s.CoreV1Api(admin)
    settings = operator_settings(redis_url, release_ns, values["operator"]["namespaces"])
    as_sa = service_account_client(env, release_ns, OPERATOR_SA)
    args = (GROUP, VERSION, watched_ns)
    with chart_rbac(env, release_ns, values), operator_as(as_sa, settings) as refusals:
        template = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Template"}
        template |= {"metadata": {"name": "tpl"}, "spec": {"image": "example.test/echo:1"}}
        custom.create_namespaced_custom_object(*args, "templates", template)
        endpoint = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Endpoint"}
        endpoint |= {"metadata": {"name": f"ep-{watched_ns}"}, "spec": {"templateId": "tpl"}}
        custom.create_namespaced_custom_object(*args, "endpoints", endpoint)
        name = endpoint["metadata"]["name"]

        deployment = wait_until(
            lambda: _read(lambda: apps.read_namespaced_deployment(f"{name}-workers", watched_ns)),
            "the worker Deployment",
        )
        secret = wait_until(
            lambda: _read(lambda: core.read_namespaced_secret(f"{name}-worker-key", watched_ns)),
            "the worker-key Secret",
        )
        key = base64.b64decode(secret.data["RUNPOD_AI_API_KEY"]).decode()
        digest = deployment.metadata.annotations["lockgate.dev/worker-key-digest"]
        assert digest == key_digest(key)
        assert deployment.metadata.owner_references[0].block_owner_deletion is True
        status = wait_until(
            lambda: _condition(custom.get_namespaced_custom_object(*args, "endpoints", name)),
            "WorkloadsApplied",
        )
        assert status["status"] == "True", status
        # a worker past its startupTimeout: its pod's log is read (allowed: 404, no pod) and
        # its pod deleted (kube/worker_health.py)
        operator_core = k8s.CoreV1Api(as_sa)
        with pytest.raises(ApiException) as missing:
            operator_core.read_namespaced_pod_log("no-such-pod", watched_ns, container="worker")
        assert missing.value.status == 404
        with pytest.raises(ApiException) as missing:
            operator_core.delete_namespaced_pod("no-such-pod", watched_ns)
        assert missing.value.status == 404

        # Redis flushed and the Deployment gone: no digest is known, so the operator
        # replaces the Secret's key (an update, never a read) and registers the new one.
        # Lost again until it does, so that no reconcile in flight finds the old digest.
        def lose_and_look() -> str | None:
            secret = core.read_namespaced_secret(f"{name}-worker-key", watched_ns)
            now = base64.b64decode(secret.data["RUNPOD_AI_API_KEY"]).decode()
            if now != key:
                return now
            with contextlib.suppress(ApiException):
                apps.delete_namespaced_deployment(f"{name}-workers", watched_ns)
            asyncio.run(_forget(redis_url, name))
            return None

        new_key = wait_until(lose_and_look, "a new worker key", every=1.0)

        def registered() -> RegistryEntry | None:
            entry = asyncio.run(_entry(redis_url, name))
            return entry if entry and entry.workerKeyDigest == key_digest(new_key) else None

        entry = wait_until(registered, "the new key registered")
        assert entry.workerKeyDigest == key_digest(new_key)
        redeployed = wait_until(
            lambda: _read(lambda: apps.read_namespaced_deployment(f"{name}-workers", watched_ns)),
            "the worker Deployment again",
        )
        assert redeployed.metadata.annotations["lockgate.dev/worker-key-digest"] == key_digest(
            new_key
        )

        custom.delete_namespaced_custom_object(*args, "endpoints", name)
        wait_until(
            lambda: (
                _read(lambda: custom.get_namespaced_custom_object(*args, "endpoints", name)) is None
            ),
            "the Endpoint cleaned up and gone",
        )
        custom.delete_namespaced_custom_object(*args, "templates", "tpl")
    return refusals.seen


async def _forget(redis_url: str, endpoint_id: str) -> None:
    """Lose what Redis knows of an endpoint (as a flushed Redis would)."""
    redis = connect(redis_url)
    try:
        registry = Registry(redis)
        entry = await registry.get_endpoint(endpoint_id)
        await registry.delete_key((entry.workerKeyDigest if entry else None) or "none")
        await registry.delete_endpoint(endpoint_id)
    finally:
        await redis.aclose()


async def _entry(redis_url: str, endpoint_id: str) -> RegistryEntry | None:
    redis = connect(redis_url)
    try:
        return await Registry(redis).get_endpoint(endpoint_id)
    finally:
        await redis.aclose()


def _read(call: Any) -> Any:
    try:
        return call()
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _condition(endpoint: dict) -> dict | None:
    conditions = (endpoint.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "WorkloadsApplied"), None)


# -- items 1-3: the operator needs no more than the chart grants ---------------------------


def test_cluster_wide_operator_reconciles_with_only_the_charts_rbac(
    env: EnvTest, redis_server: EmbeddedRedis
) -> None:
    values = {"operator": {"namespaces": []}}
    refusals = reconciles_with_the_charts_rights(
        env, redis_server.url, "lg-clusterwide", "team-cw", values
    )
    assert refusals == []


def test_namespaced_operator_reconciles_at_once_without_a_single_refusal(
    env: EnvTest, redis_server: EmbeddedRedis
) -> None:
    values = {"operator": {"namespaces": ["team-ns"]}}
    refusals = reconciles_with_the_charts_rights(
        env, redis_server.url, "lg-namespaced", "team-ns", values
    )
    assert refusals == []


# -- item 4: several releases per cluster --------------------------------------------------


def install(env: EnvTest, namespace: str, *values: str) -> subprocess.CompletedProcess[str]:
    args = ["install", RELEASE, str(CHART), "--namespace", namespace, "--create-namespace"]
    # The CRDs came by `kubectl apply`; no uninstall hook (its Job needs a node).
    for value in ("crds.install=false", "uninstallHook.enabled=false", *values):
        args += ["--set", value]
    return helm(env, *args)


def uninstall(env: EnvTest, *namespaces_: str) -> None:
    for namespace in namespaces_:
        helm(env, "uninstall", RELEASE, "--namespace", namespace)


def test_releases_of_one_name_watching_disjoint_namespaces_install_side_by_side(
    env: EnvTest,
) -> None:
    namespaces(env, "team-a", "team-b")
    try:
        first = install(env, "rel-a", "operator.namespaces={team-a}")
        assert first.returncode == 0, first.stderr
        second = install(env, "rel-b", "operator.namespaces={team-b}")
        assert second.returncode == 0, second.stderr
        roles = kubectl(env, "get", "clusterroles", "-o", "name")
        assert "rel-a-lockgate-operator" in roles and "rel-b-lockgate-operator" in roles
    finally:
        uninstall(env, "rel-a", "rel-b")


def test_a_release_watching_what_another_watches_is_refused_at_install(env: EnvTest) -> None:
    namespaces(env, "team-c")
    try:
        first = install(env, "cw-1")
        assert first.returncode == 0, first.stderr
        upgrade = helm(env, "upgrade", RELEASE, str(CHART), "-n", "cw-1", "--reuse-values")
        assert upgrade.returncode == 0, upgrade.stderr  # a release never conflicts with itself

        both_cluster_wide = install(env, "cw-2")
        assert both_cluster_wide.returncode != 0
        assert "the lockgate release cw-1/lockgate already watches every namespace" in (
            both_cluster_wide.stderr
        )
        overlapping = install(env, "cw-3", "operator.namespaces={team-c}")
        assert overlapping.returncode != 0
        assert "overlap: every namespace" in overlapping.stderr
    finally:
        uninstall(env, "cw-1", "cw-2", "cw-3")


def test_overlapping_namespace_lists_are_refused_and_the_overlap_named(env: EnvTest) -> None:
    namespaces(env, "team-d", "team-e", "team-f")
    try:
        first = install(env, "ov-1", "operator.namespaces={team-d,team-e}")
        assert first.returncode == 0, first.stderr
        second = install(env, "ov-2", "operator.namespaces={team-f,team-e}")
        assert second.returncode != 0
        assert "already watches team-d,team-e" in second.stderr
        assert "(overlap: team-e)" in second.stderr
    finally:
        uninstall(env, "ov-1", "ov-2")


# -- item 1: the management API apart, with its own rights --------------------------------


def service_account_kubeconfig(env: EnvTest, namespace: str, name: str) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (for a `lockgate` process)."""
    client = service_account_client(env, namespace, name)
    cfg = client.configuration
    path = Path(env.dir or "/tmp") / f"kubeconfig-{namespace}-{name}"
    user = {"client-certificate": cfg.cert_file, "client-key": cfg.key_file}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "envtest",
                "cluster": {"server": env.server, "certificate-authority": cfg.ssl_ca_cert},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": "sa", "context": {"cluster": "envtest", "user": name}}],
        "current-context": "sa",
    }
    path.write_text(json.dumps(config))
    return path


@contextlib.contextmanager
def manage_process(
    env: EnvTest, redis_url: str, release_ns: str, intake: str, account: str, admin_key: str
) -> Iterator[str]:
    """`lockgate manage` as a process authenticating as `account` (a ServiceAccount of
    `release_ns`), serving `intake`, with `admin_key` in a key file: its base URL."""
    keys_file = Path(env.dir or "/tmp") / f"manage-keys-{release_ns}.json"
    entry = {"name": "admin", "sha256": key_digest(admin_key), "scopes": ["admin"]}
    keys_file.write_text(json.dumps([entry]))
    port = free_port()
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO / "operator"),
        "KUBECONFIG": str(service_account_kubeconfig(env, release_ns, account)),
        "LOCKGATE_REDIS_URL": redis_url,
        "LOCKGATE_KEYS_FILE": str(keys_file),
        "LOCKGATE_ENDPOINT_NAMESPACE": intake,
        "LOCKGATE_BASE_URL": "https://jobs.example.test",
    }
    command = [sys.executable, "-m", "lockgate.cli", "manage", "--host", "127.0.0.1"]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*command, "--port", str(port)], env=environment)
    try:
        wait_until(lambda: _http("GET", f"{base}/healthz")[0] == 200, "lockgate manage")
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def test_lockgate_manage_serves_endpoints_with_only_its_own_role(
    env: EnvTest, redis_server: EmbeddedRedis
) -> None:
    release_ns, intake = "lg-manage", "team-intake"
    namespaces(env, release_ns, intake)
    values = {"operator": {"namespaces": [intake]}}
    admin_key = "lg_admin_" + "k" * 32
    with (
        chart_rbac(env, release_ns, values, "manage"),
        manage_process(
            env, redis_server.url, release_ns, intake, "lockgate-manage", admin_key
        ) as base,
    ):
        auth = {"Authorization": admin_key}
        assert _http("GET", f"{base}/v1/endpoints")[0] == 401
        body = {"id": "ep-manage", "templateId": "tpl", "workersMax": 2}
        status, created = _http("POST", f"{base}/v1/endpoints", body, auth)
        assert status in (200, 201), created
        assert created["id"] == "ep-manage"
        status, listed = _http("GET", f"{base}/v1/endpoints", None, auth)
        assert status == 200 and [e["id"] for e in listed] == ["ep-manage"]
        status, patched = _http("PATCH", f"{base}/v1/endpoints/ep-manage", {"workersMax": 3}, auth)
        assert status == 200 and patched["workersMax"] == 3
        # worker logs: listing the endpoint's pods is allowed (none run on envtest)
        status, logs = _http("GET", f"{base}/v1/endpoints/ep-manage/logs", None, auth)
        assert (status, logs) == (200, {"lines": []})
        assert_storage_served(env, base, auth, intake)
        assert_secrets_served(env, base, auth, intake)
        assert _http("DELETE", f"{base}/v1/endpoints/ep-manage", None, auth)[0] == 204
        # the catalog (/v2/catalog): nodes and the pods bound to them, listed cluster-wide
        status, gpus = _http("GET", f"{base}/v2/catalog/gpus", None, auth)
        assert (status, gpus) == (200, {"gpus": []})  # envtest's nodes: none


def assert_secrets_served(env: EnvTest, base: str, auth: dict, namespace: str) -> None:
    """Account secrets (issue 46 item 7) through `lockgate manage` with only its Role: a
    Secret created, its value replaced whole (`update`), deleted; never read."""
    body = {"name": "hf_Token/ci", "value": "first-value", "description": "ci"}
    status, made = _http("POST", f"{base}/v2/account/secrets", body, auth)
    assert status == 201, made
    name = secrets.object_name("hf_Token/ci")

    def value() -> str:
        data = kubectl(env, "get", "secret", name, "-n", namespace, "-o", "jsonpath={.data.value}")
        return base64.b64decode(data).decode()

    assert value() == "first-value"
    one = f"{base}/v2/account/secrets/{made['id']}"
    status, rotated = _http("PATCH", one, {"value": "second-value"}, auth)
    assert status == 200 and rotated["description"] == "ci", rotated
    assert value() == "second-value"
    assert _http("DELETE", one, None, auth)[0] == 204
    gone = subprocess.run(
        [tool("kubectl"), "--kubeconfig", str(env.kubeconfig), "get", "secret", name,
         "-n", namespace],
        capture_output=True, text=True,
    )  # fmt: skip
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def assert_storage_served(env: EnvTest, base: str, auth: dict, namespace: str) -> None:
    """Registry credentials (Secrets written, never read) and network volumes (claims)
    through `lockgate manage` with only its Role (issue 34, items 3 and 4)."""
    cred = {"name": "ci", "username": "robot", "password": "pw", "registry": "r.test"}
    status, made = _http("POST", f"{base}/v1/containerregistryauth", cred, auth)
    assert status == 201, made
    one = f"{base}/v1/containerregistryauth/{made['id']}"
    assert _http("GET", one, None, auth)[1]["username"] == "robot"
    secret = kubectl(env, "get", "secret", made["id"], "-n", namespace, "-o", "jsonpath={.type}")
    assert secret == "kubernetes.io/dockerconfigjson"
    assert _http("DELETE", one, None, auth)[0] == 204

    status, volume = _http("POST", f"{base}/v1/networkvolumes", {"name": "v", "size": 1}, auth)
    assert status == 201, volume
    vol = f"{base}/v1/networkvolumes/{volume['id']}"
    assert _http("GET", f"{base}/v1/networkvolumes", None, auth)[1] == [volume]
    assert _http("PATCH", vol, {"name": "w"}, auth)[1]["name"] == "w"
    status, moved = _http(
        "PATCH", f"{base}/v1/endpoints/ep-manage", {"networkVolumeId": volume["id"]}, auth
    )
    assert status == 200 and moved["networkVolumeId"] == volume["id"], moved
    assert _http("DELETE", vol, None, auth)[0] == 409
    _http("PATCH", f"{base}/v1/endpoints/ep-manage", {"networkVolumeId": ""}, auth)
    assert _http("DELETE", vol, None, auth)[0] == 204


def test_the_management_api_under_the_operators_account_names_each_refusal(
    env: EnvTest, redis_server: EmbeddedRedis
) -> None:
    """What `lockgate operator --manage-port` serves with the chart's operator account
    (the same app, run here as `lockgate manage` with that account): the Kubernetes API's
    403 on a claim or an Endpoint's deletion is a 503 naming the refusal, not a 500 (a credential's
    Secret it may create: the operator writes worker-key Secrets)."""
    release_ns, intake = "lg-manage-op", "team-intake-op"
    namespaces(env, release_ns, intake)
    admin_key = "lg_admin_" + "o" * 32
    auth = {"Authorization": admin_key}
    with (
        chart_rbac(env, release_ns, {"operator": {"namespaces": [intake]}}, "operator"),
        manage_process(env, redis_server.url, release_ns, intake, OPERATOR_SA, admin_key) as base,
    ):
        # it may create an Endpoint (the operator makes batch pools), never delete one
        status, made = _http(
            "POST", f"{base}/v1/endpoints", {"id": "ep-op", "templateId": "tpl"}, auth
        )
        assert status == 200, (status, made)
        for method, path, body in (
            ("POST", "/v1/networkvolumes", {"name": "v", "size": 1}),
            ("DELETE", "/v1/endpoints/ep-op", None),
        ):
            status, error = _http(method, f"{base}{path}", body, auth)
            assert status == 503, (path, status, error)
            said = json.loads(error)["error"]
            assert said.startswith("the Kubernetes API refused the management API's account")
            assert "forbidden" in said and "lockgate manage" in said, said


def test_the_management_apis_account_can_read_no_secret_nor_write_workloads(
    env: EnvTest,
) -> None:
    release_ns, intake = "lg-manage-2", "team-intake-2"
    namespaces(env, release_ns, intake)
    values = {"operator": {"namespaces": [intake]}}
    with chart_rbac(env, release_ns, values, "manage"):
        as_manage = service_account_client(env, release_ns, "lockgate-manage")
        core, apps = k8s.CoreV1Api(as_manage), k8s.AppsV1Api(as_manage)
        custom = k8s.CustomObjectsApi(as_manage)
        for call in (
            lambda: core.list_namespaced_secret(intake),
            lambda: core.read_namespaced_secret("any", intake),
            lambda: core.patch_namespaced_secret("any", intake, {}),  # its answer: the Secret
            lambda: core.create_namespaced_secret(release_ns, {"metadata": {"name": "x"}}),
            lambda: core.list_namespaced_secret(release_ns),
            lambda: apps.list_namespaced_deployment(intake),
            lambda: core.read_node("any"),
            lambda: core.patch_node("any", {"metadata": {"labels": {"x": "y"}}}),
            lambda: core.read_namespaced_pod("any", intake),
            lambda: core.read_namespaced_pod("any", release_ns),
            lambda: core.read_namespaced_pod_log("any", release_ns),
            lambda: core.delete_namespaced_pod("any", intake),
            lambda: custom.list_namespaced_custom_object(GROUP, VERSION, "default", "endpoints"),
        ):
            with pytest.raises(ApiException) as refused:
                call()
            assert refused.value.status == 403
        assert custom.list_namespaced_custom_object(GROUP, VERSION, intake, "endpoints")
        # worker logs (issue 14): list pods and read their logs, in its namespace only
        assert core.list_namespaced_pod(intake).items == []
        # the catalog (/v2/catalog): its one cluster-wide rule lists nodes and pods, no more
        core.list_node()
        core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        with pytest.raises(ApiException) as missing:
            core.read_namespaced_pod_log("no-such-pod", intake)
        assert missing.value.status == 404  # allowed, and the pod is not there


def _http(method: str, url: str, body: Any = None, headers: dict | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError:
        return 0, None
