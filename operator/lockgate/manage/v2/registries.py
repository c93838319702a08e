"""`/v2/registries`: RunPod v2's registry credentials, a view of the credentials
`/v1/containerregistryauth` serves (the same operations and Secrets).

List `{"registries": [{id, name}]}`, create `{name, username, password}` (201 `{id,
name}`), get and delete (204); no PATCH, as RunPod. The username and password never come
back out. Deleting a credential follows RunPod's rule: templates that pull with it are not
a reason to refuse; their `registry` becomes null. lockgate refuses (400, naming them)
only when such a template is used by an endpoint: its workers still pull with the
credential, as RunPod refuses a credential in use by a pod.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from lockgate.gateway.errors import BadRequest
from lockgate.gateway.http import json_response
from lockgate.manage import operations as ops
from lockgate.manage.storage_api import create_registry_auth
from lockgate.manage.templates import edit_template
from lockgate.manage.v2 import Backends, add_collection_routes, v2_app
from lockgate.manage.v2.bodies import ClosedBody
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.problems import body_of
from lockgate.manage.v2.wording import in_use_is_a_400
from lockgate.models.registryauth import DOCKER_HUB, REGISTRY_PATTERN
from lockgate.models.templates import runpod_template


class NewRegistry(ClosedBody):
    """CreateRegistryRequest, and lockgate's `registry`: the host the credential is for
    (default Docker Hub; as `/v1/containerregistryauth` takes it)."""

    name: str = Field(..., min_length=1)
    username: str = Field(..., min_length=1, description="write-only")
    password: str = Field(..., min_length=1, description="write-only")
    registry: str = Field(DOCKER_HUB, pattern=REGISTRY_PATTERN, description="lockgate's")


class Registry(BaseModel):
    """RunPod v2's registry credential as answered: its id and name, never its secrets."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str


def registry_view(record: dict[str, Any]) -> dict[str, Any]:
    """What v2 shows of a credential: its id and name, nothing else."""
    return Registry(id=record["id"], name=record["name"]).model_dump()


def without_credential(record: dict[str, Any], auth_id: str) -> dict[str, Any]:
    """The `/v1/templates` changes that make a template stop pulling with `auth_id`."""
    changes: dict[str, Any] = {}
    if record["containerRegistryAuthId"] == auth_id:
        changes["containerRegistryAuthId"] = ""
    if auth_id in record["imagePullSecrets"]:
        changes["imagePullSecrets"] = [s for s in record["imagePullSecrets"] if s != auth_id]
    return changes


class RegistryRoutes:
    """The collection's handlers over one process's backends."""

    def __init__(self, backends: Backends) -> None:
        self.plane, self.storage = backends.plane, backends.storage

    @documented(
        Operation(
            "listRegistries", "Every registry credential", answer=Registry, listed_as="registries"
        )
    )
    async def list_all(self, _request: web.Request) -> web.Response:
        auths = await self.storage.list_registry_auths()
        return json_response({"registries": [registry_view(r) for r in auths.values()]})

    @documented(
        Operation(
            "createRegistry",
            "Create a registry credential",
            body=NewRegistry,
            answer=Registry,
            status=201,
            errors=(400, 422),
        )
    )
    async def create(self, request: web.Request) -> web.Response:
        body = await body_of(request, NewRegistry)
        made = await create_registry_auth(self.storage, body.model_dump())
        return json_response(registry_view(made), status=201)

    @documented(Operation("getRegistry", "One registry credential", answer=Registry, errors=(404,)))
    async def get(self, request: web.Request) -> web.Response:
        record = await ops.get_registry_auth(self.storage, request.match_info["id"])
        return json_response(registry_view(record))

    @documented(
        Operation(
            "deleteRegistry",
            "Delete a registry credential (400 while an endpoint's workers pull with it)",
            status=204,
            errors=(400, 404),
        )
    )
    async def delete(self, request: web.Request) -> web.Response:
        auth_id = request.match_info["id"]
        await ops.get_registry_auth(self.storage, auth_id)  # 404 first
        templates = await ops.auth_users(self.plane, auth_id)
        await self.refuse_when_workers_pull_with(auth_id, templates)
        for template_id in templates:
            record = runpod_template(template_id, await ops.get_template(self.plane, template_id))
            changes = without_credential(record, auth_id)
            await edit_template(self.plane, self.storage, template_id, changes)
        with in_use_is_a_400():  # a template took it up meanwhile
            await ops.delete_registry_auth(self.plane, self.storage, auth_id)
        return web.Response(status=204)

    async def refuse_when_workers_pull_with(self, auth_id: str, templates: list[str]) -> None:
        """400 naming the endpoints whose template pulls with the credential."""
        users = {t: await ops.template_users(self.plane, t) for t in templates}
        in_use = sorted({e for endpoints in users.values() for e in endpoints})
        if in_use:
            via = ", ".join(t for t, endpoints in users.items() if endpoints)
            raise BadRequest(
                f"registry {auth_id!r} is used by endpoint(s) {', '.join(in_use)} "
                f"(through template(s) {via}): their workers pull with it; delete them or "
                "give their templates another registry first"
            )


def create_app(backends: Backends) -> web.Application:
    """The `/v2/registries` sub-application."""
    app, routes = v2_app(backends), RegistryRoutes(backends)
    add_collection_routes(
        app, list_all=routes.list_all, create=routes.create, get=routes.get, delete=routes.delete
    )
    return app
