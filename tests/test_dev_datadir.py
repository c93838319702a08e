"""Dev mode's data folder, with real `lockgate dev` processes: private (0700, files 0600),
its Redis behind a password, a folder of an earlier version upgraded, and one `lockgate
dev` per folder, the lock dying with its holder."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp
import psutil
import pytest
import redis

from lockgate.dev import datadir
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from tests.devproc import REPO, DevProcess
from tests.test_cli_daily import clean_env, lockgate, one_line_error

ECHO = str(REPO / "examples/echo/handler.py")


def modes(folder: Path) -> dict[str, int]:
    """Each path under `folder` (itself as '.'), outside `volumes/` and the tests' CLI
    config, and its permission bits."""
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if relative.parts[0] not in ("volumes", "config"):
            found[str(relative)] = stat.S_IMODE(path.lstat().st_mode)
    return found


def assert_private(folder: Path) -> None:
    found = modes(folder)
    wrong = {
        name: oct(mode)
        for name, mode in found.items()
        if mode != (0o700 if (folder / name).is_dir() else 0o600)
    }
    assert not wrong, found


def unauthenticated_ping(port: int) -> bytes:
    """What Redis answers a PING on a connection that gave no password."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(200)


def redis_port(dev: DevProcess) -> int:
    return int(dev.redis_url.rsplit(":", 1)[1].split("/")[0])


def test_the_data_folder_is_private_and_its_redis_needs_the_password(tmp_path) -> None:
    data = tmp_path / "data"
    with DevProcess(ECHO, data_dir=data) as dev:
        assert_private(data)
        names = set(modes(data))
        assert {"api-key", "webhook-secret", "redis-password", "redis.log", "dev.lock"} <= names
        assert any("appendonly" in name for name in names), names
        assert unauthenticated_ping(redis_port(dev)).startswith(b"-NOAUTH")
        assert redis.Redis.from_url(dev.redis_url).ping() is True
        password = (data / "redis-password").read_text().strip()
        assert len(password) >= 32 and not any(password in line for line in dev.lines)
        # `lockgate keys` without the password: one line saying where it is
        no_password = dev.redis_url.replace(f":{password}@", "")
        env = clean_env(tmp_path / "cfg")
        line = one_line_error(lockgate("keys", "list", "--redis-url", no_password, env=env))
        assert "refused the connection's password" in line and "redis-password" in line
        assert "dev" in lockgate("keys", "list", "--redis-url", dev.redis_url, env=env).stdout


def test_a_data_folder_of_an_earlier_version_starts_and_is_tightened(tmp_path) -> None:
    data = tmp_path / "old"
    old = EmbeddedRedis(data)  # no password, as dev mode ran it before
    old.start()
    try:
        redis.Redis.from_url(old.url).set("earlier-marker", "kept")
    finally:
        old.stop()
    (data / "api-key").write_text("lg_earlier\n")
    (data / "webhook-secret").write_text("whsec_earlier\n")
    for path in [data, *data.rglob("*")]:  # the modes of a default umask (022)
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert not (data / "redis-password").exists()
    with DevProcess(ECHO, data_dir=data) as dev:
        assert dev.key == "lg_earlier"
        assert_private(data)
        assert unauthenticated_ping(redis_port(dev)).startswith(b"-NOAUTH")
        assert redis.Redis.from_url(dev.redis_url).get("earlier-marker") == b"kept"


def aof_files(data: Path) -> dict[str, tuple[int, bytes]]:
    """Each append-only file of the folder: its inode and contents."""
    return {
        str(p.relative_to(data)): (p.stat().st_ino, p.read_bytes())
        for p in data.rglob("appendonly*")
        if p.is_file()
    }


def redis_child(dev: DevProcess) -> psutil.Process:
    kids = psutil.Process(dev.proc.pid).children()
    return next(k for k in kids if "redis-server" in " ".join(k.cmdline()))


async def queue_job(dev: DevProcess) -> str:
    async with (
        aiohttp.ClientSession(headers=dev.headers()) as http,
        http.post(dev.job_url("run"), json={"input": {"held": 1}}) as response,
    ):
        assert response.status == 200, await response.text()
        return (await response.json())["id"]


async def job_status(dev: DevProcess, job_id: str) -> str:
    async with (
        aiohttp.ClientSession(headers=dev.headers()) as http,
        http.get(dev.job_url(f"status/{job_id}")) as response,
    ):
        assert response.status == 200, await response.text()
        return (await response.json())["status"]


async def test_a_second_dev_in_the_same_folder_refuses_at_once_and_touches_nothing(
    tmp_path,
) -> None:
    data = tmp_path / "shared"
    first = DevProcess(ECHO, "--workers-max", "0", data_dir=data).start()
    try:
        job_id = await queue_job(first)  # no worker will take it (workers-max 0)
        config = first.config_home / "lockgate" / "config.json"
        config_before = config.read_text()
        aof_before = aof_files(data)
        assert aof_before

        second_port = free_port()
        second = subprocess.run(
            [sys.executable, "-m", "lockgate.cli", "dev", ECHO, "--workers-max", "0",
             "--port", str(second_port), "--data-dir", str(data)],
            env={**first.env, "LOCKGATE_LOG_LEVEL": "INFO"}, cwd=REPO,
            capture_output=True, text=True, timeout=30,  # "at once": imports, then the refusal
        )  # fmt: skip
        assert second.returncode != 0 and second.stdout == ""
        line = one_line_error(second)
        assert line == (
            f"lockgate dev: data folder {data} is in use by another lockgate dev "
            f"(pid {first.proc.pid}, port {first.port}): stop it, or give this one another "
            "folder with --data-dir"
        )

        assert first.proc.poll() is None
        assert await job_status(first, job_id) == "IN_QUEUE"
        assert config.read_text() == config_before
        aof_after = aof_files(data)  # the first's own writes may only have been appended
        assert aof_after.keys() == aof_before.keys()
        for name, (inode, content) in aof_before.items():
            assert aof_after[name][0] == inode and aof_after[name][1].startswith(content)
        with pytest.raises(OSError):  # nothing listened on the second's port
            socket.create_connection(("127.0.0.1", second_port), timeout=1).close()

        # SIGKILL: its Redis gets SIGTERM, flushes and exits, and the lock dies with both
        embedded = redis_child(first)
        first.proc.kill()
        first.proc.wait(10)
        embedded.wait(30)
    finally:
        if first.proc.poll() is None:
            first.stop()
    with DevProcess(ECHO, "--workers-max", "0", data_dir=data) as again:
        assert await job_status(again, job_id) == "IN_QUEUE"
        assert json.loads((data / "dev.lock").read_text()) == {
            "pid": again.proc.pid,
            "port": again.port,
        }


# The decisions, directly.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"pid": 12, "port": 8080}', datadir.Holder(12, 8080)),
        ('{"pid": 12}', datadir.Holder(12, None)),
        ("", datadir.Holder(None, None)),
        ("not json", datadir.Holder(None, None)),
        ('{"pid": "12", "port": [1]}', datadir.Holder(None, None)),
    ],
)
def test_the_lock_file_names_its_holder(text, expected) -> None:
    assert datadir.holder_of(text) == expected


def test_a_claimed_folder_is_refused_to_a_second_claim_until_the_first_closes(tmp_path) -> None:
    fd = datadir.claim(tmp_path / "d", 8080)
    try:
        with pytest.raises(datadir.DataDirInUse) as refused:
            datadir.claim(tmp_path / "d", 9090)
        assert f"(pid {os.getpid()}, port 8080)" in str(refused.value)
    finally:
        os.close(fd)
    os.close(datadir.claim(tmp_path / "d", 9090))
