"""`lockgate gateway --processes N`: N real gateway processes on one port under a parent,
one /metrics summed over them, SIGTERM drains them all; plus the decisions as tables."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate import cli
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.store import keys
from lockgate.supervisor import (
    AUTO,
    child_env,
    cpus_from_quota,
    parse_cpu_max,
    parse_processes,
)
from tests.conftest import REPO, eventually, register


@pytest.mark.parametrize(
    ("value", "expected"), [("1", 1), ("4", 4), ("0", AUTO), ("auto", AUTO), (" Auto ", AUTO)]
)
def test_processes_values(value: str, expected: int) -> None:
    assert parse_processes(value) == expected


@pytest.mark.parametrize("value", ["-1", "two", "1.5", ""])
def test_bad_processes_values_are_refused(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="'auto'"):
        parse_processes(value)


@pytest.mark.parametrize(
    ("cpu_max", "usable", "expected"),
    [
        ("max 100000", 2, 2),  # no limit: the CPUs the container may run on
        ("200000 100000", 8, 2),
        ("150000 100000", 8, 2),  # 1.5 CPUs: two processes can use all of it
        ("50000 100000", 8, 1),  # less than a CPU: still one
        ("400000 100000", 2, 2),  # a limit above the affinity: the affinity
        ("max", 1, 1),
    ],
)
def test_processes_per_cpu_limit(cpu_max: str, usable: int, expected: int) -> None:
    assert cpus_from_quota(*parse_cpu_max(cpu_max), usable=usable) == expected


@pytest.mark.parametrize(
    ("limit", "expected"), [("536870912", "268435456"), ("0", "0"), ("", ""), (None, None)]
)
def test_each_process_gets_its_share_of_the_memory_limit(limit, expected) -> None:
    environ = {"PATH": "/bin"} | ({} if limit is None else {"LOCKGATE_MEMORY_LIMIT_BYTES": limit})
    env = child_env(environ, 2, "/tmp/m")
    assert env.get("LOCKGATE_MEMORY_LIMIT_BYTES") == expected
    assert env["LOCKGATE_GATEWAY_PROCESSES"] == "1"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/tmp/m"
    assert env["PATH"] == "/bin"


@pytest.mark.parametrize(("flag", "env"), [(["--processes", "-2"], None), ([], "many")])
def test_a_bad_process_count_is_a_usage_error(
    flag: list[str], env: str | None, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    if env is not None:
        monkeypatch.setenv("LOCKGATE_GATEWAY_PROCESSES", env)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["gateway", *flag])
    assert exit_.value.code == 2
    assert "--processes: must be a whole number >= 0 or 'auto'" in capsys.readouterr().err


@dataclass
class Parent:
    """A `lockgate gateway --processes 2` parent, its port and the client's headers."""

    proc: subprocess.Popen
    port: int
    client: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(pid) for pid in path.read_text().split()]


@pytest.fixture
async def parent(
    redis: Redis, redis_server: EmbeddedRedis, tmp_path: Path
) -> AsyncIterator[Parent]:
    client_key, _ = await register(redis, "procs")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO)])}
    log = (tmp_path / "gateway.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "gateway", "--processes", "2", "--port", str(port),
         "--redis-url", redis_server.url, "--log-format", "text"],
        env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    p = Parent(proc, port, {"authorization": client_key})
    try:
        await eventually(lambda: _listening(p), "both gateway processes to listen", timeout=20)
        yield p
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=30)
        log.close()


async def _listening(p: Parent) -> bool:
    return len(p.children()) == 2 and all(_sockets(pid, p.port, state="0A") for pid in p.children())


def _sockets(pid: int, port: int, state: str) -> int:
    """How many IPv4 TCP sockets of `pid` have local `port` in `state` (0A: listening,
    01: established), from /proc/net/tcp and the process's open descriptors."""
    fds = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if m := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(m.group(1))
    rows = [line.split() for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]]
    return sum(
        1
        for row in rows
        if int(row[1].split(":")[1], 16) == port and row[3] == state and row[9] in inodes
    )


def _requests(metrics: str, route: str) -> float:
    pattern = rf'^lockgate_http_requests_total{{[^}}]*route="{re.escape(route)}"[^}}]*}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, metrics, re.MULTILINE))


async def test_two_processes_share_the_port_sum_their_metrics_and_stop_together(
    parent: Parent, redis: Redis, tmp_path: Path
) -> None:
    """One parent, one test: a gateway process start costs seconds on a loaded CI machine."""
    children = parent.children()
    # Each session is one connection; the kernel hashes each to one process's socket.
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(16)]
    try:
        for s in sessions:
            for _ in range(2):
                async with s.get(f"{parent.url}/readyz") as r:
                    assert r.status == 200
        served = {pid: _sockets(pid, parent.port, state="01") for pid in children}
        assert all(served.values()), served  # both processes hold client connections
        async with sessions[0].get(f"{parent.url}/metrics") as r:
            metrics = await r.text()
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    assert _requests(metrics, "/readyz") == 32  # whichever process answered the scrape

    async with aiohttp.ClientSession() as http:
        runsync = asyncio.ensure_future(
            http.post(
                f"{parent.url}/v2/procs/runsync?wait=20000",
                json={"input": {"n": 1}},
                headers=parent.client,
            )
        )

        async def queued() -> list[bytes]:
            return [k async for k in redis.scan_iter(match=keys.job("procs", "sync-*"))]

        (job_key,) = await eventually(queued, "the /runsync job in Redis")
        parent.proc.send_signal(signal.SIGTERM)
        async with await runsync as r:  # answered as its process drains, the job not final
            assert r.status == 200
            body = await r.json()
    assert parent.proc.wait(timeout=30) == 0
    assert keys.job("procs", body["id"]).encode() == job_key
    assert body["status"] == "IN_QUEUE"
    assert await redis.exists(job_key)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    log = (tmp_path / "gateway.log").read_text()
    assert log.count("started (pid") == 2 and log.count(" stopped") == 2, log


CRASH_ONCE = """
import os, signal, sys, time
once = os.environ["ONCE"]
try:
    os.mkdir(once)  # the first child to get here dies on its own, once the other is up
except FileExistsError:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    open(once + "/up", "w").close()
    time.sleep(30)
    sys.exit(4)
while not os.path.exists(once + "/up"):
    time.sleep(0.01)
sys.exit(3)
"""


def test_a_child_that_dies_stops_the_others_and_the_parent_fails_with_its_code(
    tmp_path: Path,
) -> None:
    script = (
        "import sys; from lockgate.supervisor import Supervisor; "
        "from lockgate.logs import setup_logging; setup_logging(); "
        f"s = Supervisor([sys.executable, '-c', {CRASH_ONCE!r}], 2, "
        f"{{'ONCE': {str(tmp_path / 'once')!r}}}); s.start(); sys.exit(s.wait())"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 3, done.stderr  # the failed child's code
    assert "exited unexpectedly with code 3" in done.stderr
    assert done.stderr.count(" stopped") == 1, done.stderr  # the other drained on SIGTERM
