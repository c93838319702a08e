"""`/v2/openapi.json` (issue 46, item 10) from dev mode's real app on loopback: a valid
OpenAPI 3.1 document (checked by openapi-spec-validator), served without a key, holding
every mounted v2 route under RunPod's operationId, closed request bodies, and answers the
views really give (created, read and refused through HTTP, checked against its schemas).
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from aiohttp import web
from openapi_spec_validator import validate
from redis.asyncio import Redis
from referencing import Registry as Refs
from referencing.jsonschema import DRAFT202012

from lockgate.apps.dev import build_app
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.manage.v2.openapi import mounted_routes, undocumented, v2_document
from lockgate.store import Registry
from tests.conftest import REPO, make_settings

ECHO_ARGS = "python tests/handlers/sync_echo.py"  # dev mode runs args (relative to the repo)
# RunPod's operationIds of the routes lockgate mounts, as its MCP server 4.0.0 calls them
# (specgen/generated/tools.gen.ts and the curated list tools).
RUNPODS = {
    ("get", "/v2/serverless"): "listEndpoints",
    ("post", "/v2/serverless"): "createEndpoint",
    ("get", "/v2/serverless/{id}"): "getEndpoint",
    ("patch", "/v2/serverless/{id}"): "updateEndpoint",
    ("delete", "/v2/serverless/{id}"): "deleteEndpoint",
    ("get", "/v2/templates"): "listTemplates",
    ("post", "/v2/templates"): "createTemplate",
    ("get", "/v2/templates/{id}"): "getTemplate",
    ("patch", "/v2/templates/{id}"): "updateTemplate",
    ("delete", "/v2/templates/{id}"): "deleteTemplate",
    ("get", "/v2/registries"): "listRegistries",
    ("post", "/v2/registries"): "createRegistry",
    ("get", "/v2/registries/{id}"): "getRegistry",
    ("delete", "/v2/registries/{id}"): "deleteRegistry",
    ("get", "/v2/network-volumes"): "listNetworkVolumes",
    ("post", "/v2/network-volumes"): "createNetworkVolume",
    ("get", "/v2/network-volumes/{id}"): "getNetworkVolume",
    ("patch", "/v2/network-volumes/{id}"): "updateNetworkVolume",
    ("delete", "/v2/network-volumes/{id}"): "deleteNetworkVolume",
}


@dataclass
class Dev:
    app: web.Application
    url: str
    key: str
    http: aiohttp.ClientSession

    async def call(self, method: str, path: str, body: Any = None, *, key: bool = True):
        """Status, content type and JSON body of `method {url}{path}`."""
        headers = {"authorization": f"Bearer {self.key}"} if key else {}
        async with self.http.request(method, self.url + path, json=body, headers=headers) as r:
            text = await r.text()
            return r.status, r.content_type, (await r.json(content_type=None) if text else None)


@pytest.fixture
async def dev(
    redis: Redis, redis_server: EmbeddedRedis, http: aiohttp.ClientSession
) -> AsyncIterator[Dev]:
    """Dev mode's whole app (gateway, /v1, /graphql, /v2) on loopback."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    settings = make_settings(redis_server.url, port, sweep_interval_s=0.2)
    with tempfile.TemporaryDirectory(prefix="lockgate-dev-") as data_dir:
        app, plane = build_app(
            settings, gateway_url=url, base_dir=REPO, data_dir=Path(data_dir), stop_grace_s=5
        )
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            yield Dev(app, url, key, http)
        finally:
            await plane.close()
            await runner.cleanup()


@pytest.fixture
async def document(dev: Dev) -> dict[str, Any]:
    status, content_type, doc = await dev.call("GET", "/v2/openapi.json", key=False)
    assert (status, content_type) == (200, "application/json")
    return doc


def conforms(doc: dict[str, Any], schema: dict[str, Any], value: Any) -> None:
    """Raise unless `value` is valid against `schema`, whose refs point into `doc`."""
    refs = Refs().with_resource("urn:doc", DRAFT202012.create_resource(doc))
    jsonschema.Draft202012Validator(_rebase(schema), registry=refs).validate(value)


def _rebase(schema: Any) -> Any:
    """`schema` with its `#/…` refs made absolute (`urn:doc#/…`)."""
    if isinstance(schema, dict):
        return {
            k: ("urn:doc" + v if k == "$ref" and v.startswith("#") else _rebase(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_rebase(v) for v in schema]
    return schema


def answer_schema(doc: dict[str, Any], method: str, path: str, status: int) -> dict[str, Any]:
    response = doc["paths"][path][method]["responses"][str(status)]
    if "$ref" in response:
        response = doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    (media,) = response["content"].values()
    return media["schema"]


# -- the document ----------------------------------------------------------------------------


async def test_the_document_is_served_without_a_key_and_is_valid_openapi_3_1(
    dev: Dev, document: dict[str, Any]
) -> None:
    validate(document)  # openapi-spec-validator: raises on any violation of OpenAPI 3.1
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    status, content_type, body = await dev.call("GET", "/v2/serverless", key=False)
    assert (status, content_type) == (401, "application/problem+json"), body  # still guarded


async def test_every_mounted_v2_route_is_in_the_document_with_its_operation(
    dev: Dev, document: dict[str, Any]
) -> None:
    routes = mounted_routes(dev.app)
    assert {r.collection for r in routes} >= {"serverless", "templates", "registries"}
    assert undocumented(dev.app) == []  # a route mounted without `@documented` fails here
    for route in routes:
        assert route.method.lower() in document["paths"][route.path], route
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)) == len(routes)


def test_a_route_mounted_without_an_operation_is_found_and_still_listed() -> None:
    async def handler(_request: web.Request) -> web.Response:
        return web.Response()

    extra = web.Application()
    extra.router.add_get("/{id}/things", handler)
    root = web.Application()
    root.add_subapp("/v2/extra", extra)
    assert undocumented(root) == ["GET /v2/extra/{id}/things"]
    doc = v2_document(root)
    validate(doc)
    assert doc["paths"]["/v2/extra/{id}/things"]["get"]["summary"] == "undocumented"


async def test_operation_ids_and_paths_are_runpods(document: dict[str, Any]) -> None:
    found = {
        (method, path): op["operationId"]
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    assert {k: found.get(k) for k in RUNPODS} == RUNPODS


async def test_request_bodies_are_closed_and_errors_are_problems(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    bodies = [
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        for item in document["paths"].values()
        for op in item.values()
        if "requestBody" in op
    ]
    assert {"CreateEndpoint", "UpdateEndpoint", "NewTemplate", "NewRegistry"} <= set(bodies)
    for name in bodies:
        assert schemas[name]["additionalProperties"] is False, name
    assert schemas["ErrorResponse"]["required"] == ["title", "status", "detail"]
    create = document["paths"]["/v2/serverless"]["post"]["responses"]
    assert {"201", "400", "401", "403", "422", "default"} <= set(create)
    listed = answer_schema(document, "get", "/v2/serverless", 200)
    assert listed["properties"]["endpoints"]["items"]["$ref"].endswith("/Endpoint")


# -- the answers conform ---------------------------------------------------------------------


async def test_real_answers_conform_to_the_document(dev: Dev, document: dict[str, Any]) -> None:
    body = {
        "name": "doc", "type": "QUEUE", "image": "python:3.12-slim", "args": ECHO_ARGS,
        "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
        "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}, "env": {"A": "1"},
    }  # fmt: skip
    status, _, endpoint = await dev.call("POST", "/v2/serverless", body)
    assert status == 201, endpoint
    conforms(document, answer_schema(document, "post", "/v2/serverless", 201), endpoint)
    one = f"/v2/serverless/{endpoint['id']}"
    for path, doc_path in [("/v2/serverless", "/v2/serverless"), (one, "/v2/serverless/{id}"),
                           ("/v2/templates", "/v2/templates"),
                           (f"/v2/templates/{endpoint['id']}", "/v2/templates/{id}"),
                           ("/v2/registries", "/v2/registries"),
                           ("/v2/network-volumes", "/v2/network-volumes")]:  # fmt: skip
        status, _, answer = await dev.call("GET", path)
        assert status == 200, answer
        conforms(document, answer_schema(document, "get", doc_path, 200), answer)
    status, content_type, problem = await dev.call("PATCH", one, {"workersMax": 2})
    assert (status, content_type) == (422, "application/problem+json")
    conforms(document, answer_schema(document, "patch", "/v2/serverless/{id}", 422), problem)
    assert problem["errors"] == ["workersMax: not a field of this request"]
    status, _, _ = await dev.call("DELETE", one)
    assert status == 204
    status, _, problem = await dev.call("GET", one)
    assert status == 404
    conforms(document, answer_schema(document, "get", "/v2/serverless/{id}", 404), problem)
