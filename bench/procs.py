"""Start and stop the processes under test: `lockgate dev` and the floor echo server."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HANDLER = Path(__file__).with_name("noop_handler.py")
REPO = Path(__file__).resolve().parent.parent
API_KEY = "bench-key"
ENDPOINT = "bench"
# The bench measures speed, not refusals: every rate is raised out of reach, while the
# limit check itself (a Redis round trip per request) still runs as in production.
UNREACHED_RATES = (
    '{"runsync": {"rate": 1000000000}, "run": {"rate": 1000000000}, '
    '"status": {"rate": 1000000000}, "stream": {"rate": 1000000000}, '
    '"cancel": {"rate": 1000000000}, "retry": {"rate": 1000000000}, '
    '"purge-queue": {"rate": 1000000000}, "health": {"rate": 1000000000}, '
    '"openai": {"rate": 1000000000}, "lb": {"rate": 1000000000}}'
)
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"bench | {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _stat(pid: int | str) -> list[str]:
    """/proc/<pid>/stat after the command name: [state, ppid, ...]; [] once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (0 once it is gone)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def children(pid: int) -> list[int]:
    """The child processes of `pid` (Redis and the workers, for `lockgate dev`)."""
    procs = (p.name for p in Path("/proc").iterdir() if p.name.isdigit())
    return [int(p) for p in procs if (fields := _stat(p)) and fields[1] == str(pid)]


def machine_cpu() -> tuple[float, float]:
    """CPU seconds of the whole machine so far, summed over its CPUs: (total, busy)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    total, idle = sum(values), values[3] + values[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return total / tick, (total - idle) / tick


def machine_busy(seconds: float = 0.5) -> float:
    """The share of all CPUs busy over `seconds` (others' load, when the bench is idle)."""
    (total0, busy0), _, (total1, busy1) = machine_cpu(), time.sleep(seconds), machine_cpu()
    return (busy1 - busy0) / max(1e-9, total1 - total0)


@dataclass
class Service:
    """A started process: its pid, where it listens, and its output file."""

    process: subprocess.Popen
    port: int
    log_path: Path
    redis_port: int = 0
    redis_password: str = ""  # the embedded Redis's (`<data dir>/redis-password`)
    redis_pid: int = 0  # the embedded redis-server; killed if `lockgate dev` has to be killed

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def lockgate_command() -> list[str]:
    """The `lockgate` console script of this interpreter's environment."""
    beside = Path(sys.executable).with_name("lockgate")
    found = str(beside) if beside.exists() else shutil.which("lockgate")
    if not found:
        raise RuntimeError("no `lockgate` command; pip install -e '.[server]'")
    return [found]


def wait_for(service: Service, pattern: str) -> re.Match[str]:
    """Wait until the service's output matches `pattern`; fail if it exits first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if found := re.search(pattern, service.log_path.read_text(errors="replace")):
            return found
        if service.process.poll() is not None:
            break
        time.sleep(0.05)
    tail = service.log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"{service.log_path.name}: no {pattern!r} within time:\n{tail}")


def stop(process: subprocess.Popen, name: str) -> None:
    """SIGINT, then SIGKILL of its process group if it outlives STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"{name} (pid {process.pid}) ignored SIGINT; killing its process group")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def spawn(command: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    with log_path.open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip


@contextlib.contextmanager
def floor_server(workdir: Path) -> Iterator[Service]:
    """The bare aiohttp echo server, for as long as the block runs."""
    port = free_port()
    command = [sys.executable, "-m", "bench.floor", str(port)]
    log_path = workdir / "floor.log"
    service = Service(spawn(command, log_path, dict(os.environ)), port, log_path)
    try:
        wait_for(service, r"floor ready")
        log(f"floor echo server pid {service.process.pid} on port {port}")
        yield service
    finally:
        stop(service.process, "floor server")


@contextlib.contextmanager
def lockgate_dev(
    workdir: Path, name: str, workers: int, env: dict[str, str], handler: Path = HANDLER
) -> Iterator[Service]:
    """`lockgate dev` with `handler` (the no-op one by default) and exactly `workers` workers,
    in its own data dir."""
    port, data_dir, log_path = free_port(), workdir / f"{name}-data", workdir / f"{name}.log"
    command = [
        *lockgate_command(), "dev", str(handler), "--port", str(port), "--data-dir", str(data_dir),
        "--api-key", API_KEY, "--endpoint-id", ENDPOINT, "--workers-min", str(workers),
        "--workers-max", str(workers), "--idle-timeout", "60",
    ]  # fmt: skip
    env = {**os.environ, "LOCKGATE_RATE_LIMITS": UNREACHED_RATES, **env}
    service = Service(spawn(command, log_path, env), port, log_path)
    try:
        service.redis_port = int(wait_for(service, r"redis ready on 127\.0\.0\.1:(\d+)")[1])
        service.redis_password = (data_dir / "redis-password").read_text().strip()
        wait_for(service, r"endpoint '\S+' ready")
        service.redis_pid = next(p for p in children(service.process.pid) if _is_redis(p))
        log(f"lockgate dev '{name}' pid {service.process.pid} on port {port}, {workers} worker(s)")
        yield service
    finally:
        stop(service.process, f"lockgate dev '{name}'")
        _kill_orphan(service.redis_pid)


def _is_redis(pid: int) -> bool:
    try:
        return b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _kill_orphan(pid: int) -> None:
    """Kill the embedded redis-server if it outlived `lockgate dev` (its own session)."""
    if pid and _is_redis(pid):
        log(f"redis-server pid {pid} outlived lockgate dev; killing it")
        os.kill(pid, signal.SIGKILL)
