"""A pytest plugin for the suite's own upkeep (issue 31): the time each test module took, and
no process left behind.

- At the end of the run, the time of every module (setup, call and teardown of its tests)
  is printed, slowest first, with the total (and each pytest-xdist worker's share): a slow
  addition shows at once.
- Every process the run starts inherits `LOCKGATE_TEST_RUN` (a fresh id per run). At the
  end, a `lockgate`, `redis-server`, `redis-sentinel`, `kubelet`, `containerd`,
  `kube-apiserver` or `etcd` process that still carries this run's id (in
  /proc/<pid>/environ) gets 30 s to go; one still there is a leak: it is named, and the run
  fails. A process started with an environment of its own (not a copy of the test's) is
  not seen; nor is one on a system without /proc.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

RUN_VAR = "LOCKGATE_TEST_RUN"
WATCHED = (
    "lockgate", "redis-server", "redis-sentinel", "kubelet", "containerd", "kube-apiserver",
    "etcd",
)  # fmt: skip
GRACE_S = 30.0

_durations: dict[str, float] = defaultdict(float)
_per_worker: dict[str, float] = defaultdict(float)  # pytest-xdist worker id -> seconds
_run_id = ""


def pytest_configure(config: pytest.Config) -> None:
    global _run_id
    if os.environ.get("PYTEST_XDIST_WORKER"):  # pragma: no cover - not used here
        return
    _run_id = os.environ.setdefault(RUN_VAR, uuid.uuid4().hex)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid.split("::", 1)[0]] += report.duration
    _per_worker[getattr(report, "worker_id", "main")] += report.duration


def leaked(run_id: str, me: int | None = None) -> dict[int, str]:
    """Watched processes other than `me` whose environment carries `run_id`: pid -> command."""
    me = os.getpid() if me is None else me
    found: dict[int, str] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    marker = f"{RUN_VAR}={run_id}".encode()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            if not any(name in cmdline for name in WATCHED):
                continue
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie holds nothing but its pid
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        found[int(entry.name)] = cmdline[:200]
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _run_id:
        return
    deadline = time.monotonic() + GRACE_S
    left = leaked(_run_id)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = leaked(_run_id)
    session.config.stash[_LEFT] = left
    if left and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LEFT = pytest.StashKey[dict[int, str]]()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _durations:
        terminalreporter.section("time per test module")
        total = sum(_durations.values())
        for module, seconds in sorted(_durations.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
        terminalreporter.write_line(f"{total:8.1f} s  in all ({len(_durations)} modules)")
        if len(_per_worker) > 1:
            for worker, seconds in sorted(_per_worker.items()):
                terminalreporter.write_line(f"{seconds:8.1f} s  on worker {worker}")
    left = config.stash.get(_LEFT, {})
    if left:
        terminalreporter.section("processes left behind by this run", red=True)
        for pid, cmdline in sorted(left.items()):
            terminalreporter.write_line(f"pid {pid}: {cmdline}")
        terminalreporter.write_line(f"{len(left)} process(es) still running {GRACE_S:.0f} s "
                                    "after the last test: the run fails")  # fmt: skip
