"""`/v1/keys`: what `lockgate keys` does, over REST for the console (admin keys only),
served by dev mode's real app (gateway + `/v1`) on loopback over a real Redis."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from redis.asyncio import Redis

from lockgate.apps.dev import build_app
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.models.keys import rfc3339
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry, key_digest
from tests.conftest import REPO, make_settings


class Keys:
    """A client of `/v1/keys` with an admin key."""

    def __init__(self, http: aiohttp.ClientSession, url: str, key: str) -> None:
        self.http, self.url, self.key = http, url, key

    async def call(
        self, method: str, path: str = "", body: Any = None, key: str | None = None
    ) -> tuple[int, Any]:
        headers = {"authorization": f"Bearer {key or self.key}"}
        async with self.http.request(
            method, f"{self.url}/v1/keys{path}", json=body, headers=headers
        ) as resp:
            payload = await resp.json() if resp.content_type == "application/json" else None
            return resp.status, payload

    async def job_api_status(self, key: str) -> int:
        """What the job API answers this key (an unknown endpoint: 404 once the key is
        accepted, 401 when it is not)."""
        headers = {"authorization": f"Bearer {key}"}
        async with self.http.get(f"{self.url}/v2/no-such-endpoint/health", headers=headers) as r:
            return r.status

    async def refusal(self, method: str, path: str, key: str) -> tuple[int, str]:
        """Status and body text of `method path` (any route of the process) with `key`."""
        headers = {"authorization": f"Bearer {key}"}
        async with self.http.request(method, f"{self.url}{path}", headers=headers) as resp:
            return resp.status, await resp.text()


@pytest.fixture
async def keys(
    redis: Redis, redis_server: EmbeddedRedis, http: aiohttp.ClientSession
) -> AsyncIterator[Keys]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = make_settings(redis_server.url, port, auth_cache_s=30.0)
    app, plane = build_app(settings, gateway_url=url, base_dir=REPO, stop_grace_s=1)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    admin = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(admin, {"name": "admin", "scopes": ["admin"]})
    try:
        yield Keys(http, url, admin)
    finally:
        await plane.close()
        await runner.cleanup()


async def test_a_created_key_is_shown_once_and_works_until_revoked(
    keys: Keys, redis: Redis
) -> None:
    status, created = await keys.call("POST", body={"name": "ci", "scopes": ["jobs"]})
    assert status == 200, created
    key = created["key"]
    assert key.startswith("lg_")
    assert created["id"] == key_digest(key)[:12]
    assert (created["name"], created["scopes"], created["endpoints"]) == ("ci", ["jobs"], None)
    assert created["createdAt"].endswith("Z")
    assert await keys.job_api_status(key) == 404  # accepted: the endpoint is what is missing

    status, listed = await keys.call("GET")
    assert status == 200
    mine = [k for k in listed if k["name"] == "ci"]
    assert mine == [{k: v for k, v in created.items() if k != "key"}]
    assert all("key" not in k for k in listed)
    assert key not in str(listed)

    assert (await keys.call("DELETE", f"/{created['id']}"))[0] == 204
    assert await keys.job_api_status(key) == 401  # the gateway forgot it at once
    assert await Registry(redis).get_key(key_digest(key)) is None
    assert (await keys.call("DELETE", f"/{created['id']}"))[0] == 404


async def test_a_key_limited_to_endpoints_keeps_them_and_an_unknown_one_is_refused(
    keys: Keys, redis: Redis
) -> None:
    body = {"name": "team-a", "scopes": ["jobs:read", "jobs"], "endpoints": ["sd", "llm"]}
    await Registry(redis).put_endpoint("sd", RegistryEntry(id="sd"))
    status, refused = await keys.call("POST", body=body)
    assert status == 400 and refused["error"].startswith("endpoints: no endpoint 'llm'")
    assert "team-a" not in {k["name"] for k in (await keys.call("GET"))[1]}
    await Registry(redis).put_endpoint("llm", RegistryEntry(id="llm"))
    status, created = await keys.call("POST", body=body)
    assert status == 200, created
    assert created["endpoints"] == ["sd", "llm"]
    assert created["scopes"] == ["jobs:read", "jobs"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "scopes": ["root"]}, "scopes"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x"}, "scopes"),
        ({"name": "has space", "scopes": ["jobs"]}, "name"),
        ({"scopes": ["jobs"]}, "name"),
        ({"name": "x", "scopes": ["jobs"], "endpoints": "sd"}, "endpoints"),
        ({"name": "x", "scopes": ["jobs"], "ttl": 5}, "ttl"),
        ({"name": "x", "scopes": ["jobs"], "expiresAt": "tomorrow"}, "expiresAt"),
        ({"name": "x", "scopes": ["jobs"], "expiresAt": 1893456000}, "expiresAt"),
        ({"name": "x", "scopes": ["jobs"], "expiresAt": "2027-01-01T00:00:00"}, "expiresAt"),
        ({"name": "x", "scopes": ["jobs"], "expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
        ({"name": "x", "scopes": ["jobs"], "expiresAt": "2027-01-01"}, "expiresAt"),
        (["x"], "body"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(keys: Keys, body: Any, field: str) -> None:
    status, answer = await keys.call("POST", body=body)
    assert status == 400, answer
    assert answer["error"].startswith(field), answer


async def test_a_taken_name_is_a_409_with_the_commands_message(keys: Keys) -> None:
    assert (await keys.call("POST", body={"name": "dup", "scopes": ["jobs"]}))[0] == 200
    status, answer = await keys.call("POST", body={"name": "dup", "scopes": ["admin"]})
    assert status == 409
    assert answer["error"] == "a key named 'dup' exists: revoke it or choose another name"


async def test_revoking_needs_a_listed_id(keys: Keys) -> None:
    status, answer = await keys.call("DELETE", "/admin")
    assert status == 400 and answer["error"].startswith("id")
    assert (await keys.call("DELETE", "/0123456789ab"))[0] == 404


async def test_only_admin_keys_may_manage_keys(keys: Keys) -> None:
    _, created = await keys.call("POST", body={"name": "client", "scopes": ["jobs"]})
    assert (await keys.call("GET", key=created["key"]))[0] in (401, 403)
    assert (await keys.call("POST", body={"name": "x", "scopes": ["admin"]}, key="lg_no"))[0] == 401


async def test_the_callers_key_is_marked_and_worker_keys_say_their_worker(
    keys: Keys, redis: Redis
) -> None:
    worker = {"name": "dev-worker:w-1", "scopes": ["workers"], "endpoints": ["w"], "worker": "w-1"}
    await Registry(redis).put_key(f"lgw_{secrets.token_hex(8)}", worker)
    shared = f"lgw_{secrets.token_hex(8)}"
    await Registry(redis).put_key(shared, {"name": "shared:w", "scopes": ["workers"]})
    status, listed = await keys.call("GET")
    assert status == 200
    by_name = {k["name"]: k for k in listed}
    assert by_name["admin"]["current"] is True  # the key this call was made with
    assert by_name["dev-worker:w-1"]["worker"] == "w-1"
    assert "current" not in by_name["dev-worker:w-1"]
    assert sum(1 for k in listed if k.get("current")) == 1

    await Registry(redis).put_endpoint(
        "w", RegistryEntry(id="w", workerKeyDigest=key_digest(shared))
    )
    listed = {k["name"]: k for k in (await keys.call("GET"))[1]}
    assert listed["shared:w"]["workerOf"] == "w"  # the endpoint's shared worker key
    assert "workerOf" not in listed["admin"]


async def test_a_bad_key_name_is_said_in_words_not_as_a_pattern(keys: Keys) -> None:
    status, answer = await keys.call("POST", body={"name": "has space", "scopes": ["jobs"]})
    assert status == 400
    assert answer["error"].startswith("name: 1 to 128 characters: letters, digits")
    assert "'has space'" in answer["error"] and "[A-Za-z" not in answer["error"]


async def test_the_last_admin_key_cannot_be_revoked(keys: Keys) -> None:
    _, listed = await keys.call("GET")
    [admin] = [k for k in listed if k["name"] == "admin"]
    status, answer = await keys.call("DELETE", f"/{admin['id']}")
    assert status == 409
    assert "last admin key" in answer["error"] and "--scope admin" in answer["error"]
    _, other = await keys.call("POST", body={"name": "admin-2", "scopes": ["admin"]})
    assert (await keys.call("DELETE", f"/{admin['id']}", key=other["key"]))[0] == 204
    status, answer = await keys.call("DELETE", f"/{other['id']}", key=other["key"])
    assert status == 409  # now admin-2 is the last one


async def test_a_key_past_its_expiry_is_refused_everywhere_with_the_expiry_message(
    keys: Keys,
) -> None:
    expires_ms = (time.time_ns() // 1_000_000 // 1000 + 3) * 1000  # a whole second, 2-3 s ahead
    expires_at = rfc3339(expires_ms)
    body = {"name": "short", "scopes": ["jobs", "admin"], "expiresAt": expires_at}
    status, created = await keys.call("POST", body=body)
    assert status == 200, created
    assert (created["expiresAt"], created["expired"]) == (expires_at, False)
    key = created["key"]
    # accepted (and so cached by the gateway, whose cache here lasts 30 s) before it expires
    assert await keys.job_api_status(key) == 404
    assert (await keys.call("GET", key=key))[0] == 200

    while time.time_ns() // 1_000_000 < expires_ms:
        await asyncio.sleep(0.2)

    expected = f"API key expired at {expires_at}"
    assert (await keys.call("GET", key=key)) == (401, {"error": expected})
    for method, path in [
        ("GET", "/v2/no-such-endpoint/health"),  # job API
        ("POST", "/v2/no-such-endpoint/run"),
        ("GET", "/v2/no-such-endpoint/openai/v1/models"),  # OpenAI route
        ("GET", "/v2/no-such-endpoint/job-take/w-1"),  # worker API
        ("GET", "/v1/endpoints"),  # management API (the console signs in with this)
    ]:
        status, text = await keys.refusal(method, path, key)
        assert (status, expected in text) == (401, True), (path, text)
    status, text = await keys.refusal("GET", "/v2/no-such-endpoint/health", "lg_unknown")
    assert status == 401 and "expired" not in text  # an unknown key is told apart

    _, listed = await keys.call("GET")
    [shown] = [k for k in listed if k["name"] == "short"]
    assert (shown["expiresAt"], shown["expired"]) == (expires_at, True)  # kept, marked
    assert (await keys.call("DELETE", f"/{shown['id']}"))[0] == 204


async def test_a_key_without_expiry_says_none(keys: Keys) -> None:
    status, created = await keys.call("POST", body={"name": "forever", "scopes": ["jobs"]})
    assert status == 200
    assert "expiresAt" not in created and "expired" not in created
