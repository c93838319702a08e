"""`make bench` rows past one Redis (scenarios `shards` and `ack` of bench/core.py).

shards: end-to-end jobs/s (/run -> a worker takes -> done, no-op workers) through 2
`lockgate gateway` processes and 3 endpoints, on one standalone Redis and then on a Redis
Cluster of 3 masters + 3 replicas whose 3 endpoints' slots sit on different masters; each
run checked for lost and doubled jobs. On 2 cores the cluster's 6 redis-servers share the
CPUs with the gateways, workers and load generator: the ratio is not a scaling figure (the
sizing section of docs/operations.md derives that from per-core costs, bench/sizing.py).

ack: /run p50 over sequential requests with LOCKGATE_REDIS_MIN_REPLICAS_ACK 0 and 1 on a
Sentinel set (a master, 2 replicas, 3 sentinels), then on the 3-master cluster: one gateway
with each setting, requests taking turns between them, so the shared machine's noise falls
on both alike.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import orjson

from bench import load
from bench.measure import CpuMeter
from bench.procs import ENDPOINT, Service, log
from bench.report import Row, ms
from bench.topology import (
    Topology,
    cluster,
    endpoints_on_masters,
    gateways,
    register_endpoints,
    sentinels,
    standalone,
    workers,
)

if TYPE_CHECKING:
    from bench.core import Config

GATEWAYS = 2
ENDPOINTS = 3
WORKERS_PER_ENDPOINT = 2
FINISH_TIMEOUT_S = 60


def url(gateway: Service, endpoint: str, route: str) -> str:
    return f"{gateway.base}/v2/{endpoint}/{route}"


async def finished(http: aiohttp.ClientSession, gateway: Service, endpoints: list[str]) -> int:
    """Jobs completed or failed, summed over the endpoints (their /health)."""
    total = 0
    for endpoint in endpoints:
        jobs = (await load.get_json(http, url(gateway, endpoint, "health")))["jobs"]
        total += jobs["completed"] + jobs["failed"]
    return total


async def failed(http: aiohttp.ClientSession, gateway: Service, endpoints: list[str]) -> int:
    bodies = [await load.get_json(http, url(gateway, e, "health")) for e in endpoints]
    return sum(b["jobs"]["failed"] for b in bodies)


async def workers_in(http: aiohttp.ClientSession, gateway: Service, endpoints: list[str]) -> None:
    """Wait until every endpoint's workers have called in."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        bodies = [await load.get_json(http, url(gateway, e, "health")) for e in endpoints]
        if all(b["workers"]["idle"] + b["workers"]["running"] >= WORKERS_PER_ENDPOINT
               for b in bodies):  # fmt: skip
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("workers did not call in within 60 s")


async def finished_at(
    http: aiohttp.ClientSession, gateway: Service, endpoints: list[str], total: int
) -> float:
    """The perf_counter time at which `total` jobs are finished over the endpoints."""
    deadline = time.perf_counter() + FINISH_TIMEOUT_S
    while time.perf_counter() < deadline:
        if await finished(http, gateway, endpoints) >= total:
            return time.perf_counter()
        await asyncio.sleep(0.02)
    raise RuntimeError(f"{total} jobs not finished within {FINISH_TIMEOUT_S} s")


async def spread_load(
    http: aiohttp.ClientSession, targets: list[str], total: int, clients: int
) -> list[str]:
    """`total` /run POSTs spread evenly over the target URLs, `clients` senders in all."""
    each, senders = total // len(targets), max(1, clients // len(targets))
    bursts = await asyncio.gather(
        *(load.burst(http, t, load.SMALL_BODY, each, senders) for t in targets)
    )
    return [orjson.loads(r)["id"] for b in bursts for r in b.replies]


async def spread_e2e(cfg: Config, work: Path, topology: Topology) -> tuple[float, tuple, Row]:
    """Jobs/s end to end over 2 gateways x 3 endpoints; (lost, twice, failed); CPU row."""
    from bench.core import audit

    endpoints = endpoints_on_masters(topology, ENDPOINTS)
    _, worker_keys = await register_endpoints(topology, endpoints)
    total = cfg.n(4_800) // (GATEWAYS * ENDPOINTS) * (GATEWAYS * ENDPOINTS)
    ids_dir = work / f"ids-{len(topology.processes)}"
    ids_dir.mkdir()
    with gateways(work, topology, GATEWAYS) as gws:
        placements = [
            (gws[i % GATEWAYS], e, worker_keys[e])
            for i, e in enumerate(endpoints * WORKERS_PER_ENDPOINT)
        ]
        with workers(work, placements, ids_dir) as worker_pids:
            async with load.session(cfg.clients) as http:
                await workers_in(http, gws[0], endpoints)
                log(f"{topology.name}: {total} jobs over {endpoints} via {GATEWAYS} gateways")
                cpu = CpuMeter({
                    "gateways": [g.process.pid for g in gws], "Redis": topology.pids(),
                    "workers": worker_pids, "client": [os.getpid()],
                })  # fmt: skip
                started = time.perf_counter()
                watcher = asyncio.create_task(finished_at(http, gws[0], endpoints, total))
                targets = [url(g, e, "run") for g in gws for e in endpoints]
                ids = await spread_load(http, targets, total, cfg.clients)
                done = await watcher
                cpu_row = cpu.row(f"CPU us per job end to end, {topology.name}", total)
                fails = await failed(http, gws[0], endpoints)
    lost, twice = audit(ids_dir, ids)
    return total / (done - started), (lost, twice, fails), cpu_row


async def shards(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """One standalone Redis, then a 3-master cluster: the same 2-gateway, 3-endpoint run."""
    shape = f"{GATEWAYS} gateways, {ENDPOINTS} endpoints x {WORKERS_PER_ENDPOINT} workers"
    rows, details, rates = [], [], []
    for start in (standalone, cluster):
        began = time.monotonic()
        with start(work) as topology:
            per_s, (lost, twice, fails), cpu_row = await spread_e2e(cfg, work, topology)
        log(f"{topology.name}: {time.monotonic() - began:.0f} s with start and stop")
        rates.append(per_s)
        clean = lost == twice == fails == 0
        note = "" if start is standalone else (
            f"{per_s / rates[0]:.2f}x one Redis (2 cores: no scaling shown)"
        )  # fmt: skip
        rows += [
            Row(f"end to end, {topology.name}, {shape}", f"{per_s:,.0f} jobs/s", "", note),
            Row("  lost / run twice / failed", f"{lost} / {twice} / {fails}", "", "0 / 0 / 0",
                clean),
        ]  # fmt: skip
        details.append(cpu_row)
    return rows + details


async def alternating(
    http: aiohttp.ClientSession, urls: list[str], count: int
) -> list[list[float]]:
    """Latency (s) of `count` sequential POSTs to each URL, taking turns, so that both
    see the same moments of a shared machine's noise."""
    took: list[list[float]] = [[] for _ in urls]
    for _ in range(count):
        for i, target in enumerate(urls):
            started = time.perf_counter()
            await load.post(http, target, load.SMALL_BODY)
            took[i].append(time.perf_counter() - started)
    return took


async def ack_cost(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """/run p50 and p90 through two gateways, MIN_REPLICAS_ACK 0 and 1, requests taking
    turns between them: on one Sentinel set, then on a 3-master Redis Cluster (where the
    WAIT goes to the endpoint's master)."""
    count, rows = cfg.n(1000), []
    for start, name in ((sentinels, "Sentinel"), (cluster, "Cluster")):
        with start(work / name.lower()) as topology:
            await register_endpoints(topology, [ENDPOINT])
            with (
                gateways(work, topology, 1, {"LOCKGATE_REDIS_MIN_REPLICAS_ACK": "0"}) as (off,),
                gateways(work, topology, 1, {"LOCKGATE_REDIS_MIN_REPLICAS_ACK": "1"}) as (on,),
            ):
                urls = [url(off, ENDPOINT, "run"), url(on, ENDPOINT, "run")]
                async with load.session(2) as http:
                    await alternating(http, urls, cfg.n(50))
                    took = await alternating(http, urls, count)
        (off50, off90), (on50, on90) = (
            (load.percentile(t, 50), load.percentile(t, 90)) for t in took
        )
        rows += [
            Row(f"/run p50 / p90, {name}, MIN_REPLICAS_ACK=0 ({count} seq.)",
                f"{ms(off50)} / {ms(off90)}"),
            Row(f"/run p50 / p90, {name}, MIN_REPLICAS_ACK=1 ({count} seq.)",
                f"{ms(on50)} / {ms(on90)}", "", f"p50 {(on50 - off50) * 1000:+.2f} ms"),
        ]  # fmt: skip
    return rows
