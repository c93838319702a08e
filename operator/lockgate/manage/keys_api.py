"""API keys over REST, `{prefix}/keys`: what `lockgate keys` does, for the console.

Admin scope (the management app's middleware). Same rules and messages as the command
(`lockgate.apikeys`): a key is shown once, at creation, and only its SHA-256 is kept; a
key's `id` is the start of that digest, as `lockgate keys list` prints it. The list is by
name; `worker` marks a running worker's temporary key (its worker id), `workerOf` an
endpoint's shared worker key (its endpoint id), `current` the caller's own key.

| route | answer |
|---|---|
| `GET /v1/keys` | `[{"id", "name", "scopes", "endpoints", "createdAt"?, "expiresAt"?, ...}]` |
| `POST /v1/keys` `{"name", "scopes", "endpoints"?, "expiresAt"?}` | the same object plus `"key"` |
| `DELETE /v1/keys/{id}` | 204; 404 when no key has that id; 409 for the last admin key |

`expiresAt` is an RFC 3339 time (`2027-01-01T00:00:00Z`) in the future; from then on the key
is refused with 401 `API key expired at <time>`. An expired key stays listed, with
`"expired": true`, until it is revoked.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from aiohttp import web

from lockgate import apikeys
from lockgate.gateway.auth import bearer_token
from lockgate.gateway.errors import ApiError, BadRequest, NotFound
from lockgate.gateway.http import iso_ms, json_object, json_response
from lockgate.models.keys import expiry_problem, is_expired, rfc3339, timestamp_ms
from lockgate.store import Registry, key_digest, now_ms

REGISTRY = web.AppKey("keys_registry", Registry)
KEY_ID_RE = re.compile(r"^[0-9a-f]{8,64}$")  # a digest prefix, as `lockgate keys revoke` takes


class KeyExists(ApiError):
    """Another key has this name."""

    status = 409


class LastAdminKey(ApiError):
    """Revoking this key would leave no admin key."""

    status = 409


def describe_key(digest: str, record: dict[str, Any]) -> dict[str, Any]:
    """A key as the API shows it: never the key, its id is the digest's start."""
    shown: dict[str, Any] = {
        "id": digest[: apikeys.ID_CHARS],
        "name": record.get("name", "?"),
        "scopes": list(record.get("scopes", [])),
        "endpoints": record.get("endpoints"),
    }
    if isinstance(record.get("created"), int):
        shown["createdAt"] = iso_ms(record["created"])
    if isinstance(record.get("expires"), int):
        shown["expiresAt"] = rfc3339(record["expires"])
        shown["expired"] = is_expired(record["expires"], now_ms())
    if isinstance(record.get("worker"), str):
        shown["worker"] = record["worker"]  # a running worker's own key, revoked as it stops
    return shown


class NewKey(NamedTuple):
    """A `POST /v1/keys` body, checked for shape."""

    name: str
    scopes: list[str]
    endpoints: list[str] | None
    expires: int | None  # epoch ms; None: never


def parse_expires_at(value: Any, now_ms: int) -> int | None:
    """`expiresAt` (absent or null: never) as epoch ms; 400 naming it when bad or past."""
    if value is None:
        return None
    expires = timestamp_ms(value) if isinstance(value, str) else None
    problem = expiry_problem(expires, now_ms)
    if problem:
        raise BadRequest(f"{problem}; got {value!r}")
    return expires


def parse_new_key(body: dict[str, Any]) -> NewKey:
    """`{"name", "scopes", "endpoints"?, "expiresAt"?}` checked for shape; values are checked
    by the command's own rules (`apikeys.key_record`)."""
    unknown = sorted(set(body) - {"name", "scopes", "endpoints", "expiresAt"})
    if unknown:
        raise BadRequest(f"{unknown[0]}: not a field of a key (name, scopes, endpoints, expiresAt)")
    name, scopes, endpoints = body.get("name"), body.get("scopes"), body.get("endpoints")
    if not isinstance(name, str):
        raise BadRequest("name: required, a string")
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise BadRequest("scopes: required, a list of jobs, jobs:read, workers or admin")
    if endpoints is not None and (
        not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints)
    ):
        raise BadRequest("endpoints: a list of endpoint ids, or absent for every endpoint")
    expires = parse_expires_at(body.get("expiresAt"), now_ms())
    return NewKey(name, scopes, endpoints or None, expires)


async def list_keys(request: web.Request) -> web.Response:
    """Every key, by name; the caller's own is marked `"current": true` (the console asks
    more before revoking the key it is signed in with), an endpoint's shared worker key
    (which lockgate made and keeps) `"workerOf": endpoint id`."""
    registry = request.app[REGISTRY]
    stored = await registry.list_keys()
    token = bearer_token(request.headers.get("authorization"))
    mine = key_digest(token) if token else None
    endpoint_keys = {
        entry.workerKeyDigest: endpoint_id
        for endpoint_id, entry in (await registry.list_endpoints()).items()
    }
    shown = [describe_key(d, r) for d, r in stored.items()]
    for key, digest in zip(shown, stored, strict=True):
        if digest == mine:
            key["current"] = True
        if digest in endpoint_keys:
            key["workerOf"] = endpoint_keys[digest]  # the endpoint's shared worker key
    return json_response(sorted(shown, key=lambda k: (str(k["name"]), k["id"])))


async def create_key(request: web.Request) -> web.Response:
    new = parse_new_key(await json_object(request))
    registry = request.app[REGISTRY]
    try:
        record = apikeys.key_record(new.name, new.scopes, new.endpoints, new.expires)
    except apikeys.KeyCommandError as err:
        raise BadRequest(str(err)) from err
    try:
        key = await apikeys.create(registry, record)
    except apikeys.UnknownEndpoint as err:
        raise BadRequest(str(err)) from err
    except apikeys.KeyCommandError as err:
        raise KeyExists(str(err)) from err
    stored = record.model_dump(mode="json", exclude_none=True)
    return json_response({**describe_key(key_digest(key), stored), "key": key})


async def revoke_key(request: web.Request) -> web.Response:
    key_id = request.match_info["key_id"]
    if not KEY_ID_RE.fullmatch(key_id):
        raise BadRequest("id: the key's id (8 to 64 lowercase hex digits, as listed)")
    registry = request.app[REGISTRY]
    stored = await registry.list_keys()
    found = [d for d in stored if d.startswith(key_id)]
    if not found:
        raise NotFound(f"no key with an id starting {key_id!r}")
    if len(found) > 1:
        raise BadRequest(f"id: {key_id!r} starts {len(found)} keys' ids: give more digits")
    if apikeys.leaves_no_admin(found[:1], stored):
        raise LastAdminKey(
            f"key {stored[found[0]].get('name', '?')!r} is the last admin key: revoking it would "
            "lock everyone out of the console and the management API. Create another admin "
            "key first (lockgate keys create NAME --scope admin)"
        )
    await registry.delete_key(found[0])
    return web.Response(status=204)


def add_keys_routes(app: web.Application, registry: Registry, *, prefix: str = "/v1") -> None:
    """`{prefix}/keys` on the management app (whose middleware requires an admin key)."""
    app[REGISTRY] = registry
    app.router.add_get(f"{prefix}/keys", list_keys)
    app.router.add_post(f"{prefix}/keys", create_key)
    app.router.add_delete(f"{prefix}/keys/{{key_id}}", revoke_key)
