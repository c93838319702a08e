"""`/v2/account/secrets`: RunPod's account secrets (reference §5.3, docs/secrets.md), a
thin view over `manage.secrets.AccountSecrets`.

Refusals are `manage.operations`' (`Missing` 404, `Taken` 409, `Invalid` 400), which the
v2 app's `refusal_statuses` answers as problems. `POST` `{name*, value*, description?}` →
201 `Secret`; `GET` → `{"secrets": [...]}`
(`?name=` the secret of that name, any case); `GET /{id}`; `PATCH /{id}` `{value?,
description?}` (at least one; `description: ""` clears it) → 200 `Secret`; `DELETE /{id}`
→ 204, or 409 naming the endpoints whose env still refers to it. A `Secret` is `id, name,
description, createdAt, valueLastUpdatedAt`: never the value.
"""

from __future__ import annotations

from typing import ClassVar

from aiohttp import web
from pydantic import Field, field_validator, model_validator

from lockgate.gateway.http import json_response, no_content
from lockgate.manage.secrets import AccountSecrets
from lockgate.manage.v2 import Backends, add_collection_routes, v2_app
from lockgate.manage.v2.bodies import ClosedBody
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.problems import body_of
from lockgate.models import secrets
from lockgate.models.secrets import SecretRecord

ACCOUNT_SECRETS = web.AppKey("account_secrets", AccountSecrets)


def _description(value: str | None) -> str | None:
    if problem := secrets.description_problem(value):
        raise ValueError(problem)
    return value


class CreateSecretRequest(ClosedBody):
    """RunPod's create body, closed; `description` may be null (none)."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"description"})

    name: str = Field(..., min_length=1, max_length=secrets.NAME_MAX, pattern=secrets.NAME_PATTERN)
    value: str = Field(..., min_length=1, max_length=secrets.VALUE_MAX)
    description: str | None = None

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if problem := secrets.name_problem(name):
            raise ValueError(problem)
        return name

    _check_description = field_validator("description")(_description)


class UpdateSecretRequest(ClosedBody):
    """RunPod's update body, closed: at least one field; `description` null or `""`
    clears it."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"description"})

    value: str | None = Field(None, min_length=1, max_length=secrets.VALUE_MAX)
    description: str | None = None

    _check_description = field_validator("description")(_description)

    @model_validator(mode="after")
    def _something(self) -> UpdateSecretRequest:
        if not self.model_fields_set:
            raise ValueError("give value, description or both")
        return self


def _account(request: web.Request) -> AccountSecrets:
    return request.app[ACCOUNT_SECRETS]


def _view(record: SecretRecord) -> dict[str, object]:
    return record.view()


@documented(
    Operation(
        "listSecrets",
        "Every account secret (never a value)",
        answer=SecretRecord,
        listed_as="secrets",
    )
)
async def list_secrets(request: web.Request) -> web.Response:
    """`{"secrets": [...]}`, by name; `?name=` keeps the one of that name (any case)."""
    wanted = request.query.get("name")
    found = await _account(request).list()
    if wanted is not None:
        found = [r for r in found if r.name.casefold() == wanted.casefold()]
    return json_response({"secrets": [_view(r) for r in found]})


@documented(
    Operation(
        "createSecret",
        "Keep a secret",
        body=CreateSecretRequest,
        answer=SecretRecord,
        status=201,
        errors=(409, 422),
    )
)
async def create_secret(request: web.Request) -> web.Response:
    body = await body_of(request, CreateSecretRequest)
    record = await _account(request).create(body.name, body.value, body.description)
    return json_response(_view(record), status=201)


@documented(
    Operation(
        "getSecret", "One account secret (never its value)", answer=SecretRecord, errors=(404,)
    )
)
async def get_secret(request: web.Request) -> web.Response:
    return json_response(_view(await _account(request).get(request.match_info["id"])))


@documented(
    Operation(
        "updateSecret",
        "Rotate a value or change a description",
        body=UpdateSecretRequest,
        answer=SecretRecord,
        errors=(404, 422),
    )
)
async def update_secret(request: web.Request) -> web.Response:
    body = await body_of(request, UpdateSecretRequest)
    record = await _account(request).update(
        request.match_info["id"],
        value=body.value,
        description=body.description,
        clear="description" in body.model_fields_set and not body.description,
    )
    return json_response(_view(record))


@documented(
    Operation("deleteSecret", "Delete a secret no env refers to", status=204, errors=(404, 409))
)
async def delete_secret(request: web.Request) -> web.Response:
    await _account(request).delete(request.match_info["id"])
    return no_content()


def create_app(backends: Backends) -> web.Application:
    """The `/v2/account/secrets` sub-application (over `backends.secrets`)."""
    if backends.secrets is None:
        raise ValueError("the v2 secrets routes need Backends.secrets")
    app = v2_app(backends)
    app[ACCOUNT_SECRETS] = backends.secrets
    add_collection_routes(
        app,
        list_all=list_secrets,
        create=create_secret,
        get=get_secret,
        patch=update_secret,
        delete=delete_secret,
    )
    return app
