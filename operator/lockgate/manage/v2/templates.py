"""`/v2/templates`: RunPod v2's template collection, a view of the templates `/v1/templates`
serves (the same operations, the same Template resources; `template_shapes` maps them).

List `{"templates": [...]}`, create (201), get, PATCH (200, the whole template) and delete
(204). Deleting a template an endpoint uses is a 400 naming the endpoints, as RunPod
answers ("in use by a serverless endpoint"; `/v1` says 409).
"""

from __future__ import annotations

from aiohttp import web

from lockgate.gateway.http import json_response
from lockgate.manage import operations as ops
from lockgate.manage.templates import create_template, edit_template
from lockgate.manage.v2 import Backends, add_collection_routes, v2_app
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.problems import body_of
from lockgate.manage.v2.template_shapes import (
    V2_WORDS,
    NewTemplate,
    Template,
    TemplateChanges,
    spec_of_record,
    template_view,
    v1_payload,
)
from lockgate.manage.v2.wording import in_use_is_a_400, v2_words


class TemplateRoutes:
    """The collection's handlers over one process's backends."""

    def __init__(self, backends: Backends) -> None:
        self.plane, self.storage = backends.plane, backends.storage

    @documented(
        Operation("listTemplates", "Every template", answer=Template, listed_as="templates")
    )
    async def list_all(self, _request: web.Request) -> web.Response:
        """Every template, ordered by id."""
        templates = await self.plane.list_templates()
        views = [template_view(i, spec) for i, spec in sorted(templates.items())]
        return json_response({"templates": views})

    @documented(
        Operation(
            "createTemplate",
            "Create a template",
            body=NewTemplate,
            answer=Template,
            status=201,
            errors=(400, 422),
        )
    )
    async def create(self, request: web.Request) -> web.Response:
        payload = v1_payload(await body_of(request, NewTemplate))
        with v2_words(V2_WORDS):
            record = await create_template(self.plane, self.storage, payload)
        return json_response(template_view(record["id"], spec_of_record(record)), status=201)

    @documented(Operation("getTemplate", "One template", answer=Template, errors=(404,)))
    async def get(self, request: web.Request) -> web.Response:
        template_id = request.match_info["id"]
        spec = await ops.get_template(self.plane, template_id)
        return json_response(template_view(template_id, spec))

    @documented(
        Operation(
            "updateTemplate",
            "Change the fields sent; the whole template back",
            body=TemplateChanges,
            answer=Template,
            errors=(400, 404, 422),
        )
    )
    async def patch(self, request: web.Request) -> web.Response:
        """The fields sent change, the others (lockgate's own too) keep their values."""
        template_id = request.match_info["id"]
        changes = v1_payload(await body_of(request, TemplateChanges))
        with v2_words(V2_WORDS):
            record = await edit_template(self.plane, self.storage, template_id, changes)
        return json_response(template_view(template_id, spec_of_record(record)))

    @documented(
        Operation(
            "deleteTemplate",
            "Delete a template (400 while an endpoint uses it)",
            status=204,
            errors=(400, 404),
        )
    )
    async def delete(self, request: web.Request) -> web.Response:
        with in_use_is_a_400():  # used by endpoints
            await ops.delete_template(self.plane, request.match_info["id"])
        return web.Response(status=204)


def create_app(backends: Backends) -> web.Application:
    """The `/v2/templates` sub-application."""
    app, routes = v2_app(backends), TemplateRoutes(backends)
    add_collection_routes(
        app,
        list_all=routes.list_all,
        create=routes.create,
        get=routes.get,
        patch=routes.patch,
        delete=routes.delete,
    )
    return app
