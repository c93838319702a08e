"""The management API served by the operator, writing Endpoint resources (envtest)."""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.store import Registry

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = pytest.mark.envtest


class Api:
    """A client of `/v1/endpoints` with an admin key."""

    def __init__(self, http: aiohttp.ClientSession, url: str, key: str) -> None:
        self.http, self.url, self.key = http, url, key

    async def call(
        self, method: str, path: str = "", body: Any = None, key: str | None = None
    ) -> tuple[int, Any]:
        headers = {"authorization": f"Bearer {key or self.key}"}
        async with self.http.request(
            method, f"{self.url}/v1/endpoints{path}", json=body, headers=headers
        ) as resp:
            payload = await resp.json() if resp.content_type == "application/json" else None
            return resp.status, payload


@pytest.fixture
async def api(
    operator: RunningOperator, redis: Redis, http: aiohttp.ClientSession, resources: Resources
) -> Api:
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    resources.template("manage-tpl")
    return Api(http, operator.manage_url, key)


def forget(resources: Resources, endpoint_id: str) -> None:
    resources.created.append(("endpoints", endpoint_id))


# -- round trip ----------------------------------------------------------------------------


async def test_post_creates_an_endpoint_resource_with_a_runpod_style_id(
    api: Api, resources: Resources
) -> None:
    status, record = await api.call(
        "POST", body={"name": "echo", "templateId": "manage-tpl", "gpuTypeIds": ["NVIDIA L4"]}
    )
    assert status == 200, record
    forget(resources, record["id"])
    assert re.fullmatch(r"[a-z0-9]{14}", record["id"])
    assert record["name"] == "echo" and record["gpuTypeIds"] == ["NVIDIA L4"]
    assert record["workersMax"] == 3  # a default, filled in
    assert record["jobApiUrl"] == f"https://jobs.example.test/v2/{record['id']}/"
    assert "phase" in record["status"]
    stored = resources.get("endpoints", record["id"])
    assert stored["spec"]["gpuTypeIds"] == ["NVIDIA L4"]


async def test_created_endpoint_reads_back_ready_once_reconciled(
    api: Api, resources: Resources
) -> None:
    status, record = await api.call("POST", body={"id": "mg-ready", "templateId": "manage-tpl"})
    assert status == 200, record
    forget(resources, "mg-ready")

    async def ready() -> dict | None:
        _, got = await api.call("GET", "/mg-ready")
        return got if got["status"]["phase"] == "Ready" else None

    got = await resources.eventually(ready, "phase Ready")
    assert got["status"]["endpointId"] == "mg-ready"
    _, listed = await api.call("GET")
    assert "mg-ready" in [r["id"] for r in listed]


async def test_patch_changes_the_given_fields_and_keeps_the_others(
    api: Api, resources: Resources
) -> None:
    await api.call("POST", body={"id": "mg-patch", "templateId": "manage-tpl", "name": "a"})
    forget(resources, "mg-patch")

    status, record = await api.call("PATCH", "/mg-patch", {"workersMax": 9, "idleTimeout": 60})
    assert status == 200, record
    assert (record["workersMax"], record["idleTimeout"], record["name"]) == (9, 60, "a")
    spec = resources.get("endpoints", "mg-patch")["spec"]
    assert (spec["workersMax"], spec["idleTimeout"], spec["templateId"]) == (9, 60, "manage-tpl")


async def test_delete_removes_the_endpoint(api: Api, resources: Resources) -> None:
    await api.call("POST", body={"id": "mg-delete", "templateId": "manage-tpl"})
    forget(resources, "mg-delete")

    status, _ = await api.call("DELETE", "/mg-delete")
    assert status == 204

    async def gone() -> bool:
        return (await api.call("GET", "/mg-delete"))[0] == 404

    await resources.eventually(gone, "404 after delete")


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"computeType": "TPU"}, "computeType"),
        ({"executionTimeoutMs": 10}, "executionTimeoutMs"),
        ({"workersMin": 4, "workersMax": 2}, "workersMin"),
        ({"gpuCount": "many"}, "gpuCount"),
        ({"colour": "blue"}, "colour"),
        ({"id": "Not_An_Id"}, "id"),
    ],
)
async def test_invalid_payload_is_refused_naming_the_field(
    api: Api, body: dict, field: str
) -> None:
    status, error = await api.call("POST", body=body)
    assert status == 400
    assert field in error["error"]


async def test_body_that_is_not_a_json_object_is_refused(api: Api) -> None:
    status, error = await api.call("POST", body=[1, 2])
    assert status == 400 and "JSON object" in error["error"]


async def test_patch_that_breaks_min_not_above_max_is_refused(
    api: Api, resources: Resources
) -> None:
    await api.call("POST", body={"id": "mg-minmax", "templateId": "manage-tpl"})
    forget(resources, "mg-minmax")
    status, error = await api.call("PATCH", "/mg-minmax", {"workersMin": 5})
    assert status == 400 and "workersMin (5) must not exceed workersMax (3)" in error["error"]


async def test_existing_id_is_a_conflict(api: Api, resources: Resources) -> None:
    await api.call("POST", body={"id": "mg-twice", "templateId": "manage-tpl"})
    forget(resources, "mg-twice")
    status, error = await api.call("POST", body={"id": "mg-twice"})
    assert status == 409 and "mg-twice" in error["error"]


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
async def test_unknown_endpoint_is_not_found(api: Api, method: str) -> None:
    status, error = await api.call(method, "/mg-nobody", {} if method == "PATCH" else None)
    assert status == 404 and "mg-nobody" in error["error"]


async def test_missing_or_non_admin_key_is_unauthorized(api: Api, redis: Redis) -> None:
    client_key = f"lg_{secrets.token_hex(8)}"
    await Registry(redis).put_key(client_key, {"name": "client", "scopes": ["jobs"]})
    assert (await api.call("GET", key="lg_unknown"))[0] == 401
    assert (await api.call("GET", key=client_key))[0] == 401
    async with api.http.get(f"{api.url}/v1/endpoints") as resp:
        assert resp.status == 401
