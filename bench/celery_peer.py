"""Celery + Redis as the peer: the same load shapes against lockgate and Celery, in one
run, each with the same number of workers and a no-op job (issue 17, item 1; issue 51,
item 4: the side-by-side harness's shapes and verdict too).

1. sequential latency: lockgate `/runsync` against Celery `apply_async(...).get()`;
2. 32 concurrent synchronous clients, jobs/s: `/runsync` against `apply_async(...).get()`;
3. a batch of 5,000 jobs by 32 clients that each submit their share, then poll what is
   still pending every POLL_INTERVAL_S (lockgate: `/run` + `/status`, as the runpod SDK
   polls; Celery: `delay()` + `AsyncResult.ready()`): completed jobs/s, p50
   submit-to-seen, and jobs lost or run twice (from the ids the workers record; a job
   still pending at DEADLINE_S counts as unfinished: lost or slow, the bench cannot tell);
4. the side-by-side harness's batch (../shared/bench-peers/vs_lockgate.sh, which issue 51's
   targets are judged by): lockgate's 5,000 `/run` from 32 submitters while 32 pollers
   re-poll each pending job at once; Celery's 5,000 `apply_async` then `.get()` on each.
   Its verdict line (`runsync_p50/celery_p50`, `completed/s vs celery`,
   `runsync_thr/floor`) is printed as the harness prints it.
Celery runs in the bench's own venv (`make bench-venv`, `$BENCH_VENV`, `.venv-bench` by
default), never the project's: a prefork pool on its own Redis (broker and result
backend), and its client (bench/celery_side.py) as a process of its own, one thread per
client. lockgate's client is the bench's aiohttp session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from bench import load
from bench.celery_side import DEADLINE_S, POLL_INTERVAL_S, shares
from bench.load import SMALL_BODY
from bench.measure import CpuMeter, audit, job_url, meter, wait_workers
from bench.procs import REPO, Service, children, lockgate_dev, log, spawn, stop, wait_for
from bench.report import Row, ms
from lockgate.dev.redis_server import EmbeddedRedis

if TYPE_CHECKING:
    from bench.core import Config

FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
SHAPE_TIMEOUT_S = 120.0  # one Celery load shape's client process, start-up included
THROUGHPUT_S = 8.0  # the harness's /runsync throughput window
__all__ = ["bench_python", "beside_celery", "shares", "versus"]


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
    """One system's figures for the load shapes."""

    p50: float
    p99: float
    sync_rate: float
    batch: Batch
    lost_twice: tuple[int, int]  # jobs seen final that no worker ran; jobs run twice
    cpu: Row  # CPU time of the batch per job seen final, by process group
    drained: float = 0.0  # completed jobs/s of the side-by-side harness's batch
    drain_lost: int = 0  # jobs of that batch no worker ran, or not completed


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


async def lockgate_drain(
    http: aiohttp.ClientSession, dev: Service, total: int, clients: int
) -> tuple[float, list[str]]:
    """The harness's batch (../shared/bench-peers/loadgen.py `run+status`): `clients`
    submitters send `total` /run while `clients` pollers take each id as it comes and poll
    its /status, putting it back at once while it is not final. Completed jobs/s (first
    submit to the last seen final) and the ids seen completed."""
    ids: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
    todo = iter(range(total))
    done: list[str] = []
    last, seen = [0.0], [0]
    finished = asyncio.Event()

    async def submitter() -> None:
        for _ in todo:
            job = orjson.loads(await load.post(http, job_url(dev, "run"), SMALL_BODY))
            ids.put_nowait((job["id"], time.perf_counter()))

    async def poller() -> None:
        while True:
            job_id, sent = await ids.get()
            status = (await load.get_json(http, job_url(dev, f"status/{job_id}")))["status"]
            if status not in FINAL:
                ids.put_nowait((job_id, sent))
                continue
            last[0] = time.perf_counter()
            if status == "COMPLETED":
                done.append(job_id)
            seen[0] += 1
            if seen[0] == total:
                finished.set()

    started = time.perf_counter()
    tasks = [asyncio.create_task(submitter()) for _ in range(clients)]
    tasks += [asyncio.create_task(poller()) for _ in range(clients)]
    try:
        await asyncio.wait_for(finished.wait(), DEADLINE_S)
    except TimeoutError:
        log(f"lockgate: {total - seen[0]} jobs of the harness batch not final in time")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return len(done) / max(1e-9, (last[0] or time.perf_counter()) - started), done


async def lockgate_figures(cfg: Config, work: Path) -> Figures:
    """The load shapes against `lockgate dev` with `cfg.peer_workers` no-op workers."""
    ids_dir = work / "peer-lockgate-ids"
    ids_dir.mkdir()
    with lockgate_dev(work, "peer", cfg.peer_workers, {"BENCH_IDS_DIR": str(ids_dir)}) as dev:
        async with load.session(cfg.clients) as http:
            await wait_workers(http, dev, cfg.peer_workers)
            url = job_url(dev, "runsync")
            log(f"lockgate: sequential /runsync, {cfg.peer_workers} workers")
            await load.sequential(http, url, SMALL_BODY, cfg.n(200))
            lat = await load.sequential(http, url, SMALL_BODY, cfg.n(1500))
            log(f"lockgate: /runsync from {cfg.clients} clients for {THROUGHPUT_S:g} s")
            sync = await load.for_duration(
                http, url, SMALL_BODY, cfg.clients, THROUGHPUT_S * min(1.0, cfg.scale)
            )
            log(f"lockgate: {cfg.n(5000)} jobs, {cfg.clients} clients submit then poll /status")
            cpu = meter(dev)
            batch = await lockgate_batch(http, dev, cfg.n(5000), cfg.clients)
            cpu_use = cpu.row("CPU us per polled job, lockgate", max(1, len(batch.seen)))
            log(f"lockgate: the harness's batch, {cfg.n(5000)} /run, {cfg.clients} pollers")
            drained, done = await lockgate_drain(http, dev, cfg.n(5000), cfg.clients)
    p50, p99 = load.percentile(lat, 50), load.percentile(lat, 99)
    lost = cfg.n(5000) - len(done) + audit(ids_dir, done)[0]
    return Figures(p50, p99, sync.rate, batch, audit(ids_dir, batch.ids), cpu_use, drained, lost)


# -- Celery's side: bench/celery_side.py in the bench's own venv


def bench_python() -> Path | None:
    """The bench venv's interpreter (`$BENCH_VENV`, else `.venv-bench` in the repository),
    when it can import Celery; None otherwise."""
    venv = Path(os.environ.get("BENCH_VENV") or REPO / ".venv-bench")
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    found = subprocess.run(
        [str(python), "-c", "import celery"], capture_output=True, timeout=60, check=False
    )
    return python if found.returncode == 0 else None


@contextlib.contextmanager
def celery_worker(
    python: Path, work: Path, workers: int, ids_dir: Path
) -> Iterator[tuple[str, Callable[[], CpuMeter]]]:
    """A Redis and a Celery prefork worker of `workers` children on it (the bench venv's
    `python`), for as long as the block runs; yields the Redis URL and a way to meter
    their CPU. On exit every process of the worker's group goes."""
    redis = EmbeddedRedis(work / "celery-redis")  # append-only, everysec: as `lockgate dev`
    redis.start()
    log_path = work / "celery.log"
    env = {**os.environ, "BENCH_CELERY_REDIS": redis.url, "BENCH_IDS_DIR": str(ids_dir)}
    command = [
        str(python), "-m", "celery", "-A", "bench.celery_app", "worker", "--pool", "prefork",
        "--concurrency", str(workers), "--without-gossip", "--without-mingle",
        "--without-heartbeat", "--loglevel", "INFO",
    ]  # fmt: skip
    worker = Service(spawn(command, log_path, env), 0, log_path)
    try:
        wait_for(worker, r"celery@\S+ ready")
        log(f"celery worker pid {worker.process.pid}, {workers} prefork children, {redis.url}")
        pids = [worker.process.pid, *children(worker.process.pid)]
        redis_pid = redis.process.pid if redis.process else 0
        groups = {"Celery worker": pids, "Redis": [redis_pid]}
        yield redis.url, lambda: CpuMeter(groups)
    finally:
        stop(worker.process, "celery worker")
        with contextlib.suppress(ProcessLookupError):  # a prefork child that outlived it
            os.killpg(worker.process.pid, signal.SIGKILL)
        redis.stop()


def celery_shape(python: Path, url: str, shape: str, cfg: Config) -> tuple[dict[str, Any], float]:
    """One load shape by bench/celery_side.py: its figures, and its client process's CPU
    time (s, its start-up included: read from this process's reaped children)."""
    command = [
        str(python), "-m", "bench.celery_side", "--redis", url, "--shape", shape,
        "--scale", str(cfg.scale), "--clients", str(cfg.clients),
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        command, cwd=REPO, stdout=subprocess.PIPE, timeout=SHAPE_TIMEOUT_S, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"celery_side --shape {shape} exited with {done.returncode}")
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout), used


def celery_figures(python: Path, cfg: Config, work: Path) -> Figures:
    """The load shapes against Celery with `cfg.peer_workers` prefork children."""
    ids_dir = work / "peer-celery-ids"
    ids_dir.mkdir()
    with celery_worker(python, work, cfg.peer_workers, ids_dir) as (url, new_meter):
        log(f"celery: sequential apply_async().get(), {cfg.peer_workers} workers")
        lat = celery_shape(python, url, "latency", cfg)[0]["latencies"]
        log(f"celery: {cfg.n(2000)} apply_async().get() from {cfg.clients} threads")
        sync_rate = celery_shape(python, url, "sync", cfg)[0]["sync_rate"]
        log(f"celery: {cfg.n(5000)} jobs, {cfg.clients} threads delay() then poll ready()")
        cpu = new_meter()
        polled, client_s = celery_shape(python, url, "polled", cfg)
        batch = Batch(
            polled["seconds"], polled["seen"], polled["ids"], polled["polls"],
            polled["failed"], polled["unfinished"],
        )  # fmt: skip
        seen = max(1, len(batch.seen))
        row = cpu.row("CPU us per polled job, Celery", seen)
        client = f", client {client_s / seen * 1e6:,.0f} (its start-up too) ("
        cpu_use = dataclasses.replace(row, value=row.value.replace(" (", client, 1))
        log(f"celery: the harness's batch, {cfg.n(5000)} apply_async then get()")
        drain = celery_shape(python, url, "drained", cfg)[0]
    p50, p99 = load.percentile(lat, 50), load.percentile(lat, 99)
    drained = drain["completed"] / max(1e-9, drain["seconds"])
    lost = cfg.n(5000) - drain["completed"] + audit(ids_dir, drain["ids"])[0]
    return Figures(p50, p99, sync_rate, batch, audit(ids_dir, batch.ids), cpu_use, drained, lost)


# -- the scenario


async def floor_figures(cfg: Config, floor: Service) -> tuple[float, float]:
    """The floor's sequential p50 and its rate with `cfg.clients` concurrent senders."""
    url = f"{floor.base}/echo"
    async with load.session(cfg.clients) as http:
        await load.sequential(http, url, SMALL_BODY, cfg.n(200))
        lat = await load.sequential(http, url, SMALL_BODY, cfg.n(1500))
        sent = await load.for_duration(
            http, url, SMALL_BODY, cfg.clients, THROUGHPUT_S * min(1.0, cfg.scale)
        )
    return load.percentile(lat, 50), sent.rate


def batch_clean(figures: Figures, total: int) -> bool:
    """Every job seen completed, each run exactly once."""
    batch = figures.batch
    return len(batch.seen) == total and batch.failed == 0 and figures.lost_twice == (0, 0)


def verdict(ours: Figures, celery: Figures, floor: tuple[float, float]) -> tuple[str, bool]:
    """The side-by-side harness's verdict line (../shared/bench-peers/vs_lockgate.sh) from
    this run's figures, and whether its two goals are met."""
    p50 = ours.p50 / celery.p50 if celery.p50 else float("inf")
    done = ours.drained / celery.drained if celery.drained else 0.0
    ok = p50 <= 0.7 and done >= 2
    text = (
        f"{'OK' if ok else 'SHORT'} runsync_p50/celery_p50={p50:.2f} (goal <=0.7); "
        f"runsync_p50/floor={ours.p50 / floor[0]:.1f}; "
        f"completed/s vs celery={done:.2f} (goal >=2); "
        f"runsync_thr/floor={ours.sync_rate / floor[1]:.2f}"
    )
    return text, ok


def peer_rows(cfg: Config, ours: Figures, celery: Figures, floor: tuple[float, float]) -> list[Row]:
    """The table rows: lockgate, the floor where one applies, Celery, and the ratios."""
    total, n = cfg.n(5000), cfg.peer_workers
    p50_target, p50_ok = versus(ours.p50, celery.p50, at_most=0.7)
    batch_target, batch_ok = versus(ours.batch.rate, celery.batch.rate, at_least=2)
    drain_target, drain_ok = versus(ours.drained, celery.drained, at_least=2)
    clean = batch_clean(ours, total)
    line, _ = verdict(ours, celery, floor)

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
        Row(f"{total:,} jobs as the side-by-side harness: /run + /status at once vs "
            "apply_async + get()", f"{ours.drained:,.0f} jobs/s", "", drain_target,
            drain_ok and ours.drain_lost == 0 and celery.drain_lost == 0,
            peer=f"{celery.drained:,.0f} jobs/s"),
        Row("  verdict as vs_lockgate.sh", line, detail=True),
        ours.cpu,
        celery.cpu,
    ]  # fmt: skip


async def beside_celery(cfg: Config, work: Path, floor: Service) -> list[Row]:
    """The floor, lockgate, then Celery, one after the other: the same loads on each."""
    python = bench_python()
    if python is None:
        log("no bench venv with Celery: no Celery rows (make bench-venv, or set BENCH_VENV)")
        return [Row("Celery peer", "skipped", "", "no bench venv with celery: make bench-venv")]
    log("floor: sequential and concurrent POSTs")
    floor_figs = await floor_figures(cfg, floor)
    ours = await lockgate_figures(cfg, work)
    celery_figs = await asyncio.to_thread(celery_figures, python, cfg, work)
    rows = peer_rows(cfg, ours, celery_figs, floor_figs)
    log(f"side by side: {verdict(ours, celery_figs, floor_figs)[0]}")
    return rows
