"""lockgate on a real node (tests/cluster.py) as a user drives it: a helm release of
charts/lockgate with the images hack/images.sh builds, the job API through the gateway
Service, and what kubectl shows. Used by tests/test_node.py and bench/cluster.py."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from cluster import Cluster, missing_parts
from images import archives
from lockgate.store import key_digest
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "lockgate"
NODE_VALUES = Path(__file__).resolve().parent / "node-values.yaml"
REQUIRE_ENV = "LOCKGATE_REQUIRE_CLUSTER"
TOOLS_ENV = "LOCKGATE_TOOLS_DIR"
RELEASE = "lockgate"
NAMESPACE = "lockgate"
USER_NAMESPACE = "default"  # where `kubectl apply -f examples/echo/` puts the Endpoint


def manage_values(admin_key: str) -> tuple[str, ...]:
    """helm arguments: the management API writes in USER_NAMESPACE and takes `admin_key`
    (scopes admin and jobs)."""
    keys = [{"name": "admin", "sha256": key_digest(admin_key), "scopes": ["admin", "jobs"]}]
    return (
        "--set", f"operator.endpointNamespace={USER_NAMESPACE}",
        "--set-json", f"apiKeys.keys={json.dumps(keys)}",
    )  # fmt: skip


def helm_binary() -> str | None:
    """helm from PATH, else from the tools folder `make tools` fills."""
    tools = Path(os.environ.get(TOOLS_ENV) or Path.home() / ".cache" / "lockgate-tools")
    for candidate in (shutil.which("helm"), tools / "bin" / "helm"):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def require_cluster() -> None:
    """Skip (or, with LOCKGATE_REQUIRE_CLUSTER=1, fail) when the node cannot run here."""
    missing = missing_parts()
    if not archives():
        missing.append("the images (make cluster-images)")
    if helm_binary() is None:
        missing.append("helm (make tools)")
    if not missing:
        return
    message = "no real node here: missing " + ", ".join(missing)
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@dataclass
class Release:
    """lockgate installed by helm on the node, and what a user reads from it."""

    node: Cluster
    name: str = RELEASE
    namespace: str = NAMESPACE
    values: list[Path] = field(default_factory=lambda: [NODE_VALUES])
    uninstalled: bool = False

    def helm(self, *args: str, timeout: float = 300) -> str:
        cmd = [helm_binary() or "helm", "--kubeconfig", self.node.kubeconfig, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}\n{self.describe()}"
            )
        return proc.stdout

    def install(self, *extra: str) -> str:
        files = [arg for v in self.values for arg in ("-f", str(v))]
        return self.helm(
            "install", self.name, str(CHART), "-n", self.namespace, "--create-namespace",
            *files, "--wait", "--timeout", "180s", *extra,
        )  # fmt: skip

    def upgrade(self, *extra: str) -> str:
        files = [arg for v in self.values for arg in ("-f", str(v))]
        return self.helm(
            "upgrade", self.name, str(CHART), "-n", self.namespace, *files,
            "--wait", "--timeout", "180s", *extra,
        )  # fmt: skip

    def uninstall(self) -> None:
        """`helm uninstall --wait`, once (a module's teardown after a test did it is a no-op)."""
        if not self.uninstalled:
            self.helm("uninstall", self.name, "-n", self.namespace, "--wait")
            self.uninstalled = True

    def apply(self, obj: dict[str, Any]) -> None:
        """`kubectl apply` one object (its own namespace in its metadata, if any)."""
        self.node.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def kubectl(self, *args: str, check: bool = True) -> str:
        return self.node.kubectl("-n", self.namespace, *args, check=check)

    def get(self, kind: str, name: str = "", *args: str) -> Any:
        out = self.kubectl("get", kind, *([name] if name else []), *args, "-o", "json")
        return json.loads(out)

    def client_key(self) -> str:
        secret = self.get("secret", f"{self.name}-client-key")
        return base64.b64decode(secret["data"]["key"]).decode()

    def service_url(self, service: str, port_name: str = "") -> str:
        """http://<ClusterIP>:<port>: the node routes Service IPs (kube-proxy)."""
        svc = self.get("service", service)
        ports = svc["spec"]["ports"]
        port = next((p for p in ports if p.get("name") == port_name), ports[0])["port"]
        return f"http://{svc['spec']['clusterIP']}:{port}"

    @property
    def gateway_url(self) -> str:
        return self.service_url(f"{self.name}-gateway")

    def pods(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Pods matching `selector` in `namespace` (default: the release's; "": all)."""
        ns = ("-A",) if namespace == "" else ("-n", namespace or self.namespace)
        out = self.node.kubectl("get", "pods", *ns, "-l", selector, "-o", "json")
        return json.loads(out)["items"]

    def describe(self) -> str:
        """What a person would look at when something failed: pods, events."""
        return (
            self.node.kubectl(
                "get", "pods,deploy,endpoints.lockgate.dev", "-A", "-o", "wide", check=False
            )
            + self.node.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False)[
                -4000:
            ]
        )


def running(pod: dict[str, Any]) -> bool:
    """A pod whose containers all run and that is not being deleted."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (
        not pod["metadata"].get("deletionTimestamp")
        and pod.get("status", {}).get("phase") == "Running"
        and bool(statuses)
        and all("running" in (s.get("state") or {}) for s in statuses)
    )


class Jobs:
    """The job API of one endpoint through the gateway Service, with the client key."""

    def __init__(self, release: Release, endpoint: str, key: str = "") -> None:
        """`key`: an API key with the jobs scope; default: the chart's client key."""
        self.url = f"{release.gateway_url}/v2/{endpoint}"
        self.http = requests.Session()
        self.http.headers["authorization"] = key or release.client_key()

    def runsync(self, payload: dict[str, Any], wait_ms: int = 60000) -> dict[str, Any]:
        response = self.http.post(f"{self.url}/runsync?wait={wait_ms}", json=payload, timeout=90)
        assert response.status_code == 200, response.text
        return response.json()

    def run(self, payload: dict[str, Any]) -> str:
        response = self.http.post(f"{self.url}/run", json=payload, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()["id"]

    def status(self, job_id: str) -> dict[str, Any]:
        response = self.http.get(f"{self.url}/status/{job_id}", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def final(self, job_id: str, timeout: float = 120) -> dict[str, Any]:
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}
        return wait_until(
            lambda: (s := self.status(job_id))["status"] in final and s,
            f"job {job_id} to end",
            timeout,
        )

    def health(self) -> dict[str, Any]:
        return self.http.get(f"{self.url}/health", timeout=10).json()


LB_IMAGE = "registry.example.com/lockgate-lb-example:0.1.0"  # examples/loadbalancer
LB_PORT = 8000


def apply_lb_endpoint(release: Release, name: str, *, load_seconds: float, **spec: Any) -> None:
    """A load-balancing Endpoint (and its Template) running the example worker, which
    answers `/ping` 204 for `load_seconds`; `spec` overrides the Endpoint's defaults here
    (one worker per 4 requests, at most 1, 5 s idle, 30 s per request, no parking on
    scale-down: the tests count pods). Returns once the Endpoint is Ready."""
    meta = {"name": name, "namespace": USER_NAMESPACE}
    template = {
        "image": LB_IMAGE,
        "command": ["python", "-u", "/app/worker.py"],
        "ports": [f"{LB_PORT}/http"],
        "env": {"LOAD_SECONDS": f"{load_seconds:g}"},
    }
    endpoint = {"templateId": name, "type": "LB", "scalerType": "REQUEST_COUNT",
                "scalerValue": 4, "computeType": "CPU", "vcpuCount": 1, "workersMin": 0,
                "workersMax": 1, "idleTimeout": 5, "requestTimeoutS": 30,
                "lbResumeWindowS": 0, **spec}  # fmt: skip
    for kind, body in (("Template", template), ("Endpoint", endpoint)):
        release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": kind, "metadata": meta,
                       "spec": body})  # fmt: skip
    wait_until(lambda: endpoint_status(release, name).get("phase") == "Ready", f"{name} Ready")


def endpoint_status(release: Release, name: str) -> dict[str, Any]:
    obj = json.loads(
        release.node.kubectl(
            "-n", USER_NAMESPACE, "get", "endpoints.lockgate.dev", name, "-o", "json"
        )
    )
    return obj.get("status") or {}


def worker_pods(release: Release, endpoint: str, *, live: bool = True) -> list[dict[str, Any]]:
    pods = release.pods(f"lockgate.dev/endpoint={endpoint}", USER_NAMESPACE)
    return [p for p in pods if not live or not p["metadata"].get("deletionTimestamp")]


def workers_stopped(release: Release, endpoint: str) -> bool:
    """Every worker pod of the endpoint is being deleted and none of its containers runs
    (the pod objects may stay until the kubelet's next status sync)."""
    pods = worker_pods(release, endpoint, live=False)
    return all(p["metadata"].get("deletionTimestamp") for p in pods) and not any(
        "running" in (c.get("state") or {})
        for pod in pods
        for c in pod.get("status", {}).get("containerStatuses") or []
    )


def pod_log(release: Release, pod: dict[str, Any]) -> str:
    return release.node.kubectl(
        "-n", USER_NAMESPACE, "logs", pod["metadata"]["name"], "--all-containers", check=False
    )


SYSTEM_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
LOCKGATE_KINDS = ("endpoints.lockgate.dev", "templates.lockgate.dev")
LOCKGATE_CRDS = (*LOCKGATE_KINDS, "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


def reset_node(node: Cluster) -> None:
    """Take from the node what a test module left, so the next module meets a fresh one:
    releases still installed (a module that failed before its uninstall), lockgate objects
    (freed of finalizers no operator will remove) and their CRDs, the namespaces the module
    made (kept Secrets with them), pods, Secrets and claims left in `default`, and the
    node's GPU label."""
    helm = [helm_binary() or "helm", "--kubeconfig", node.kubeconfig]
    listed = subprocess.run([*helm, "list", "-A", "-o", "json"], capture_output=True,
                            text=True, check=False, timeout=60)  # fmt: skip
    for rel in json.loads(listed.stdout or "[]"):
        uninstall = ["uninstall", rel["name"], "-n", rel["namespace"], "--wait", "--timeout=120s"]
        subprocess.run([*helm, *uninstall], capture_output=True, check=False, timeout=180)
    for kind in LOCKGATE_KINDS:
        out = node.kubectl("get", kind, "-A", "-o", "json", check=False) or '{"items": []}'
        for obj in json.loads(out)["items"]:
            meta = obj["metadata"]
            if meta.get("finalizers"):
                node.kubectl("-n", meta["namespace"], "patch", kind, meta["name"], "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    node.kubectl("delete", "crd", *LOCKGATE_CRDS, "--ignore-not-found", "--timeout=120s",
                 check=False)  # fmt: skip
    spaces = json.loads(node.kubectl("get", "namespaces", "-o", "json"))["items"]
    made = [n["metadata"]["name"] for n in spaces if n["metadata"]["name"] not in SYSTEM_NAMESPACES]
    if made:
        # Terminating first (no new pod can start there), then the pods killed at once: a
        # namespace waits for its pods' grace periods (a worker's is its execution timeout
        # + 15 s), which a reset need not honour.
        node.kubectl("delete", "namespace", *made, "--wait=false", check=False)
        for space in made:
            node.kubectl("-n", space, "delete", "pods", "--all", "--grace-period=0", "--force",
                         "--wait=false", check=False)  # fmt: skip
        node.kubectl("delete", "namespace", *made, "--ignore-not-found", "--timeout=180s",
                     check=False, timeout=200)  # fmt: skip
    node.kubectl("-n", "default", "delete", "pods,deployments,daemonsets,jobs", "--all",
                 "--grace-period=0", "--force", "--timeout=60s", check=False)  # fmt: skip
    # Secrets and claims a module made in `default` (the management API's credentials and
    # volumes, a test's token Secret); the service account's token stays
    node.kubectl("-n", "default", "delete", "secrets", "--field-selector",
                 "type!=kubernetes.io/service-account-token", "--timeout=60s",
                 check=False)  # fmt: skip
    node.kubectl("-n", "default", "delete", "persistentvolumeclaims", "--all",
                 "--timeout=60s", check=False)  # fmt: skip
    node.kubectl("label", "node", "--all", "nvidia.com/gpu.product-", check=False)
