"""Batch Jobs (issue 49, items 1-3) in dev mode over real HTTP on loopback, with real Redis
and real worker processes: a draft uploaded across calls, a request deleted, finalize,
progress and results, cancel mid-way, every limit, the signed webhook delivered once, and
a restart of dev mode (gateway and workers) mid-batch after which everything is still
there. The batch runs on the endpoint's hidden batch pool: the endpoint's own jobs and
workers never see it."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from aiohttp import web
from redis.asyncio import Redis

from lockgate.apps.dev import build_app
from lockgate.dev.controlplane import LocalControlPlane
from lockgate.dev.redis_server import free_port
from lockgate.models.batch import batch_pool_id
from lockgate.signing import verify
from lockgate.store import Registry, connect
from lockgate.store.connection import RedisSettings
from tests.conftest import REPO, eventually, make_settings, redis_settings, wait_until
from tests.devproc import DevProcess
from tests.redis_topologies import SentinelProcs
from tests.redis_topologies import redis_sentinels as redis_sentinels  # a fixture

SLEEPER = "python tests/handlers/sleeper.py async"
SECRET = "batch-webhook-secret"
LIMITS = {
    "batch_max_active": 3, "batch_max_requests": 6, "batch_max_queued": 8,
    "batch_max_bytes": 4096,
}  # fmt: skip


class Dev:
    """Dev mode's app on loopback, with an admin, a `jobs` and a `jobs:read` key."""

    def __init__(self, http: aiohttp.ClientSession, url: str, plane: LocalControlPlane) -> None:
        self.http, self.url, self.plane = http, url, plane
        self.admin = self.jobs = self.reader = ""

    async def keys(self, redis: Redis) -> None:
        registry = Registry(redis)
        self.admin, self.jobs, self.reader = (f"lg_{secrets.token_hex(8)}" for _ in range(3))
        await registry.put_key(self.admin, {"name": "admin", "scopes": ["admin"]})
        await registry.put_key(self.jobs, {"name": "client", "scopes": ["jobs"]})
        await registry.put_key(self.reader, {"name": "reader", "scopes": ["jobs:read"]})

    async def endpoint(self, endpoint_id: str, **fields: Any) -> None:
        body = {"id": endpoint_id, "templateId": SLEEPER, "idleTimeout": 1, **fields}
        async with self.http.post(
            f"{self.url}/v1/endpoints", json=body, headers={"authorization": self.admin}
        ) as resp:
            assert resp.status == 200, await resp.text()

    async def call(
        self, method: str, path: str, body: Any = None, *, key: str | None = None, raw: bytes = b""
    ) -> tuple[int, Any]:
        headers = {"authorization": key or self.jobs}
        kwargs: dict[str, Any] = {"data": raw} if raw else {"json": body}
        async with self.http.request(
            method, f"{self.url}/v2/{path}", headers=headers, **kwargs
        ) as resp:
            return resp.status, await resp.json(content_type=None)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, got = await self.call(method, path, body, **kw)
        assert status == 200, (status, got)
        return got

    async def done(self, ep: str, bid: str) -> dict[str, Any]:
        async def ended() -> dict[str, Any] | None:
            got = await self.ok("GET", f"{ep}/batch/{bid}")
            return got if got["doneAt"] else None

        return await eventually(ended, f"batch {bid} done", timeout=60)

    async def results(self, ep: str, bid: str) -> list[dict[str, Any]]:
        page = await self.ok("GET", f"{ep}/batch/{bid}/requests?limit=500")
        return page["requests"]

    async def admin_get(self, path: str, **params: str) -> Any:
        headers = {"authorization": self.admin}
        async with self.http.get(f"{self.url}{path}", params=params, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def billed_ids(self) -> list[str]:
        """The endpoints of the usage report (`/v2/billing/serverless`, by hour)."""
        report = await self.admin_get("/v2/billing/serverless", bucketSize="hour")
        return [r["serverlessId"] for r in report["records"]]


async def no_pool_shown(dev: Dev, ep: str) -> bool:
    """Whether the endpoint's batch pool is in none of the user-facing lists: the endpoint
    lists (v1, v2), the usage report; and whether it exists (registered, with workers).
    False when it does not exist (an endpoint without batches has none at all)."""
    lists = [
        [e["id"] for e in await dev.admin_get("/v1/endpoints")],
        [e["id"] for e in (await dev.admin_get("/v2/serverless"))["endpoints"]],
        await dev.billed_ids(),
    ]
    assert ep in lists[0] and ep in lists[1]
    for ids in lists:
        assert not [i for i in ids if i.startswith("batch-")], ids
    pool = dev.plane._endpoints[ep].batch
    registered = await dev.plane.gw.registry.get_endpoint(batch_pool_id(ep))
    assert (pool is None) == (registered is None), (pool, registered)
    return pool is not None


@contextlib.asynccontextmanager
async def dev_mode(
    redis_target: RedisSettings, http: aiohttp.ClientSession, **settings: Any
) -> AsyncIterator[Dev]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    values = {
        "sweep_interval_s": 0.2, "batch_interval_s": 0.2, "webhook_allow_private": True,
        "webhook_secret": SECRET, "webhook_retry_interval_s": 0.5, **settings,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lockgate-dev-", ignore_cleanup_errors=True) as data:
        app, plane = build_app(
            make_settings(redis_target, port, **values), gateway_url=url, base_dir=REPO,
            data_dir=Path(data), stop_grace_s=5,
        )  # fmt: skip
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            yield Dev(http, url, plane)
        finally:
            await plane.close()
            await runner.cleanup()


class Receiver:
    """A webhook receiver on loopback: every call's headers and body."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.calls.append((dict(request.headers), body))
        if self.fail_first:
            self.fail_first -= 1
            return web.Response(status=500)
        return web.Response(text="ok")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    hook = Receiver()
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield hook, f"http://127.0.0.1:{port}/hook"
    await runner.cleanup()


async def test_a_batch_from_draft_to_its_results_on_its_own_pool(
    redis: Redis, redis_target: RedisSettings, http: aiohttp.ClientSession, receiver: Any
) -> None:
    hook, hook_url = receiver
    hook.fail_first = 1  # the first attempt fails: delivered by the retry, once
    async with dev_mode(redis_target, http) as dev:
        await dev.keys(redis)
        await dev.endpoint("bj-life", workersMax=1, batchWorkersMax=2)
        ep = "bj-life"
        assert not await no_pool_shown(dev, ep), "a pool before any batch"

        # a draft uploaded across calls; one request deleted
        # n=1 runs across a 10 s interval's end with 5 s to spare: its worker is sampled
        # alive (usage is sampled, keys.HISTORY_INTERVAL_S), billed to the endpoint below
        first = [{"input": {"n": 1, "sleep": 15}}]
        created = await dev.ok("POST", f"{ep}/batch?webhook={hook_url}", first)
        bid = created["id"]
        assert created == {"id": bid, "status": "DRAFT"} and bid.startswith("batch_")
        assert dev.plane._endpoints[ep].batch is None, "a pool for a DRAFT: nothing runs yet"
        two = await dev.ok(
            "POST", f"{ep}/batch/{bid}/requests",
            {"requests": [{"input": {"n": 2}}, {"input": {"n": 3, "fail": "three is bad"}}]},
        )  # fmt: skip
        assert two["requestTotal"] == 3
        three = await dev.ok(
            "POST", f"{ep}/batch/{bid}/requests", {"requests": [{"input": {"n": 4}}]}
        )
        assert three["requestTotal"] == 4
        gone = three["requestIds"][0]
        after = await dev.ok("DELETE", f"{ep}/batch/{bid}/requests/{gone}")
        assert after["requestTotal"] == 3 and after["status"] == "DRAFT"
        status, _ = await dev.call("DELETE", f"{ep}/batch/{bid}/requests/{gone}")
        assert status == 404
        drafts = await dev.results(ep, bid)
        assert [r["status"] for r in drafts] == ["DRAFT"] * 3
        assert gone not in [r["id"] for r in drafts]

        # a display name; a reader reads and may not write
        named = await dev.ok("PUT", f"{ep}/batch/{bid}", {"name": "nightly"})
        assert named["name"] == "nightly"
        assert (await dev.ok("GET", f"{ep}/batch/{bid}", key=dev.reader))["name"] == "nightly"
        status, _ = await dev.call("POST", f"{ep}/batch/{bid}/finalize", key=dev.reader)
        assert status == 401

        # finalize: it runs on the batch pool; a finalized batch takes no more requests
        final = await dev.ok("POST", f"{ep}/batch/{bid}/finalize")
        assert final["status"] == "FINALIZED" and final["requestTotal"] == 3
        status, refused = await dev.call(
            "POST", f"{ep}/batch/{bid}/requests", {"requests": [{"input": {}}]}
        )
        assert status == 400 and "FINALIZED" in refused["error"]
        status, _ = await dev.call("POST", f"{ep}/batch/{bid}/finalize")
        assert status == 400

        done = await dev.done(ep, bid)
        assert done["status"] == "FAILED"  # one request failed
        assert (done["requestCompleted"], done["requestFailed"], done["requestTotal"]) == (2, 1, 3)
        assert done["requestInProgress"] == 0 and isinstance(done["createdAt"], int)
        assert done["webhook"] in ("PENDING", "DELIVERED")
        rows = {
            r["output"]["echo"]["n"] if "output" in r else 3: r for r in await dev.results(ep, bid)
        }
        assert rows[1]["status"] == "COMPLETED" and rows[1]["startedAt"].endswith("Z")
        assert rows[3]["status"] == "FAILED" and "three is bad" in rows[3]["error"]
        assert rows[3]["completedAt"] is not None

        # the endpoint's own queue never had them; its pool did
        async with http.get(
            f"{dev.url}/v2/{ep}/health", headers={"authorization": dev.jobs}
        ) as resp:
            health = await resp.json()
        assert health["jobs"]["completed"] == 0 and health["jobs"]["failed"] == 0
        pool = dev.plane._endpoints[ep].batch
        assert pool is not None and pool.endpoint_id == batch_pool_id(ep)
        assert await no_pool_shown(dev, ep), "no pool once its batch ran"

        # the webhook: signed, its second attempt delivered, never again
        async def delivered() -> dict[str, str] | None:
            fields = await dev.plane.gw.batches.get(ep, bid)
            return fields if fields and fields.get("whState") == "delivered" else None

        await eventually(delivered, "the webhook delivered", timeout=30)
        assert (await dev.ok("GET", f"{ep}/batch/{bid}"))["webhook"] == "DELIVERED"
        assert len(hook.calls) == 2
        headers, body = hook.calls[-1]
        verify(SECRET, headers, body)
        assert b'"status":"FAILED"' in body and bid.encode() in body

        # the list, newest first; the pool goes back to zero workers
        second = (await dev.ok("POST", f"{ep}/batch", []))["id"]
        listed = await dev.ok("GET", f"{ep}/batch")
        assert [b["id"] for b in listed["batches"]] == [second, bid]
        assert (listed["total"], listed["hasMore"]) == (2, False)

        async def at_zero() -> bool | None:
            return pool.count == 0 or None

        await eventually(at_zero, "the batch pool at zero", timeout=30)
        assert len(hook.calls) == 2

        # its workers' time is billed to the endpoint (whose own workers never ran), under
        # the endpoint's id alone
        async def billed() -> list[str] | None:
            ids = await dev.billed_ids()
            return ids if ep in ids else None

        billed_ids = await eventually(billed, "the pool's usage billed to its endpoint", 60)
        assert not [i for i in billed_ids if i.startswith("batch-")], billed_ids


async def test_cancel_mid_way_lets_the_running_request_finish(
    redis: Redis, redis_target: RedisSettings, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async with dev_mode(redis_target, http) as dev:
        await dev.keys(redis)
        await dev.endpoint("bj-cancel", workersMax=1, batchWorkersMax=1)
        ep = "bj-cancel"
        marks = str(tmp_path)
        slow = [{"input": {"sleep": 1.5, "marks": marks}} for _ in range(4)]
        bid = (await dev.ok("POST", f"{ep}/batch", slow))["id"]
        await dev.ok("POST", f"{ep}/batch/{bid}/finalize")

        async def started() -> list[Path] | None:
            return list(tmp_path.glob("*.start")) or None

        first = (await eventually(started, "a request running", timeout=60))[0]
        cancelled = await dev.ok("POST", f"{ep}/batch/{bid}/cancel")
        assert cancelled["status"] in ("FINALIZED", "CANCELLED")
        done = await dev.done(ep, bid)
        assert done["status"] == "CANCELLED"
        assert done["requestCompleted"] >= 1
        assert done["requestCompleted"] + done["requestFailed"] == 4
        rows = await dev.results(ep, bid)
        by_id = {r["id"]: r for r in rows}
        assert by_id[first.stem]["status"] == "COMPLETED"  # in flight: it finished
        assert (tmp_path / f"{first.stem}.end").exists()
        assert {r["status"] for r in rows} <= {"COMPLETED", "CANCELLED"}
        assert "CANCELLED" in {r["status"] for r in rows}
        status, refused = await dev.call("POST", f"{ep}/batch/{bid}/cancel")
        assert status == 400 and "CANCELLED" in refused["error"]

        # a DRAFT is cancelled at once
        draft = (await dev.ok("POST", f"{ep}/batch", [{"input": {}}, {"input": {}}]))["id"]
        gone = await dev.ok("POST", f"{ep}/batch/{draft}/cancel")
        assert (gone["status"], gone["requestFailed"], gone["requestTotal"]) == ("CANCELLED", 2, 2)
        assert gone["doneAt"] is not None
        assert [r["status"] for r in await dev.results(ep, draft)] == ["CANCELLED"] * 2


async def test_every_limit_and_bad_input_get_a_clear_4xx(
    redis: Redis, redis_target: RedisSettings, http: aiohttp.ClientSession
) -> None:
    async with dev_mode(redis_target, http, **LIMITS) as dev:
        await dev.keys(redis)
        await dev.endpoint("bj-limits", workersMax=1, batchWorkersMax=0)  # nothing runs
        ep = "bj-limits"
        one = {"input": {"v": 1}}

        # requests per batch (6): at create and across uploads
        status, got = await dev.call("POST", f"{ep}/batch", [one] * 7)
        assert status == 400 and "at most 6 requests" in got["error"]
        a = (await dev.ok("POST", f"{ep}/batch", [one] * 5))["id"]
        status, got = await dev.call("POST", f"{ep}/batch/{a}/requests", {"requests": [one] * 2})
        assert status == 400 and "at most 6 requests" in got["error"]
        await dev.ok("POST", f"{ep}/batch/{a}/requests", {"requests": [one]})

        # bytes per batch (4096)
        big = {"input": {"text": "x" * 3000}}
        status, got = await dev.call("POST", f"{ep}/batch", [big, big])
        assert status == 413 and "MiB" in got["error"]

        # active batches (3)
        b = (await dev.ok("POST", f"{ep}/batch", [one] * 3))["id"]
        c = (await dev.ok("POST", f"{ep}/batch", []))["id"]
        status, got = await dev.call("POST", f"{ep}/batch", [])
        assert status == 429 and "3 batches not yet done" in got["error"]

        # queued per endpoint (8): 6 finalized, 3 more would pass it
        await dev.ok("POST", f"{ep}/batch/{a}/finalize")
        status, got = await dev.call("POST", f"{ep}/batch/{b}/finalize")
        assert status == 429 and "more than 8 requests" in got["error"]
        assert (await dev.ok("POST", f"{ep}/batch/{c}/finalize"))["doneAt"] is not None

        # bodies and parameters
        for path, body, raw, why in [
            (f"{ep}/batch", {"input": {}}, b"", "JSON array"),
            (f"{ep}/batch", None, b"[{", "not valid JSON"),
            (f"{ep}/batch", [{"input": 5}], b"", "input"),
            (f"{ep}/batch", [{"input": {}, "webhook": "http://x.test/"}], b"", "no webhook"),
            (f"{ep}/batch/{b}/requests", [one], b"", '{"requests"'),
            (f"{ep}/batch/{b}/requests", {"requests": one}, b"", "JSON array"),
            (f"{ep}/batch?webhook=ftp://x", [], b"", "webhook"),
        ]:
            status, got = await dev.call("POST", path, body, raw=raw)
            assert status == 400 and why in got["error"], (path, got)
        status, got = await dev.call("PUT", f"{ep}/batch/{b}", {"name": 5})
        assert status == 400
        status, got = await dev.call("PUT", f"{ep}/batch/{b}", {"title": "x"})
        assert status == 400
        status, _ = await dev.call(
            "POST", f"{ep}/batch", raw=b"[" + b" " * (11 * 1024 * 1024) + b"]"
        )
        assert status == 413
        for query in ("limit=0", "limit=501", "offset=-1", "limit=x"):
            status, got = await dev.call("GET", f"{ep}/batch/{b}/requests?{query}")
            assert status == 400, query
        for path in (f"{ep}/batch/batch_nope", f"{ep}/batch/not-a-batch", "no-such-ep/batch"):
            status, _ = await dev.call("GET", path)
            assert status == 404, path
        status, _ = await dev.call("GET", f"{ep}/batch", key="lg_unknown")
        assert status == 401
        # the scopes: an admin key is not a job API key; a reader reads, never writes
        for method, path in (("GET", f"{ep}/batch"), ("POST", f"{ep}/batch/{b}/cancel")):
            assert (await dev.call(method, path, key=dev.admin))[0] == 401, path
        assert (await dev.call("GET", f"{ep}/batch/{b}/requests", key=dev.reader))[0] == 200
        for method, path, body in (
            ("POST", f"{ep}/batch", []),
            ("POST", f"{ep}/batch/{b}/requests", {"requests": []}),
            ("PUT", f"{ep}/batch/{b}", {"name": "x"}),
            ("DELETE", f"{ep}/batch/{b}/requests/nope", None),
            ("POST", f"{ep}/batch/{b}/cancel", None),
        ):
            assert (await dev.call(method, path, body, key=dev.reader))[0] == 401, path


async def test_a_restart_mid_batch_loses_nothing(
    redis: Redis, redis_target: RedisSettings, http: aiohttp.ClientSession
) -> None:
    ep = "bj-restart"
    async with dev_mode(redis_target, http) as dev:
        await dev.keys(redis)
        await dev.endpoint(ep, workersMax=1, batchWorkersMax=1)
        slow = [{"input": {"n": n, "sleep": 0.5}} for n in range(5)]
        bid = (await dev.ok("POST", f"{ep}/batch", slow))["id"]
        before = await dev.ok("PUT", f"{ep}/batch/{bid}", {"name": "kept"})
        await dev.ok("POST", f"{ep}/batch/{bid}/finalize")

        async def some_done() -> bool | None:
            got = await dev.ok("GET", f"{ep}/batch/{bid}")
            return got["requestCompleted"] >= 1 or None

        await eventually(some_done, "a request done", timeout=60)
        keys = (dev.jobs,)

    async with dev_mode(redis_target, http) as dev:  # gateway and workers start again
        dev.jobs = keys[0]
        await dev.plane.resume()  # as `lockgate dev` does at its start
        done = await dev.done(ep, bid)
        assert done["status"] == "FINALIZED"  # none failed: RunPod has no COMPLETED
        assert (done["requestCompleted"], done["requestTotal"]) == (5, 5)
        assert (done["name"], done["createdAt"]) == ("kept", before["createdAt"])
        rows = await dev.results(ep, bid)
        assert sorted(r["output"]["echo"]["n"] for r in rows) == list(range(5))


def test_a_batch_survives_a_restart_of_lockgate_dev(tmp_path: Path) -> None:
    """The real `lockgate dev` command: a batch finalized while no worker may run (its
    pool's most is the endpoint's `--workers-max 0`), the process stopped and started
    again with workers: the batch, its name and its requests are there, and it ends."""
    echo = str(REPO / "examples/echo/handler.py")

    def call(dev: DevProcess, method: str, path: str, body: Any = None) -> Any:
        resp = requests.request(
            method, dev.job_url(path), json=body, headers=dev.headers(), timeout=30
        )
        assert resp.status_code == 200, resp.text
        return resp.json()

    with DevProcess(echo, "--workers-max", "0", "--api-key", "k", data_dir=tmp_path) as dev:
        bid = call(dev, "POST", "batch", [{"input": {"n": n}} for n in range(5)])["id"]
        call(dev, "PUT", f"batch/{bid}", {"name": "kept"})
        assert call(dev, "POST", f"batch/{bid}/finalize")["status"] == "FINALIZED"
        created = call(dev, "GET", f"batch/{bid}")["createdAt"]
    with DevProcess(echo, "--workers-max", "1", "--api-key", "k", data_dir=tmp_path) as dev:
        done = wait_until(
            lambda: (got := call(dev, "GET", f"batch/{bid}"))["doneAt"] and got,
            "the batch done after the restart", timeout=60,
        )  # fmt: skip
        assert (done["status"], done["name"], done["createdAt"]) == ("FINALIZED", "kept", created)
        assert (done["requestCompleted"], done["requestTotal"]) == (5, 5)
        rows = call(dev, "GET", f"batch/{bid}/requests")["requests"]
        assert sorted(r["output"]["echo"]["n"] for r in rows) == list(range(5))


async def test_a_redis_failover_mid_batch_loses_nothing(
    redis_sentinels: SentinelProcs, http: aiohttp.ClientSession
) -> None:
    """A Sentinel set (a master, 2 replicas), each accepted change waiting for a replica:
    the master SIGKILLed while a batch runs; once a replica is promoted the batch goes on
    and ends with every request's result, none lost nor counted twice."""
    procs = redis_sentinels
    target = redis_settings(
        redis_sentinels=procs.sentinel_nodes, redis_sentinel_master=procs.master_name,
        redis_min_replicas_ack=1,
    )  # fmt: skip
    client = connect(target)
    ep = "bj-failover"
    try:
        await client.flushall()
        async with dev_mode(target, http) as dev:
            await dev.keys(client)
            await dev.endpoint(ep, workersMax=1, batchWorkersMax=1)
            slow = [{"input": {"n": n, "sleep": 0.3}} for n in range(6)]
            bid = (await dev.ok("POST", f"{ep}/batch", slow))["id"]
            await dev.ok("POST", f"{ep}/batch/{bid}/finalize")

            async def some_done() -> bool | None:
                got = await dev.ok("GET", f"{ep}/batch/{bid}")
                return got["requestCompleted"] >= 1 or None

            await eventually(some_done, "a request done", timeout=60)
            procs.master().kill()

            async def ended() -> dict[str, Any] | None:
                status, got = await dev.call("GET", f"{ep}/batch/{bid}")
                return got if status == 200 and got["doneAt"] else None  # 503: failing over

            done = await eventually(ended, "the batch done after the failover", timeout=120)
            assert (done["status"], done["requestCompleted"], done["requestTotal"]) == (
                "FINALIZED", 6, 6,
            )  # fmt: skip
            rows = await dev.results(ep, bid)
            assert sorted(r["output"]["echo"]["n"] for r in rows) == list(range(6))
    finally:
        await client.aclose()
        await asyncio.to_thread(procs.heal)
