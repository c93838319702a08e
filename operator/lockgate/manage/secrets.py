"""Account secrets (`/v2/account/secrets`, docs/secrets.md): the version-neutral operations,
over Redis for what is shown and a `SecretValues` backend for the values.

A secret's record (name, description, dates: `models.secrets.SecretRecord`) is kept in
Redis (`lg:secrets`, by id) on a cluster and in dev mode alike, as registry credentials
are; its value only in the backend: a Kubernetes Secret the management API writes and
never reads (`kube.secret_values`), or a 0600 file in dev mode's data folder
(`dev.secret_values`). The id is a function of the name, so the record's `HSETNX` is what
makes a name unique. Nothing here logs, returns or keeps a value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from lockgate.manage.controlplane import ControlPlane
from lockgate.manage.listing import EndpointQuery
from lockgate.manage.operations import Invalid, Missing, Taken
from lockgate.models import EndpointRecord, secrets
from lockgate.models.secrets import SecretRecord
from lockgate.store import Registry, keys


class SecretNotFound(Missing):
    """No secret has this id (404)."""


class SecretExists(Taken):
    """A secret with this name exists already (409)."""


class SecretInUse(Taken):
    """The secret is still referred to; the message names the endpoints and templates
    (409)."""


class SecretValueRefused(Invalid):
    """The backend refused the value (a cluster's Secret size limit); says why (400)."""


class SecretValues(Protocol):
    """Where values are kept, by the secret's name. Never read back by the API."""

    async def write(self, name: str, value: str, *, new: bool) -> None:
        """Keep `value` for `name` (`new`: no value is kept yet); raises
        `SecretValueRefused`."""
        ...

    async def remove(self, name: str) -> None:
        """Forget the value of `name` (absent already: fine)."""
        ...


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def users_of(plane: ControlPlane, name: str) -> tuple[list[str], list[str]]:
    """The endpoints whose template's env refers to the secret `name`, and those
    templates, each sorted by id."""
    templates = await plane.list_templates()
    using = {t for t, spec in templates.items() if name in spec.account_secrets().values()}
    if not using:
        return [], []
    page = await plane.page(EndpointQuery())
    endpoints = [
        r.id for r in page.items if isinstance(r, EndpointRecord) and r.templateId in using
    ]
    return sorted(endpoints), sorted(using)


class AccountSecrets:
    """Create, list, read, rotate and delete secrets; refuse deleting one in use."""

    def __init__(self, registry: Registry, values: SecretValues, plane: ControlPlane) -> None:
        self.registry = registry
        self.values = values
        self.plane = plane

    async def create(self, name: str, value: str, description: str | None) -> SecretRecord:
        """Keep a new secret; raises `SecretExists` (or `SecretValueRefused`)."""
        at = now()
        record = SecretRecord(
            name=name, description=description or None, createdAt=at, valueLastUpdatedAt=at
        )
        sid = secrets.secret_id(name)
        if not await self.registry.add_record(keys.SECRETS, sid, record.model_dump()):
            raise SecretExists(f"name: a secret named {name!r} exists already")
        try:
            await self.values.write(name, value, new=True)
        except Exception:  # no value kept: no record either
            await self.registry.delete_record(keys.SECRETS, sid)
            raise
        return record

    async def list(self) -> list[SecretRecord]:
        """Every secret, by name."""
        stored = await self.registry.list_records(keys.SECRETS)
        return sorted((SecretRecord.model_validate(e) for e in stored.values()), key=_name)

    async def get(self, secret_id: str) -> SecretRecord:
        """The secret with this id; raises `SecretNotFound`."""
        entry = await self.registry.get_record(keys.SECRETS, secret_id)
        if entry is None:
            raise SecretNotFound(f"no secret with id {secret_id!r}")
        return SecretRecord.model_validate(entry)

    async def update(
        self, secret_id: str, *, value: str | None, description: str | None, clear: bool
    ) -> SecretRecord:
        """A new value (workers get it at their next start) and/or description (`clear`:
        none); the value first, as RunPod does. Raises `SecretNotFound`."""
        record = await self.get(secret_id)
        changes: dict[str, object] = {}
        if value is not None:
            await self.values.write(record.name, value, new=False)
            changes["valueLastUpdatedAt"] = now()
        if clear or description is not None:
            changes["description"] = description or None
        record = record.model_copy(update=changes)
        await self.registry.put_record(keys.SECRETS, secret_id, record.model_dump())
        return record

    async def delete(self, secret_id: str) -> None:
        """Forget the secret and its value; raises `SecretNotFound`, or `SecretInUse`
        naming the endpoints (and templates) whose env still refers to it."""
        record = await self.get(secret_id)
        endpoints, templates = await users_of(self.plane, record.name)
        if endpoints or templates:
            raise SecretInUse(in_use_message(record.name, endpoints, templates))
        await self.values.remove(record.name)
        await self.registry.delete_record(keys.SECRETS, secret_id)


def in_use_message(name: str, endpoints: list[str], templates: list[str]) -> str:
    """The refusal to delete a secret in use, naming who uses it and what to do."""
    used = [f"endpoints {', '.join(endpoints)}"] if endpoints else []
    used += [f"templates {', '.join(templates)}"] if templates else []
    return (
        f"secret {name!r} is in use by {' and '.join(used)}: remove the references "
        f"({{{{ RUNPOD_SECRET_{name} }}}}) from their env first"
    )


def _name(record: SecretRecord) -> str:
    return record.name
