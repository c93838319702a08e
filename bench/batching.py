"""`make bench` scenario `batching`: an embedding-shaped handler (bench/embed_handler.py: one
call 20 ms + 0.2 ms per input, one call at a time) on one worker under `lockgate dev`, 64
clients sending /runsync in a closed loop: jobs/s, p50 and p95 without batching and with
dynamic batching at max_size 8, 32 and 64 (wait_ms 10). Target: at max_size 32 at least 8x
the unbatched jobs/s, with a p95 within the unbatched p95.

On the max_size 32 `lockgate dev`, after its closed loop: the sequential /runsync p50 and
p95 with no batch, then while a batch of `Config.batch_requests` (5,000) runs on the
endpoint's batch pool, which runs the same handler (bench/under_batch.py). Target: the p50
with the batch within 1.2x the p50 without. Batched, the pool works through the batch as
fast as the gateway feeds it (500 requests a second), so the batch loads the gateway and
Redis hard; unbatched, its one worker would take 100 s for it at 50 jobs/s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load, under_batch
from bench.load import SMALL_BODY
from bench.measure import job_url, wait_workers
from bench.procs import Service, lockgate_dev, log
from bench.report import Row, ms
from bench.under_batch import UnderBatch, runsync_under_batch

if TYPE_CHECKING:
    from bench.core import Config

HANDLER = Path(__file__).with_name("embed_handler.py")
CLIENTS = 64
SIZES = (0, 8, 32, 64)  # 0: unbatched
WARM_S, MEASURE_S = 2.0, 10.0
UNDER_BATCH = 32  # the max_size whose `lockgate dev` also measures /runsync under a batch
SEQUENTIAL = 200  # sequential /runsync of each figure with and without the batch


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


Figure = tuple[float, float, float]  # jobs/s, p50 s, p95 s
Figures = dict[int, Figure]  # max_size (0: unbatched) -> its figure


async def measure(work: Path, size: int, cfg: Config) -> tuple[Figure, UnderBatch | None]:
    """(jobs/s, p50 s, p95 s) with `size` as max_size (0: unbatched); at UNDER_BATCH, also
    the sequential /runsync without and with a batch running."""
    requests = cfg.n(cfg.batch_requests)
    env = {"BENCH_BATCH": str(size), "LOCKGATE_BATCH_MAX_REQUESTS": str(max(5000, requests))}
    under = None
    with lockgate_dev(work, f"batching-{size}", 1, env, handler=HANDLER) as dev:
        async with load.session(1) as http:
            await wait_workers(http, dev, 1)
        url = job_url(dev, "runsync")
        await closed_loop(url, WARM_S * cfg.scale)
        rate, latencies = await closed_loop(url, MEASURE_S * cfg.scale)
        if size == UNDER_BATCH:
            under = await runsync_under_batch(dev, requests, cfg.n(SEQUENTIAL))
    return (rate, load.percentile(latencies, 50), load.percentile(latencies, 95)), under


async def batching(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """Jobs/s, p50 and p95 per max_size, one `lockgate dev` each; /runsync under a batch."""
    figures: Figures = {}
    under = None
    for size in SIZES:
        log(f"batching: {_name(size)}, {CLIENTS} /runsync clients")
        figures[size], measured = await measure(work, size, cfg)
        under = measured or under
    return rows(figures, under)


def rows(figures: Figures, under: UnderBatch | None = None) -> list[Row]:
    """The rows: jobs/s and p50 / p95 per max_size; at 32, the 8x and p95 targets; then
    the /runsync p50 under a batch, when measured."""
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
    if under is not None:
        table += under_batch.rows(under, _name(UNDER_BATCH))
    return table


def _name(size: int) -> str:
    return f"max_size {size}" if size else "unbatched"
