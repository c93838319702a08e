"""Faults with real processes: a gateway SIGKILLed and Redis restarted under load.

No job that /run accepted (returned an id for) may be lost.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.workerenv import worker_env, worker_id_env
from tests.conftest import REPO, register

JOBS = 2000


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
        env = {
            **os.environ, "LOCKGATE_REDIS_URL": self.redis.url, "LOCKGATE_PORT": str(self.port),
            "LOCKGATE_TAKE_WAIT_S": "2", "LOCKGATE_SWEEP_INTERVAL_S": "0.2",
            "LOCKGATE_HEARTBEAT_TIMEOUT_S": "3", "LOCKGATE_UNLISTED_GRACE_S": "1",
            "LOCKGATE_POLL_FALLBACK_S": "0.5",
        }  # fmt: skip
        self.gateway = subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", "gateway", "--log-format", "text"], env=env
        )

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
        async with sem, session.get(f"{c.url}/v2/echo/status/{job_id}", headers=headers) as r:
            return r.status == 200 and (await r.json())["status"] == "COMPLETED"

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
