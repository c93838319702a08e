"""`/graphql`: the subset of RunPod's GraphQL API that the runpod SDK's management calls
send (`create_template`, `create_endpoint`, `get_endpoints`, `update_endpoint_template`,
`create_container_registry_auth`, and `deleteRegistryAuth`),
served with graphql-core over the same `ControlPlane` and rules as `/v1`.

It sits at the root of the process that serves `/v1` (so `RUNPOD_API_BASE_URL` is that
origin) and needs an admin key as a Bearer token, as `/v1` does. RunPod's shapes differ
from REST's: `dockerArgs` is one string (split like a shell into `dockerStartCmd`),
`ports`, `gpuIds`, `locations` and `allowedCudaVersions` are comma-separated strings,
`env` is a list of `{key, value}`, `flashBootType` is `FLASHBOOT` or `OFF`. Unknown
fields and operations are GraphQL errors (HTTP 200 with `errors`), never a 500.

A document is bounded before it is validated or run (validation of many aliases of one
field alone is quadratic): at most `MAX_TOKENS` tokens (graphql-core's parser limit), at most
`MAX_SELECTIONS` selections (fields, fragment spreads and inline fragments, a fragment
counted each time it is spread) and at most `MAX_CONTROL_PLANE_FIELDS` fields that read or
write the control plane (`endpoints`, `podTemplates`, each mutation: two Kubernetes list
calls for `endpoints` under `lockgate manage`). The runpod SDK's largest query has about 30
selections and one such field.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from graphql import (
    DocumentNode,
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    build_schema,
    execute,
    parse,
    validate,
)

from lockgate.gateway.auth import ADMIN, Authenticator
from lockgate.gateway.errors import ApiError, Unauthorized
from lockgate.manage import operations as ops
from lockgate.manage.admin import ALL_ENDPOINTS, AUTHENTICATOR
from lockgate.manage.api import payload_parts
from lockgate.manage.controlplane import CONTROL_PLANE, ControlPlane
from lockgate.manage.listing import EndpointQuery
from lockgate.manage.storage import STORAGE, Storage
from lockgate.manage.storage_api import create_registry_auth
from lockgate.manage.templates import create_template, edit_template
from lockgate.models import EndpointRecord, TemplateSpec
from lockgate.models.templates import runpod_template

SDL = """
type Query {
  myself: User!
}

type User {
  id: String!
  endpoints: [Endpoint!]!
  podTemplates: [PodTemplate!]!
}

type EnvironmentVariable {
  key: String!
  value: String!
}

input EnvironmentVariableInput {
  key: String!
  value: String
}

type NetworkVolume {
  id: String
  dataCenterId: String
}

enum FlashBootType {
  OFF
  FLASHBOOT
}

type PodTemplate {
  id: String!
  name: String
  imageName: String
  dockerArgs: String
  dockerEntrypoint: [String!]
  dockerStartCmd: [String!]
  containerDiskInGb: Int
  volumeInGb: Int
  volumeMountPath: String
  ports: String
  env: [EnvironmentVariable!]
  isServerless: Boolean
  readme: String
  containerRegistryAuthId: String
  category: String
}

input PodTemplateInput {
  id: String
  name: String!
  imageName: String!
  dockerArgs: String
  containerDiskInGb: Int
  volumeInGb: Int
  volumeMountPath: String
  ports: String
  env: [EnvironmentVariableInput]
  isServerless: Boolean
  containerRegistryAuthId: String
  startSsh: Boolean
  isPublic: Boolean
  readme: String
  category: String
}

type Endpoint {
  id: String!
  name: String
  templateId: String
  template: PodTemplate
  gpuIds: String
  gpuCount: Int
  networkVolumeId: String
  networkVolume: NetworkVolume
  modelReferences: [String]
  locations: String
  idleTimeout: Int
  scalerType: String
  scalerValue: Int
  workersMin: Int
  workersMax: Int
  workersStandby: Int
  allowedCudaVersions: String
  flashBootType: FlashBootType
  executionTimeoutMs: Int
  type: String
  userId: String
  aiKey: String
  version: Int
  env: [EnvironmentVariable!]
  createdAt: String
}

input EndpointInput {
  id: String
  name: String
  templateId: String!
  gpuIds: String
  gpuCount: Int
  networkVolumeId: String
  modelReferences: [String]
  locations: String
  idleTimeout: Int
  scalerType: String
  scalerValue: Int
  workersMin: Int
  workersMax: Int
  allowedCudaVersions: String
  flashBootType: FlashBootType
  executionTimeoutMs: Int
  type: String
}

input SaveRegistryAuthInput {
  name: String!
  username: String!
  password: String!
  registry: String
}

type RegistryAuth {
  id: String!
  name: String
}

input UpdateEndpointTemplateInput {
  endpointId: String!
  templateId: String!
}

type Mutation {
  saveTemplate(input: PodTemplateInput!): PodTemplate
  saveEndpoint(input: EndpointInput!): Endpoint
  updateEndpointTemplate(input: UpdateEndpointTemplateInput!): Endpoint
  saveRegistryAuth(input: SaveRegistryAuthInput!): RegistryAuth
  deleteRegistryAuth(registryAuthId: String!): Boolean
}
"""

MAX_TOKENS = 5_000  # the SDK's largest document: ~100 tokens
MAX_SELECTIONS = 300  # the SDK's largest: ~30
MAX_CONTROL_PLANE_FIELDS = 5  # the SDK sends one per document
CONTROL_PLANE_FIELDS = frozenset({"endpoints", "podTemplates"})  # and every mutation

USER_ID = "lockgate"  # one account: every admin key sees the same endpoints
IGNORED_TEMPLATE_INPUT = ("startSsh", "isPublic")  # pods only; no meaning here


def _words(text: str | None, name: str) -> list[str]:
    try:
        return shlex.split(text or "")
    except ValueError as err:
        raise GraphQLError(f"{name}: cannot split {text!r} into words: {err}") from err


def _list(text: str | None) -> list[str]:
    """A comma-separated string as a list ("" and None: empty)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _env_list(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in sorted(env.items())]


def template_payload(given: dict[str, Any]) -> dict[str, Any]:
    """`saveTemplate`'s input as a `/v1/templates` payload."""
    payload: dict[str, Any] = {}
    for key, value in given.items():
        if key in IGNORED_TEMPLATE_INPUT or value is None:
            continue
        if key == "dockerArgs":
            payload["dockerStartCmd"] = _words(value, "dockerArgs")
        elif key == "ports":
            payload["ports"] = _list(value)
        elif key == "env":
            payload["env"] = {e["key"]: e.get("value") or "" for e in value if e}
        elif key == "containerRegistryAuthId" and value == "":
            continue  # the SDK's "none"
        else:
            payload[key] = value
    return payload


def template_view(record: dict[str, Any]) -> dict[str, Any]:
    """A `/v1/templates` record in GraphQL's `PodTemplate` shape."""
    return {
        **record,
        "dockerArgs": shlex.join(record["dockerStartCmd"]),
        "ports": ",".join(record["ports"]),
        "env": _env_list(record["env"]),
        "containerRegistryAuthId": record["containerRegistryAuthId"] or None,
    }


# Where each `EndpointSpec` field is in GraphQL's `Endpoint` (and `EndpointInput`), or why
# it is not ("not in GraphQL: …"); tests/test_view_fields.py fails on a field missing here.
ENDPOINT_FIELDS: dict[str, str] = {
    "name": "name",
    "type": "type",
    "templateId": "templateId",
    "gpuTypeIds": "gpuIds",
    "gpuCount": "gpuCount",
    "networkVolumeId": "networkVolumeId",
    "modelReferences": "modelReferences",
    "dataCenterIds": "locations",
    "idleTimeout": "idleTimeout",
    "scalerType": "scalerType",
    "scalerValue": "scalerValue",
    "workersMin": "workersMin",
    "workersMax": "workersMax",
    "allowedCudaVersions": "allowedCudaVersions",
    "flashboot": "flashBootType",
    "executionTimeoutMs": "executionTimeoutMs",
    "computeType": "not in GraphQL: RunPod's schema has none (a CPU endpoint's gpuIds is empty)",
    "cpuFlavorIds": "not in GraphQL: the runpod SDK sends none",
    "vcpuCount": "not in GraphQL: the runpod SDK sends none",
    "requestTimeoutS": "not in GraphQL: lockgate's load-balancing setting",
    "lbHoldS": "not in GraphQL: lockgate's load-balancing setting",
    "lbWebSocketMaxS": "not in GraphQL: lockgate's load-balancing setting",
    "replicas": "not in GraphQL: the scale subresource's",
    "onWorkerLost": "not in GraphQL: lockgate's setting",
    "requeueMaxRunS": "not in GraphQL: lockgate's setting",
    "warmup": "not in GraphQL: lockgate's warm-up (v1, kubectl; docs/warm-up.md)",
    "lbResumeWindowS": "not in GraphQL: lockgate's load-balancing setting",
    "batchWorkersMax": "not in GraphQL: lockgate's batch pool (docs/batch-jobs.md)",
    "startupTimeout": "not in GraphQL: lockgate's startup deadline",
    "crashLoopThreshold": "not in GraphQL: lockgate's crash-loop setting",
    "source": "not in GraphQL: RunPod's schema has no git source (v1, v2, kubectl)",
}


def endpoint_payload(given: dict[str, Any]) -> dict[str, Any]:
    """`saveEndpoint`'s input as a `/v1/endpoints` payload."""
    payload: dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            continue
        if key == "gpuIds":
            payload["gpuTypeIds"] = _list(value)
        elif key == "locations":
            payload["dataCenterIds"] = _list(value)
        elif key == "allowedCudaVersions":
            payload["allowedCudaVersions"] = _list(value)
        elif key == "flashBootType":
            payload["flashboot"] = value == "FLASHBOOT"
        else:
            payload[key] = value
    return payload


def endpoint_view(record: EndpointRecord, template: TemplateSpec | None) -> dict[str, Any]:
    """An endpoint record in GraphQL's `Endpoint` shape; `env` is its template's."""
    tpl = runpod_template(record.templateId, template) if template is not None else None
    return {
        "id": record.id,
        "name": record.name,
        "templateId": record.templateId,
        "template": template_view(tpl) if tpl is not None else None,
        "gpuIds": ",".join(record.gpuTypeIds),
        "gpuCount": record.gpuCount,
        "networkVolumeId": record.networkVolumeId or None,
        "networkVolume": None,
        "modelReferences": list(record.modelReferences),
        "locations": ",".join(record.dataCenterIds),
        "idleTimeout": record.idleTimeout,
        "scalerType": record.scalerType.value,
        "scalerValue": record.scalerValue,
        "workersMin": record.workersMin,
        "workersMax": record.workersMax,
        "workersStandby": 0,
        "allowedCudaVersions": ",".join(record.allowedCudaVersions),
        "flashBootType": "FLASHBOOT" if record.flashboot else "OFF",
        "executionTimeoutMs": record.executionTimeoutMs,
        "type": record.type.value,
        "userId": USER_ID,
        "aiKey": None,
        "version": record.version,
        "env": _env_list(template.env) if template is not None else [],
        "createdAt": record.createdAt,
    }


async def _template_of(plane: ControlPlane, template_id: str) -> TemplateSpec | None:
    return (await plane.list_templates()).get(template_id) if template_id else None


# -- resolvers ------------------------------------------------------------------------------


def _plane(info: Any) -> ControlPlane:
    plane: ControlPlane = info.context["plane"]
    return plane


def _storage(info: Any) -> Storage:
    storage: Storage = info.context["storage"]
    return storage


async def resolve_myself(_root: Any, _info: Any) -> dict[str, Any]:
    return {"id": USER_ID}


async def resolve_endpoints(_user: Any, info: Any) -> list[dict[str, Any]]:
    plane = _plane(info)
    templates = await plane.list_templates()
    page = await plane.page(EndpointQuery())
    return [
        endpoint_view(r, templates.get(r.templateId))
        for r in page.items
        if isinstance(r, EndpointRecord)
    ]


async def resolve_templates(_user: Any, info: Any) -> list[dict[str, Any]]:
    templates = await _plane(info).list_templates()
    return [template_view(runpod_template(i, spec)) for i, spec in templates.items()]


@contextmanager
def as_graphql_errors() -> Iterator[None]:
    """A refusal of the operations (or of a view's parsing) as a GraphQL error with the
    HTTP status REST would answer with."""
    try:
        yield
    except (ApiError, ops.Refused) as err:
        error = ops.api_error(err) if isinstance(err, ops.Refused) else err
        raise GraphQLError(error.message, extensions={"status": error.status}) from err


async def resolve_save_template(_root: Any, info: Any, input: dict[str, Any]) -> dict[str, Any]:
    plane, storage, payload = _plane(info), _storage(info), template_payload(input)
    template_id = payload.pop("id", None)
    with as_graphql_errors():
        if template_id:
            record = await edit_template(plane, storage, template_id, payload)
        else:
            record = await create_template(plane, storage, payload)
    return template_view(record)


async def resolve_save_endpoint(_root: Any, info: Any, input: dict[str, Any]) -> dict[str, Any]:
    plane, payload = _plane(info), endpoint_payload(input)
    endpoint_id = payload.pop("id", None)
    with as_graphql_errors():
        if endpoint_id:
            record = await ops.edit_endpoint(plane, _storage(info), endpoint_id, payload)
        else:
            record = await ops.create_endpoint(plane, _storage(info), *payload_parts(payload))
    return endpoint_view(record, await _template_of(plane, record.templateId))


async def resolve_update_endpoint_template(
    _root: Any,
    info: Any,
    input: dict[str, Any],
) -> dict[str, Any]:
    plane = _plane(info)
    with as_graphql_errors():
        record = await ops.edit_endpoint(
            plane, _storage(info), input["endpointId"], {"templateId": input["templateId"]}
        )
    return endpoint_view(record, await _template_of(plane, record.templateId))


async def resolve_save_registry_auth(
    _root: Any, info: Any, input: dict[str, Any]
) -> dict[str, Any]:
    payload = {k: v for k, v in input.items() if v is not None}
    with as_graphql_errors():
        return await create_registry_auth(_storage(info), payload)


async def resolve_delete_registry_auth(_root: Any, info: Any, registryAuthId: str) -> bool:
    with as_graphql_errors():
        await ops.delete_registry_auth(_plane(info), _storage(info), registryAuthId)
    return True


def build() -> GraphQLSchema:
    """The schema with its resolvers."""
    schema = build_schema(SDL)
    query, user, mutation = schema.query_type, schema.get_type("User"), schema.mutation_type
    assert isinstance(user, GraphQLObjectType) and query is not None and mutation is not None
    query.fields["myself"].resolve = resolve_myself
    user.fields["endpoints"].resolve = resolve_endpoints
    user.fields["podTemplates"].resolve = resolve_templates
    mutations = mutation.fields
    mutations["saveTemplate"].resolve = resolve_save_template
    mutations["saveEndpoint"].resolve = resolve_save_endpoint
    mutations["updateEndpointTemplate"].resolve = resolve_update_endpoint_template
    mutations["saveRegistryAuth"].resolve = resolve_save_registry_auth
    mutations["deleteRegistryAuth"].resolve = resolve_delete_registry_auth
    return schema


SCHEMA = build()
MUTATIONS = frozenset(SCHEMA.mutation_type.fields) if SCHEMA.mutation_type else frozenset()


class TooCostly(Exception):
    """A document over one of the bounds; the message names it."""


@dataclass
class _Cost:
    """Selections and control-plane fields counted so far, over one document's fragments."""

    fragments: dict[str, FragmentDefinitionNode]
    selections: int = 0
    control_plane: int = 0

    def field(self, node: FieldNode, top_of_mutation: bool) -> None:
        name = node.name.value
        if name in CONTROL_PLANE_FIELDS or (top_of_mutation and name in MUTATIONS):
            self.control_plane += 1
            if self.control_plane > MAX_CONTROL_PLANE_FIELDS:
                raise TooCostly(
                    f"query: more than {MAX_CONTROL_PLANE_FIELDS} fields that read or write "
                    "endpoints and templates (endpoints, podTemplates, mutations)"
                )

    def walk(self, selections: SelectionSetNode | None, top: bool, inside: frozenset[str]) -> None:
        for node in selections.selections if selections else ():
            self.selections += 1
            if self.selections > MAX_SELECTIONS:
                raise TooCostly(f"query: more than {MAX_SELECTIONS} selections")
            if isinstance(node, FieldNode):
                self.field(node, top)
                self.walk(node.selection_set, False, inside)
            elif isinstance(node, InlineFragmentNode):
                self.walk(node.selection_set, top, inside)
            elif isinstance(node, FragmentSpreadNode):
                name = node.name.value
                if name in self.fragments and name not in inside:  # cycles: validation's
                    self.walk(self.fragments[name].selection_set, top, inside | {name})


def check_cost(document: DocumentNode) -> None:
    """Raise `TooCostly` when the document's operations select more than `MAX_SELECTIONS`
    nodes or `MAX_CONTROL_PLANE_FIELDS` control-plane fields, fragments expanded where
    spread. Stops at the first bound passed, so the walk costs at most that many steps."""
    fragments = [d for d in document.definitions if isinstance(d, FragmentDefinitionNode)]
    cost = _Cost({d.name.value: d for d in fragments})
    for op in document.definitions:
        if isinstance(op, OperationDefinitionNode):
            cost.walk(op.selection_set, op.operation.value == "mutation", frozenset())


async def run(
    query: str,
    context: dict[str, Any],
    variables: dict[str, Any] | None,
    operation: str | None,
) -> ExecutionResult:
    """Parse (bounded), check the cost, validate, then execute."""
    try:
        document = parse(query, max_tokens=MAX_TOKENS)
        check_cost(document)
    except GraphQLError as err:
        return ExecutionResult(None, [err])
    except TooCostly as err:
        return ExecutionResult(None, [GraphQLError(str(err))])
    errors = validate(SCHEMA, document)
    if errors:
        return ExecutionResult(None, errors)
    result = execute(
        SCHEMA,
        document,
        context_value=context,
        variable_values=variables,
        operation_name=operation,
    )
    return await result if not isinstance(result, ExecutionResult) else result


def _errors(status: int, message: str) -> web.Response:
    return web.json_response({"errors": [{"message": message}]}, status=status)


def add_graphql_route(app: web.Application, manage: web.Application) -> None:
    """`POST /graphql` on `app` (the process's root app), over `manage`'s control plane
    and authenticator (admin keys only, as `/v1`)."""

    async def serve(request: web.Request) -> web.Response:
        authenticator: Authenticator = manage[AUTHENTICATOR]
        try:
            await authenticator.require(request, ADMIN, ALL_ENDPOINTS)
        except Unauthorized as err:
            return _errors(401, err.message)
        except ApiError as err:
            return _errors(err.status, err.message)
        try:
            body = await request.json()
        except ValueError:
            return _errors(400, "body: expected a JSON object with a query")
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return _errors(400, "query: expected a GraphQL document (a string)")
        variables = body.get("variables")
        operation = body.get("operationName")
        if variables is not None and not isinstance(variables, dict):
            return _errors(400, "variables: expected a JSON object")
        if operation is not None and not isinstance(operation, str):
            return _errors(400, "operationName: expected a string")
        context = {"plane": manage[CONTROL_PLANE], "storage": manage[STORAGE]}
        result = await run(body["query"], context, variables, operation)
        return web.json_response(result.formatted)

    app.router.add_post("/graphql", serve)
