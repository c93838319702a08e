"""API keys: scopes, endpoint lists, revocation, the key file and `lockgate keys`."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time

import orjson
import pytest

from lockgate.apikeys import KeyCommandError, create, key_record, revoke
from lockgate.gateway.keyfile import KeyFileError, parse_key_file
from lockgate.models.keys import effective_scopes, rfc3339
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry, key_digest
from tests.conftest import LiveGateway

READS = [("GET", "status/nope"), ("GET", "stream/nope"), ("GET", "health")]
WRITES = [("POST", "run"), ("POST", "runsync?wait=1000"), ("POST", "cancel/nope"),
          ("POST", "retry/nope"), ("POST", "purge-queue")]  # fmt: skip


async def call(http, gw: LiveGateway, method: str, path: str, key: str) -> int:
    body = {"input": {}} if method == "POST" else None
    headers = {"authorization": key}
    async with http.request(method, gw.job_url(path), json=body, headers=headers) as r:
        await r.read()
        return r.status


async def add_key(redis, name: str, scopes: list[str], endpoints: list[str] | None = None) -> str:
    return await create(Registry(redis), key_record(name, scopes, endpoints))


@pytest.mark.parametrize(
    ("scopes", "expected"),
    [
        (["jobs"], {"jobs", "jobs:read"}),
        (["jobs:read"], {"jobs:read"}),
        (["admin"], {"admin"}),
        (["workers", "jobs:read"], {"workers", "jobs:read"}),
    ],
)
def test_jobs_implies_jobs_read_and_nothing_else_is_implied(scopes, expected):
    assert effective_scopes(scopes) == expected


async def test_a_jobs_read_key_reads_but_cannot_submit_or_change(http, gateway, redis):
    key = await add_key(redis, "reader", ["jobs:read"])
    for method, path in READS:
        assert await call(http, gateway, method, path, key) != 401, path
    for method, path in WRITES:
        assert await call(http, gateway, method, path, key) == 401, path


async def test_a_jobs_key_may_call_every_client_route(http, gateway, redis):
    key = await add_key(redis, "client", ["jobs"])
    for method, path in READS + WRITES:
        assert await call(http, gateway, method, path, key) in (200, 404), path


@pytest.mark.parametrize("scopes", [["admin"], ["workers"]])
async def test_admin_and_worker_keys_cannot_call_client_routes(http, gateway, redis, scopes):
    key = await add_key(redis, "other", scopes)
    for method, path in READS + WRITES:
        assert await call(http, gateway, method, path, key) == 401, path


async def test_a_key_limited_to_endpoints_is_refused_elsewhere(http, gateway, redis):
    await Registry(redis).put_endpoint("other", RegistryEntry(id="other"))
    key = await add_key(redis, "one-endpoint", ["jobs"], ["other"])
    assert await call(http, gateway, "GET", "health", key) == 401
    async with http.get(f"{gateway.url}/v2/other/health", headers={"authorization": key}) as r:
        assert r.status == 200


async def test_keys_are_stored_as_digests_only(redis):
    key = await add_key(redis, "ci", ["jobs"])
    stored = await redis.hgetall("lg:keys")
    assert list(stored) == [key_digest(key).encode()]
    assert key.encode() not in b"".join(stored.values())
    assert orjson.loads(stored[key_digest(key).encode()])["name"] == "ci"


async def test_a_second_key_with_a_taken_name_is_refused(redis):
    await add_key(redis, "ci", ["jobs"])
    with pytest.raises(KeyCommandError, match="exists"):
        await add_key(redis, "ci", ["jobs:read"])


async def test_a_revoked_key_is_refused_at_once(http, gateway, redis):
    key = await add_key(redis, "short-lived", ["jobs"])
    assert await call(http, gateway, "GET", "health", key) == 200  # now cached
    await revoke(Registry(redis), "short-lived")
    await asyncio.sleep(0.2)  # the revocation event reaches the gateway
    assert await call(http, gateway, "GET", "health", key) == 401


@pytest.mark.parametrize("gateway_settings", [{"auth_cache_s": 1.0}], indirect=True)
async def test_a_revocation_whose_event_is_missed_holds_within_the_cache_time(http, gateway, redis):
    key = await add_key(redis, "short-lived", ["jobs"])
    assert await call(http, gateway, "GET", "health", key) == 200
    await redis.hdel("lg:keys", key_digest(key))  # no event: only the cache time bounds it
    assert await call(http, gateway, "GET", "health", key) == 200
    await asyncio.sleep(1.1)
    assert await call(http, gateway, "GET", "health", key) == 401


async def test_revoke_by_id_prefix_and_unknown_names_are_refused(redis):
    key = await add_key(redis, "ci", ["jobs"])
    with pytest.raises(KeyCommandError, match="no key"):
        await revoke(Registry(redis), "nobody")
    assert await revoke(Registry(redis), key_digest(key)[:12]) == [key_digest(key)]
    assert await redis.hlen("lg:keys") == 0


# -- the key file


def entry(secret: str, name: str, scopes: list[str], **extra) -> dict:
    return {"name": name, "sha256": key_digest(secret), "scopes": scopes, **extra}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{", "not JSON"),
        (b'{"name": "x"}', "list"),
        (b'[{"name": "x", "scopes": ["jobs"]}]', "sha256"),
        (b'[{"name": "x", "sha256": "abc", "scopes": ["jobs"]}]', "sha256"),
        (json.dumps([entry("k", "x", ["root"])]).encode(), "scopes"),
        (json.dumps([entry("k", "x", ["jobs"], key="k")]).encode(), "key"),
    ],
)
def test_a_bad_key_file_is_refused_naming_the_problem(raw, problem):
    with pytest.raises(KeyFileError, match=problem):
        parse_key_file(raw)


@pytest.fixture
def key_file(tmp_path, gateway_settings):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps([entry("file-key", "from-file", ["jobs:read"])]))
    gateway_settings.update(keys_file=str(path), keys_file_reload_s=0.1)
    return path


async def test_keys_from_the_file_work_and_changes_are_picked_up(http, key_file, gateway):
    assert await call(http, gateway, "GET", "health", "file-key") == 200
    assert await call(http, gateway, "POST", "run", "file-key") == 401  # jobs:read only
    key_file.write_text(json.dumps([entry("new-key", "from-file", ["jobs"])]))
    await asyncio.sleep(0.5)
    assert await call(http, gateway, "GET", "health", "file-key") == 401
    assert await call(http, gateway, "POST", "run", "new-key") == 200
    assert await call(http, gateway, "GET", "health", gateway.client_key) == 200  # Redis too


async def test_a_broken_key_file_keeps_the_last_good_keys(http, key_file, gateway):
    key_file.write_text("[{")
    await asyncio.sleep(0.5)
    assert await call(http, gateway, "GET", "health", "file-key") == 200


async def test_a_key_file_entry_past_its_expiry_is_refused_naming_it(http, key_file, gateway):
    past = (time.time_ns() // 1_000_000 // 1000 - 3600) * 1000
    entries = [entry("file-key", "from-file", ["jobs:read"]),
               entry("old-key", "old", ["jobs"], expires=past)]  # fmt: skip
    key_file.write_text(json.dumps(entries))
    await asyncio.sleep(0.5)
    async with http.get(gateway.job_url("health"), headers={"authorization": "old-key"}) as r:
        assert (r.status, await r.json()) == (401, {"error": f"API key expired at {rfc3339(past)}"})
    assert await call(http, gateway, "GET", "health", "file-key") == 200


async def test_a_stored_key_is_refused_from_its_expiry_though_cached(http, gateway, redis):
    expires = (time.time_ns() // 1_000_000 // 1000 + 2) * 1000  # a whole second, 1-2 s ahead
    key = await create(Registry(redis), key_record("brief", ["jobs"], None, expires))
    assert await call(http, gateway, "GET", "health", key) == 200  # now cached
    while time.time_ns() // 1_000_000 < expires:
        await asyncio.sleep(0.1)
    async with http.get(gateway.job_url("health"), headers={"authorization": key}) as r:
        answer = (r.status, await r.json())
    assert answer == (401, {"error": f"API key expired at {rfc3339(expires)}"})


# -- refusals are logged with the key's name, never the key


async def test_refusals_are_logged_with_the_key_name_and_reason(http, gateway, redis, caplog):
    key = await add_key(redis, "reader", ["jobs:read"])
    caplog.set_level(logging.INFO, "lockgate.gateway")
    assert await call(http, gateway, "POST", "run", key) == 401
    assert await call(http, gateway, "POST", "run", "wrong-key") == 401
    refusals = [r for r in caplog.records if r.getMessage().startswith("refused")]
    assert [r.fields["key"] for r in refusals] == ["reader", None]
    assert "may not use jobs" in refusals[0].fields["reason"]
    assert "unknown" in refusals[1].fields["reason"]
    assert all(key not in r.getMessage() and "wrong-key" not in r.getMessage() for r in refusals)


# -- `lockgate keys`


def lockgate(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "lockgate.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


async def test_the_keys_command_creates_lists_and_revokes(http, gateway, redis_server):
    url = ["--redis-url", redis_server.url]
    made = lockgate("keys", *url, "create", "ci-bot", "--scope", "jobs", "--endpoint", "echo")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("lg_") and "shown once" in made.stderr
    assert await call(http, gateway, "POST", "run", key) == 200
    listed = lockgate("keys", *url, "list").stdout
    assert "ci-bot" in listed and key_digest(key)[:12] in listed and key not in listed
    assert lockgate("keys", *url, "revoke", "ci-bot").returncode == 0
    await asyncio.sleep(0.2)
    assert await call(http, gateway, "POST", "run", key) == 401
    assert lockgate("keys", *url, "revoke", "ci-bot").returncode == 1


def test_the_keys_command_prints_a_key_file_entry_without_redis():
    made = lockgate("keys", "create", "ci", "--scope", "jobs:read", "--file-entry")
    key, line = made.stdout.splitlines()
    assert parse_key_file(f"[{line}]".encode())[key_digest(key)].name == "ci"


def test_a_key_file_entry_may_carry_an_expiry():
    made = lockgate("keys", "create", "ci", "--scope", "jobs", "--file-entry", "--expires-in", "1h")
    key, line = made.stdout.splitlines()
    expires = parse_key_file(f"[{line}]".encode())[key_digest(key)].expires
    assert expires is not None and 3590 < expires / 1000 - time.time() <= 3601
