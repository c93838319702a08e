"""Part of `make bench` scenario `batching` (issue 49, item 6): the sequential `/runsync`
p50 and p95 of an endpoint with no batch, then the same while a batch of N requests
(default 5,000) runs on the endpoint's batch pool (docs/batch-jobs.md: in dev mode a second
local pool of workers, from zero). Target: the p50 with the batch within 1.2x the p50
without.

The measurement with the batch starts once the pool's worker has taken its first requests
(the pool's `/health` shows jobs in progress or done: its worker is up, the batch under
way) and stops after as many `/runsync` as the one without, or as soon as the batch is
done, whichever comes first; the batch's summary is read right after the last `/runsync`,
and a batch already done then is reported, as the figure is then not one taken wholly
under load."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
import orjson

from bench import load
from bench.load import SMALL_BODY
from bench.measure import NOISY, CpuMeter, job_url, meter
from bench.procs import ENDPOINT, Service, log
from bench.report import Row, ms
from lockgate.models.batch import batch_pool_id

UPLOAD_CHUNK = 1_000  # requests per create or upload call (RunPod's limit is 10 MiB a call)
POLL_S = 0.5  # how often the batch's summary is read while /runsync is measured
STARTED_TIMEOUT_S = 60.0  # finalize -> the pool's worker took its first requests
DONE_TIMEOUT_S = 600.0  # finalize -> the whole batch done
TARGET = 1.2  # the p50 with the batch / the p50 without, at most


@dataclass(frozen=True)
class Cpu:
    """The share of one core each group of processes used over a measurement, and the share
    of all CPUs other processes used meanwhile."""

    groups: dict[str, float]
    others: float

    def text(self) -> str:
        used = ", ".join(f"{name} {share:.0%}" for name, share in self.groups.items())
        return f"{used} of a core; other processes {self.others:.0%} of the CPUs"


def cpu_of(cpu: CpuMeter, seconds: float) -> Cpu:
    """What `cpu`'s groups used over the last `seconds` (when the meter was made)."""
    used, _, others = cpu.used()
    return Cpu({name: v / seconds for name, v in used.items()}, others)


@dataclass(frozen=True)
class UnderBatch:
    """Sequential /runsync with no batch and while a batch ran on the batch pool."""

    requests: int  # the batch's size
    alone: Sequential  # /runsync with no batch
    during: Sequential  # /runsync while the batch ran
    ended_first: bool  # the batch was done when the measurement with it ended
    ended_by_then: int  # its requests ended when the measurement with it ended
    batch_s: float | None  # finalize to the batch done; None: not within DONE_TIMEOUT_S
    waited_s: float  # finalize to the pool's worker taking its first requests
    cpu_alone: Cpu  # what the processes used while /runsync ran with no batch
    cpu_during: Cpu  # and while it ran with the batch


def batch_url(dev: Service, tail: str = "") -> str:
    return job_url(dev, f"batch{tail}")


async def summary(http: aiohttp.ClientSession, dev: Service, batch_id: str) -> dict:
    return await load.get_json(http, batch_url(dev, f"/{batch_id}"))


def ended(batch: dict) -> int:
    """How many of the batch's requests have ended (completed or failed)."""
    return int(batch["requestCompleted"]) + int(batch["requestFailed"])


def done(batch: dict) -> bool:
    return ended(batch) >= int(batch["requestTotal"])


async def start_batch(http: aiohttp.ClientSession, dev: Service, requests: int) -> str:
    """Create a batch of `requests` copies of the bench's small job, uploaded in chunks,
    and finalize it: its id."""
    item = orjson.loads(SMALL_BODY)
    batch_id = str(orjson.loads(await load.post(http, batch_url(dev), b"[]"))["id"])
    for start in range(0, requests, UPLOAD_CHUNK):
        chunk = [item] * min(UPLOAD_CHUNK, requests - start)
        body = orjson.dumps({"requests": chunk})
        await load.post(http, batch_url(dev, f"/{batch_id}/requests"), body)
    await load.post(http, batch_url(dev, f"/{batch_id}/finalize"), b"")
    return batch_id


async def pool_started(http: aiohttp.ClientSession, dev: Service, timeout: float) -> bool:
    """Wait until the batch pool's worker has taken requests; False after `timeout`. The
    pool is made when the endpoint's first batch runs: its `/health` answers 404 until then."""
    url = f"{dev.base}/v2/{batch_pool_id(ENDPOINT)}/health"
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        async with http.get(url) as reply:
            data = await reply.read()
            if reply.status not in (200, 404):
                raise RuntimeError(f"GET {url} answered {reply.status}: {data[:200]!r}")
        if reply.status == 200:
            jobs = orjson.loads(data)["jobs"]
            if jobs["inProgress"] + jobs["completed"] + jobs["failed"] > 0:
                return True
        await asyncio.sleep(0.02)
    return False


async def wait_for(
    http: aiohttp.ClientSession, dev: Service, batch_id: str, least: int, timeout: float
) -> bool:
    """Wait until at least `least` of the batch's requests ended; False after `timeout`."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if ended(await summary(http, dev, batch_id)) >= least:
            return True
        await asyncio.sleep(0.05)
    return False


@dataclass
class Sequential:
    """Sequential /runsync: each answered one's latency (s), and how many the gateway
    refused with 503 (busy: its body budget held by others; not counted as latencies)."""

    latencies: list[float]
    refused: int = 0


async def sequential_while(
    http: aiohttp.ClientSession, url: str, count: int, running: asyncio.Event | None = None
) -> Sequential:
    """Up to `count` sequential /runsync (at least one answered), stopping once `running`
    is clear; a 503 is counted and the next one sent; any other refusal raises."""
    measured = Sequential([])
    while len(measured.latencies) < count and (
        running is None or running.is_set() or not measured.latencies
    ):
        sent = time.perf_counter()
        async with http.post(url, data=SMALL_BODY) as reply:
            body = await reply.read()
        if reply.status == 503:
            measured.refused += 1
            if measured.refused >= count:
                raise RuntimeError(f"POST {url}: {count} answered 503: {body[:200]!r}")
            continue
        if reply.status != 200:
            raise RuntimeError(f"POST {url} answered {reply.status}: {body[:200]!r}")
        measured.latencies.append(time.perf_counter() - sent)
    return measured


async def watch(
    http: aiohttp.ClientSession, dev: Service, batch_id: str, running: asyncio.Event
) -> None:
    """Clear `running` once the batch is done."""
    while not done(await summary(http, dev, batch_id)):
        await asyncio.sleep(POLL_S)
    running.clear()


async def runsync_under_batch(dev: Service, requests: int, count: int) -> UnderBatch:
    """`count` sequential /runsync with no batch, then up to `count` while a batch of
    `requests` runs on the endpoint's batch pool; then wait for the batch to be done."""
    url, began = job_url(dev, "runsync"), time.perf_counter()
    async with load.session(2) as http:
        await load.sequential(http, url, SMALL_BODY, max(1, count // 10))  # warm-up
        log(f"batching: {count} sequential /runsync, no batch")
        cpu, started = meter(dev), time.perf_counter()
        alone = await sequential_while(http, url, count)
        cpu_alone = cpu_of(cpu, time.perf_counter() - started)
        log(f"batching: a batch of {requests:,} requests on the batch pool")
        batch_id = await start_batch(http, dev, requests)
        finalized = time.perf_counter()
        if not await pool_started(http, dev, STARTED_TIMEOUT_S):
            raise RuntimeError(f"the batch pool took no request in {STARTED_TIMEOUT_S} s")
        waited = time.perf_counter() - finalized
        log(f"batching: {count} sequential /runsync while the batch runs")
        running = asyncio.Event()
        running.set()
        watcher = asyncio.create_task(watch(http, dev, batch_id, running))
        try:
            cpu, started = meter(dev), time.perf_counter()  # the pool's worker is up
            during = await sequential_while(http, url, count, running)
            cpu_during = cpu_of(cpu, time.perf_counter() - started)
            by_then = await summary(http, dev, batch_id)
        finally:
            watcher.cancel()
        remaining = finalized + DONE_TIMEOUT_S - time.perf_counter()
        finished = await wait_for(http, dev, batch_id, requests, remaining)
        took = time.perf_counter() - finalized if finished else None
    log(f"batching: /runsync without and with the batch: {time.perf_counter() - began:.0f} s")
    return UnderBatch(
        requests, alone, during, done(by_then), ended(by_then), took, waited, cpu_alone,
        cpu_during,
    )  # fmt: skip


def rows(under: UnderBatch, name: str) -> list[Row]:
    """The rows: p50 / p95 without and with the batch, their ratio beside the 1.2x target
    (not judged when the batch was done before the measurement ended), and how the batch
    went. `name` says which `lockgate dev` of the scenario it ran on."""
    alone, during = under.alone.latencies, under.during.latencies
    p50, with_p50 = load.percentile(alone, 50), load.percentile(during, 50)
    refused = under.alone.refused, under.during.refused
    ratio = with_p50 / p50
    batch = f"{under.requests:,}-request batch"
    state = "DONE before the end"
    if not under.ended_first:
        state = f"still running at the end, {under.ended_by_then:,} of {under.requests:,} ended"
    judged = None if under.ended_first else ratio <= TARGET
    target = f"<= {TARGET}x" + (" (not judged: the batch ended first)" * under.ended_first)
    took = f"done in {under.batch_s:.1f} s" if under.batch_s is not None else "not done"
    per_s = f" ({under.requests / under.batch_s:,.0f} requests/s)" if under.batch_s else ""
    return [
        Row(f"batching {name}: sequential /runsync p50 / p95, no batch", _pair(alone), "",
            f"({len(alone)} requests)"),
        Row(f"batching {name}: sequential /runsync p50 / p95, {batch} running", _pair(during),
            "", f"({len(during)} requests; batch {state})"),
        Row(f"batching: /runsync p50 with a {batch} running vs none", f"{ratio:.2f}x", "",
            target, judged),
        Row("batching: /runsync refused (503), no batch / with the batch",
            f"{refused[0]} / {refused[1]}", "", "0 / 0", refused == (0, 0)),
        Row(f"batching: the {batch} on the batch pool", f"{took}{per_s} after finalize, "
            f"its worker took the first ones after {under.waited_s:.1f} s", detail=True),
        Row("batching: CPU while /runsync ran, no batch", under.cpu_alone.text(), detail=True,
            noisy=under.cpu_alone.others > NOISY),
        Row(f"batching: CPU while /runsync ran, {batch} running", under.cpu_during.text(),
            detail=True, noisy=under.cpu_during.others > NOISY),
    ]  # fmt: skip


def _pair(latencies: list[float]) -> str:
    return f"{ms(load.percentile(latencies, 50))} / {ms(load.percentile(latencies, 95))}"
