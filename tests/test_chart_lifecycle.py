"""The chart's life in a cluster, with real helm against a real kube-apiserver (envtest):
CRDs shared by several releases or applied by `kubectl apply -f crds/`, upgrades that
change the Redis password or its storage, and uninstall/reinstall keeping the Secrets that
belong to Redis's data. No --wait: nothing here needs a pod to run."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envtest import EnvTest, binaries_dir
from tests.conftest import wait_until
from tests.node_release import CHART, helm_binary

REPO = Path(__file__).resolve().parent.parent
CRDS = ("endpoints.lockgate.dev", "templates.lockgate.dev")
# Values every release here installs with: a small chart (no KEDA, no ServiceMonitor).
# No uninstall hook: its Job needs a node, which envtest lacks (helm uninstall would wait for
# it); tests/test_node_uninstall.py runs it on the real node.
BASE = ("--set", "gateway.replicaCount=1", "--set", "uninstallHook.enabled=false")
# The upgrade tests leave the CRDs to the tests above: they install releases of their own.
NO_CRDS = ("--set", "crds.install=false")


@dataclass
class Cluster:
    """helm and kubectl against one envtest apiserver."""

    env: EnvTest
    helm_path: str

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        if check and done.returncode:
            raise AssertionError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(
            self.helm_path, "--kubeconfig", str(self.env.kubeconfig), *args, check=check
        )

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        beside_helm = Path(self.helm_path).with_name("kubectl")  # both from `make tools`
        kubectl = str(beside_helm) if beside_helm.exists() else shutil.which("kubectl")
        assert kubectl, "kubectl missing: `make tools` installs it"
        return self.run(kubectl, "--kubeconfig", str(self.env.kubeconfig), *args, check=check)

    def install(self, release: str, namespace: str, *extra: str) -> None:
        """Each release watches its own namespace only: the chart refuses two operators
        watching the same ones (two cluster-wide releases)."""
        own = ("--set", f"operator.namespaces={{{namespace}}}")
        self.helm("install", release, str(CHART), "-n", namespace, "--create-namespace",
                  *BASE, *own, *extra)  # fmt: skip

    def upgrade(self, release: str, namespace: str, *extra: str, check: bool = True):
        return self.helm("upgrade", release, str(CHART), "-n", namespace, "--reuse-values",
                         *extra, check=check)  # fmt: skip

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        ns = ("-n", namespace) if namespace else ()
        done = self.kubectl("get", kind, name, *ns, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def secret(self, name: str, namespace: str) -> dict[str, str]:
        found = self.get("secret", name, namespace)
        assert found is not None, f"Secret {namespace}/{name} is missing"
        return {k: base64.b64decode(v).decode() for k, v in found["data"].items()}

    def delete_crds(self) -> None:
        self.kubectl("delete", "crd", *CRDS, "--ignore-not-found", "--wait=true")
        wait_until(lambda: all(self.get("crd", name) is None for name in CRDS), timeout=60)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    helm = helm_binary()
    if helm is None or binaries_dir() is None:
        pytest.skip("needs helm (make tools) and the envtest binaries (hack/envtest.sh)")
    with EnvTest() as env:
        yield Cluster(env, helm)


def pod_annotations(cluster: Cluster, kind: str, name: str, namespace: str) -> dict[str, str]:
    found = cluster.get(kind, name, namespace)
    assert found is not None, f"{kind} {namespace}/{name} is missing"
    return found["spec"]["template"]["metadata"].get("annotations", {})


def owner(cluster: Cluster, crd: str) -> str | None:
    found = cluster.get("crd", crd)
    assert found is not None, f"CRD {crd} is missing"
    return found["metadata"].get("annotations", {}).get("meta.helm.sh/release-namespace")


# -- item 4: CRDs shared safely ------------------------------------------------------------


def test_crds_applied_with_kubectl_do_not_block_helm_install(cluster: Cluster) -> None:
    cluster.delete_crds()
    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    cluster.install("applied", "crds-applied")
    for crd in CRDS:
        assert owner(cluster, crd) is None  # still the admin's, untouched by the release
    cluster.helm("uninstall", "applied", "-n", "crds-applied")
    assert all(cluster.get("crd", crd) for crd in CRDS)


def test_a_second_release_installs_and_keeps_the_crds_when_the_first_goes(
    cluster: Cluster,
) -> None:
    cluster.delete_crds()
    cluster.install("first", "crds-first")
    assert [owner(cluster, crd) for crd in CRDS] == ["crds-first"] * len(CRDS)
    cluster.install("second", "crds-second")
    cluster.upgrade("second", "crds-second")  # upgrades of the non-owner keep working
    cluster.helm("uninstall", "first", "-n", "crds-first")
    for crd in CRDS:
        found = cluster.get("crd", crd)
        assert found is not None and "deletionTimestamp" not in found["metadata"], crd
    cluster.upgrade("second", "crds-second")
    assert all(cluster.get("crd", crd) for crd in CRDS)


# -- item 6: upgrades and reinstalls -------------------------------------------------------


def test_a_redis_password_change_rolls_redis_and_its_clients(cluster: Cluster) -> None:
    ns = "upgrade-password"
    cluster.install("pw", ns, *NO_CRDS)
    rolled = {
        ("statefulset", "pw-lockgate-redis"): "checksum/auth",
        ("deployment", "pw-lockgate-gateway"): "checksum/settings",
        ("deployment", "pw-lockgate-operator"): "checksum/settings",
    }

    def annotations() -> dict[tuple[str, str], str | None]:
        return {
            (kind, name): pod_annotations(cluster, kind, name, ns).get(key)
            for (kind, name), key in rolled.items()
        }

    installed = annotations()
    cluster.upgrade("pw", ns)  # nothing changed: nothing rolls (the first upgrade included)
    assert annotations() == installed
    cluster.upgrade("pw", ns, "--set", "redis.auth.password=a-new-password")
    changed = annotations()
    assert all(changed[key] != installed[key] for key in rolled), (installed, changed)
    assert cluster.secret("pw-lockgate-settings", ns)["REDIS_PASSWORD"] == "a-new-password"


def test_a_redis_storage_change_fails_before_anything_changes(cluster: Cluster) -> None:
    ns = "upgrade-storage"
    cluster.install("st", ns, *NO_CRDS, "--set", "redis.persistence.size=8Gi")
    cluster.upgrade("st", ns, "--set", "redis.persistence.size=8192Mi")  # the same size
    for change in ("redis.persistence.size=16Gi", "redis.persistence.storageClass=fast"):
        done = cluster.upgrade("st", ns, "--set", change, "--set", "gateway.replicaCount=3",
                               check=False)  # fmt: skip
        assert done.returncode != 0, change
        assert change.split("=")[0] in done.stderr, done.stderr
        assert "docs/install.md" in done.stderr, done.stderr
        gateway = cluster.get("deployment", "st-lockgate-gateway", ns)
        assert gateway is not None and gateway["spec"]["replicas"] == 1, change


def test_settings_and_client_key_survive_uninstall_and_reinstall(cluster: Cluster) -> None:
    ns = "reinstall"
    names = ("again-lockgate-settings", "again-lockgate-client-key")
    cluster.install("again", ns, *NO_CRDS)
    before = {name: cluster.secret(name, ns) for name in names}
    cluster.helm("uninstall", "again", "-n", ns)
    assert cluster.get("deployment", "again-lockgate-gateway", ns) is None
    assert {name: cluster.secret(name, ns) for name in names} == before
    cluster.install("again", ns, *NO_CRDS)
    assert {name: cluster.secret(name, ns) for name in names} == before
    keys = json.loads(cluster.secret("again-lockgate-api-keys", ns)["keys.json"])
    client_key = before["again-lockgate-client-key"]["key"]
    assert keys[0]["sha256"] == hashlib.sha256(client_key.encode()).hexdigest()
