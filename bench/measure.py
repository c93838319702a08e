"""What the bench reads besides HTTP replies: /health, CPU time, Redis memory and RSS."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bench import load
from bench.procs import ENDPOINT, Service, children, cpu_seconds, machine_cpu, rss_bytes
from bench.report import Row

NOISY = 0.1  # share of the CPUs other processes may use before a figure is suspect


def job_url(dev: Service, route: str) -> str:
    return f"{dev.base}/v2/{ENDPOINT}/{route}"


async def health(http: aiohttp.ClientSession, dev: Service) -> dict:
    return await load.get_json(http, job_url(dev, "health"))


async def wait_workers(http: aiohttp.ClientSession, dev: Service, count: int) -> None:
    """Wait until `count` workers have called in (so no start-up time is measured)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = (await health(http, dev))["workers"]
        if workers["idle"] + workers["running"] >= count:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{count} worker(s) did not call in within 60 s")


@dataclass
class CpuMeter:
    """CPU time used by named groups of processes, and by every other process, since made."""

    pids: dict[str, list[int]]
    start: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        total, busy = machine_cpu()
        ours = {name: sum(map(cpu_seconds, pids)) for name, pids in self.pids.items()}
        return {**ours, " total": total, " busy": busy}

    def per_op(self, group: str, ops: int) -> float:
        """Microseconds of CPU per operation used by `group` since the meter was made."""
        return (self._read()[group] - self.start[group]) / ops * 1e6

    def used(self) -> tuple[dict[str, float], float, float]:
        """CPU seconds used by each group since the meter was made; the machine's CPU
        seconds meanwhile (summed over its CPUs); and the share of them other processes used."""
        used = {k: v - self.start[k] for k, v in self._read().items()}
        total, busy = used.pop(" total"), used.pop(" busy")
        return used, total, max(0.0, busy - sum(used.values())) / max(1e-9, total)

    def row(self, figure: str, ops: int) -> Row:
        """A detail row: microseconds of CPU per operation, per group, and others' share."""
        used, _, others = self.used()
        groups = ", ".join(f"{k} {v / ops * 1e6:,.0f}" for k, v in used.items())
        text = f"{groups} (other processes used {others:.0%} of the CPUs meanwhile)"
        return Row(figure, text, detail=True, noisy=others > NOISY)


def meter(dev: Service) -> CpuMeter:
    """A CPU meter over the gateway, Redis, the workers and this load generator."""
    workers = [p for p in children(dev.process.pid) if p != dev.redis_pid]
    groups = {"gateway": [dev.process.pid], "Redis": [dev.redis_pid], "client": [os.getpid()]}
    return CpuMeter({**groups, **({"workers": workers} if workers else {})})


async def redis_memory(dev: Service) -> tuple[int, int]:
    """Redis `used_memory` (INFO memory) and the RSS of the redis-server process."""
    client = Redis(port=dev.redis_port, password=dev.redis_password)
    try:
        memory = await client.info("memory")
    finally:
        await client.aclose()
    return int(memory["used_memory"]), rss_bytes(dev.redis_pid)


def floor_meter(floor: Service) -> CpuMeter:
    """A CPU meter over the floor server and this load generator."""
    return CpuMeter({"floor": [floor.process.pid], "client": [os.getpid()]})


def audit(ids_dir: Path, submitted: list[str]) -> tuple[int, int]:
    """(lost, run twice) from the ids the workers recorded."""
    ran = Counter(line for f in ids_dir.glob("*.ids") for line in f.read_text().split())
    lost = len(set(submitted) - ran.keys())
    return lost, sum(n - 1 for n in ran.values() if n > 1)
