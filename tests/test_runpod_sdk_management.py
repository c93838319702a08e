"""The official runpod SDK's management calls, unchanged, against `/graphql` (issue 34):
`create_template`, `create_endpoint`, `get_endpoints`, `update_endpoint_template`, then
`runpod.Endpoint(id).run_sync` on the endpoint they made; `create_container_registry_auth`
and `delete_container_registry_auth`. `RUNPOD_API_BASE_URL` points at
a real `lockgate dev` process, or at the operator's management API over envtest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import requests
import runpod
from runpod import error as runpod_error
from runpod.api.graphql import run_graphql_query

from tests.devproc import REPO, DevProcess

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]

START = "python tests/handlers/env_echo.py"  # relative to where lockgate dev runs


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    with DevProcess(str(REPO / "tests/handlers/sync_echo.py"), data_dir=data) as running:
        yield running


@pytest.fixture
def sdk(dev: DevProcess, monkeypatch: pytest.MonkeyPatch) -> DevProcess:
    """The SDK pointed at `lockgate dev`: management calls and the job API."""
    monkeypatch.setenv("RUNPOD_API_BASE_URL", dev.url)
    monkeypatch.setattr(runpod, "api_key", dev.key)
    monkeypatch.setattr(runpod, "endpoint_url_base", f"{dev.url}/v2")
    return dev


def listed(endpoint_id: str) -> dict:
    [found] = [e for e in runpod.get_endpoints() if e["id"] == endpoint_id]
    return found


def test_sdk_creates_a_template_and_an_endpoint_that_runs_jobs_with_its_env(sdk) -> None:
    template = runpod.create_template(
        "env-echo", "example.test/env-echo:1", docker_start_cmd=START,
        env={"GREETING": "hello sdk"}, is_serverless=True, ports="8000/http",
    )  # fmt: skip
    assert template["name"] == "env-echo" and template["imageName"] == "example.test/env-echo:1"
    assert template["dockerArgs"] == START and template["isServerless"] is True
    assert template["env"] == [{"key": "GREETING", "value": "hello sdk"}]
    assert template["ports"] == "8000/http" and template["containerDiskInGb"] == 10

    endpoint = runpod.create_endpoint("sdk-echo", template["id"], workers_max=1)
    assert endpoint["templateId"] == template["id"] and endpoint["gpuIds"] == "AMPERE_16"
    assert (endpoint["workersMax"], endpoint["flashBootType"]) == (1, "OFF")

    found = listed(endpoint["id"])
    assert found["name"] == "sdk-echo" and found["version"] == 1
    assert found["env"] == [{"key": "GREETING", "value": "hello sdk"}]
    assert found["createdAt"]

    out = runpod.Endpoint(endpoint["id"]).run_sync({"names": ["GREETING"]}, timeout=60)
    assert out["env"] == {"GREETING": "hello sdk"}

    other = runpod.create_template(
        "env-echo-2", "example.test/env-echo:2", docker_start_cmd=START, env={"GREETING": "two"}
    )
    moved = runpod.update_endpoint_template(endpoint["id"], other["id"])
    assert moved == {"id": endpoint["id"], "templateId": other["id"]}
    assert listed(endpoint["id"])["version"] == 2
    out = runpod.Endpoint(endpoint["id"]).run_sync({"names": ["GREETING"]}, timeout=60)
    assert out["env"] == {"GREETING": "two"}

    # the REST API sees the same records; the first template is free once nothing uses it
    headers = {"authorization": f"Bearer {sdk.key}"}
    first = requests.delete(f"{sdk.url}/v1/templates/{template['id']}", headers=headers, timeout=10)
    assert first.status_code == 204
    second = requests.delete(f"{sdk.url}/v1/templates/{other['id']}", headers=headers, timeout=10)
    assert second.status_code == 409 and endpoint["id"] in second.json()["error"]


def test_sdk_creates_and_deletes_a_registry_credential_the_rest_api_shows(sdk) -> None:
    made = runpod.create_container_registry_auth("ci", "robot", "s3cret-Pa55")
    assert set(made) == {"id", "name"} and made["name"] == "ci"
    headers = {"authorization": f"Bearer {sdk.key}"}
    url = f"{sdk.url}/v1/containerregistryauth/{made['id']}"
    got = requests.get(url, headers=headers, timeout=10)
    assert got.status_code == 200 and got.json()["username"] == "robot"
    assert got.json()["registry"] == "docker.io" and "s3cret" not in got.text

    with pytest.raises(runpod_error.QueryError) as raised:  # RunPod's REST has no update
        runpod.update_container_registry_auth(made["id"], "robot", "other")
    assert "updateRegistryAuth" in str(raised.value)

    assert runpod.delete_container_registry_auth(made["id"]) is True
    assert requests.get(url, headers=headers, timeout=10).status_code == 404
    with pytest.raises(runpod_error.QueryError) as raised:
        runpod.delete_container_registry_auth(made["id"])
    assert "not found" in str(raised.value)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("query { myself { endpoints { id noSuchField } } }", "noSuchField"),
        ("mutation { deleteEverything }", "deleteEverything"),
        ("query { myself { endpoints { id } }", "Syntax Error"),
        (
            'mutation { saveTemplate(input: {name: "t", imageName: "x:1", containerDiskInGb: 0})'
            " { id } }",
            "containerDiskInGb",
        ),
        ('mutation { saveTemplate(input: {name: "t"}) { id } }', "imageName"),
        (
            'mutation { saveEndpoint(input: {name: "e", templateId: "t", workersMin: 9,'
            " workersMax: 1}) { id } }",
            "workersMin",
        ),
        (
            'mutation { saveEndpoint(input: {name: "e", templateId: "t",'
            ' modelReferences: ["no-org"]}) { id } }',
            "modelReferences",
        ),
        (
            'mutation { updateEndpointTemplate(input: {endpointId: "nobody", templateId: "t"})'
            " { id } }",
            "nobody",
        ),
    ],
)
def test_unknown_fields_operations_and_bad_input_are_graphql_errors(
    sdk, query: str, says: str
) -> None:
    with pytest.raises(runpod_error.QueryError) as raised:
        run_graphql_query(query)
    assert says in str(raised.value)


def test_a_wrong_key_is_refused_and_a_bad_body_is_400_never_500(sdk) -> None:
    with pytest.raises(runpod_error.AuthenticationError):
        run_graphql_query("query { myself { id } }", api_key="lg_not_a_key")
    headers = {"authorization": f"Bearer {sdk.key}", "content-type": "application/json"}
    for body in ("not json", json.dumps([1]), json.dumps({"query": 5})):
        resp = requests.post(f"{sdk.url}/graphql", data=body, headers=headers, timeout=10)
        assert resp.status_code == 400 and resp.json()["errors"][0]["message"]


@pytest.mark.envtest
def test_sdk_management_calls_write_template_and_endpoint_resources(
    operator: RunningOperator, resources: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNPOD_API_BASE_URL", operator.manage_url)
    monkeypatch.setattr(runpod, "api_key", operator.file_admin_key)
    template = runpod.create_template(
        "kube-sdk", "example.test/echo:1", docker_start_cmd="python -u handler.py",
        env={"MODE": "one"}, is_serverless=True,
    )  # fmt: skip
    resources.created.append(("templates", template["id"]))
    spec = resources.get("templates", template["id"])["spec"]
    assert spec["image"] == "example.test/echo:1"
    assert spec["args"] == ["python", "-u", "handler.py"] and spec["env"] == {"MODE": "one"}

    endpoint = runpod.create_endpoint("kube-sdk", template["id"], gpu_ids="ADA_24")
    resources.created.append(("endpoints", endpoint["id"]))
    stored = resources.get("endpoints", endpoint["id"])["spec"]
    assert stored["templateId"] == template["id"] and stored["gpuTypeIds"] == ["ADA_24"]
    assert listed(endpoint["id"])["env"] == [{"key": "MODE", "value": "one"}]

    other = runpod.create_template("kube-sdk-2", "example.test/echo:2")
    resources.created.append(("templates", other["id"]))
    runpod.update_endpoint_template(endpoint["id"], other["id"])
    assert resources.get("endpoints", endpoint["id"])["spec"]["templateId"] == other["id"]
    assert listed(endpoint["id"])["version"] == 2


def _aliases(n: int, field: str) -> str:
    return " ".join(f"a{i}: {field}" for i in range(n))


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("{ myself { " + _aliases(3000, "endpoints { id }") + " } }", "more than 5000 tokens"),
        ("{ myself { " + _aliases(400, "id") + " } }", "more than 300 selections"),
        ("{ myself { " + _aliases(6, "endpoints { id }") + " } }", "more than 5 fields"),
        (
            "mutation { " + _aliases(6, 'deleteRegistryAuth(registryAuthId: "x")') + " }",
            "more than 5 fields",
        ),
        (  # a fragment counts each time it is spread
            "query { myself { " + " ".join(f"...F{i % 2}" for i in range(20)) + " } } "
            "fragment F0 on User { " + _aliases(20, "id") + " } "
            "fragment F1 on User { " + _aliases(20, "id") + " }",
            "more than 300 selections",
        ),
    ],
)
def test_a_costly_query_is_a_graphql_error_before_it_runs(sdk, query: str, says: str) -> None:
    """Bounded before validation (quadratic in aliases of one field) and execution (two
    Kubernetes list calls per `endpoints` under `lockgate manage`): 3,000 aliases took
    8.3 s and stalled the job API."""
    with pytest.raises(runpod_error.QueryError) as raised:
        run_graphql_query(query)
    assert says in str(raised.value)
