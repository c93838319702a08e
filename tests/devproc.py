"""`lockgate dev` as a user starts it: a child process, read line by line, stopped with Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from lockgate.dev.redis_server import free_port

REPO = Path(__file__).resolve().parent.parent


class DevProcess:
    """One `lockgate dev` run; `url`, `key` and `endpoint` are read from what it prints."""

    def __init__(self, *args: str, data_dir: Path, port: int | None = None, env=None) -> None:
        self.port = port or free_port()
        self.args = [*args, "--port", str(self.port), "--data-dir", str(data_dir)]
        self.data_dir = data_dir
        # the CLI config dev mode writes goes to the test's folder, never the user's ~/.config
        self.config_home = data_dir / "config"
        self.env = {
            **os.environ,
            "LOCKGATE_LOG_LEVEL": "INFO",
            "XDG_CONFIG_HOME": str(self.config_home),
            **(env or {}),
        }
        self.lines: list[str] = []
        self.key = self.endpoint = ""
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30) -> DevProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", "dev", *self.args], env=self.env, cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        line = self.wait_for(r"lockgate dev \| try: curl", timeout_s)
        self.key = re.search(r"authorization: (\S+?)'", line).group(1)
        # a queue endpoint's line runs a job, a load-balancing one's pings through /lb/
        self.endpoint = re.search(r"/(?:v2|lb)/([a-z0-9-]+)/(?:runsync|ping)", line).group(1)
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout_s: float = 30) -> str:
        """The first output line matching `pattern`, waiting for it to appear."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if self.proc.poll() is not None and not any(re.search(pattern, x) for x in self.lines):
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines))

    @property
    def redis_url(self) -> str:
        """The URL of the embedded Redis, with the password dev mode keeps in its data folder:
        the port as it prints it ('redis ready on …'), the password from its file."""
        port = re.search(r"redis ready on 127\.0\.0\.1:(\d+)", self.wait_for("redis ready"))
        password = (self.data_dir / "redis-password").read_text().strip()
        return f"redis://:{password}@127.0.0.1:{port.group(1)}/0"

    def headers(self) -> dict[str, str]:
        return {"authorization": self.key}

    def job_url(self, path: str) -> str:
        return f"{self.url}/v2/{self.endpoint}/{path}"

    def workers(self) -> list[psutil.Process]:
        """The live worker processes (children of dev that are not redis-server); a worker
        that exited but is not reaped yet (a zombie) is not counted."""
        workers = []
        for kid in psutil.Process(self.proc.pid).children():
            try:
                if "redis-server" not in " ".join(kid.cmdline()):
                    workers.append(kid)
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue
        return workers

    def stop(self, timeout_s: float = 30) -> int:
        """Ctrl-C, as a person would; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                child.kill()
            self.proc.kill()
            raise

    def __enter__(self) -> DevProcess:
        """Start it, unless it was started already (`with await to_thread(dev.start):` used to
        start a second one and leave the first running)."""
        return self if self.proc else self.start()

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.stop()
