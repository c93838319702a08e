"""`make bench` rows for the gateway's own CPU (scenario `gateway` of bench/core.py).

The gateway's CPU per job end to end (32 clients submit with /run, the workers take and
finish) and per sequential /runsync, and the /runsync p50, on `lockgate dev`: every request
is served by aiohttp. The hand-written fast path that served the job and worker routes
until issue 30 was removed; its figures beside aiohttp's, measured in alternating rounds
before the removal, are in docs/operations.md ("Connection limits").
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load
from bench.measure import health, job_url, meter, wait_workers
from bench.procs import Service, lockgate_dev, log
from bench.report import Row

if TYPE_CHECKING:
    from bench.core import Config

BODY = b'{"input": {"x": 1}}'
ROUNDS = 2
FAST_PATH_NOTE = "aiohttp only (fast path removed: docs/operations.md)"
WORKERS = 2


async def _finished(http, dev: Service, total: int) -> None:
    while True:
        jobs = (await health(http, dev))["jobs"]
        if jobs["completed"] + jobs["failed"] >= total:
            return
        await asyncio.sleep(0.02)


async def _measure(cfg: Config, dev: Service) -> tuple[float, float, float]:
    """(gateway µs per job end to end, gateway µs per /runsync, /runsync p50 ms)."""
    jobs, syncs = cfg.n(6_000), cfg.n(1_000)
    async with load.session(cfg.clients) as http:
        await wait_workers(http, dev, WORKERS)
        await load.sequential(http, job_url(dev, "runsync"), BODY, cfg.n(200))
        cpu = meter(dev)
        latencies = await load.sequential(http, job_url(dev, "runsync"), BODY, syncs)
        per_sync = cpu.per_op("gateway", syncs)
        done = (await health(http, dev))["jobs"]["completed"]
        cpu = meter(dev)
        await load.burst(http, job_url(dev, "run"), BODY, jobs, cfg.clients)
        await asyncio.wait_for(_finished(http, dev, done + jobs), 120)
        per_job = cpu.per_op("gateway", jobs)
    return per_job, per_sync, load.percentile(latencies, 50) * 1000


async def gateway_cpu(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """`ROUNDS` rounds of `_measure`, each on a fresh `lockgate dev`; medians and rounds."""
    rounds: list[tuple[float, float, float]] = []
    for n in range(ROUNDS):
        with lockgate_dev(work, f"gateway-cpu-{n}", WORKERS, {}) as dev:
            started = time.perf_counter()
            rounds.append(await _measure(cfg, dev))
            log(f"gateway CPU round {n}: {rounds[-1]} in {time.perf_counter() - started:.0f} s")
    per_job, per_sync, p50 = zip(*rounds, strict=True)
    return [
        _median(f"gateway CPU per job end to end, {WORKERS} workers", per_job, "us"),
        _median("gateway CPU per sequential /runsync", per_sync, "us"),
        _median("/runsync p50 (same runs)", p50, "ms", digits=2),
    ]


def _median(figure: str, values: tuple[float, ...], unit: str, digits: int = 0) -> Row:
    rounds = ", ".join(f"{x:,.{digits}f}" for x in values)
    note = f"rounds: {rounds}; {FAST_PATH_NOTE}"
    return Row(figure, f"{statistics.median(values):,.{digits}f} {unit}", "", note)
