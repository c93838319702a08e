"""`lockgate keys`: create, list and revoke API keys (stored in Redis as their SHA-256).

`create` prints the key once, on stdout alone (`KEY=$(lockgate keys create ci --scope jobs)`);
nothing keeps it. With `--file-entry` nothing is written to Redis: the key and the JSON entry
for the gateway's mounted key file are printed instead.

`revoke` refuses, as the console does, to revoke the last admin key stored in Redis, and
says what revoking the key the CLI itself signs in with would do; `--force` does either.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from typing import Any

import orjson
from pydantic import ValidationError
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockgate import clientconfig
from lockgate.models import describe_validation_error
from lockgate.models.keys import (
    KeyFileEntry,
    KeyRecord,
    Scope,
    duration_s,
    expiry_problem,
    is_expired,
    key_name_problem,
    rfc3339,
    timestamp_ms,
    whole_second,
)
from lockgate.output import table
from lockgate.store import Registry, connect, key_digest, now_ms
from lockgate.store.connection import RedisSettings, standalone
from lockgate.store.registry import KEY_ID_CHARS

KEY_PREFIX = "lg_"
ID_CHARS = KEY_ID_CHARS  # `keys list` shows this much of the digest as the key's id


class KeyCommandError(Exception):
    """A key command cannot be carried out (message for the user)."""


def new_key() -> str:
    """A fresh key: 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def expiry_ms(expires_in: str | None, expires_at: str | None, now_ms: int) -> int | None:
    """The expiry `--expires-in` or `--expires-at` asks for (epoch ms; None: never), or
    KeyCommandError naming the flag."""
    if expires_in is not None and expires_at is not None:
        raise KeyCommandError("give --expires-in or --expires-at, not both")
    if expires_in is not None:
        seconds = duration_s(expires_in)
        if seconds is None:
            raise KeyCommandError(
                f"--expires-in: a number and a unit s, m, h or d (30d, 12h); got {expires_in!r}"
            )
        return whole_second(now_ms + seconds * 1000)
    if expires_at is not None:
        expires = timestamp_ms(expires_at)
        problem = expiry_problem(expires, now_ms)
        if problem:
            raise KeyCommandError(problem.replace("expiresAt:", "--expires-at:", 1))
        return expires
    return None


def key_record(
    name: str, scopes: list[str], endpoints: list[str] | None, expires: int | None = None
) -> KeyRecord:
    """The record of a new key, or KeyCommandError naming the bad field."""
    problem = key_name_problem(name)
    if problem:
        raise KeyCommandError(problem)
    try:
        return KeyRecord(
            name=name,
            scopes=scopes,
            endpoints=endpoints,
            created=now_ms(),
            expires=expires,
        )
    except ValidationError as err:
        raise KeyCommandError(describe_validation_error(err)) from err


def expiry_text(record: dict, now_ms: int) -> str:
    """A key's expiry as `keys list` shows it: `never`, the time, or `expired <time>`."""
    expires = record.get("expires")
    if not isinstance(expires, int):
        return "never"
    return f"expired {rfc3339(expires)}" if is_expired(expires, now_ms) else rfc3339(expires)


LIST_HEADERS = ("id", "name", "scopes", "endpoints", "expires")


def list_row(digest: str, record: dict, now_ms: int) -> list[Any]:
    """One row of `keys list`: id, name, scopes, endpoints (`*`: all), expiry."""
    return [
        digest[:ID_CHARS],
        record.get("name", "?"),
        list(record.get("scopes", [])),
        record.get("endpoints") or "*",
        expiry_text(record, now_ms),
    ]


def matches(digest: str, record: dict, name_or_id: str) -> bool:
    """A key is named by its name, or by a prefix of its digest (8 hex digits or more)."""
    by_id = len(name_or_id) >= 8 and digest.startswith(name_or_id)
    return by_id or record.get("name") == name_or_id


class UnknownEndpoint(KeyCommandError):
    """A key limited to an endpoint that does not exist."""


async def create(registry: Registry, record: KeyRecord) -> str:
    """Store a new key under a name no other key has, limited (if at all) to endpoints
    that exist; returns the key."""
    taken = await registry.list_keys()
    if any(r.get("name") == record.name for r in taken.values()):
        raise KeyCommandError(
            f"a key named {record.name!r} exists: revoke it or choose another name"
        )
    if record.endpoints:
        known = await registry.list_endpoints()
        if missing := [e for e in record.endpoints if e not in known]:
            raise UnknownEndpoint(
                f"endpoints: no endpoint {missing[0]!r}: a key may be limited only to "
                "endpoints that exist (lockgate endpoints list)"
            )
    key = new_key()
    await registry.put_key(key, record.model_dump(mode="json", exclude_none=True))
    return key


def leaves_no_admin(digests: list[str], stored: dict[str, dict]) -> bool:
    """Whether revoking the keys `digests` removes the last stored key with the admin scope
    (keys in the gateway's mounted key file are not counted: they may not exist)."""
    admins = {d for d, record in stored.items() if Scope.ADMIN in record.get("scopes", [])}
    return bool(admins) and admins <= set(digests)


def revoke_problem(names: list[str], *, last_admin: bool, signed_in_from: str | None) -> str | None:
    """Why revoking the keys `names` needs `--force`, or None: it would leave no admin key
    in Redis (`last_admin`), or it would sign the CLI out (`signed_in_from`: where the
    key it signs in with is set)."""
    shown = ", ".join(repr(name) for name in names)
    if last_admin:
        return (
            f"{shown} is the last admin key stored in Redis: revoking it locks everyone out "
            "of the console and the management API. Create another admin key first "
            "(lockgate keys create NAME --scope admin), or add --force"
        )
    if signed_in_from is not None:
        return (
            f"{shown} is the key this CLI signs in with ({signed_in_from}): revoking it makes "
            "lockgate endpoints, jobs and logs answer 401 until you run lockgate login with "
            "another key (or set LOCKGATE_API_KEY). Add --force to revoke it anyway"
        )
    return None


async def revoke(
    registry: Registry,
    name_or_id: str,
    *,
    force: bool = False,
    signed_in: tuple[str, str] | None = None,
) -> list[str]:
    """Delete every key with that name or digest prefix; returns their digests. Without
    `force`, KeyCommandError when `revoke_problem` names one."""
    stored = await registry.list_keys()
    found = [d for d, r in stored.items() if matches(d, r, name_or_id)]
    if not found:
        raise KeyCommandError(f"no key named {name_or_id!r} or with an id starting so")
    signs_out = signed_in is not None and key_digest(signed_in[0]) in found
    problem = (
        None
        if force
        else revoke_problem(
            [stored[d].get("name", "?") for d in found],
            last_admin=leaves_no_admin(found, stored),
            signed_in_from=signed_in[1] if signed_in and signs_out else None,
        )
    )
    if problem:
        raise KeyCommandError(problem)
    for digest in found:
        await registry.delete_key(digest)
    return found


def _new_record(args: argparse.Namespace) -> KeyRecord:
    expires = expiry_ms(args.expires_in, args.expires_at, now_ms())
    return key_record(args.name, args.scope, args.endpoint, expires)


async def _run(args: argparse.Namespace) -> None:
    if args.keys_command == "create" and args.file_entry:
        record = _new_record(args)
        key = new_key()
        entry = KeyFileEntry(**record.model_dump(), sha256=key_digest(key))
        print(key)
        print(orjson.dumps(entry.model_dump(mode="json", exclude_none=True)).decode())
        print("the key is shown once; add the entry to the key file", file=sys.stderr)
        return
    redis = connect(args.redis, max_connections=4)
    try:
        registry = Registry(redis)
        if args.keys_command == "create":
            print(await create(registry, _new_record(args)))
            print("the key is shown once and kept nowhere: store it now", file=sys.stderr)
        elif args.keys_command == "list":
            now = now_ms()
            listed = sorted((await registry.list_keys()).items(), key=_by_name)
            print(table(LIST_HEADERS, [list_row(d, r, now) for d, r in listed]))
        else:
            signed_in = clientconfig.signed_in_key()
            revoked = await revoke(registry, args.name_or_id, force=args.force, signed_in=signed_in)
            for digest in revoked:
                print(f"revoked {digest[:ID_CHARS]}")
    finally:
        await redis.aclose()


def _by_name(item: tuple[str, dict]) -> str:
    return str(item[1].get("name", ""))


def unreachable(settings: RedisSettings) -> str:
    """The one line for a Redis `lockgate keys` cannot reach: which one, and what to set."""
    return (
        f"cannot reach {settings.describe()}: give the running lockgate's Redis with "
        "--redis-url or LOCKGATE_REDIS_URL (lockgate dev prints it, its password kept in "
        "<data dir>/redis-password: 'redis ready on …'), or "
        "manage keys over HTTP: the console's Keys page or /v1/keys"
    )


def refused_password(settings: RedisSettings) -> str:
    """The one line for a Redis that wants another password (or one): where dev mode's is."""
    return (
        f"{settings.describe()} refused the connection's password (or needs one): give it in "
        "--redis-url redis://:PASSWORD@host:port/0; lockgate dev keeps its Redis's in "
        "<data dir>/redis-password and prints the command ('redis ready on …')"
    )


def main(args: argparse.Namespace) -> int:
    redis_url = getattr(args, "redis_url", None)  # given before or after the action, or not
    flags = standalone(redis_url) if redis_url else {}
    args.redis = RedisSettings(**flags)  # --redis-url wins over LOCKGATE_REDIS_*
    try:
        asyncio.run(_run(args))
    except KeyCommandError as err:
        print(f"lockgate keys: {err}", file=sys.stderr)
        return 1
    except RedisAuthenticationError:  # NOAUTH, WRONGPASS (a ConnectionError in redis-py)
        print(f"lockgate keys: {refused_password(args.redis)}", file=sys.stderr)
        return 1
    except (RedisConnectionError, RedisTimeoutError, OSError):
        print(f"lockgate keys: {unreachable(args.redis)}", file=sys.stderr)
        return 1
    return 0
