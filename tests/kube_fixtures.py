"""Fixtures for the operator tests: one real control plane and one operator per session.

Test modules load this with `pytest_plugins = ["kube_fixtures"]` (and never import it: it
must be imported as a plugin first), so the session fixtures exist once however many
modules use them; helpers come through the `resources` fixture. Without the envtest
binaries the tests skip (`make envtest` builds them), unless LOCKGATE_REQUIRE_ENVTEST=1
makes that a failure. LOCKGATE_E2E_KUBECONFIG=<file> runs them against an existing
cluster instead (`make e2e`: a kind cluster with the CRDs applied).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from envtest import EnvTest, binaries_dir
from lockgate.apps.operator import run
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube.crds import GROUP, VERSION
from lockgate.kube.settings import OperatorSettings
from lockgate.store import key_digest
from tests.conftest import eventually, make_settings, start_gateway, wait_until

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "lockgate-test"
FILE_ADMIN_KEY = "lg_admin_from_the_key_file"
GATEWAY_LABELS = {"app.kubernetes.io/name": "lockgate", "app.kubernetes.io/component": "gateway"}
E2E_KUBECONFIG = "LOCKGATE_E2E_KUBECONFIG"  # an existing cluster instead of envtest
T = TypeVar("T")


def require_envtest() -> None:
    """Skip (or, in CI, fail) when the control plane binaries are missing."""
    if binaries_dir() is not None or os.environ.get(E2E_KUBECONFIG):
        return
    message = "envtest binaries missing: `make envtest` (bash hack/envtest.sh) builds them"
    if os.environ.get("LOCKGATE_REQUIRE_ENVTEST") == "1":
        pytest.fail(message + " (LOCKGATE_REQUIRE_ENVTEST=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def envtest() -> Iterator[EnvTest]:
    """etcd, kube-apiserver and kube-controller-manager (garbage collector, ReplicaSets)."""
    require_envtest()
    env = EnvTest()
    env.start(controller_manager=True)
    yield env
    env.stop()


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest) -> Iterator[k8s.ApiClient]:
    """An admin API client with the CRDs installed and the test namespace created: envtest's,
    or the cluster of $LOCKGATE_E2E_KUBECONFIG."""
    kubeconfig = os.environ.get(E2E_KUBECONFIG)
    if kubeconfig:
        api = k8s_config.new_client_from_config(config_file=kubeconfig)
    else:
        api = request.getfixturevalue("envtest").api_client()
    install_crds(api)
    namespace = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE))
    _unless_exists(lambda: k8s.CoreV1Api(api).create_namespace(namespace))
    yield api
    api.close()


def _unless_exists(create: Callable[[], Any]) -> None:
    """Create, or leave alone what a reused cluster already has (409)."""
    try:
        create()
    except ApiException as err:
        if err.status != 409:
            raise


def install_crds(api: k8s.ApiClient) -> None:
    """`kubectl apply -f crds/`, then wait until the API serves them."""
    ext = k8s.ApiextensionsV1Api(api)
    names = []
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as err:
            if err.status != 409:
                raise
            crd["metadata"]["resourceVersion"] = ext.read_custom_resource_definition(
                name
            ).metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)
        names.append(name)

    def established(name: str) -> bool:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    wait_until(lambda: all(established(n) for n in names), "CRDs established")
    custom = k8s.CustomObjectsApi(api)
    wait_until(
        lambda: _ok(
            lambda: custom.list_namespaced_custom_object(GROUP, VERSION, "default", "endpoints")
        ),
        "the endpoints API",
    )


@dataclass
class RunningOperator:
    settings: OperatorSettings
    manage_url: str
    metrics_port: int  # the scaler scrapes 127.0.0.1:<port>/metrics; a test may serve it
    file_admin_key: str = FILE_ADMIN_KEY  # an admin key known from the key file alone


RESERVED_SECRETS = ["lockgate-settings", "lockgate-api-keys", "lockgate-client-key"]


@pytest.fixture(scope="session")
def operator(
    kube: k8s.ApiClient, redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningOperator]:
    """`lockgate operator` (kopf + management API) in a thread, watching the test namespace;
    its key file (a mounted Secret in a cluster) holds the admin key `FILE_ADMIN_KEY`."""
    manage_port, metrics_port = free_port(), free_port()
    keys_file = tmp_path_factory.mktemp("keys") / "keys.json"
    entry = {"name": "file-admin", "sha256": key_digest(FILE_ADMIN_KEY), "scopes": ["admin"]}
    keys_file.write_text(json.dumps([entry]))
    settings = OperatorSettings(
        redis_url=redis_server.url,
        namespaces=[NAMESPACE],
        gateway_url="http://gateway.lockgate-test:8080",
        base_url="https://jobs.example.test",
        manage_host="127.0.0.1",
        manage_port=manage_port,
        liveness_port=0,
        resync_s=1.0,
        resync_rest_s=1.0,
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",  # nothing there unless a test
        scale_interval_s=0.2,
        metrics_grace_s=0.5,
        keys_file=str(keys_file),
        lb_gateway_labels=GATEWAY_LABELS,  # as the chart sets them (networkPolicy.enabled)
        reserved_secrets=RESERVED_SECRETS,  # as the chart of a release named lockgate
    )
    running = OperatorThread(kube, settings)
    yield RunningOperator(settings, f"http://127.0.0.1:{manage_port}", metrics_port)
    running.stop()


@pytest.fixture
def start_operator(kube: k8s.ApiClient) -> Iterator[Callable[[OperatorSettings], OperatorThread]]:
    """Start a whole operator of the test's own with these settings (stopped at the end)."""
    started: list[OperatorThread] = []

    def start(settings: OperatorSettings) -> OperatorThread:
        started.append(OperatorThread(kube, settings))
        return started[-1]

    yield start
    alive = [r for r in started if not _ok(r.stop)]  # every one stopped, then the failure
    assert not alive, f"{len(alive)} operator(s) did not stop within 30 s"


class OperatorThread:
    """`lockgate operator` (`apps.operator.run`: kopf, the scaler, the management API) in a
    thread of its own, started and ready; `stop` sets its stop flag, as SIGTERM does."""

    def __init__(self, kube: k8s.ApiClient, settings: OperatorSettings) -> None:
        self._stop, ready = threading.Event(), threading.Event()
        self.errors: list[BaseException] = []

        def serve() -> None:
            try:
                asyncio.run(run(settings, api_client=kube, stop_flag=self._stop, ready_flag=ready))
            except BaseException as err:  # reported by the caller, not lost in the thread
                self.errors.append(err)
                ready.set()

        self.thread = threading.Thread(target=serve, name="lockgate-operator", daemon=True)
        self.thread.start()
        assert ready.wait(30), "the operator did not become ready in 30 s"
        assert not self.errors, f"the operator failed to start: {self.errors[0]!r}"

    def stop(self, timeout_s: float = 30) -> None:
        """Stop it and wait up to `timeout_s` for its thread to end; an operator still
        running after that fails the test that stopped it (it would go on reconciling the
        next tests' objects on the shared Redis and namespaces)."""
        self._stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"the operator did not stop within {timeout_s:g} s"


# -- helpers -------------------------------------------------------------------------------


def _ok(call: Callable[[], Any]) -> bool:
    try:
        call()
    except Exception:
        return False
    return True


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


class Resources:
    """Create Endpoints and Templates in the test namespace; delete leftovers at the end."""

    namespace = NAMESPACE
    wait_until = staticmethod(wait_until)
    eventually = staticmethod(eventually)
    condition = staticmethod(condition)

    def __init__(self, api: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.apps = k8s.AppsV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.created: list[tuple[str, str]] = []

    def _args(self, plural: str) -> tuple[str, str, str, str]:
        return GROUP, VERSION, NAMESPACE, plural

    def template(self, name: str, **spec: Any) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Template"}
        body |= {"metadata": {"name": name}, "spec": {"image": "example.test/echo:1", **spec}}
        self.created.append(("templates", name))
        return self.custom.create_namespaced_custom_object(*self._args("templates"), body)

    def endpoint(self, name: str, *, annotations: dict | None = None, **spec: Any) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Endpoint"}
        meta = {"name": name, **({"annotations": annotations} if annotations else {})}
        body |= {"metadata": meta, "spec": spec}
        self.created.append(("endpoints", name))
        return self.custom.create_namespaced_custom_object(*self._args("endpoints"), body)

    def secret(self, name: str, labels: dict[str, str] | None = None, **data: str) -> None:
        """An Opaque Secret holding `data` (deleted at the end)."""
        meta = k8s.V1ObjectMeta(name=name, labels=labels)
        self.core.create_namespaced_secret(NAMESPACE, k8s.V1Secret(metadata=meta, string_data=data))
        self.created.append(("secrets", name))

    def get(self, plural: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(*self._args(plural), name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def patch(self, plural: str, name: str, patch: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(
            *self._args(plural), name, patch, _content_type="application/merge-patch+json"
        )

    def delete(self, plural: str, name: str) -> None:
        with contextlib.suppress(ApiException):
            if plural == "secrets":
                self.core.delete_namespaced_secret(name, NAMESPACE)
            else:
                self.custom.delete_namespaced_custom_object(*self._args(plural), name)

    def status(self, name: str) -> dict:
        return (self.get("endpoints", name) or {}).get("status") or {}

    def deployment(self, name: str) -> k8s.V1Deployment | None:
        try:
            return self.apps.read_namespaced_deployment(name, NAMESPACE)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def cleanup(self) -> None:
        for plural, name in reversed(self.created):
            self.delete(plural, name)


@pytest.fixture
def resources(kube: k8s.ApiClient) -> Iterator[Resources]:
    made = Resources(kube)
    yield made
    made.cleanup()


# -- the gateway's /metrics, for tests whose endpoints must be Ready -------------------------


@pytest.fixture
def metrics_served(operator: RunningOperator, redis_server: EmbeddedRedis) -> Iterator[None]:
    """A real gateway serving `/metrics` where the operator's scaler scrapes. Without one,
    the scaler cannot read metrics and a Ready endpoint shows as Degraded. It runs on its
    own event loop in a thread, so blocking waits in a test do not stall it. The loop's
    `asyncio.Runner` closes it as `asyncio.run` does: the tasks that outlived the gateway
    (a store call still opening its connection) are cancelled first, not left pending in a
    closed loop to fail when collected, in whichever test that happens."""
    loop_runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)  # sets no thread's loop
    loop = loop_runner.get_loop()
    thread = threading.Thread(target=loop.run_forever, name="metrics-gateway", daemon=True)
    thread.start()
    settings = make_settings(redis_server.url, operator.metrics_port)
    runner = asyncio.run_coroutine_threadsafe(start_gateway(settings), loop).result(30)
    yield
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop_runner.close()
