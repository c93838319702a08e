"""`make bench` rows for the gateway's fast path (scenario `fastpath` of bench/core.py).

The gateway's CPU per job end to end (32 clients submit with /run, the workers take and
finish) and per sequential /runsync, and the /runsync p50, on `lockgate dev` with
`LOCKGATE_FAST_PATH=false` (every request through aiohttp) and with the fast path on, in
alternating rounds: the machine's speed drifts between minutes, so only a pair measured
side by side compares.
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


def _pair(figure: str, off: tuple, on: tuple, unit: str, digits: int = 0) -> Row:
    """`off -> on` medians, the change, and each round's figures."""

    def fmt(x: float) -> str:
        return f"{x:,.{digits}f}"

    a, b = statistics.median(off), statistics.median(on)
    rounds = "; ".join(f"{fmt(x)} -> {fmt(y)}" for x, y in zip(off, on, strict=True))
    return Row(figure, f"{fmt(a)} -> {fmt(b)} {unit}", "", f"{b / a - 1:+.0%} (rounds: {rounds})")


async def fast_path(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """Alternating off/on rounds of `_measure`."""
    figures: dict[str, list[tuple[float, float, float]]] = {"false": [], "true": []}
    for n in range(ROUNDS):
        for on in figures:
            env = {"LOCKGATE_FAST_PATH": on}
            with lockgate_dev(work, f"fastpath-{on}-{n}", WORKERS, env) as dev:
                started = time.perf_counter()
                figures[on].append(await _measure(cfg, dev))
                log(f"fast path {on}: {figures[on][-1]} in {time.perf_counter() - started:.0f} s")
    off, on = zip(*figures["false"], strict=True), zip(*figures["true"], strict=True)
    (job_off, sync_off, p50_off), (job_on, sync_on, p50_on) = off, on
    return [
        _pair(f"gateway CPU per job end to end, {WORKERS} workers, fast path off -> on",
              job_off, job_on, "us"),
        _pair("gateway CPU per sequential /runsync, fast path off -> on", sync_off, sync_on, "us"),
        _pair("/runsync p50, fast path off -> on", p50_off, p50_on, "ms", digits=2),
    ]  # fmt: skip
