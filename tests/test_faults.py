"""Faults with real processes: a gateway SIGKILLed and Redis restarted under load, and a
gateway SIGKILLed while a webhook delivery waits for its retry or is in flight.

No job that /run accepted (returned an id for) may be lost; no webhook either.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.store import keys, now_ms
from lockgate.worker import verify_webhook
from lockgate.workerenv import worker_env, worker_id_env
from tests.conftest import REPO, register
from tests.test_lifecycle import SECRET, Receiver, _true, eventually

JOBS = 2000


def gateway_process(redis_url: str, port: int, **env: str) -> subprocess.Popen:
    """A `lockgate gateway` process; `env` adds LOCKGATE_* settings (names without prefix)."""
    settings = {"REDIS_URL": redis_url, "PORT": str(port), **env}
    return subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "gateway", "--log-format", "text"],
        env={**os.environ, **{f"LOCKGATE_{k}": v for k, v in settings.items()}},
    )


class Cluster:
    """Redis, one `lockgate gateway` process and two workers, each replaceable."""

    def __init__(self, data_dir: Path) -> None:
        self.redis = EmbeddedRedis(data_dir / "redis")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.gateway: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.client_key = self.worker_key = ""

    def start_gateway(self) -> None:
        self.gateway = gateway_process(
            self.redis.url, self.port, TAKE_WAIT_S="2", SWEEP_INTERVAL_S="0.2",
            HEARTBEAT_TIMEOUT_S="3", UNLISTED_GRACE_S="1", POLL_FALLBACK_S="0.5",
        )  # fmt: skip

    def start_workers(self, n: int = 2) -> None:
        base = worker_env(self.url, "echo", self.worker_key)
        for i in range(n):
            env = {**os.environ, **base, **worker_id_env(f"w{i}"),
                   "LOCKGATE_PING_INTERVAL_MS": "300", "LOCKGATE_LOG_LEVEL": "WARNING"}  # fmt: skip
            self.workers.append(
                subprocess.Popen([sys.executable, str(REPO / "examples/echo/handler.py")], env=env)
            )

    def stop(self) -> None:
        for p in [*self.workers, self.gateway]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        self.redis.stop()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    c.redis.start()
    client = Redis.from_url(c.redis.url)
    c.client_key, c.worker_key = await register(client, "echo")
    await client.aclose()
    c.start_gateway()
    c.start_workers()
    try:
        yield c
    finally:
        c.stop()


async def submit_all(session: aiohttp.ClientSession, c: Cluster, n: int, ids: list[str]) -> None:
    """Submit n jobs with 16 clients; a refused or failed request is sent again later.
    Appends the ids /run returned to `ids`."""
    todo = iter(range(n))

    async def client() -> None:
        for i in todo:
            while True:
                try:
                    async with session.post(
                        f"{c.url}/v2/echo/run", json={"input": {"n": i}},
                        headers={"authorization": c.client_key},
                    ) as r:  # fmt: skip
                        if r.status == 200:
                            ids.append((await r.json())["id"])
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)

    await asyncio.gather(*(client() for _ in range(16)))


async def under_load(session, c: Cluster) -> tuple[asyncio.Task, list[str]]:
    """Start submitting JOBS jobs; return once a quarter of them were accepted."""
    ids: list[str] = []
    load = asyncio.create_task(submit_all(session, c, JOBS, ids))
    while len(ids) < JOBS // 4:
        await asyncio.sleep(0.005)
    assert not load.done(), "the fault must land while jobs are being submitted"
    return load, ids


async def all_completed(session: aiohttp.ClientSession, c: Cluster, ids: list[str]) -> bool:
    headers = {"authorization": c.client_key}
    sem = asyncio.Semaphore(32)

    async def done(job_id: str) -> bool:
        async with sem:
            while True:  # 2,000 reads can outrun the /status limit: wait like a client would
                async with session.get(f"{c.url}/v2/echo/status/{job_id}", headers=headers) as r:
                    if r.status != 429:
                        return r.status == 200 and (await r.json())["status"] == "COMPLETED"
                    retry_after = float(r.headers["retry-after"])
                await asyncio.sleep(retry_after)

    return all(await asyncio.gather(*(done(i) for i in ids)))


async def wait_all_completed(session, c: Cluster, ids: list[str], timeout_s: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        async with session.get(
            f"{c.url}/v2/echo/health", headers={"authorization": c.client_key}
        ) as r:
            health = await r.json() if r.status == 200 else None
        if health and health["jobs"]["completed"] >= len(ids):
            break
        await asyncio.sleep(0.5)
    assert await all_completed(session, c, ids), f"health: {health}"


async def test_a_gateway_killed_under_load_loses_no_accepted_job(cluster: Cluster):
    async with aiohttp.ClientSession() as session:
        load, ids = await under_load(session, cluster)
        cluster.gateway.kill()
        cluster.gateway.wait()
        await asyncio.sleep(1.0)
        cluster.start_gateway()
        await load
        assert len(ids) == len(set(ids)) == JOBS
        await wait_all_completed(session, cluster, ids)


async def test_a_redis_restarted_under_load_loses_no_accepted_job(cluster: Cluster):
    async with aiohttp.ClientSession() as session:
        load, ids = await under_load(session, cluster)
        await asyncio.to_thread(cluster.redis.stop)
        accepted_before_restart = len(ids)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.redis.start)
        await load
        assert accepted_before_restart < JOBS
        assert len(ids) == len(set(ids)) == JOBS
        await wait_all_completed(session, cluster, ids)


RETRY_S = 2.0  # seconds between webhook attempts, for the test below


async def gateway_up(session: aiohttp.ClientSession, base: str, key: str) -> None:
    async def answers() -> bool:
        try:
            async with session.get(f"{base}/health", headers={"authorization": key}) as r:
                return r.status == 200
        except aiohttp.ClientError:
            return False

    await eventually(answers, timeout_s=20)


async def retry_waits_in_the_outbox(redis: Redis, job_id: str) -> bool:
    """The first attempt failed, and the second is due within RETRY_S (not leased)."""
    attempts = await redis.hget(keys.prefix("echo") + "wha", job_id)
    due_ms = await redis.zscore(keys.prefix("echo") + "wh", job_id)
    return attempts == b"1" and due_ms is not None and due_ms <= now_ms() + RETRY_S * 1000


async def finish_a_job_with_a_webhook(
    http: aiohttp.ClientSession, base: str, client_key: str, worker_key: str, webhook: str
) -> str:
    """Submit a job with `webhook`, take it as worker w1 and complete it; its id."""
    client, worker = {"authorization": client_key}, {"authorization": worker_key}
    async with http.post(
        f"{base}/run", json={"input": {}, "webhook": webhook}, headers=client
    ) as r:
        job_id = (await r.json())["id"]
    async with http.get(f"{base}/job-take/w1", headers=worker) as r:
        assert (await r.json())["id"] == job_id
    async with http.post(
        f"{base}/job-done/w1/{job_id}", json={"output": {"n": 7}}, headers=worker
    ) as r:
        assert (await r.json())["accepted"] is True
    return job_id


def assert_the_completed_job(sent: bytes, job_id: str) -> None:
    """`sent` is the /status body of the job finished by `finish_a_job_with_a_webhook`."""
    assert orjson.loads(sent) | {"delayTime": 0, "executionTime": 0} == {
        "id": job_id, "status": "COMPLETED", "delayTime": 0, "executionTime": 0,
        "output": {"n": 7},
    }  # fmt: skip


async def outbox_is_empty(redis: Redis, job_id: str) -> bool:
    """No delivery of the job is due, leased or counted."""
    prefix = keys.prefix("echo")
    due = await redis.zscore(prefix + "wh", job_id)
    return due is None and await redis.hget(prefix + "wha", job_id) is None


@pytest.mark.parametrize("first_attempt", ["refused", "answered 500"])
async def test_a_webhook_waiting_for_its_retry_is_delivered_once_by_a_restarted_gateway(
    redis: Redis, redis_server: EmbeddedRedis, first_attempt: str
):
    client_key, worker_key = await register(redis, "echo")
    settings = dict(
        WEBHOOK_SECRET=SECRET, WEBHOOK_RETRY_INTERVAL_S=str(RETRY_S),
        WEBHOOK_ALLOW_PRIVATE="true", SWEEP_INTERVAL_S="0.2",
    )  # fmt: skip
    port, hook_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}/v2/echo"
    receiver = Receiver(failures=1 if first_attempt == "answered 500" else 0)
    if first_attempt == "answered 500":
        await receiver.start(hook_port)
    gateway = gateway_process(redis_server.url, port, **settings)
    try:
        async with aiohttp.ClientSession() as http:
            await gateway_up(http, base, client_key)
            webhook = f"http://127.0.0.1:{hook_port}/hook"
            job_id = await finish_a_job_with_a_webhook(http, base, client_key, worker_key, webhook)
            await eventually(lambda: retry_waits_in_the_outbox(redis, job_id))
            gateway.kill()
            gateway.wait()
            killed_at = time.monotonic()
            if first_attempt == "refused":
                await receiver.start(hook_port)
            gateway = gateway_process(redis_server.url, port, **settings)
            expected = 2 if first_attempt == "answered 500" else 1
            await eventually(lambda: _true(len(receiver.calls) >= expected), timeout_s=20)
            await asyncio.sleep(RETRY_S + 1)  # time for a duplicate to show up, if any
            assert len(receiver.calls) == expected
            delivered_at, headers, sent = receiver.calls[-1]
            assert delivered_at > killed_at
            verify_webhook(headers, sent, SECRET)
            assert_the_completed_job(sent, job_id)
            assert await outbox_is_empty(redis, job_id)
    finally:
        gateway.kill()
        gateway.wait()
        if hasattr(receiver, "runner"):
            await receiver.runner.cleanup()


async def test_a_webhook_call_cut_by_a_killed_gateway_is_made_again_once_its_lease_ends(
    redis: Redis, redis_server: EmbeddedRedis
):
    client_key, worker_key = await register(redis, "echo")
    timeout_s, margin_s = 4.0, 1.0  # the claimed call's lease: 5 s (default 10 + 20)
    settings = dict(
        WEBHOOK_SECRET=SECRET, WEBHOOK_TIMEOUT_S=str(timeout_s),
        WEBHOOK_LEASE_MARGIN_S=str(margin_s), WEBHOOK_ALLOW_PRIVATE="true",
        SWEEP_INTERVAL_S="0.2",
    )  # fmt: skip
    port = free_port()
    base = f"http://127.0.0.1:{port}/v2/echo"
    receiver = Receiver(hangs=1)  # takes the first call and never answers it
    webhook = await receiver.start()
    gateway = gateway_process(redis_server.url, port, **settings)
    try:
        async with aiohttp.ClientSession() as http:
            await gateway_up(http, base, client_key)
            job_id = await finish_a_job_with_a_webhook(http, base, client_key, worker_key, webhook)
            await eventually(lambda: _true(len(receiver.calls) == 1), timeout_s=10)
            gateway.kill()  # while the call waits for its answer, well before its timeout
            gateway.wait()
            gateway = gateway_process(redis_server.url, port, **settings)
            lease_s = timeout_s + margin_s
            await eventually(lambda: _true(len(receiver.calls) >= 2), timeout_s=lease_s + 10)
            await asyncio.sleep(1.0)  # a duplicate already on its way lands; the empty outbox
            assert len(receiver.calls) == 2  # (checked below) rules out any later one
            (cut_at, cut_headers, cut), (delivered_at, headers, sent) = receiver.calls
            assert delivered_at - cut_at >= lease_s - 0.5  # not while the lease held
            for call_headers, body in ((cut_headers, cut), (headers, sent)):
                verify_webhook(call_headers, body, SECRET)
                assert_the_completed_job(body, job_id)
            assert headers["webhook-id"] == cut_headers["webhook-id"]  # one message, twice
            assert await outbox_is_empty(redis, job_id)
    finally:
        gateway.kill()
        gateway.wait()
        receiver.released.set()
        await receiver.runner.cleanup()
