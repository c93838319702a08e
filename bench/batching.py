"""`make bench` scenario `batching`: an embedding-shaped handler (bench/embed_handler.py: one
call 20 ms + 0.2 ms per input, one call at a time) on one worker under `lockgate dev`, 64
clients sending /runsync in a closed loop: jobs/s, p50 and p95 without batching and with
dynamic batching at max_size 8, 32 and 64 (wait_ms 10). Target: at max_size 32 at least 8x
the unbatched jobs/s, with a p95 within the unbatched p95."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load
from bench.load import SMALL_BODY
from bench.measure import job_url, wait_workers
from bench.procs import Service, lockgate_dev, log
from bench.report import Row, ms

if TYPE_CHECKING:
    from bench.core import Config

HANDLER = Path(__file__).with_name("embed_handler.py")
CLIENTS = 64
SIZES = (0, 8, 32, 64)  # 0: unbatched
WARM_S, MEASURE_S = 2.0, 10.0


async def closed_loop(url: str, seconds: float) -> tuple[float, list[float]]:
    """Jobs/s and each request's latency (s) of CLIENTS senders for `seconds`."""
    latencies: list[float] = []
    async with load.session(CLIENTS) as http:
        until = time.perf_counter() + seconds
        started = time.perf_counter()

        async def sender() -> None:
            while time.perf_counter() < until:
                sent = time.perf_counter()
                await load.post(http, url, SMALL_BODY)
                latencies.append(time.perf_counter() - sent)

        await asyncio.gather(*(sender() for _ in range(CLIENTS)))
        return len(latencies) / (time.perf_counter() - started), latencies


async def measure(work: Path, size: int, scale: float) -> tuple[float, float, float]:
    """(jobs/s, p50 s, p95 s) with `size` as max_size (0: unbatched)."""
    env = {"BENCH_BATCH": str(size)}
    with lockgate_dev(work, f"batching-{size}", 1, env, handler=HANDLER) as dev:
        async with load.session(1) as http:
            await wait_workers(http, dev, 1)
        url = job_url(dev, "runsync")
        await closed_loop(url, WARM_S * scale)
        rate, latencies = await closed_loop(url, MEASURE_S * scale)
    return rate, load.percentile(latencies, 50), load.percentile(latencies, 95)


Figures = dict[int, tuple[float, float, float]]  # max_size (0: unbatched) -> jobs/s, p50, p95


async def batching(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """Jobs/s, p50 and p95 per max_size, one `lockgate dev` each."""
    figures: Figures = {}
    for size in SIZES:
        log(f"batching: {_name(size)}, {CLIENTS} /runsync clients")
        figures[size] = await measure(work, size, cfg.scale)
    return rows(figures)


def rows(figures: Figures) -> list[Row]:
    """The rows: jobs/s and p50 / p95 per max_size; at 32, the 8x and p95 targets."""
    table = []
    for size, (rate, p50, p95) in figures.items():
        table.append(Row(f"batching {_name(size)}: jobs/s, {CLIENTS} clients", f"{rate:.0f}"))
        table.append(Row(f"batching {_name(size)}: /runsync p50 / p95", f"{ms(p50)} / {ms(p95)}"))
    base_rate, _, base_p95 = figures[0]
    rate32, _, p95_32 = figures[32]
    table.append(
        Row("batching: max_size 32 jobs/s vs unbatched", f"{rate32 / base_rate:.1f}x", "",
            ">= 8x", rate32 >= 8 * base_rate)
    )  # fmt: skip
    table.append(
        Row("batching: max_size 32 p95 vs unbatched p95", f"{ms(p95_32)} vs {ms(base_p95)}", "",
            "<= unbatched", p95_32 <= base_p95)
    )  # fmt: skip
    return table


def _name(size: int) -> str:
    return f"max_size {size}" if size else "unbatched"
