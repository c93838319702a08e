"""Registry credentials and network volumes on a real node (issue 34), through the
management API (`lockgate manage`) as a user drives it, in one module (one chart install):

- a password-protected registry (tests/registry.py: Debian's docker-registry with a bcrypt
  htpasswd, plain HTTP on the node's bridge) holds the echo example's image: a template
  naming it with the `containerRegistryAuthId` of a credential made through
  `/v1/containerregistryauth` runs jobs; the same image without the credential is refused
  by the registry (401), and the Endpoint's `WorkersHealthy` condition names the image;
- a network volume made through `/v1/networkvolumes` (its claim binds to a hostPath
  PersistentVolume the test provides, of the class tests/node-values.yaml names) is
  mounted at /runpod-volume in both workers of an endpoint: what a job on one worker writes,
  a job on the other reads (tests/workers/runpod_volume.py);
- a template hands workers only the Secrets labelled `lockgate.dev/worker-secret: "true"`
  (issue 45): lockgate's own are a 400, another gets no workers until it is labelled;
- deleting them through the API is refused while in use (409: the volume by the endpoint,
  the credential by its template, the template by the endpoint), then the endpoints, the
  volume, the templates and the credential go in that order (each freeing the next) and
  nothing of theirs is left in the namespace.

The tests run in file order and share what they made (`made`): the last one deletes it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cluster import Cluster
from images import archives
from lockgate.kube.manifests.names import deployment_name, secret_name
from node_release import (
    REQUIRE_ENV,
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    manage_values,
    running,
    wait_until,
    worker_pods,
)
from registry import Registry, missing_programs

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ADMIN_KEY = "lg_node_registry_admin_" + "k" * 24
ECHO_IMAGE = "registry.example.com/lockgate-echo:0.1.0"  # pushed to the test registry
VOLUME_IMAGE = "localhost/lockgate-test/runpod-worker:dev"  # imported: never pulled
VOLUME_CMD = ["python", "-u", "/app/runpod_volume.py"]
STORAGE_CLASS = "lockgate-node-volume"  # tests/node-values.yaml's networkVolumes class
CPU = {"computeType": "CPU", "vcpuCount": 1}
MANAGED_BY_MANAGE = "app.kubernetes.io/managed-by=lockgate-manage"  # kube/storage.py's


class Manage:
    """The management API's `/v1` through its Service, with the admin key."""

    def __init__(self, release: Release) -> None:
        self.url = release.service_url(f"{release.name}-manage") + "/v1"
        self.http = requests.Session()
        self.http.headers["authorization"] = f"Bearer {ADMIN_KEY}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Status and JSON body (None when empty)."""
        resp = self.http.request(method, f"{self.url}{path}", json=body, timeout=30)
        return resp.status_code, resp.json() if resp.content else None

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a new record: 201 for a credential or a volume, 200 for the rest (as the
        routes answer on RunPod)."""
        status, record = self.call("POST", path, body)
        created = 201 if path in ("/containerregistryauth", "/networkvolumes") else 200
        assert status == created, record
        return record


@pytest.fixture(scope="module")
def release(node: Cluster) -> Iterator[Release]:
    """The chart with an admin key, its management API serving the user namespace."""
    rel = Release(node)
    rel.install(*manage_values(ADMIN_KEY))
    yield rel
    rel.uninstall()


@pytest.fixture(scope="module")
def manage(release: Release) -> Manage:
    return Manage(release)


@pytest.fixture(scope="module")
def registry(node: Cluster) -> Iterator[Registry]:
    """The password-protected registry, started once the node (its bridge) is up."""
    if missing := missing_programs():
        message = "no test registry here: missing " + ", ".join(missing) + " (make envtest)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    reg = Registry(node)
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def made(release: Release) -> Iterator[dict[str, str]]:
    """Ids of what the tests made through the API, for the last test to delete. After a
    failure, the Secrets and claims the management API made are deleted here (the node's
    reset between modules takes the rest)."""
    ids: dict[str, str] = {}
    yield ids
    release.node.kubectl(
        "-n", USER_NAMESPACE, "delete", "secrets,pvc", "-l", MANAGED_BY_MANAGE,
        "--ignore-not-found", "--wait=false", check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def volume_dir(node: Cluster, release: Release) -> Iterator[Path]:
    """A PersistentVolume for one network volume: a node folder any uid may write,
    ReadWriteMany, of the chart's networkVolumes class (removed after the module)."""
    assert node.dir is not None
    folder = node.dir / "network-volume"
    folder.mkdir()
    folder.chmod(0o777)
    name = f"{STORAGE_CLASS}-{secrets.token_hex(3)}"
    release.apply({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": STORAGE_CLASS,
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(folder), "type": "Directory"}},
    })  # fmt: skip
    yield folder
    node.kubectl("delete", "pv", name, "--ignore-not-found", "--wait=false", check=False)
    shutil.rmtree(folder, ignore_errors=True)


def objects(release: Release, kinds: str) -> list[dict[str, Any]]:
    """Objects of `kinds` in the user namespace, as the admin lists them."""
    out = release.node.kubectl("-n", USER_NAMESPACE, "get", kinds, "-o", "json")
    return json.loads(out)["items"]


def one(release: Release, kind: str, name: str) -> dict[str, Any]:
    """One object of the user namespace, as the admin reads it."""
    out = release.node.kubectl("-n", USER_NAMESPACE, "get", kind, name, "-o", "json")
    return json.loads(out)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def completed(jobs: Jobs, job_input: dict[str, Any]) -> dict[str, Any]:
    """A job run to its end (a pull and a pod start may outlast one /runsync wait)."""
    job = jobs.runsync({"input": job_input}, wait_ms=60000)
    if job["status"] not in ("COMPLETED", "FAILED"):
        job = jobs.final(job["id"], timeout=240)
    assert job["status"] == "COMPLETED", job
    return job


# -- registry credentials ------------------------------------------------------------------


def test_an_image_in_a_password_protected_registry_pulls_with_the_credential_only(
    release: Release, manage: Manage, registry: Registry, made: dict[str, str]
) -> None:
    archive = archives()[ECHO_IMAGE]
    private = registry.push(archive, "lockgate/echo:0.1.0")
    unpulled = registry.push(archive, "lockgate/echo:no-credential")  # never pulled with it

    auth = manage.create(
        "/containerregistryauth",
        {"name": "node registry", "username": registry.username,
         "password": registry.password, "registry": registry.host},
    )  # fmt: skip
    assert registry.password not in json.dumps(auth)
    [secret] = [s for s in objects(release, "secrets") if s["metadata"]["name"] == auth["id"]]
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    template = manage.create(
        "/templates",
        {"name": "private echo", "imageName": private, "containerRegistryAuthId": auth["id"]},
    )
    endpoint = manage.create(
        "/endpoints",
        {"templateId": template["id"], "name": "private", **CPU, "workersMin": 0,
         "workersMax": 1, "idleTimeout": 5},
    )  # fmt: skip
    made.update(auth=auth["id"], template=template["id"], endpoint=endpoint["id"])
    job = completed(Jobs(release, endpoint["id"], ADMIN_KEY), {"from": "the private registry"})
    assert job["output"] == {"echo": {"from": "the private registry"}}
    deploy = one(release, "deployment", deployment_name(endpoint["id"]))
    pod = deploy["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": auth["id"]}]
    assert pod["containers"][0]["image"] == private

    # The same image without the credential: the registry refuses the pull.
    bare = manage.create("/templates", {"name": "no credential", "imageName": unpulled})
    refused = manage.create(
        "/endpoints",
        {"templateId": bare["id"], "name": "refused", **CPU, "workersMin": 1, "workersMax": 1},
    )

    def failing() -> dict[str, Any]:
        cond = condition(endpoint_status(release, refused["id"]), "WorkersHealthy")
        return cond if cond.get("status") == "False" else {}

    cond = wait_until(failing, "WorkersHealthy=False", timeout=180, every=1)
    assert cond["reason"] == "ImagePullError", cond
    assert unpulled in cond["message"] and "pull secret" in cond["message"], cond
    health = Jobs(release, refused["id"], ADMIN_KEY).health()
    assert health["workers"]["unhealthy"] >= 1 and health["workers"]["idle"] == 0, health

    def pull_failures() -> list[str]:
        events = objects(release, "events")
        return [
            e["message"]
            for e in events
            if e["involvedObject"]["name"].startswith(deployment_name(refused["id"]))
            and e.get("reason") == "Failed"
            and unpulled in e.get("message", "")
        ]

    failures = wait_until(pull_failures, "the kubelet's pull failure event", 60, every=1)
    assert any("401 Unauthorized" in m for m in failures), failures  # kubectl describe pod
    assert not any(running(p) for p in worker_pods(release, refused["id"]))

    assert manage.call("DELETE", f"/endpoints/{refused['id']}")[0] == 204
    wait_until(
        lambda: manage.call("DELETE", f"/templates/{bare['id']}")[0] == 204,
        "the unused template deleted",
        timeout=60,
    )


# -- network volumes -----------------------------------------------------------------------


def test_a_network_volume_is_shared_by_two_workers(
    release: Release, manage: Manage, volume_dir: Path, made: dict[str, str]
) -> None:
    volume = manage.create("/networkvolumes", {"name": "shared", "size": 1, "dataCenterId": "node"})
    made["volume"] = volume["id"]
    wait_until(
        lambda: one(release, "pvc", volume["id"])["status"].get("phase") == "Bound",
        "the volume's claim bound to the node's PersistentVolume",
        timeout=60,
        every=1,
    )
    template = manage.create(
        "/templates", {"name": "volume worker", "imageName": VOLUME_IMAGE,
                       "dockerStartCmd": VOLUME_CMD},
    )  # fmt: skip
    endpoint = manage.create(
        "/endpoints",
        {"templateId": template["id"], "name": "shared volume", **CPU, "workersMin": 2,
         "workersMax": 2, "idleTimeout": 60, "networkVolumeId": volume["id"]},
    )  # fmt: skip
    made.update(volume_template=template["id"], volume_endpoint=endpoint["id"])
    pods = wait_until(
        lambda: (
            len(ps := [p for p in worker_pods(release, endpoint["id"]) if running(p)]) == 2 and ps
        ),
        "two running workers",
        timeout=180,
        every=1,
    )
    names = {p["metadata"]["name"] for p in pods}

    jobs = Jobs(release, endpoint["id"], ADMIN_KEY)
    text = f"written by one worker, read by another {secrets.token_hex(4)}"
    # The writer holds its job after writing, so the next job goes to the other worker.
    writing = jobs.run({"input": {"path": "notes/shared.txt", "write": text, "hold": 15}})
    on_node = volume_dir / "notes" / "shared.txt"
    wait_until(lambda: on_node.is_file() and on_node.read_text() == text, "the file", 120)
    read = completed(jobs, {"path": "notes/shared.txt"})
    wrote = jobs.final(writing, timeout=120)
    assert wrote["status"] == "COMPLETED", wrote

    assert read["output"]["text"] == text
    writer, reader = wrote["output"]["worker"], read["output"]["worker"]
    assert {writer, reader} == names, (writer, reader, names)  # two different worker pods
    assert wrote["output"]["uid"] != 0 and on_node.stat().st_uid == wrote["output"]["uid"]


# -- Secrets workers may read (issue 45 item 8) ---------------------------------------------


def test_a_template_hands_workers_only_secrets_labelled_for_them(
    release: Release, manage: Manage
) -> None:
    """With the chart's RBAC: lockgate's own Secrets are a 400 naming the field; another
    Secret gets no workers (SecretsAllowed=False) until its owner labels it."""
    for fields, field in (
        ({"envFromSecrets": [f"{release.name}-settings"]}, "envFromSecrets"),
        ({"secretEnv": {"K": {"name": secret_name("other"), "key": "k"}}}, "secretEnv.K"),
    ):
        body = {"name": "t", "imageName": "x:1", **fields}
        status, error = manage.call("POST", "/templates", body)
        assert status == 400 and error["error"].startswith(field), error
    secret = f"node-s3-{secrets.token_hex(3)}"
    release.node.kubectl("-n", USER_NAMESPACE, "create", "secret", "generic", secret,
                         "--from-literal=AWS_KEY=k")  # fmt: skip
    template = manage.create(
        "/templates", {"name": "s3 reader", "imageName": VOLUME_IMAGE, "envFromSecrets": [secret]}
    )
    endpoint = manage.create(
        "/endpoints", {"templateId": template["id"], "name": "s3", **CPU, "workersMin": 0}
    )
    workers = deployment_name(endpoint["id"])

    def deployment() -> dict[str, Any] | None:
        found = [d for d in objects(release, "deployments") if d["metadata"]["name"] == workers]
        return found[0] if found else None

    def refused() -> dict[str, Any]:
        cond = condition(endpoint_status(release, endpoint["id"]), "SecretsAllowed")
        return cond if cond.get("status") == "False" else {}

    cond = wait_until(refused, "SecretsAllowed=False", timeout=60, every=1)
    assert "not marked for workers" in cond["message"] and secret in cond["message"], cond
    assert deployment() is None
    release.node.kubectl("-n", USER_NAMESPACE, "label", "secret", secret,
                         "lockgate.dev/worker-secret=true")  # fmt: skip
    deploy = wait_until(deployment, "the workers once the Secret is labelled", 60, every=1)
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": secret}}]
    assert manage.call("DELETE", f"/endpoints/{endpoint['id']}")[0] == 204
    wait_until(
        lambda: manage.call("DELETE", f"/templates/{template['id']}")[0] == 204,
        "the unused template deleted", timeout=60,
    )  # fmt: skip
    release.node.kubectl("-n", USER_NAMESPACE, "delete", "secret", secret, "--wait=false")


# -- nothing left behind -------------------------------------------------------------------


def test_deleting_through_the_api_is_refused_in_use_then_leaves_nothing_behind(
    release: Release, manage: Manage, made: dict[str, str]
) -> None:
    assert {"auth", "template", "endpoint", "volume"} <= made.keys(), "earlier tests failed"
    in_use = (
        (f"/networkvolumes/{made['volume']}", made["volume_endpoint"]),
        (f"/containerregistryauth/{made['auth']}", made["template"]),
        (f"/templates/{made['template']}", made["endpoint"]),
    )
    for path, user in in_use:
        status, error = manage.call("DELETE", path)
        assert status == 409 and user in error["error"], (path, status, error)

    order = (
        f"/endpoints/{made['endpoint']}",
        f"/endpoints/{made['volume_endpoint']}",
        f"/networkvolumes/{made['volume']}",
        f"/templates/{made['template']}",
        f"/templates/{made['volume_template']}",
        f"/containerregistryauth/{made['auth']}",  # unused once its template is gone
    )
    # A template or volume is free once the operator let its endpoint's workers go.
    for path in order:
        wait_until(lambda p=path: manage.call("DELETE", p)[0] == 204, f"DELETE {path}", 120, 1)
        wait_until(lambda p=path: manage.call("GET", p)[0] == 404, f"{path} gone", 120, 1)

    endpoints = (made["endpoint"], made["volume_endpoint"])
    ours = {
        *made.values(),
        *(deployment_name(e) for e in endpoints),
        *(secret_name(e) for e in endpoints),
    }
    kinds = "deployments,pods,secrets,pvc,templates.lockgate.dev,endpoints.lockgate.dev"

    def left() -> list[str]:
        return [
            f"{o['kind']}/{o['metadata']['name']}"
            for o in objects(release, kinds)
            if o["metadata"]["name"] in ours
            or o["metadata"].get("labels", {}).get("lockgate.dev/endpoint") in endpoints
        ]

    wait_until(lambda: not left(), "nothing of theirs in the namespace", timeout=120, every=1)
