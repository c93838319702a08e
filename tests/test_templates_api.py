"""`/v1/templates` and the endpoints API in RunPod's shapes (issue 34), over both control
planes: `local` (dev mode's app, real worker processes) and `kubernetes` (the operator's
management API writing Template and Endpoint resources in envtest). Tests of what only the
local plane does (workers running a template's command with its env) are at the end.
"""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.store import Registry
from tests.conftest import eventually
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    admin_key,
    api,
    dev_app,
    job_call,
    jobs_key,
    kubernetes_api,
    local_api,
    stored_entries,
)

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]

OTHER_KEY = {"name": "another-endpoint-worker-key", "key": "RUNPOD_AI_API_KEY"}
UNCONFINED = {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}
ENV_ECHO = ["python", "tests/handlers/env_echo.py"]  # relative to the repository


async def call(api: Api, method: str, path: str, body: Any = None, key: str | None = None):
    """`{url}/v1{path}` with the admin key: status and JSON body (None when empty)."""
    headers = {"authorization": f"Bearer {key or api.key}"}
    async with api.http.request(method, f"{api.url}/v1{path}", json=body, headers=headers) as r:
        payload = await r.json() if r.content_type == "application/json" else None
        return r.status, payload


def names(error: dict, field: str) -> bool:
    """Whether an error body names `field` (itself, or one of its items or keys; a rule
    between fields is reported on the body and names them in its message)."""
    return any(
        re.match(rf"{re.escape(field)}[.:]", part)
        or (part.startswith("body: ") and f"{field} " in part)
        for part in error["error"].split("; ")
    )


def plane(request: pytest.FixtureRequest) -> str:
    return request.node.callspec.params["api"]


@pytest.fixture
def forget_template(api: Api, request: pytest.FixtureRequest):
    """Deletes a template made through the API after the test (the Kubernetes plane's
    resources outlive a test otherwise)."""
    if plane(request) == "kubernetes":
        resources: Resources = request.getfixturevalue("resources")
        return lambda template_id: resources.created.append(("templates", template_id))
    return lambda _template_id: None


async def stored_template(api: Api, request: pytest.FixtureRequest, template_id: str) -> dict:
    """The template as its backend keeps it: a Template resource's spec, or dev mode's entry."""
    if plane(request) == "kubernetes":
        resources: Resources = request.getfixturevalue("resources")
        return (resources.get("templates", template_id) or {}).get("spec")
    redis: Redis = request.getfixturevalue("redis")
    return await Registry(redis).get_template(template_id)


async def new_template(api: Api, forget, **fields: Any) -> dict:
    body = {"name": "env-echo", "imageName": "example.test/env-echo:1", **fields}
    status, record = await call(api, "POST", "/templates", body)
    assert status == 200, record
    forget(record["id"])
    return record


async def new_endpoint(api: Api, template_id: str, **fields: Any) -> dict:
    status, record = await call(api, "POST", "/endpoints", {"templateId": template_id, **fields})
    assert status == 200, record
    api.forget(record["id"])
    return record


# -- templates -----------------------------------------------------------------------------


async def test_a_template_is_created_with_runpods_fields_and_read_back(
    api: Api, forget_template, request: pytest.FixtureRequest
) -> None:
    record = await new_template(
        api, forget_template, dockerEntrypoint=["/bin/sh", "-c"], dockerStartCmd=["run.sh"],
        env={"GREETING": "hello"}, ports=["8000/http", "22/tcp"], volumeInGb=5, readme="# hi",
        isServerless=True, category="CPU",
    )  # fmt: skip
    assert re.fullmatch(r"[a-z0-9]{10}", record["id"])
    assert record["name"] == "env-echo" and record["imageName"] == "example.test/env-echo:1"
    assert record["dockerEntrypoint"] == ["/bin/sh", "-c"]
    assert record["dockerStartCmd"] == ["run.sh"]
    assert record["env"] == {"GREETING": "hello"} and record["ports"] == ["8000/http", "22/tcp"]
    assert (record["containerDiskInGb"], record["volumeInGb"]) == (50, 5)  # RunPod's default
    assert record["volumeMountPath"] == "/workspace" and record["readme"] == "# hi"
    assert record["isServerless"] is True and record["category"] == "CPU"
    assert record["containerRegistryAuthId"] == ""

    status, got = await call(api, "GET", f"/templates/{record['id']}")
    assert (status, got) == (200, record)
    status, listed = await call(api, "GET", "/templates")
    assert status == 200 and record in listed
    stored = await stored_template(api, request, record["id"])  # TemplateSpec's names
    assert stored["image"] == "example.test/env-echo:1"
    assert (stored["command"], stored["args"]) == (["/bin/sh", "-c"], ["run.sh"])


async def test_patch_and_its_update_synonym_change_the_given_fields_only(
    api: Api, forget_template, request: pytest.FixtureRequest
) -> None:
    record = await new_template(api, forget_template, env={"A": "1"}, readme="first")
    tid = record["id"]
    status, patched = await call(api, "PATCH", f"/templates/{tid}", {"env": {"B": "2"}})
    assert status == 200, patched
    assert patched["env"] == {"B": "2"} and patched["readme"] == "first"  # env replaced
    assert (await stored_template(api, request, tid))["env"] == {"B": "2"}

    status, updated = await call(api, "POST", f"/templates/{tid}/update", {"readme": "second"})
    assert status == 200, updated
    assert (updated["readme"], updated["env"]) == ("second", {"B": "2"})
    assert (await call(api, "GET", f"/templates/{tid}"))[1] == updated


async def test_a_template_in_use_cannot_be_deleted_until_its_endpoints_are_gone(
    api: Api, forget_template
) -> None:
    tid = (await new_template(api, forget_template))["id"]
    if api.plane is not None:  # dev mode runs the template: give it a command
        await call(api, "PATCH", f"/templates/{tid}", {"dockerStartCmd": ENV_ECHO})
    first = await new_endpoint(api, tid, name="user-one")
    second = await new_endpoint(api, tid, name="user-two")

    status, error = await call(api, "DELETE", f"/templates/{tid}")
    assert status == 409
    assert first["id"] in error["error"] and second["id"] in error["error"]
    assert (await call(api, "GET", f"/templates/{tid}"))[0] == 200

    for endpoint in (first, second):
        assert (await call(api, "DELETE", f"/endpoints/{endpoint['id']}"))[0] == 204

    async def deleted() -> bool:
        status, _ = await call(api, "DELETE", f"/templates/{tid}")
        return status == 204

    await eventually(deleted, "204 once no endpoint uses it")
    assert (await call(api, "GET", f"/templates/{tid}"))[0] == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"imageName": "x:1"}, "name"),
        ({"name": "t"}, "imageName"),
        ({"name": "t", "imageName": ""}, "imageName"),
        ({"name": "t", "imageName": "x:1", "ports": ["80/udp"]}, "ports"),
        ({"name": "t", "imageName": "x:1", "env": {"A": 1}}, "env.A"),
        ({"name": "t", "imageName": "x:1", "env": {"BAD NAME": "1"}}, "env"),
        ({"name": "t", "imageName": "x:1", "containerDiskInGb": 0}, "containerDiskInGb"),
        ({"name": "t", "imageName": "x:1", "category": "TPU"}, "category"),
        ({"name": "t", "imageName": "x:1", "dockerStartCmd": "python h.py"}, "dockerStartCmd"),
        ({"name": "t", "imageName": "x:1", "colour": "blue"}, "colour"),
        ({"name": "t", "imageName": "x:1", "image": "y:1"}, "image"),
        ({"name": "t", "imageName": "x:1", "id": "Not_An_Id"}, "id"),
        ({"name": "t", "imageName": "x:1", "env": {"A\n": "1"}}, "env"),
        ({"name": "t", "imageName": "x:1", "podAnnotations": UNCONFINED}, "podAnnotations"),
        ({"name": "t", "imageName": "x:1", "envFromSecrets": ["ep1-worker-key"]}, "envFromSecrets"),
        ({"name": "t", "imageName": "x:1", "secretEnv": {"K": OTHER_KEY}}, "secretEnv"),
    ],
)
async def test_a_bad_template_is_refused_naming_the_field(api: Api, body: dict, field: str) -> None:
    status, error = await call(api, "POST", "/templates", body)
    assert status == 400 and names(error, field), error


@pytest.mark.envtest
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"envFromSecrets": ["lockgate-settings"]}, "envFromSecrets"),
        ({"secretEnv": {"K": {"name": "lockgate-client-key", "key": "key"}}}, "secretEnv.K"),
    ],
)
async def test_the_charts_own_secrets_are_refused_on_the_cluster(
    kubernetes_api: Api, resources: Resources, fields: dict, field: str
) -> None:
    """Issue 45 item 8: the chart's Secrets (LOCKGATE_RESERVED_SECRETS) are refused by
    name, on create and on edit; other Secrets wait for their label (the operator's check)."""
    api = kubernetes_api
    body = {"name": "t", "imageName": "x:1", **fields}
    status, error = await call(api, "POST", "/templates", body)
    assert status == 400 and names(error, field), error
    assert "lockgate's own" in error["error"]
    record = await new_template(api, lambda i: resources.created.append(("templates", i)))
    status, error = await call(api, "PATCH", f"/templates/{record['id']}", fields)
    assert status == 400 and names(error, field) and "lockgate's own" in error["error"], error


@pytest.mark.parametrize("how", ["PATCH", "POST"])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"imageName": ""}, "imageName"),
        ({"name": None}, "name"),
        ({"volumeInGb": -1}, "volumeInGb"),
        ({"isServerless": "maybe"}, "isServerless"),
        ({"id": "another"}, "id"),
        ([1, 2], "body"),
    ],
)
async def test_a_bad_template_edit_is_refused_naming_the_field_and_changes_nothing(
    api: Api, forget_template, how: str, body: Any, field: str
) -> None:
    record = await new_template(api, forget_template)
    path = f"/templates/{record['id']}" + ("/update" if how == "POST" else "")
    status, error = await call(api, how, path, body)
    assert status == 400 and names(error, field), error
    assert (await call(api, "GET", f"/templates/{record['id']}"))[1] == record


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/templates/tpl-nobody"),
        ("PATCH", "/templates/tpl-nobody"),
        ("POST", "/templates/tpl-nobody/update"),
        ("DELETE", "/templates/tpl-nobody"),
    ],
)
async def test_an_unknown_template_is_not_found(api: Api, method: str, path: str) -> None:
    status, error = await call(api, method, path, {} if method in ("PATCH", "POST") else None)
    assert status == 404 and "tpl-nobody" in error["error"]


async def test_a_template_id_that_exists_is_a_conflict(api: Api, forget_template) -> None:
    await new_template(api, forget_template, id="tpl-twice")
    status, error = await call(
        api, "POST", "/templates", {"id": "tpl-twice", "name": "n", "imageName": "x:1"}
    )
    assert status == 409 and "tpl-twice" in error["error"]


async def test_templates_and_graphql_need_an_admin_key(api: Api, redis: Redis) -> None:
    jobs_only = f"lg_{'j' * 16}"
    await Registry(redis).put_key(jobs_only, {"name": "jobs", "scopes": ["jobs"]})
    for key in ("lg_unknown_key", jobs_only):
        assert (await call(api, "GET", "/templates", key=key))[0] == 401
        headers = {"authorization": f"Bearer {key}"}
        body = {"query": "{ myself { id } }"}
        async with api.http.post(f"{api.url}/graphql", json=body, headers=headers) as resp:
            assert resp.status == 401
            assert (await resp.json())["errors"][0]["message"]


# -- endpoints in RunPod's shapes ----------------------------------------------------------


async def test_an_endpoint_record_has_runpods_fields_and_the_template_when_asked(
    api: Api, forget_template
) -> None:
    template = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO)
    record = await new_endpoint(api, template["id"], name="shaped")
    assert re.fullmatch(r"[a-z0-9]{14}", record["id"])  # generated, as RunPod does
    assert record["templateId"] == template["id"] and record["version"] == 1
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["createdAt"])
    assert record["networkVolumeId"] is None
    assert "template" not in record and "workers" not in record

    path = f"/endpoints/{record['id']}"
    status, got = await call(api, "GET", f"{path}?includeTemplate=true&includeWorkers=true")
    assert status == 200 and got["template"] == template and got["workers"] == []
    status, listed = await call(api, "GET", "/endpoints?includeTemplate=true")
    [row] = [r for r in listed if r["id"] == record["id"]]
    assert row["template"] == template and "workers" not in row


async def test_the_version_goes_up_when_the_template_or_its_env_changes(
    api: Api, forget_template
) -> None:
    first = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO, env={"V": "1"})
    second = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO)
    record = await new_endpoint(api, first["id"])
    path = f"/endpoints/{record['id']}"

    _, edited = await call(api, "PATCH", path, {"workersMax": 2})
    assert edited["version"] == 1  # a setting, not the template
    await call(api, "PATCH", f"/templates/{first['id']}", {"env": {"V": "2"}})
    assert (await call(api, "GET", path))[1]["version"] == 2
    status, moved = await call(api, "POST", f"{path}/update", {"templateId": second["id"]})
    assert status == 200 and moved["version"] == 3 and moved["templateId"] == second["id"]
    assert moved["workersMax"] == 2


@pytest.mark.parametrize(
    ("method", "suffix", "body", "field"),
    [
        ("POST", "", {"networkVolumeId": "vol-1"}, "networkVolumeId"),
        ("POST", "", {"workersMin": 4, "workersMax": 2}, "workersMin"),
        ("POST", "", {"modelReferences": ["org/model:../../../../outside/x"]}, "modelReferences"),
        ("PATCH", "/{id}", {"modelReferences": ["org/mo--del"]}, "modelReferences"),
        ("PATCH", "/{id}", {"networkVolumeId": "vol-1"}, "networkVolumeId"),
        ("POST", "/{id}/update", {"idleTimeout": -1}, "idleTimeout"),
        ("POST", "/{id}/update", {"templateId": ""}, "templateId"),
        ("GET", "/{id}?includeTemplate=maybe", None, "includeTemplate"),
        ("GET", "?includeWorkers=2", None, "includeWorkers"),
    ],
)
async def test_bad_endpoint_input_is_refused_naming_the_field(
    api: Api, forget_template, method: str, suffix: str, body: Any, field: str
) -> None:
    template = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO)
    record = await new_endpoint(api, template["id"])
    if method == "POST" and not suffix:
        body = {"templateId": template["id"], **body}
    path = "/endpoints" + suffix.format(id=record["id"])
    status, error = await call(api, method, path, body)
    assert status == 400 and names(error, field), error


async def test_an_endpoint_without_a_template_id_is_refused(api: Api) -> None:
    status, error = await call(api, "POST", "/endpoints", {"name": "no-template"})
    assert status == 400 and error["error"].startswith("templateId: "), error


# -- dev mode: a template's command and env run in local workers ---------------------------


async def runsync(api: Api, key: str, endpoint_id: str, names: list[str]) -> dict:
    status, done = await job_call(
        api.http, api.url, key, "POST", f"{endpoint_id}/runsync", {"input": {"names": names}}
    )
    assert status == 200 and done["status"] == "COMPLETED", done
    return done["output"]


async def test_local_workers_run_the_template_with_its_env_and_an_edit_rolls_them(
    local_api: Api, jobs_key: str
) -> None:
    api = local_api
    status, template = await call(
        api, "POST", "/templates",
        {"name": "echo", "imageName": "example.test/env-echo:1", "dockerStartCmd": ENV_ECHO,
         "env": {"GREETING": "hello"}},
    )  # fmt: skip
    assert status == 200, template
    endpoint = (await new_endpoint(api, template["id"], workersMax=1))["id"]

    first = await runsync(api, jobs_key, endpoint, ["GREETING", "RUNPOD_ENDPOINT_ID"])
    assert first["env"] == {"GREETING": "hello", "RUNPOD_ENDPOINT_ID": endpoint}
    _, got = await call(api, "GET", f"/endpoints/{endpoint}?includeWorkers=true")
    assert len(got["workers"]) == 1 and got["workers"][0]["status"] in {"IDLE", "RUNNING"}

    status, _ = await call(
        api, "PATCH", f"/templates/{template['id']}", {"env": {"GREETING": "bye"}}
    )
    assert status == 200
    second = await runsync(api, jobs_key, endpoint, ["GREETING"])
    assert second["env"] == {"GREETING": "bye"}
    assert second["pid"] != first["pid"]  # a new worker, started with the new env
    assert (await call(api, "GET", f"/endpoints/{endpoint}"))[1]["version"] == 2


async def test_local_a_template_that_cannot_run_here_is_refused_naming_dockerstartcmd(
    local_api: Api, jobs_key: str
) -> None:
    api = local_api
    bare = await new_template(api, lambda _id: None)  # no command: the image's own
    status, error = await call(api, "POST", "/endpoints", {"templateId": bare["id"]})
    assert status == 400 and error["error"].startswith("dockerStartCmd: "), error

    good = await new_template(api, lambda _id: None, dockerStartCmd=ENV_ECHO, env={"X": "1"})
    endpoint = (await new_endpoint(api, good["id"], workersMax=1))["id"]
    broken = {"dockerStartCmd": ["no-such-program-here"]}
    status, error = await call(api, "PATCH", f"/templates/{good['id']}", broken)
    assert status == 400 and error["error"].startswith("dockerStartCmd: "), error
    assert (await call(api, "GET", f"/templates/{good['id']}"))[1] == good  # unchanged
    assert (await runsync(api, jobs_key, endpoint, ["X"]))["env"] == {"X": "1"}


async def test_local_templates_come_back_when_dev_mode_restarts(
    redis: Redis, redis_server, http: aiohttp.ClientSession, jobs_key: str
) -> None:
    async with dev_app(redis_server) as (url, _plane):
        api = Api(http, url, await admin_key(redis), "", url, stored_entries(redis))
        template = await new_template(
            api, lambda _id: None, dockerStartCmd=ENV_ECHO, env={"R": "1"}
        )
        endpoint = (await new_endpoint(api, template["id"], workersMax=1))["id"]
    async with dev_app(redis_server) as (url, plane):
        await plane.resume()
        api = Api(http, url, api.key, "", url, stored_entries(redis))
        assert (await call(api, "GET", f"/templates/{template['id']}"))[1] == template
        assert (await runsync(api, jobs_key, endpoint, ["R"]))["env"] == {"R": "1"}
        assert (await call(api, "DELETE", f"/endpoints/{endpoint}"))[0] == 204
        assert (await call(api, "DELETE", f"/templates/{template['id']}"))[0] == 204
