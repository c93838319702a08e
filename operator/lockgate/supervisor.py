"""`lockgate gateway --processes N`: N full gateways on one port, under a supervising parent.

This module imports nothing heavy (no aiohttp, redis, pydantic) and nothing of the gateway:
the parent stays small and starts its children at once. `apps.gateway` decides between one
gateway in-process and this parent of several.

Each child is an ordinary `lockgate gateway` process (its own event loop, Redis client and
background loops) bound with SO_REUSEPORT, so the kernel spreads connections over them.
The parent serves nothing: it starts the children, forwards SIGTERM/SIGINT to them, waits
while each drains as a single gateway does, and exits 0 when all stopped cleanly. A child
that dies on its own stops the others and the parent fails: the container restarts as a
whole (Kubernetes' backoff), rather than the parent hiding a crash loop behind restarts;
the exit code is that child's (2 for bad settings, as a single gateway exits), else 1.

Counters and histograms of every child are summed at each scrape through prometheus_client's
multiprocess mode: the parent creates a private PROMETHEUS_MULTIPROC_DIR, hands it to the
children and removes it when they are gone (see `gateway.metrics`). Each child sizes its body
budget from a 1/N share of the container's memory limit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("lockgate.supervisor")

AUTO = 0  # --processes 0 or auto: one per CPU the container may use
ENV = "LOCKGATE_GATEWAY_PROCESSES"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
MEMORY_LIMIT = "LOCKGATE_MEMORY_LIMIT_BYTES"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
CGROUP_V2_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
CGROUP_V1_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def parse_processes(value: str) -> int:
    """An argparse type: a count >= 1, or `0`/`auto` (AUTO); anything else is refused."""
    text = value.strip().lower()
    if text == "auto":
        return AUTO
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 or 'auto', not {value!r}")
    return n


def cpus_from_quota(quota_us: int | None, period_us: int, usable: int) -> int:
    """Processes for a CFS quota: the quota in CPUs rounded up (1.5 CPUs: 2 processes, which
    together can use all of it; one process cannot use more than one), never more than the
    `usable` CPUs (affinity), never less than 1. No quota: `usable`."""
    if quota_us is None or quota_us <= 0 or period_us <= 0:
        return max(1, usable)
    return max(1, min(usable, math.ceil(quota_us / period_us)))


def parse_cpu_max(text: str) -> tuple[int | None, int]:
    """cgroup v2 `cpu.max` ("max 100000" or "150000 100000") as (quota or None, period)."""
    quota, _, period = text.strip().partition(" ")
    return (None if quota == "max" else int(quota)), int(period or 100000)


def read_cpu_quota() -> tuple[int | None, int]:
    """This container's CPU limit from cgroup v2, else v1; (None, period) without one."""
    try:
        return parse_cpu_max(CGROUP_V2_CPU_MAX.read_text())
    except (OSError, ValueError):
        pass
    try:
        quota = int(CGROUP_V1_QUOTA.read_text())
        return (quota if quota > 0 else None), int(CGROUP_V1_PERIOD.read_text())
    except (OSError, ValueError):
        return None, 100000


def auto_processes() -> int:
    """One process per CPU the container may use: its CPU limit, else its CPU affinity
    (never os.cpu_count(), which counts the node's CPUs whatever the container gets)."""
    return cpus_from_quota(*read_cpu_quota(), usable=len(os.sched_getaffinity(0)))


def resolve(n: int) -> int:
    """The number of gateway processes to run for the `--processes` value `n`."""
    return auto_processes() if n == AUTO else n


def child_command(args: argparse.Namespace) -> list[str]:
    """The command line of one child: this gateway's flags with `--processes 1`."""
    cmd = [sys.executable, "-m", "lockgate.cli", "gateway", "--processes", "1"]
    flags = {"--host": args.host, "--port": args.port, "--redis-url": args.redis_url}
    for flag, value in flags.items():
        if value is not None:
            cmd += [flag, str(value)]
    return [*cmd, "--log-format", args.log_format]


def die_with_parent() -> None:
    """In a child before it runs: SIGTERM it when the parent dies, even of SIGKILL, so that
    no orphan keeps serving the port (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def child_env(environ: Mapping[str, str], n: int, metrics_dir: str) -> dict[str, str]:
    """The environment of each of `n` children: one process each, the shared metrics
    directory, and a 1/n share of the container's memory limit, from which each sizes its
    own body budget (an explicit LOCKGATE_BODY_BUDGET_BYTES stays per process)."""
    env = {**environ, ENV: "1", MULTIPROC_DIR: metrics_dir}
    limit = environ.get(MEMORY_LIMIT, "").strip()
    if limit.isdigit() and int(limit) > 0:
        env[MEMORY_LIMIT] = str(int(limit) // n)
    return env


class Supervisor:
    """Runs `n` children of `command` and stops them together."""

    def __init__(self, command: list[str], n: int, env: dict[str, str]) -> None:
        self.command, self.n, self.env = command, n, env
        self.children: dict[int, subprocess.Popen] = {}
        self.stopping = False
        self.failed = 0  # the exit code of the first child that died on its own

    def stop(self, signum: int = signal.SIGTERM, *_: object) -> None:
        """Forward a stop to every live child (each drains as a single gateway does)."""
        if not self.stopping:
            log.info("gateway processes stopping (signal %s)", signal.Signals(signum).name)
        self.stopping = True
        for pid, child in list(self.children.items()):
            if child.returncode is None:  # os.kill, not Popen: only wait() reaps children
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)

    def start(self) -> None:
        for i in range(self.n):
            if self.stopping:
                break
            child = subprocess.Popen(self.command, env=self.env, preexec_fn=die_with_parent)
            self.children[child.pid] = child
            log.info("gateway process %d/%d started (pid %d)", i + 1, self.n, child.pid)
        if self.stopping:  # a signal during the start: reach the children started since
            self.stop()

    def wait(self) -> int:
        """Reap children until none is left; 0 when all ended cleanly after a stop, else the
        code of the first that died on its own (2: bad settings, as with one process)."""
        while any(c.returncode is None for c in self.children.values()):
            pid, status = os.wait()  # resumed after a signal handler runs (PEP 475)
            child = self.children.get(pid)
            if child is None:
                continue
            child.returncode = code = os.waitstatus_to_exitcode(status)
            if self.stopping and code == 0:
                log.info("gateway process pid %d stopped", pid)
                continue
            log.error("gateway process pid %d exited unexpectedly with code %d", pid, code)
            self.failed = self.failed or (code if code > 0 else 1)
            self.stop()
        return self.failed


def supervise(args: argparse.Namespace, n: int) -> int:
    """Run `n` gateway processes until SIGTERM/SIGINT; the exit code of the whole."""
    metrics_dir = tempfile.mkdtemp(prefix="lockgate-metrics-")
    sup = Supervisor(child_command(args), n, child_env(os.environ, n, metrics_dir))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, sup.stop)
    try:
        sup.start()
        return sup.wait()
    finally:
        sup.stop()
        for child in sup.children.values():
            child.wait()
        shutil.rmtree(metrics_dir, ignore_errors=True)
