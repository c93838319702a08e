"""`make bench` (`python -m bench.core`): lockgate's figures beside the HTTP floor, one table.

1. /runsync latency, one warm worker, sequential requests;
2. /run acceptance rate with 32 concurrent clients and no workers;
3. end-to-end completed jobs/s with 4 workers, checked for lost and doubled jobs;
4. purge of 100,000 queued 1 KB jobs, and memory with them queued;
5. /status requests/s with auth and rate limits on, against both off (bench/access.py);
6. the OpenAI route: per-chunk stream overhead, time to first token, and chat
   completions/s against /runsync with the same handler (bench/openai_route.py);
7. end to end through 2 gateways and 3 endpoints on one Redis vs a 3-master Redis
   Cluster, and the /run p50 cost of MIN_REPLICAS_ACK=1 on Sentinel and on the cluster
   (bench/redis_modes.py);
8. /run acceptance through `lockgate gateway --processes 1` and 2 (bench/processes.py);
9. beside Celery + Redis, 2 workers each: sequential latency, 32 synchronous clients, and
   5,000 jobs by 32 clients that submit then poll (bench/celery_peer.py);
10. the gateway's CPU per job and per /runsync, and the /runsync p50, every request served
   by aiohttp (bench/gateway_cpu.py);
11. load-balancing endpoints: a small GET's p50/p95, GETs/s of 32 clients, CPU per proxied
   GET and SSE time to first byte through `/lb/` beside the same requests sent straight to
   the worker (bench/lb_proxy.py);
12. dynamic batching: an embedding-shaped handler's jobs/s and /runsync p50/p95 from 64
   clients, unbatched and at max_size 8, 32 and 64, and the sequential /runsync p50/p95
   with no batch and while a 5,000-request batch runs on the batch pool (bench/batching.py,
   bench/under_batch.py).
`--only NAME` runs one scenario (runsync, run, e2e, status, openai, shards, ack, procs,
celery, gateway, lb, batching).
Progress goes to stderr; the table to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench import load, redis_modes
from bench.access import status_overhead
from bench.batching import batching
from bench.celery_peer import beside_celery
from bench.gateway_cpu import gateway_cpu
from bench.lb_proxy import lb_proxy
from bench.load import SMALL_BODY
from bench.measure import (
    CpuMeter,
    audit,
    floor_meter,
    health,
    job_url,
    meter,
    redis_memory,
    wait_workers,
)
from bench.openai_route import openai_route
from bench.processes import acceptance_by_processes
from bench.procs import Service, floor_server, lockgate_dev, log, machine_busy, rss_bytes
from bench.report import Row, machine, ms, table

KB_BODY = orjson.dumps({"input": {"data": "x" * 1013}})  # `input` is 1,024 bytes of JSON
MB = 1024 * 1024
E2E_TIMEOUT_S = 120


@dataclass(frozen=True)
class Config:
    """Sizes of each measurement; `scale` shrinks them all for a quick try."""

    scale: float = 1.0
    concurrency: int = 1  # jobs each worker runs at once (concurrency_modifier)
    clients: int = 32
    queue_clients: int = 64
    e2e_workers: int = 4
    rounds: int = 3  # alternating on/off rounds of the /status overhead scenario
    peer_workers: int = 2  # workers of lockgate and of Celery's prefork pool, side by side
    batch_requests: int = 5_000  # the batch running while `batching` measures /runsync

    def n(self, full: int) -> int:
        return max(1, int(full * self.scale))


# -- 1. /runsync latency


async def seq_latency(url: str, body: bytes, cfg: Config) -> tuple[float, float]:
    """p50 and p99 (s) of sequential POSTs, after a warm-up."""
    async with load.session(1) as http:
        await load.sequential(http, url, body, cfg.n(200))
        lat = await load.sequential(http, url, body, cfg.n(2000))
    return load.percentile(lat, 50), load.percentile(lat, 99)


async def runsync_latency(cfg: Config, work: Path, floor: Service) -> list[Row]:
    """/runsync p50/p99 with one warm worker, beside sequential POSTs to the floor."""
    log("floor: sequential POST latency")
    floor_cpu = floor_meter(floor)
    f50, f99 = await seq_latency(f"{floor.base}/echo", SMALL_BODY, cfg)
    floor_use = floor_cpu.row("CPU us per sequential floor POST", cfg.n(200) + cfg.n(2000))
    with lockgate_dev(work, "runsync", 1, {}) as dev:
        async with load.session(1) as http:
            await wait_workers(http, dev, 1)
        log("lockgate: sequential /runsync latency")
        cpu = meter(dev)
        p50, p99 = await seq_latency(job_url(dev, "runsync"), SMALL_BODY, cfg)
        cpu_use = cpu.row("CPU us per /runsync", cfg.n(200) + cfg.n(2000))
    return [
        Row("/runsync p50, 1 warm worker", ms(p50), ms(f50), "<= 2.50 ms", p50 <= 0.0025),
        Row("/runsync p99, 1 warm worker", ms(p99), ms(f99)),
        cpu_use,
        floor_use,
    ]


# -- 2. /run acceptance, 4. purge and memory (no workers: jobs stay queued)


async def rate(
    what: str, url: str, body: bytes, cfg: Config, new_meter: Callable[[], CpuMeter]
) -> tuple[float, Row]:
    """Requests/s of `cfg.clients` concurrent senders after a warm-up, and the CPU they cost."""
    count = cfg.n(10_000)
    async with load.session(cfg.clients) as http:
        await load.burst(http, url, body, cfg.n(1_000), cfg.clients)
        cpu = new_meter()
        sent = await load.burst(http, url, body, count, cfg.clients)
    return sent.rate, cpu.row(f"CPU us per {what}", count)


async def acceptance_and_queue(cfg: Config, work: Path, floor: Service) -> list[Row]:
    """/run acceptance at 32 clients (and the floor's rate), then the 100k-queue figures."""
    log(f"floor: {cfg.n(10_000)} POSTs from {cfg.clients} clients")
    floor_rate, floor_use = await rate(
        "concurrent floor POST", f"{floor.base}/echo", SMALL_BODY, cfg, lambda: floor_meter(floor)
    )
    with lockgate_dev(work, "queue", 0, {}) as dev:
        log(f"lockgate: {cfg.n(10_000)} /run from {cfg.clients} clients, no workers")
        run_rate, run_use = await rate(
            "/run", job_url(dev, "run"), SMALL_BODY, cfg, lambda: meter(dev)
        )
        share = run_rate / floor_rate
        rows = [
            Row(f"/run acceptance, {cfg.clients} clients", f"{run_rate:,.0f} req/s",
                f"{floor_rate:,.0f} req/s", f">= 60% of floor (is {share:.0%})", share >= 0.6),
            run_use,
            floor_use,
        ]  # fmt: skip
        async with load.session(cfg.queue_clients) as http:
            await load.post(http, job_url(dev, "purge-queue"), b"{}")
            rows += await queue_figures(http, dev, cfg)
    return rows


async def queue_figures(http: aiohttp.ClientSession, dev: Service, cfg: Config) -> list[Row]:
    """Queue 100k 1 KB jobs; memory and RSS with them queued; then time their purge."""
    count = cfg.n(100_000)
    used_before, _ = await redis_memory(dev)
    log(f"lockgate: queueing {count} jobs of 1 KB from {cfg.queue_clients} clients")
    sent = await load.burst(http, job_url(dev, "run"), KB_BODY, count, cfg.queue_clients)
    queued = (await health(http, dev))["jobs"]["inQueue"]
    used, redis_rss = await redis_memory(dev)
    gateway_rss = rss_bytes(dev.process.pid)
    per_job = (used - used_before) / count
    log(f"lockgate: purging {queued} queued jobs")
    started = time.perf_counter()
    removed = orjson.loads(await load.post(http, job_url(dev, "purge-queue"), b"{}"))["removed"]
    took = time.perf_counter() - started
    return [
        Row("/run acceptance, 1 KB input", f"{sent.rate:,.0f} req/s", "",
            f"({cfg.queue_clients} clients, {count:,} jobs)"),
        Row(f"purge {removed:,} queued jobs", ms(took), "", "< 500 ms",
            took < 0.5 and removed == count == queued),
        Row("Redis used_memory per queued job", f"{per_job:,.0f} B", "", "< 3,072 B",
            per_job < 3072),
        Row(f"Redis RSS, {count:,} queued", f"{redis_rss / MB:,.0f} MB"),
        Row(f"gateway RSS, {count:,} queued", f"{gateway_rss / MB:,.0f} MB"),
    ]  # fmt: skip


# -- 3. end to end


async def completed_at(http: aiohttp.ClientSession, dev: Service, total: int) -> float:
    """The perf_counter time at which /health first shows `total` jobs finished."""
    deadline = time.perf_counter() + E2E_TIMEOUT_S
    while time.perf_counter() < deadline:
        jobs = (await health(http, dev))["jobs"]
        if jobs["completed"] + jobs["failed"] >= total:
            return time.perf_counter()
        await asyncio.sleep(0.02)
    raise RuntimeError(f"{total} jobs not finished within {E2E_TIMEOUT_S} s: health {jobs}")


async def sample_statuses(http: aiohttp.ClientSession, dev: Service, ids: list[str]) -> int:
    """How many of a sample of 200 jobs /status does not show COMPLETED."""
    sample = random.sample(ids, min(200, len(ids)))
    bodies = [await load.get_json(http, job_url(dev, f"status/{i}")) for i in sample]
    return sum(b["status"] != "COMPLETED" for b in bodies)


async def end_to_end(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """20k jobs through /run and 4 workers: completed/s, and no job lost or run twice."""
    total, ids_dir = cfg.n(20_000), work / "e2e-ids"
    ids_dir.mkdir()
    env = {"BENCH_IDS_DIR": str(ids_dir), "BENCH_CONCURRENCY": str(cfg.concurrency)}
    with lockgate_dev(work, "e2e", cfg.e2e_workers, env) as dev:
        async with load.session(cfg.clients) as http:
            await wait_workers(http, dev, cfg.e2e_workers)
            log(f"lockgate: {total} jobs, {cfg.e2e_workers} workers, {cfg.clients} clients")
            cpu = meter(dev)
            started = time.perf_counter()
            watcher = asyncio.create_task(completed_at(http, dev, total))
            sent = await load.burst(http, job_url(dev, "run"), SMALL_BODY, total, cfg.clients)
            done = await watcher
            cpu_use = cpu.row("CPU us per job end to end", total)
            jobs = (await health(http, dev))["jobs"]
            ids = [orjson.loads(r)["id"] for r in sent.replies]
            not_completed = await sample_statuses(http, dev, ids)
    rows = e2e_rows(cfg, total / (done - started), jobs, audit(ids_dir, ids), not_completed)
    return [*rows, cpu_use]


def e2e_rows(
    cfg: Config, per_s: float, jobs: dict, lost_twice: tuple[int, int], not_completed: int
) -> list[Row]:
    lost, twice = lost_twice
    clean = lost == twice == not_completed == jobs["failed"] == 0
    return [
        Row(f"end to end, {cfg.e2e_workers} workers x {cfg.concurrency}",
            f"{per_s:,.0f} jobs/s", "", ">= 1,000 jobs/s", per_s >= 1000 and clean),
        Row("  lost / run twice / failed", f"{lost} / {twice} / {jobs['failed']}", "",
            "0 / 0 / 0", clean),
    ]  # fmt: skip


# -- running it all

Scenario = Callable[[Config, Path, Service], Awaitable[list[Row]]]


async def attempt(
    name: str, scenario: Scenario, cfg: Config, work: Path, floor: Service
) -> list[Row]:
    """Run one scenario; a failure becomes a MISS row and the others still run."""
    try:
        return await scenario(cfg, work, floor)
    except Exception as err:
        log(f"{name} failed: {type(err).__name__}: {err}")
        return [Row(name, "ERROR", "", f"{type(err).__name__}: {err}"[:80], False)]


SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "runsync": ("/runsync latency", runsync_latency),
    "run": ("/run acceptance, purge, memory", acceptance_and_queue),
    "e2e": ("end to end", end_to_end),
    "status": ("/status with auth and limits on vs off", status_overhead),
    "openai": ("OpenAI route: stream overhead, chat completions/s", openai_route),
    "shards": ("end to end on one Redis vs a 3-master Redis Cluster", redis_modes.shards),
    "ack": ("/run p50 with MIN_REPLICAS_ACK 0 vs 1 on Sentinel and Cluster", redis_modes.ack_cost),
    "procs": ("/run acceptance, lockgate gateway --processes 1 vs 2", acceptance_by_processes),
    "celery": ("beside Celery + Redis: latency, sync clients, polling batch", beside_celery),
    "gateway": ("gateway CPU per job and per /runsync, /runsync p50", gateway_cpu),
    "lb": ("LB proxy: GET p50 and GETs/s vs direct to the worker, CPU, SSE first byte", lb_proxy),
    "batching": (
        "dynamic batching: jobs/s, p50/p95 unbatched vs max_size 8/32/64, /runsync under a batch",
        batching,
    ),
}


async def run_all(
    cfg: Config, work: Path, only: str | None = None
) -> tuple[list[Row], list[float]]:
    """Every scenario (or the one named) in turn, beside one floor server; also others'
    CPU load before each."""
    scenarios = [v for k, v in SCENARIOS.items() if only in (None, k)]
    rows: list[Row] = []
    busy: list[float] = []
    with floor_server(work) as floor:
        for name, scenario in scenarios:
            busy.append(machine_busy())
            log(f"{name}: CPU busy before it starts (others' load): {busy[-1]:.0%}")
            rows += await attempt(name, scenario, cfg, work, floor)
    return rows, busy


def parse_args() -> tuple[Config, bool, str | None]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.core", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every count (e.g. 0.1)")
    parser.add_argument("--concurrency", type=int, default=1, help="jobs per worker at once")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, data)")
    parser.add_argument("--only", choices=list(SCENARIOS), help="run this scenario alone")
    parser.add_argument("--rounds", type=int, default=3, help="on/off rounds of `status`")
    parser.add_argument(
        "--batch-requests", type=int, default=5_000, metavar="N",
        help="requests of the batch `batching` runs while it measures /runsync (scaled)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.batch_requests < 1:
        parser.error("--batch-requests must be at least 1")
    cfg = Config(
        scale=args.scale, concurrency=args.concurrency, rounds=args.rounds,
        batch_requests=args.batch_requests,
    )  # fmt: skip
    return cfg, args.keep, args.only


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (as the gateway uses), else the standard loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main() -> None:
    cfg, keep, only = parse_args()
    work = Path(tempfile.mkdtemp(prefix="lockgate-bench-"))
    log(f"work dir {work}; {machine()}")
    started = time.monotonic()
    with asyncio.Runner(loop_factory=new_loop) as runner:
        rows, busy = runner.run(run_all(cfg, work, only))
    log(f"done in {time.monotonic() - started:.0f} s")
    print(machine())
    print(table(rows))
    loads = ", ".join(f"{b:.0%}" for b in busy)
    print(f"CPU busy with other work before each scenario: {loads}", end="")
    print(" (over 20%: figures are low, run again)" if max(busy) > 0.2 else "")
    if keep:
        log(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if any(r.value == "ERROR" for r in rows) else 0)  # a MISS is a figure, not a failure


if __name__ == "__main__":
    main()
