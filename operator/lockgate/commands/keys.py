"""`lockgate keys create|list|revoke` over HTTP (`/v1/keys`), with the URL and admin key
the other daily-work commands use (`--url`, `--key`, the config file).

Redis directly (`lockgate.apikeys`) only to bootstrap, where no admin key exists yet to
call the API with: when `--redis-url` is given, or the LOCKGATE_REDIS_* settings of a
lockgate process are in the environment (`kubectl exec deploy/lockgate-operator --
lockgate keys create admin --scope admin`); and `create --file-entry`, which touches
nothing. Both ways print the same table, with a header row.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any
from urllib.parse import quote

from lockgate import apikeys, clientconfig
from lockgate.client import ApiClient, ClientError
from lockgate.commands.session import emit, run_action
from lockgate.models.keys import rfc3339
from lockgate.store import now_ms

HEADERS = ("id", "name", "scopes", "endpoints", "expires")
REDIS_ENV_PREFIX = "LOCKGATE_REDIS_"


def bootstrapping(args: argparse.Namespace, environ: dict[str, str]) -> bool:
    """Whether this run goes to Redis itself (`--redis-url`, a lockgate process's Redis
    settings in `environ`, or `--file-entry`) rather than to the management API."""
    return (
        getattr(args, "redis_url", None) is not None
        or getattr(args, "file_entry", False)
        or any(name.startswith(REDIS_ENV_PREFIX) and value for name, value in environ.items())
    )


def main(args: argparse.Namespace) -> int:
    """`lockgate keys`: to Redis when `bootstrapping`, else over HTTP."""
    if bootstrapping(args, dict(os.environ)):
        return apikeys.main(args)
    args.client = "management"
    return run_action(args, over_http)


def expires_text(key: dict[str, Any]) -> str:
    """The expires column: `never`, the time, or `expired <time>`."""
    if not key.get("expiresAt"):
        return "never"
    return f"expired {key['expiresAt']}" if key.get("expired") else str(key["expiresAt"])


def rows(keys: list[dict[str, Any]]) -> list[list[Any]]:
    """The table's rows of keys as `/v1/keys` shows them (`*`: every endpoint)."""
    return [
        [k["id"], k["name"], k["scopes"], k.get("endpoints") or "*", expires_text(k)] for k in keys
    ]


def named(keys: list[dict[str, Any]], name_or_id: str) -> list[dict[str, Any]]:
    """The keys a `revoke` argument names: by name, or by the start of the id (8 hex digits
    or more; a longer one, such as a whole SHA-256, names the key whose id it starts with)."""

    def by_id(key: dict[str, Any]) -> bool:
        shorter, longer = sorted((key["id"], name_or_id), key=len)
        return len(name_or_id) >= 8 and longer.startswith(shorter)

    return [k for k in keys if k["name"] == name_or_id or by_id(k)]


def revoke_problem(found: list[dict[str, Any]], keys: list[dict[str, Any]]) -> str | None:
    """Why revoking `found` needs `--force` (the same reasons as `lockgate keys` in Redis):
    it removes the last admin key, or the key this CLI is signed in with (`current`)."""
    stored = {k["id"]: k for k in keys}
    signed_in = clientconfig.signed_in_key()
    return apikeys.revoke_problem(
        [k["name"] for k in found],
        last_admin=apikeys.leaves_no_admin([k["id"] for k in found], stored),
        signed_in_from=(signed_in[1] if signed_in else "--key")
        if any(k.get("current") for k in found)
        else None,
    )


async def over_http(args: argparse.Namespace, api: ApiClient) -> None:
    if args.keys_command == "create":
        await _create(args, api)
    elif args.keys_command == "list":
        keys = await api.call("GET", "/v1/keys")
        emit(args, keys, HEADERS, rows(keys))
    else:
        keys = await api.call("GET", "/v1/keys")
        found = named(keys, args.name_or_id)
        if not found:
            raise ClientError(f"no key named {args.name_or_id!r} or with an id starting so")
        if not args.force and (problem := revoke_problem(found, keys)):
            raise ClientError(problem)
        for key in found:
            await api.call("DELETE", f"/v1/keys/{quote(key['id'], safe='')}")
            print(f"revoked {key['id']}", flush=True)


async def _create(args: argparse.Namespace, api: ApiClient) -> None:
    try:
        expires = apikeys.expiry_ms(args.expires_in, args.expires_at, now_ms())
    except apikeys.KeyCommandError as err:
        raise ClientError(str(err)) from err
    body: dict[str, Any] = {"name": args.name, "scopes": args.scope}
    if args.endpoint:
        body["endpoints"] = args.endpoint
    if expires is not None:
        body["expiresAt"] = rfc3339(expires)
    made = await api.call("POST", "/v1/keys", body=body)
    if getattr(args, "output", None) in ("json", "yaml"):
        emit(args, made)
    else:
        print(made["key"], flush=True)  # alone on stdout: KEY=$(lockgate keys create …)
    print("the key is shown once and kept nowhere: store it now", file=sys.stderr)
