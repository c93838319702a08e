"""RunPod v2's `/v2/templates`, `/v2/registries` and `/v2/network-volumes` (issue 46, item 5)
over both control planes: `local` (dev mode's app on loopback) and `kubernetes` (the
operator's management API writing Template resources, Secrets and claims in envtest).

They are views of the `/v1` collections: what one version writes, the other reads.
"""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from lockgate.manage.v2.network_volumes import NetworkVolume
from lockgate.manage.v2.template_shapes import NOT_IN_V2, V2_FIELD_OF, V2_ONLY, Template
from lockgate.manage.v2.wording import in_v2_words
from lockgate.models import TemplateSpec
from tests.conftest import eventually
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    api,
    jobs_key,
    kubernetes_api,
    local_api,
)
from tests.test_storage_api import kube_leftovers  # noqa: F401 - a fixture
from tests.test_templates_api import (  # noqa: F401 - fixtures and helpers
    ENV_ECHO,
    call,
    forget_template,
    new_endpoint,
    stored_template,
)

pytest_plugins = ["kube_fixtures"]

PROBLEM = "application/problem+json"
# RunPod's Template: every field required (reference §4)
TEMPLATE_FIELDS = {
    "id", "name", "image", "args", "disk", "mounts", "ports", "env", "registry", "serverless",
    "public", "category", "startSsh", "startJupyter", "allowedCudaVersions",
}  # fmt: skip
AUTH = {"name": "ci", "username": "robot-user", "password": "s3cret-Pa55"}


async def v2(
    api: Api, method: str, path: str, body: Any = None, key: str | None = None
) -> tuple[int, Any]:
    """`{url}/v2{path}` with the admin key: status and JSON body (a problem too; None
    when empty). Every error is a problem."""
    headers = {"authorization": f"Bearer {key or api.key}"}
    async with api.http.request(method, f"{api.url}/v2{path}", json=body, headers=headers) as r:
        text = await r.text()
        if r.status >= 400:
            assert r.content_type == PROBLEM, (r.status, r.content_type, text)
            problem = json.loads(text)
            assert problem["status"] == r.status and problem["title"] and problem["detail"]
        return r.status, json.loads(text) if text else None


async def v2_template(api: Api, forget, **fields: Any) -> dict:
    """A template made through `/v2/templates` (runnable by dev mode's workers)."""
    body = {"name": "env-echo", "image": "example.test/env-echo:1", **fields}
    body.setdefault("args", shlex.join(ENV_ECHO))
    status, made = await v2(api, "POST", "/templates", body)
    assert status == 201, made
    forget(made["id"])
    return made


def violations_name(problem: dict, *fields: str) -> bool:
    """Whether the 422's `errors[]` names each of `fields` (the field itself or within it)."""
    return all(
        any(e.startswith((f"{f}:", f"{f}.")) for e in problem.get("errors", [])) for f in fields
    )


async def deleted(api: Api, path: str) -> None:
    """DELETE `path` until 204 (an endpoint's deletion finishes shortly after its 204)."""

    async def gone() -> bool:
        return (await v2(api, "DELETE", path))[0] == 204

    await eventually(gone, f"DELETE {path} answering 204")


# -- the mapping is data, and complete ------------------------------------------------------


def test_every_template_spec_field_is_shown_by_v2_or_listed_as_lockgates_own() -> None:
    fields = set(TemplateSpec.model_fields)
    assert not set(V2_FIELD_OF) & set(NOT_IN_V2)
    assert fields - set(V2_FIELD_OF) - set(NOT_IN_V2) == set(), "map it or list it in NOT_IN_V2"
    assert set(V2_FIELD_OF) | set(NOT_IN_V2) <= fields, "a listed field is gone from TemplateSpec"


def test_the_v2_template_has_runpods_fields_each_from_the_spec_or_fixed() -> None:
    assert set(Template.model_fields) == TEMPLATE_FIELDS
    assert {"id", *V2_FIELD_OF.values(), *V2_ONLY} == TEMPLATE_FIELDS
    assert set(NetworkVolume.model_fields) == {"id", "name", "size", "dataCenter", "type"}


@pytest.mark.parametrize(
    ("message", "words", "said"),
    [
        ("containerDiskInGb: too big", {"containerDiskInGb": "disk"}, "disk: too big"),
        ("env.A: bad; imageName: empty", {"imageName": "image"}, "env.A: bad; image: empty"),
        (
            "no auth 'x' (create one with POST /v1/containerregistryauth)",
            {"POST /v1/containerregistryauth": "POST /v2/registries"},
            "no auth 'x' (create one with POST /v2/registries)",
        ),
        ("dataCenterIds: kept", {"dataCenterId": "dataCenter"}, "dataCenterIds: kept"),
        ("/v1/dataCenterId", {"dataCenterId": "dataCenter"}, "/v1/dataCenterId"),
        ("unchanged", {}, "unchanged"),
    ],
)
def test_an_operations_refusal_is_said_in_v2_words(message: str, words: dict, said: str) -> None:
    assert in_v2_words(message, words) == said


# -- templates ----------------------------------------------------------------------------


async def test_a_template_is_created_read_listed_patched_and_deleted_in_v2_shapes(
    api: Api, forget_template
) -> None:
    made = await v2_template(
        api, forget_template, args="python 'my handler.py'", disk=30, ports=["8000/http"],
        env={"GREETING": "hello"}, serverless=True, category="CPU",
        mounts={"persistent": {"size": 20, "path": "/data"}},
    )  # fmt: skip
    assert set(made) == TEMPLATE_FIELDS
    assert made == {
        "id": made["id"], "name": "env-echo", "image": "example.test/env-echo:1",
        "args": "python 'my handler.py'", "disk": 30,
        "mounts": {"persistent": {"size": 20, "path": "/data"}}, "ports": ["8000/http"],
        "env": {"GREETING": "hello"}, "registry": None, "serverless": True, "public": False,
        "category": "CPU", "startSsh": False, "startJupyter": False, "allowedCudaVersions": [],
    }  # fmt: skip
    path = f"/templates/{made['id']}"
    assert await v2(api, "GET", path) == (200, made)
    status, listed = await v2(api, "GET", "/templates")
    assert status == 200 and made in listed["templates"]

    status, patched = await v2(api, "PATCH", path, {"env": {"B": "2"}, "disk": 40, "mounts": {}})
    assert status == 200, patched
    assert patched == {**made, "env": {"B": "2"}, "disk": 40}  # whole; mounts {}: unchanged
    assert await v2(api, "GET", path) == (200, patched)

    assert await v2(api, "DELETE", path) == (204, None)
    status, problem = await v2(api, "GET", path)
    assert status == 404 and made["id"] in problem["detail"]


async def test_a_template_made_in_v2_is_the_one_v1_and_the_backend_hold_and_back(
    api: Api, forget_template, request: pytest.FixtureRequest
) -> None:
    made = await v2_template(
        api, forget_template, disk=25, mounts={"persistent": {"size": 10, "path": "/w"}}
    )
    status, v1 = await call(api, "GET", f"/templates/{made['id']}")
    assert status == 200, v1
    assert (v1["imageName"], v1["dockerStartCmd"], v1["containerDiskInGb"]) == (
        "example.test/env-echo:1", ENV_ECHO, 25,
    )  # fmt: skip
    assert (v1["volumeInGb"], v1["volumeMountPath"], v1["containerRegistryAuthId"]) == (
        10, "/w", "",
    )  # fmt: skip
    stored = await stored_template(api, request, made["id"])  # TemplateSpec's names
    assert (stored["image"], stored["args"]) == ("example.test/env-echo:1", ENV_ECHO)

    # lockgate's own fields, set through v1, are kept by a v2 PATCH
    status, _ = await call(api, "PATCH", f"/templates/{made['id']}", {"readme": "# notes"})
    assert status == 200
    status, patched = await v2(api, "PATCH", f"/templates/{made['id']}", {"name": "renamed"})
    assert status == 200 and patched == {**made, "name": "renamed"}, patched
    status, v1 = await call(api, "GET", f"/templates/{made['id']}")
    assert (v1["name"], v1["readme"]) == ("renamed", "# notes")

    # and a v1 template reads in v2's shape
    body = {"name": "v1", "imageName": "x:1", "dockerStartCmd": ["a", "b c"], "volumeInGb": 0}
    status, v1_made = await call(api, "POST", "/templates", body)
    assert status == 200, v1_made
    forget_template(v1_made["id"])
    status, seen = await v2(api, "GET", f"/templates/{v1_made['id']}")
    assert status == 200, seen
    assert (seen["image"], seen["args"], seen["disk"], seen["mounts"]) == ("x:1", "a 'b c'", 50, {})


V1_TEMPLATE_FIELDS = {
    "imageName": "x:1",
    "dockerStartCmd": ["python", "h.py"],
    "dockerEntrypoint": ["sh"],
    "containerDiskInGb": 5,
    "containerRegistryAuthId": "abc",
    "isServerless": True,
    "volumeInGb": 20,
    "volumeMountPath": "/w",
    "readme": "hi",
    "isPublic": False,
    "dockerArgs": "python h.py",
    "templateId": "x",
    "id": "mine",
}


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_v1_style_template_fields_are_422_naming_every_one(
    api: Api, forget_template, method: str
) -> None:
    path = "/templates"
    body: dict[str, Any] = {**V1_TEMPLATE_FIELDS}
    if method == "PATCH":
        path += "/" + (await v2_template(api, forget_template))["id"]
    else:
        body |= {"name": "t", "image": "x:1"}
    status, problem = await v2(api, method, path, body)
    assert status == 422, problem
    assert violations_name(problem, *V1_TEMPLATE_FIELDS), problem["errors"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"image": "x:1"}, 422, "name"),
        ({"name": "t"}, 422, "image"),
        ({"name": "", "image": "x:1"}, 422, "name"),
        ({"name": "t", "image": "x:1", "disk": 0}, 422, "disk"),
        ({"name": "t", "image": "x:1", "disk": None}, 422, "disk"),
        ({"name": "t", "image": "x:1", "env": {"A": 1}}, 422, "env.A"),
        ({"name": "t", "image": "x:1", "category": "TPU"}, 422, "category"),
        ({"name": "t", "image": "x:1", "args": ["python"]}, 422, "args"),
        ({"name": "t", "image": "x:1", "mounts": {"network": []}}, 422, "mounts.network"),
        ({"name": "t", "image": "x:1", "mounts": {"persistent": {"size": 5, "path": "/w"}}},
         422, "mounts.persistent.size"),
        ({"name": "t", "image": "x:1", "allowedCudaVersions": ["12"]}, 422, "allowedCudaVersions"),
        ({"name": "t", "image": "x:1", "ports": ["80/udp"]}, 400, "ports"),
        ({"name": "t", "image": "x:1", "disk": 20_000}, 400, "disk"),
        ({"name": "t", "image": "x:1", "args": "python 'h.py"}, 400, "args"),
        ({"name": "t", "image": "x:1", "registry": "gone"}, 400, "registry"),
        ({"name": "t", "image": "x:1", "public": True}, 400, "public"),
        ({"name": "t", "image": "x:1", "allowedCudaVersions": ["12.8"]}, 400,
         "allowedCudaVersions"),
    ],
)  # fmt: skip
async def test_a_bad_template_is_refused_naming_the_v2_field(
    api: Api, body: dict, status: int, field: str
) -> None:
    got, problem = await v2(api, "POST", "/templates", body)
    assert got == status, problem
    if status == 422:
        assert violations_name(problem, field), problem
    else:
        assert problem["detail"].startswith((f"{field}:", f"{field}.")), problem


async def test_what_lockgate_does_not_do_is_accepted_when_not_asked_for(
    api: Api, forget_template
) -> None:
    made = await v2_template(
        api, forget_template, public=False, startSsh=True, startJupyter=True,
        allowedCudaVersions=[],
    )  # fmt: skip
    assert (made["public"], made["startSsh"], made["startJupyter"]) == (False, False, False)
    assert made["allowedCudaVersions"] == []


async def test_a_bad_template_edit_names_the_v2_field_and_changes_nothing(
    api: Api, forget_template
) -> None:
    made = await v2_template(api, forget_template)
    path = f"/templates/{made['id']}"
    for body, field in [({"image": ""}, "image"), ({"registry": "gone"}, "registry")]:
        status, problem = await v2(api, "PATCH", path, body)
        assert status == 400 and problem["detail"].startswith(f"{field}: "), problem
    assert await v2(api, "GET", path) == (200, made)


async def test_a_template_an_endpoint_uses_is_a_400_naming_it_until_it_is_gone(
    api: Api, forget_template
) -> None:
    made = await v2_template(api, forget_template)
    endpoint = await new_endpoint(api, made["id"], name="user")
    status, problem = await v2(api, "DELETE", f"/templates/{made['id']}")
    assert status == 400 and endpoint["id"] in problem["detail"], problem
    assert (await v2(api, "GET", f"/templates/{made['id']}"))[0] == 200
    assert (await call(api, "DELETE", f"/endpoints/{endpoint['id']}"))[0] == 204


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/templates/nosuchtpl"),
        ("PATCH", "/templates/nosuchtpl"),
        ("DELETE", "/templates/nosuchtpl"),
        ("GET", "/registries/nosuchauth"),
        ("DELETE", "/registries/nosuchauth"),
        ("GET", "/network-volumes/nosuchvol"),
        ("PATCH", "/network-volumes/nosuchvol"),
        ("DELETE", "/network-volumes/nosuchvol"),
    ],
)
async def test_an_unknown_id_is_a_404_problem(api: Api, method: str, path: str) -> None:
    status, problem = await v2(api, method, path, {"name": "x"} if method == "PATCH" else None)
    assert status == 404 and "not found" in problem["detail"], problem


async def test_the_collections_need_an_admin_key(api: Api, jobs_key: str) -> None:
    for path in ("/templates", "/registries", "/network-volumes"):
        assert (await v2(api, "GET", path, key="lg_nobody"))[0] == 401
        assert (await v2(api, "GET", path, key=jobs_key))[0] == 401  # not an admin key
        assert (await v2(api, "POST", path, AUTH, key=jobs_key))[0] == 401


# -- registries ---------------------------------------------------------------------------


async def test_a_registry_is_created_listed_read_and_deleted_never_showing_its_secrets(
    api: Api, kube_leftovers: None
) -> None:
    status, made = await v2(api, "POST", "/registries", AUTH)
    assert status == 201 and made == {"id": made["id"], "name": "ci"}, made
    path = f"/registries/{made['id']}"
    status, got = await v2(api, "GET", path)
    assert (status, got) == (200, made)
    status, listed = await v2(api, "GET", "/registries")
    assert status == 200 and made in listed["registries"]
    assert all(set(r) == {"id", "name"} for r in listed["registries"])
    status, v1 = await call(api, "GET", f"/containerregistryauth/{made['id']}")  # the same one
    assert status == 200 and v1["name"] == "ci"
    seen = json.dumps([made, got, listed])
    assert AUTH["password"] not in seen and AUTH["username"] not in seen

    assert (await v2(api, "PATCH", path, {"name": "other"}))[0] == 405  # no PATCH, as RunPod

    status, v1_made = await call(api, "POST", "/containerregistryauth", {**AUTH, "name": "v1"})
    assert status == 201, v1_made
    assert await v2(api, "GET", f"/registries/{v1_made['id']}") == (200, v1_made)  # {id, name}
    assert (await v2(api, "DELETE", f"/registries/{v1_made['id']}"))[0] == 204
    assert await v2(api, "DELETE", path) == (204, None)
    assert (await v2(api, "GET", path))[0] == 404
    assert (await call(api, "GET", f"/containerregistryauth/{made['id']}"))[0] == 404


@pytest.mark.parametrize(
    "body",
    [
        {"username": "u", "password": "p"},
        {"name": "n", "username": "u", "password": ""},
        {"name": "n", "username": "u", "password": "p", "registryAuthId": "x"},
        {"name": "n", "username": "u", "password": "p", "id": "mine"},
    ],
)
async def test_a_bad_registry_is_a_422(api: Api, body: dict) -> None:
    status, problem = await v2(api, "POST", "/registries", body)
    assert status == 422 and problem["errors"], problem


async def test_deleting_a_registry_templates_use_makes_their_registry_null(
    api: Api, forget_template, kube_leftovers: None
) -> None:
    _, auth = await v2(api, "POST", "/registries", AUTH)
    made = await v2_template(api, forget_template, registry=auth["id"])
    assert made["registry"] == auth["id"]
    status, v1 = await call(api, "GET", f"/templates/{made['id']}")
    assert (status, v1["containerRegistryAuthId"]) == (200, auth["id"])  # the same template

    assert await v2(api, "DELETE", f"/registries/{auth['id']}") == (204, None)
    assert await v2(api, "GET", f"/templates/{made['id']}") == (200, {**made, "registry": None})
    assert (await call(api, "GET", f"/templates/{made['id']}"))[1]["containerRegistryAuthId"] == ""


async def test_deleting_a_registry_an_endpoints_workers_pull_with_is_a_400_naming_it(
    api: Api, forget_template, kube_leftovers: None
) -> None:
    _, auth = await v2(api, "POST", "/registries", AUTH)
    made = await v2_template(api, forget_template, registry=auth["id"])
    endpoint = await new_endpoint(api, made["id"], name="puller")

    status, problem = await v2(api, "DELETE", f"/registries/{auth['id']}")
    assert status == 400 and endpoint["id"] in problem["detail"], problem
    assert made["id"] in problem["detail"]
    assert (await v2(api, "GET", f"/registries/{auth['id']}"))[0] == 200
    assert await v2(api, "GET", f"/templates/{made['id']}") == (200, made)  # unchanged

    assert (await call(api, "DELETE", f"/endpoints/{endpoint['id']}"))[0] == 204
    await deleted(api, f"/registries/{auth['id']}")  # once the endpoint is gone


# -- network volumes ----------------------------------------------------------------------


async def new_volume(api: Api, **fields: Any) -> dict:
    body = {"name": "models", "size": 10, "dataCenter": "EU-RO-1", **fields}
    status, made = await v2(api, "POST", "/network-volumes", body)
    assert status == 201, made
    return made


async def test_a_volume_is_created_read_listed_renamed_and_deleted(
    api: Api, kube_leftovers: None
) -> None:
    made = await new_volume(api, type="STANDARD")
    assert made == {
        "id": made["id"], "name": "models", "size": 10, "dataCenter": "EU-RO-1",
        "type": "STANDARD",
    }  # fmt: skip
    path = f"/network-volumes/{made['id']}"
    assert await v2(api, "GET", path) == (200, made)
    status, listed = await v2(api, "GET", "/network-volumes")
    assert status == 200 and made in listed["networkVolumes"]
    status, v1 = await call(api, "GET", f"/networkvolumes/{made['id']}")  # the same one
    assert (status, v1["dataCenterId"], v1["size"]) == (200, "EU-RO-1", 10)

    assert await v2(api, "PATCH", path, {"name": "w"}) == (200, {**made, "name": "w"})
    status, v1 = await call(api, "GET", f"/networkvolumes/{made['id']}")
    assert (status, v1["name"]) == (200, "w")

    status, v1_made = await call(api, "POST", "/networkvolumes", {"name": "v1", "size": 5})
    assert status == 201, v1_made
    status, seen = await v2(api, "GET", f"/network-volumes/{v1_made['id']}")  # as it is
    assert seen == {"id": v1_made["id"], "name": "v1", "size": 5, "dataCenter": "",
                    "type": "STANDARD"}  # fmt: skip
    assert (await v2(api, "DELETE", f"/network-volumes/{v1_made['id']}"))[0] == 204
    status, problem = await v2(api, "PATCH", path, {"size": 10, "name": "x"})  # same size: fine
    assert status == 200, problem
    status, problem = await v2(api, "DELETE", path)
    assert status == 204, problem
    assert (await v2(api, "GET", path))[0] == 404
    assert (await call(api, "GET", f"/networkvolumes/{made['id']}"))[0] == 404


async def test_local_a_volume_grows_and_a_smaller_size_is_a_400(local_api: Api) -> None:
    made = await new_volume(local_api, size=20)
    path = f"/network-volumes/{made['id']}"
    assert await v2(local_api, "PATCH", path, {"size": 30}) == (200, {**made, "size": 30})
    status, problem = await v2(local_api, "PATCH", path, {"size": 25})
    assert status == 400 and problem["detail"].startswith("size: "), problem
    assert (await v2(local_api, "GET", path))[1]["size"] == 30


async def test_a_smaller_size_is_a_400_on_either_plane(api: Api, kube_leftovers: None) -> None:
    made = await new_volume(api, size=20)
    path = f"/network-volumes/{made['id']}"
    status, problem = await v2(api, "PATCH", path, {"size": 19})
    assert status == 400 and problem["detail"].startswith("size: "), problem
    assert await v2(api, "GET", path) == (200, made)
    assert (await v2(api, "DELETE", path))[0] == 204


@pytest.mark.parametrize(
    ("method", "body", "status", "field"),
    [
        ("POST", {"size": 10, "dataCenter": "d"}, 422, "name"),
        ("POST", {"name": "v", "dataCenter": "d"}, 422, "size"),
        ("POST", {"name": "v", "size": 10}, 422, "dataCenter"),
        ("POST", {"name": "v", "size": 9, "dataCenter": "d"}, 422, "size"),
        ("POST", {"name": "v", "size": 4097, "dataCenter": "d"}, 422, "size"),
        ("POST", {"name": "v", "size": 10, "dataCenter": ""}, 422, "dataCenter"),
        ("POST", {"name": "v", "size": 10, "dataCenter": "d", "type": "FAST"}, 422, "type"),
        ("POST", {"name": "v", "size": 10, "dataCenterId": "d"}, 422, "dataCenterId"),
        ("POST", {"name": "v", "size": 10, "dataCenter": "d", "mountPath": "/x"}, 422,
         "mountPath"),
        ("POST", {"name": "v", "size": 10, "dataCenter": "d", "type": "HIGH_PERFORMANCE"}, 400,
         "type"),
        ("PATCH", {}, 422, "body"),
        ("PATCH", {"dataCenter": "US-TX-3"}, 422, "dataCenter"),
        ("PATCH", {"size": None}, 422, "size"),
        ("PATCH", {"name": ""}, 422, "name"),
        ("PATCH", {"id": "other"}, 422, "id"),
    ],
)  # fmt: skip
async def test_a_bad_volume_is_refused_naming_the_field(
    api: Api, kube_leftovers: None, method: str, body: dict, status: int, field: str
) -> None:
    made = await new_volume(api)
    path = "/network-volumes" + (f"/{made['id']}" if method == "PATCH" else "")
    got, problem = await v2(api, method, path, body)
    assert got == status, problem
    if status == 422:
        assert field == "body" or violations_name(problem, field), problem
    else:
        assert problem["detail"].startswith((f"{field}:", f"{field}.")), problem
    assert await v2(api, "GET", f"/network-volumes/{made['id']}") == (200, made)
    assert (await v2(api, "DELETE", f"/network-volumes/{made['id']}"))[0] == 204


async def test_a_volume_an_endpoint_mounts_is_a_400_naming_it_until_it_lets_go(
    api: Api, kube_leftovers: None
) -> None:
    made = await new_volume(api)
    endpoint = await new_endpoint(api, api.template, networkVolumeId=made["id"])
    path = f"/network-volumes/{made['id']}"
    status, problem = await v2(api, "DELETE", path)
    assert status == 400 and endpoint["id"] in problem["detail"], problem
    assert "networkVolumes" in problem["detail"]  # the v2 endpoint's field
    assert (await v2(api, "GET", path))[0] == 200

    status, _ = await call(api, "PATCH", f"/endpoints/{endpoint['id']}", {"networkVolumeId": None})
    assert status == 200
    await deleted(api, path)
