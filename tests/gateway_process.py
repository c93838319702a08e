"""A real `lockgate gateway` process for tests that measure or load the process itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from tests.conftest import REPO, eventually, register


@dataclass
class GatewayProcess:
    """A running gateway process: its URL, pid, and the headers of a client and a worker."""

    url: str
    pid: int
    client: dict[str, str]
    worker: dict[str, str]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def peak_rss(self) -> int:
        """The process's peak resident set (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/<pid>/status")


@asynccontextmanager
async def run_gateway(
    redis: Redis, redis_server: EmbeddedRedis, tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[GatewayProcess]:
    """`lockgate gateway` in a child process with `env` on top of ours, endpoint `echo`
    registered; its output goes to `tmp_path/gateway.log`."""
    client_key, worker_key = await register(redis, "echo")
    port = free_port()
    # Our PYTHONPATH first: a test can be run against another checkout's code.
    path = [os.environ.get("PYTHONPATH", ""), str(REPO / "operator"), str(REPO)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), **env}
    log = (tmp_path / "gateway.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "gateway", "--port", str(port),
         "--redis-url", redis_server.url, "--log-format", "text"],
        env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:

        async def up() -> bool:
            try:
                async with http.get(f"{url}/livez") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(up, "the gateway process to serve")
    try:
        yield GatewayProcess(
            url, proc.pid, {"authorization": client_key}, {"authorization": worker_key}
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
