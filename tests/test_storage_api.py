"""`/v1/containerregistryauth` and `/v1/networkvolumes` (issue 34, items 3 and 4) over both
control planes: `local` (dev mode's app: Redis, folders under the data dir, real worker
processes) and `kubernetes` (the operator's management API writing Secrets and
PersistentVolumeClaims in envtest, and the operator mounting the claim in worker pods).
"""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
from kubernetes.client.exceptions import ApiException, NotFoundException
from redis.asyncio import Redis

from lockgate.kube.manifests.names import deployment_name
from lockgate.kube.settings import OperatorSettings
from lockgate.kube.storage import gibibytes, volume_claim, volume_of_claim
from lockgate.models.registryauth import RegistryAuthSpec, docker_config
from lockgate.models.volumes import NetworkVolumeSpec
from lockgate.store import Registry, keys
from tests.conftest import eventually
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    api,
    jobs_key,
    kubernetes_api,
    local_api,
)
from tests.test_templates_api import ENV_ECHO, call, new_endpoint, new_template, runsync

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]

COMPONENT = "app.kubernetes.io/component"
AUTH = {"name": "ci", "username": "robot", "password": "s3cret-Pa55", "registry": "r.test:5000"}


def plane(request: pytest.FixtureRequest) -> str:
    """The test's control plane: its `api` parameter, else the plane fixture it asks for."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "api" in callspec.params:
        return callspec.params["api"]
    return "kubernetes" if "kubernetes_api" in request.fixturenames else "local"


@pytest.fixture
def forget_template(api: Api, request: pytest.FixtureRequest):
    if plane(request) == "kubernetes":
        resources: Resources = request.getfixturevalue("resources")
        return lambda template_id: resources.created.append(("templates", template_id))
    return lambda _template_id: None


@pytest.fixture
def kube_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Deletes the Secrets and claims a failed Kubernetes test left behind."""
    if plane(request) != "kubernetes":
        yield
        return
    resources: Resources = request.getfixturevalue("resources")
    yield
    core, ns = resources.core, resources.namespace
    secrets = core.list_namespaced_secret(ns, label_selector=f"{COMPONENT}=registry-auth")
    claims = core.list_namespaced_persistent_volume_claim(
        ns, label_selector=f"{COMPONENT}=network-volume"
    )
    for obj, delete in [
        *((o, core.delete_namespaced_secret) for o in secrets.items),
        *((o, core.delete_namespaced_persistent_volume_claim) for o in claims.items),
    ]:
        if obj.metadata.deletion_timestamp is None:  # not on its way out already
            with contextlib.suppress(NotFoundException):  # gone meanwhile
                delete(obj.metadata.name, ns)


def read_or_none(request: pytest.FixtureRequest, what: str, name: str) -> Any:
    """The object (`secret`, `persistent_volume_claim`) in the test namespace, or None."""
    resources: Resources = request.getfixturevalue("resources")
    read = getattr(resources.core, f"read_namespaced_{what}")
    with contextlib.suppress(NotFoundException):
        return read(name, resources.namespace)
    return None


def volume_folder(api: Api, volume_id: str) -> Path:
    assert api.plane is not None
    return api.plane.volumes_dir / volume_id


async def new_volume(api: Api, **fields: Any) -> dict:
    status, record = await call(
        api, "POST", "/networkvolumes", {"name": "models", "size": 5, **fields}
    )
    assert status == 201, record
    return record


# -- registry credentials -------------------------------------------------------------------


def test_a_credential_is_filed_under_its_registry_and_docker_hub_under_the_kubelets_key() -> None:
    auth = RegistryAuthSpec.model_validate(AUTH)
    [(server, entry)] = docker_config(auth)["auths"].items()
    assert server == "r.test:5000" and entry["username"] == "robot"
    assert base64.b64decode(entry["auth"]).decode() == "robot:s3cret-Pa55"
    hub = RegistryAuthSpec.model_validate({k: v for k, v in AUTH.items() if k != "registry"})
    assert hub.registry == "docker.io"
    assert list(docker_config(hub)["auths"]) == ["https://index.docker.io/v1/"]


async def test_a_credential_is_created_listed_read_and_deleted_never_showing_its_password(
    api: Api, request: pytest.FixtureRequest, redis: Redis, kube_leftovers: None
) -> None:
    status, made = await call(api, "POST", "/containerregistryauth", AUTH)
    assert status == 201 and set(made) == {"id", "name"} and made["name"] == "ci", made
    auth_id = made["id"]
    assert re.fullmatch(r"[a-z0-9]{10}", auth_id)

    status, got = await call(api, "GET", f"/containerregistryauth/{auth_id}")
    assert status == 200
    assert got == {"id": auth_id, "name": "ci", "username": "robot", "registry": "r.test:5000"}
    status, listed = await call(api, "GET", "/containerregistryauth")
    assert status == 200 and got in listed
    assert AUTH["password"] not in json.dumps([got, listed])

    kept = await Registry(redis).get_record(keys.REGISTRY_AUTHS, auth_id)
    if plane(request) == "kubernetes":
        assert "password" not in kept  # only the Secret holds it
        secret = read_or_none(request, "secret", auth_id)
        assert secret.type == "kubernetes.io/dockerconfigjson"
        assert secret.metadata.labels["app.kubernetes.io/component"] == "registry-auth"
        config = json.loads(base64.b64decode(secret.data[".dockerconfigjson"]))
        entry = config["auths"]["r.test:5000"]
        assert base64.b64decode(entry["auth"]).decode() == "robot:s3cret-Pa55"
    else:
        assert kept["password"] == AUTH["password"]  # kept, never shown

    assert (await call(api, "DELETE", f"/containerregistryauth/{auth_id}"))[0] == 204
    assert (await call(api, "GET", f"/containerregistryauth/{auth_id}"))[0] == 404
    assert (await call(api, "DELETE", f"/containerregistryauth/{auth_id}"))[0] == 404
    assert await Registry(redis).get_record(keys.REGISTRY_AUTHS, auth_id) is None
    if plane(request) == "kubernetes":
        assert read_or_none(request, "secret", auth_id) is None


async def test_a_credential_a_template_uses_cannot_be_deleted_until_the_template_is_gone(
    api: Api, forget_template, kube_leftovers: None
) -> None:
    _, made = await call(api, "POST", "/containerregistryauth", AUTH)
    template = await new_template(api, forget_template, containerRegistryAuthId=made["id"])
    assert template["containerRegistryAuthId"] == made["id"]

    status, error = await call(api, "DELETE", f"/containerregistryauth/{made['id']}")
    assert status == 409 and template["id"] in error["error"], error
    assert (await call(api, "GET", f"/containerregistryauth/{made['id']}"))[0] == 200

    assert (await call(api, "DELETE", f"/templates/{template['id']}"))[0] == 204
    assert (await call(api, "DELETE", f"/containerregistryauth/{made['id']}"))[0] == 204


async def test_a_template_naming_no_credential_is_refused(api: Api, forget_template) -> None:
    body = {"name": "t", "imageName": "r.test/i:1", "containerRegistryAuthId": "gone"}
    status, error = await call(api, "POST", "/templates", body)
    assert status == 400, error
    assert error["error"].startswith("containerRegistryAuthId: no container registry auth 'gone'")
    template = await new_template(api, forget_template)
    path = f"/templates/{template['id']}"
    status, error = await call(api, "PATCH", path, {"containerRegistryAuthId": "gone"})
    assert status == 400 and error["error"].startswith("containerRegistryAuthId: "), error
    assert (await call(api, "GET", path))[1]["containerRegistryAuthId"] == ""


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "u", "password": "p"}, "name"),
        ({"name": "n", "password": "p"}, "username"),
        ({"name": "n", "username": "u"}, "password"),
        ({"name": "n", "username": "u", "password": ""}, "password"),
        (
            {"name": "n", "username": "u", "password": "p", "registry": "https://r.test/"},
            "registry",
        ),
        ({"name": "n", "username": "u", "password": "p", "server": "r.test"}, "server"),
        ({"name": 7, "username": "u", "password": "p"}, "name"),
    ],
)
async def test_a_bad_credential_is_refused_naming_the_field(
    api: Api, body: dict, field: str
) -> None:
    status, error = await call(api, "POST", "/containerregistryauth", body)
    assert status == 400 and error["error"].startswith(f"{field}: "), error


async def test_a_credential_body_that_is_not_an_object_is_refused(api: Api) -> None:
    status, error = await call(api, "POST", "/containerregistryauth", ["ci"])
    assert status == 400 and error["error"].startswith("body: "), error


async def test_credentials_and_volumes_need_an_admin_key(api: Api, jobs_key: str) -> None:
    for path in ("/containerregistryauth", "/networkvolumes"):
        assert (await call(api, "GET", path, key="lg_nobody"))[0] == 401
        assert (await call(api, "GET", path, key=jobs_key))[0] == 401  # not an admin key
        assert (await call(api, "POST", path, AUTH, key=jobs_key))[0] == 401


# -- network volumes ------------------------------------------------------------------------


async def test_a_volume_is_created_read_renamed_and_deleted(
    api: Api, request: pytest.FixtureRequest, kube_leftovers: None
) -> None:
    record = await new_volume(api, dataCenterId="EU-RO-1")
    volume_id = record["id"]
    assert re.fullmatch(r"[a-z0-9]{10}", volume_id)
    assert record == {"id": volume_id, "name": "models", "size": 5, "dataCenterId": "EU-RO-1"}
    assert (await call(api, "GET", f"/networkvolumes/{volume_id}")) == (200, record)
    status, listed = await call(api, "GET", "/networkvolumes")
    assert status == 200 and record in listed
    if plane(request) == "kubernetes":
        claim = read_or_none(request, "persistent_volume_claim", volume_id)
        assert claim.spec.resources.requests["storage"] == "5Gi"
        assert claim.spec.access_modes == ["ReadWriteMany"]  # the settings' default
        assert claim.metadata.labels["app.kubernetes.io/component"] == "network-volume"
    else:
        assert volume_folder(api, volume_id).is_dir()

    status, renamed = await call(api, "PATCH", f"/networkvolumes/{volume_id}", {"name": "w"})
    assert status == 200 and renamed == {**record, "name": "w"}, renamed
    status, again = await call(api, "POST", f"/networkvolumes/{volume_id}/update", {"name": "x"})
    assert status == 200 and again["name"] == "x"
    assert (await call(api, "GET", f"/networkvolumes/{volume_id}"))[1]["name"] == "x"

    assert (await call(api, "DELETE", f"/networkvolumes/{volume_id}"))[0] == 204
    assert (await call(api, "GET", f"/networkvolumes/{volume_id}"))[0] == 404
    assert (await call(api, "DELETE", f"/networkvolumes/{volume_id}"))[0] == 404
    if plane(request) == "local":
        assert not volume_folder(api, volume_id).exists()


async def test_local_a_volume_grows_but_never_shrinks(local_api: Api) -> None:
    volume_id = (await new_volume(local_api, size=5))["id"]
    status, grown = await call(local_api, "PATCH", f"/networkvolumes/{volume_id}", {"size": 8})
    assert status == 200 and grown["size"] == 8
    status, error = await call(local_api, "PATCH", f"/networkvolumes/{volume_id}", {"size": 7})
    assert status == 400 and error["error"].startswith("size: "), error


@pytest.mark.envtest
async def test_kubernetes_a_resize_the_cluster_refuses_is_a_400_naming_size(
    kubernetes_api: Api, request: pytest.FixtureRequest, kube_leftovers: None
) -> None:
    # envtest's claims are never bound, and an unbound claim cannot be resized
    volume_id = (await new_volume(kubernetes_api, size=5))["id"]
    body = {"size": 6}
    status, error = await call(kubernetes_api, "PATCH", f"/networkvolumes/{volume_id}", body)
    assert status == 400 and error["error"].startswith("size: "), error
    assert (await call(kubernetes_api, "GET", f"/networkvolumes/{volume_id}"))[1]["size"] == 5
    assert (await call(kubernetes_api, "DELETE", f"/networkvolumes/{volume_id}"))[0] == 204


async def test_a_volume_an_endpoint_mounts_cannot_be_deleted_until_it_lets_go(
    api: Api, kube_leftovers: None
) -> None:
    volume_id = (await new_volume(api))["id"]
    endpoint = await new_endpoint(api, api.template, networkVolumeId=volume_id)
    assert endpoint["networkVolumeId"] == volume_id
    assert (await api.stored(endpoint["id"]))["networkVolumeId"] == volume_id

    status, error = await call(api, "DELETE", f"/networkvolumes/{volume_id}")
    assert status == 409 and endpoint["id"] in error["error"], error

    path = f"/endpoints/{endpoint['id']}"
    status, moved = await call(api, "PATCH", path, {"networkVolumeId": None})  # as shown
    assert status == 200 and moved["networkVolumeId"] is None, moved
    assert (await call(api, "DELETE", f"/networkvolumes/{volume_id}"))[0] == 204


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "", {"size": 5}, "name"),
        ("POST", "", {"name": "v"}, "size"),
        ("POST", "", {"name": "v", "size": 0}, "size"),
        ("POST", "", {"name": "v", "size": "big"}, "size"),
        ("POST", "", {"name": "v", "size": 100_000}, "size"),
        ("POST", "", {"name": "", "size": 5}, "name"),
        ("POST", "", {"name": "v", "size": 5, "dataCenterId": 3}, "dataCenterId"),
        ("POST", "", {"name": "v", "size": 5, "mountPath": "/x"}, "mountPath"),
        ("PATCH", "/{id}", {"size": 4}, "size"),
        ("PATCH", "/{id}", {"name": ""}, "name"),
        ("PATCH", "/{id}", {"dataCenterId": "US-TX-3"}, "dataCenterId"),
        ("POST", "/{id}/update", {"id": "other"}, "id"),
        ("POST", "/{id}/update", {"size": None}, "size"),
    ],
)
async def test_a_bad_volume_is_refused_naming_the_field(
    api: Api, kube_leftovers: None, method: str, path: str, body: dict, field: str
) -> None:
    volume_id = (await new_volume(api))["id"]
    status, error = await call(api, method, "/networkvolumes" + path.format(id=volume_id), body)
    assert status == 400 and error["error"].startswith(f"{field}: "), error
    assert (await call(api, "GET", f"/networkvolumes/{volume_id}"))[1]["size"] == 5
    assert (await call(api, "DELETE", f"/networkvolumes/{volume_id}"))[0] == 204


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/containerregistryauth/nosuchauth"),
        ("DELETE", "/containerregistryauth/nosuchauth"),
        ("GET", "/networkvolumes/nosuchvol"),
        ("PATCH", "/networkvolumes/nosuchvol"),
        ("DELETE", "/networkvolumes/nosuchvol"),
    ],
)
async def test_an_unknown_credential_or_volume_is_not_found(
    api: Api, method: str, path: str
) -> None:
    status, error = await call(api, method, path, {} if method == "PATCH" else None)
    assert status == 404 and "not found" in error["error"], error


async def test_an_endpoint_naming_no_volume_is_refused_naming_network_volume_id(
    api: Api,
) -> None:
    body = {"templateId": api.template, "networkVolumeId": "nosuchvol"}
    status, error = await call(api, "POST", "/endpoints", body)
    assert status == 400 and error["error"].startswith("networkVolumeId: "), error
    body["networkVolumeId"] = "Not A Name"
    status, error = await call(api, "POST", "/endpoints", body)
    assert status == 400 and error["error"].startswith("networkVolumeId: "), error


@pytest.mark.parametrize(
    ("quantity", "gib"),
    [("5Gi", 5), ("1Ti", 1024), ("512Mi", 1), ("2048Mi", 2), ("10G", 10), ("1073741824", 1)],
)
def test_a_claims_storage_request_reads_back_in_gib_rounded_up(quantity: str, gib: int) -> None:
    assert gibibytes(quantity) == gib


def test_a_claim_takes_the_settings_storage_class_and_access_mode() -> None:
    spec = NetworkVolumeSpec(name="models", size=7, dataCenterId="eu-1a")
    plain = volume_claim("ns", "vol1", spec, OperatorSettings())
    assert plain["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "7Gi"}},
    }  # no storageClassName: the cluster's default class
    settings = OperatorSettings(volume_storage_class="nfs", volume_access_mode="ReadWriteOnce")
    claim = volume_claim("ns", "vol1", spec, settings)
    assert claim["spec"]["storageClassName"] == "nfs"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert volume_of_claim(claim) == spec


# -- where workers find the volume ----------------------------------------------------------


async def test_local_workers_find_the_volume_folder_in_runpod_volume_path(
    local_api: Api, jobs_key: str
) -> None:
    api = local_api
    template = await new_template(api, lambda _id: None, dockerStartCmd=ENV_ECHO)
    volume_id = (await new_volume(api))["id"]
    endpoint = await new_endpoint(api, template["id"], workersMax=1, networkVolumeId=volume_id)

    out = await runsync(api, jobs_key, endpoint["id"], ["RUNPOD_VOLUME_PATH"])
    assert out["env"] == {"RUNPOD_VOLUME_PATH": str(volume_folder(api, volume_id))}

    # letting go of the volume replaces the workers: the new ones have no volume. The old
    # worker is awaited gone first: until its SIGTERM it may still take a queued job (a
    # dev-mode race of every worker replacement, not of volumes)
    await call(api, "PATCH", f"/endpoints/{endpoint['id']}", {"networkVolumeId": ""})

    async def old_worker_gone() -> bool:
        try:
            return psutil.Process(out["pid"]).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    await eventually(old_worker_gone, "the old worker to exit")
    again = await runsync(api, jobs_key, endpoint["id"], ["RUNPOD_VOLUME_PATH"])
    assert again["env"] == {"RUNPOD_VOLUME_PATH": None} and again["pid"] != out["pid"]


@pytest.mark.envtest
async def test_kubernetes_workers_mount_the_volume_claim_at_runpod_volume(
    kubernetes_api: Api, resources: Resources, kube_leftovers: None
) -> None:
    volume_id = (await new_volume(kubernetes_api))["id"]
    endpoint = await new_endpoint(
        kubernetes_api, kubernetes_api.template, networkVolumeId=volume_id
    )

    async def pod_spec() -> dict | None:
        try:
            got = resources.apps.read_namespaced_deployment(
                deployment_name(endpoint["id"]), resources.namespace
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return resources.apps.api_client.sanitize_for_serialization(got.spec.template.spec)

    spec = await resources.eventually(pod_spec, "the worker Deployment")
    claims = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [{"name": "runpod-volume", "persistentVolumeClaim": {"claimName": volume_id}}]
    mounts = spec["containers"][0]["volumeMounts"]
    assert {"name": "runpod-volume", "mountPath": "/runpod-volume"} in mounts
