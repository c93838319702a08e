"""Celery + Redis as the peer: the same three load shapes against lockgate and Celery, in
one run, each with the same number of workers and a no-op job (issue 17, item 1).

1. sequential latency: lockgate `/runsync` against Celery `apply_async(...).get()`;
2. 32 concurrent synchronous clients, jobs/s: `/runsync` against `apply_async(...).get()`;
3. a batch of 5,000 jobs by 32 clients that each submit their share, then poll what is
   still pending every POLL_INTERVAL_S (lockgate: `/run` + `/status`, as the runpod SDK
   polls; Celery: `delay()` + `AsyncResult.ready()`): completed jobs/s, p50
   submit-to-seen, and jobs lost or run twice (from the ids the workers record; a job
   still pending at DEADLINE_S counts as unfinished: lost or slow, the bench cannot tell).
Celery runs a prefork pool on its own Redis (broker and result backend), started here as
`lockgate dev` starts its own. Its client is the synchronous Celery API, one thread per
client; lockgate's is the bench's aiohttp session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from bench import load
from bench.load import SMALL_BODY
from bench.measure import CpuMeter, audit, job_url, meter, wait_workers
from bench.procs import Service, children, lockgate_dev, log, spawn, stop, wait_for
from bench.report import Row, ms
from lockgate.dev.redis_server import EmbeddedRedis

if TYPE_CHECKING:
    from bench.core import Config

POLL_INTERVAL_S = 0.1  # between two sweeps of a client's pending jobs
DEADLINE_S = 50.0  # each load shape of one system gives up here (a scenario stays < 60 s)
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
GET_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Batch:
    """What a submit-then-poll batch did."""

    seconds: float  # first submit to the last job seen final
    seen: list[float]  # submit-to-seen of each job (s)
    ids: list[str]  # the jobs seen final
    polls: int
    failed: int  # seen final but not completed
    unfinished: int  # still pending at the deadline

    @property
    def rate(self) -> float:
        return len(self.seen) / self.seconds


@dataclass(frozen=True)
class Figures:
    """One system's figures for the three load shapes."""

    p50: float
    p99: float
    sync_rate: float
    batch: Batch
    lost_twice: tuple[int, int]  # jobs seen final that no worker ran; jobs run twice
    cpu: Row  # CPU time of the batch per job seen final, by process group


def shares(total: int, clients: int) -> list[int]:
    """`total` jobs split between `clients` as evenly as can be (the first get one more)."""
    base, extra = divmod(total, clients)
    return [base + (i < extra) for i in range(clients)]


def versus(
    ours: float, celery: float, *, at_most: float = 0.0, at_least: float = 0.0
) -> tuple[str, bool | None]:
    """The target text and verdict for lockgate's figure as a multiple of Celery's: within
    `at_most` x (latencies) or `at_least` x (rates); neither given: shown, no verdict."""
    ratio = ours / celery if celery else float("inf")
    if at_most:
        return f"<= {at_most:g}x Celery (is {ratio:.2f}x)", ratio <= at_most
    if at_least:
        return f">= {at_least:g}x Celery (is {ratio:.2f}x)", ratio >= at_least
    return f"{ratio:.2f}x Celery", None


# -- lockgate's side: the bench's aiohttp session


async def lockgate_batch(
    http: aiohttp.ClientSession, dev: Service, total: int, clients: int
) -> Batch:
    """`total` jobs by `clients` clients that submit with /run, then poll /status."""
    seen: list[float] = []
    ids: list[str] = []
    polls = failed = 0
    unfinished: list[int] = []
    deadline = time.perf_counter() + DEADLINE_S

    async def client(count: int) -> None:
        nonlocal polls, failed
        pending = []
        for _ in range(count):
            sent = time.perf_counter()
            job = orjson.loads(await load.post(http, job_url(dev, "run"), SMALL_BODY))
            pending.append((job["id"], sent))
        while pending and time.perf_counter() < deadline:
            still = []
            for job_id, sent in pending:
                status = (await load.get_json(http, job_url(dev, f"status/{job_id}")))["status"]
                polls += 1
                if status not in FINAL:
                    still.append((job_id, sent))
                    continue
                seen.append(time.perf_counter() - sent)
                ids.append(job_id)
                failed += status != "COMPLETED"
            pending = still
            await asyncio.sleep(POLL_INTERVAL_S if pending else 0)
        unfinished.append(len(pending))

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in shares(total, clients)))
    return Batch(time.perf_counter() - started, seen, ids, polls, failed, sum(unfinished))


async def lockgate_figures(cfg: Config, work: Path) -> Figures:
    """The three load shapes against `lockgate dev` with `cfg.peer_workers` no-op workers."""
    ids_dir = work / "peer-lockgate-ids"
    ids_dir.mkdir()
    with lockgate_dev(work, "peer", cfg.peer_workers, {"BENCH_IDS_DIR": str(ids_dir)}) as dev:
        async with load.session(cfg.clients) as http:
            await wait_workers(http, dev, cfg.peer_workers)
            url = job_url(dev, "runsync")
            log(f"lockgate: sequential /runsync, {cfg.peer_workers} workers")
            await load.sequential(http, url, SMALL_BODY, cfg.n(200))
            lat = await load.sequential(http, url, SMALL_BODY, cfg.n(1000))
            log(f"lockgate: {cfg.n(2000)} /runsync from {cfg.clients} clients")
            sync = await load.burst(http, url, SMALL_BODY, cfg.n(2000), cfg.clients)
            log(f"lockgate: {cfg.n(5000)} jobs, {cfg.clients} clients submit then poll /status")
            cpu = meter(dev)
            batch = await lockgate_batch(http, dev, cfg.n(5000), cfg.clients)
            cpu_use = cpu.row("CPU us per polled job, lockgate", max(1, len(batch.seen)))
    p50, p99 = load.percentile(lat, 50), load.percentile(lat, 99)
    return Figures(p50, p99, sync.rate, batch, audit(ids_dir, batch.ids), cpu_use)


# -- Celery's side: its synchronous client API, one thread per client


def in_threads(clients: int, work: Callable[[int], Any], args: list[int]) -> list[Any]:
    """`work(arg)` for each of `args`, `clients` threads at once; the results in order."""
    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(work, args))


def celery_sequential(count: int) -> list[float]:
    """Latency (s) of `count` `apply_async(...).get()` one after another."""
    from bench.celery_app import noop

    latencies: list[float] = []
    deadline = time.perf_counter() + DEADLINE_S
    for _ in range(count):
        started = time.perf_counter()
        if started > deadline:
            break
        noop.apply_async().get(timeout=GET_TIMEOUT_S)
        latencies.append(time.perf_counter() - started)
    return latencies


def celery_sync_rate(count: int, clients: int) -> float:
    """Jobs/s of `count` `apply_async(...).get()` from `clients` threads."""
    from bench.celery_app import noop

    deadline = time.perf_counter() + DEADLINE_S

    def client(n: int) -> int:
        for done in range(n):
            if time.perf_counter() > deadline:
                return done
            noop.apply_async().get(timeout=GET_TIMEOUT_S)
        return n

    started = time.perf_counter()
    done = sum(in_threads(clients, client, shares(count, clients)))
    return done / (time.perf_counter() - started)


def celery_batch(total: int, clients: int) -> Batch:
    """`total` jobs by `clients` threads that submit with `delay()`, then poll `ready()`."""
    from bench.celery_app import noop

    deadline = time.perf_counter() + DEADLINE_S

    def client(count: int) -> tuple[list[float], list[str], int, int, int]:
        pending = []
        for _ in range(count):
            sent = time.perf_counter()
            pending.append((noop.delay(), sent))
        ids, seen, polls, failed = [], [], 0, 0
        while pending and time.perf_counter() < deadline:
            still = []
            for result, sent in pending:
                polls += 1
                if not result.ready():
                    still.append((result, sent))
                    continue
                seen.append(time.perf_counter() - sent)
                ids.append(result.id)
                failed += not result.successful()
            pending = still
            time.sleep(POLL_INTERVAL_S if pending else 0)
        return seen, ids, polls, failed, len(pending)

    started = time.perf_counter()
    done = in_threads(clients, client, shares(total, clients))
    took = time.perf_counter() - started
    seen, ids = ([x for d in done for x in d[i]] for i in (0, 1))
    polls, failed, unfinished = (sum(d[i] for d in done) for i in (2, 3, 4))
    return Batch(took, seen, ids, polls, failed, unfinished)


@contextlib.contextmanager
def celery_worker(
    work: Path, workers: int, ids_dir: Path
) -> Iterator[tuple[str, Callable[[], CpuMeter]]]:
    """A Redis and a Celery prefork worker of `workers` children on it, for as long as the
    block runs; yields the Redis URL and a way to meter their CPU. On exit every process of
    the worker's group goes."""
    redis = EmbeddedRedis(work / "celery-redis")  # append-only, everysec: as `lockgate dev`
    redis.start()
    log_path = work / "celery.log"
    env = {**os.environ, "BENCH_CELERY_REDIS": redis.url, "BENCH_IDS_DIR": str(ids_dir)}
    command = [
        sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker", "--pool", "prefork",
        "--concurrency", str(workers), "--without-gossip", "--without-mingle",
        "--without-heartbeat", "--loglevel", "INFO",
    ]  # fmt: skip
    worker = Service(spawn(command, log_path, env), 0, log_path)
    try:
        wait_for(worker, r"celery@\S+ ready")
        log(f"celery worker pid {worker.process.pid}, {workers} prefork children, {redis.url}")
        pids = [worker.process.pid, *children(worker.process.pid)]
        redis_pid = redis.process.pid if redis.process else 0
        groups = {"Celery worker": pids, "Redis": [redis_pid], "client": [os.getpid()]}
        yield redis.url, lambda: CpuMeter(groups)
    finally:
        stop(worker.process, "celery worker")
        with contextlib.suppress(ProcessLookupError):  # a prefork child that outlived it
            os.killpg(worker.process.pid, signal.SIGKILL)
        redis.stop()


def celery_figures(cfg: Config, work: Path) -> Figures:
    """The three load shapes against Celery with `cfg.peer_workers` prefork children."""
    from bench.celery_app import app

    ids_dir = work / "peer-celery-ids"
    ids_dir.mkdir()
    with celery_worker(work, cfg.peer_workers, ids_dir) as (url, new_meter):
        app.conf.update(broker_url=url, result_backend=url)
        log(f"celery: sequential apply_async().get(), {cfg.peer_workers} workers")
        celery_sequential(cfg.n(200))
        lat = celery_sequential(cfg.n(1000))
        log(f"celery: {cfg.n(2000)} apply_async().get() from {cfg.clients} threads")
        sync_rate = celery_sync_rate(cfg.n(2000), cfg.clients)
        log(f"celery: {cfg.n(5000)} jobs, {cfg.clients} threads delay() then poll ready()")
        cpu = new_meter()
        batch = celery_batch(cfg.n(5000), cfg.clients)
        cpu_use = cpu.row("CPU us per polled job, Celery", max(1, len(batch.seen)))
        app.close()  # its pools' connections, before Redis goes
    p50, p99 = load.percentile(lat, 50), load.percentile(lat, 99)
    return Figures(p50, p99, sync_rate, batch, audit(ids_dir, batch.ids), cpu_use)


# -- the scenario


async def floor_figures(cfg: Config, floor: Service) -> tuple[float, float]:
    """The floor's sequential p50 and its rate with `cfg.clients` concurrent senders."""
    url = f"{floor.base}/echo"
    async with load.session(cfg.clients) as http:
        await load.sequential(http, url, SMALL_BODY, cfg.n(200))
        lat = await load.sequential(http, url, SMALL_BODY, cfg.n(1000))
        sent = await load.burst(http, url, SMALL_BODY, cfg.n(2000), cfg.clients)
    return load.percentile(lat, 50), sent.rate


def batch_clean(figures: Figures, total: int) -> bool:
    """Every job seen completed, each run exactly once."""
    batch = figures.batch
    return len(batch.seen) == total and batch.failed == 0 and figures.lost_twice == (0, 0)


def peer_rows(cfg: Config, ours: Figures, celery: Figures, floor: tuple[float, float]) -> list[Row]:
    """The table rows: lockgate, the floor where one applies, Celery, and the ratios."""
    total, n = cfg.n(5000), cfg.peer_workers
    p50_target, p50_ok = versus(ours.p50, celery.p50, at_most=0.7)
    batch_target, batch_ok = versus(ours.batch.rate, celery.batch.rate, at_least=2)
    clean = batch_clean(ours, total)

    def audit_text(f: Figures) -> str:
        return f"{f.lost_twice[0]} / {f.lost_twice[1]} / {f.batch.failed} / {f.batch.unfinished}"

    return [
        Row(f"/runsync p50 vs Celery get(), {n} workers", ms(ours.p50), ms(floor[0]),
            p50_target, p50_ok, peer=ms(celery.p50)),
        Row(f"/runsync p99 vs Celery get(), {n} workers", ms(ours.p99), "",
            versus(ours.p99, celery.p99)[0], peer=ms(celery.p99)),
        Row(f"/runsync, {cfg.clients} sync clients", f"{ours.sync_rate:,.0f} jobs/s",
            f"{floor[1]:,.0f} req/s", versus(ours.sync_rate, celery.sync_rate)[0],
            peer=f"{celery.sync_rate:,.0f} jobs/s"),
        Row(f"{total:,} jobs, {cfg.clients} polling clients", f"{ours.batch.rate:,.0f} jobs/s",
            "", batch_target, batch_ok and clean, peer=f"{celery.batch.rate:,.0f} jobs/s"),
        Row("  p50 submit-to-seen", ms(load.percentile(ours.batch.seen, 50)), "",
            versus(load.percentile(ours.batch.seen, 50), load.percentile(celery.batch.seen, 50))[0],
            peer=ms(load.percentile(celery.batch.seen, 50))),
        Row("  polls per job", f"{ours.batch.polls / total:,.1f}", "",
            f"every {POLL_INTERVAL_S * 1000:.0f} ms", peer=f"{celery.batch.polls / total:,.1f}"),
        Row(f"  lost / twice / failed / unfinished at {DEADLINE_S:.0f} s", audit_text(ours), "",
            "0 / 0 / 0 / 0",
            clean and batch_clean(celery, total), peer=audit_text(celery)),
        ours.cpu,
        celery.cpu,
    ]  # fmt: skip


async def beside_celery(cfg: Config, work: Path, floor: Service) -> list[Row]:
    """The floor, lockgate, then Celery, one after the other: the same loads on each."""
    try:
        import celery  # noqa: F401
    except ImportError:
        log("celery is not installed: no Celery rows (pip install -e '.[bench]')")
        return [
            Row("Celery peer", "skipped", "", "celery not installed: pip install -e '.[bench]'")
        ]
    log("floor: sequential and concurrent POSTs")
    floor_figs = await floor_figures(cfg, floor)
    ours = await lockgate_figures(cfg, work)
    celery_figs = await asyncio.to_thread(celery_figures, cfg, work)
    return peer_rows(cfg, ours, celery_figs, floor_figs)
