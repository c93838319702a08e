"""`make bench-sizing` (`python -m bench.sizing`): the figures of docs/operations.md's
"Sizing Redis", read from Redis itself (INFO) and /proc, on real redis-servers on loopback.

Per job transition (submit = /run, take = job-take, done = job-done, and a full job run by
no-op worker processes): the script calls (EVALSHA) and all the commands Redis ran (INFO
commandstats, which counts every command inside the scripts too), Redis CPU (INFO cpu
used_cpu_user + used_cpu_sys) and the gateway process's CPU; memory per queued job (INFO
memory used_memory, small and 1 KB inputs); then a full job on a 3-master cluster with 3
endpoints on 3 masters: each master's share. One gateway (`lockgate gateway`); every run
repeated (`--runs`) so the machine's noise shows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench import load
from bench.load import SMALL_BODY
from bench.procs import ENDPOINT, Service, cpu_seconds, log
from bench.redis_modes import url
from bench.report import cpu_model
from bench.topology import (
    cluster,
    endpoints_on_masters,
    gateways,
    register_endpoints,
    standalone,
    workers,
)
from tests.redis_topologies import send  # importable once bench.topology set the path

KB_BODY = orjson.dumps({"input": {"data": "x" * 1013}})  # `input` is 1,024 bytes of JSON
CLIENTS = 16


def info(port: int, section: str) -> dict[str, str]:
    """One INFO section as {field: value}."""
    lines = send(port, "INFO", section, timeout=5).split("\r\n")
    return dict(ln.split(":", 1) for ln in lines if ":" in ln and not ln.startswith("#"))


@dataclass(frozen=True)
class Reading:
    """A Redis server's counters at one moment."""

    calls: Counter  # commandstats calls per command, commands inside scripts included
    cpu_s: float  # used_cpu_user + used_cpu_sys
    memory: int  # used_memory, bytes

    @classmethod
    def of(cls, port: int) -> Reading:
        cpu = info(port, "cpu")
        calls = Counter({
            k.removeprefix("cmdstat_"): int(v.split(",")[0].removeprefix("calls="))
            for k, v in info(port, "commandstats").items()
        })  # fmt: skip
        used = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        return cls(calls, used, int(info(port, "memory")["used_memory"]))


@dataclass(frozen=True)
class Cost:
    """What one transition cost, per job."""

    scripts: float  # EVALSHA calls: one per transition, or per batch of a loop tick
    commands: float  # every command, inside the scripts too
    top: str  # the most frequent commands, inside scripts or not
    redis_us: float
    gateway_us: float


def cost(before: Reading, after: Reading, gw_s: float, jobs: int) -> Cost:
    """Per-job cost between two readings (INFO's own calls taken out)."""
    calls = after.calls - before.calls
    calls.pop("info", None)  # `Reading.of`'s own
    scripts = calls["evalsha"] + calls["eval"]
    top = ", ".join(f"{k} {v / jobs:.1f}" for k, v in calls.most_common(5) if k != "evalsha")
    cpu_us = (after.cpu_s - before.cpu_s) / jobs * 1e6
    return Cost(scripts / jobs, calls.total() / jobs, top, cpu_us, gw_s / jobs * 1e6)


async def measured(port: int, gateway_pid: int, jobs: int, work: Awaitable) -> Cost:
    before, gw = Reading.of(port), cpu_seconds(gateway_pid)
    await work
    return cost(before, Reading.of(port), cpu_seconds(gateway_pid) - gw, jobs)


# -- the transitions, driven over HTTP as a worker would


async def takes(gateway: Service, worker_key: str, count: int) -> list[tuple[str, str]]:
    """`count` job-take calls from CLIENTS worker ids; the (worker, job id) pairs taken."""
    taken: list[tuple[str, str]] = []
    todo = iter(range(count))
    headers = {"authorization": worker_key}

    async def worker(http: aiohttp.ClientSession, wid: str) -> None:
        for _ in todo:
            async with http.get(url(gateway, ENDPOINT, f"job-take/{wid}"), headers=headers) as r:
                assert r.status == 200, f"job-take answered {r.status}"
                taken.append((wid, (await r.json())["id"]))

    async with load.session(CLIENTS) as http:
        await asyncio.gather(*(worker(http, f"s{i}") for i in range(CLIENTS)))
    return taken


async def dones(gateway: Service, worker_key: str, taken: list[tuple[str, str]]) -> None:
    """job-done for every taken job, CLIENTS at once."""
    todo = iter(taken)
    headers = {"authorization": worker_key}

    async def worker(http: aiohttp.ClientSession) -> None:
        for wid, job in todo:
            route = f"job-done/{wid}/{job}?isStream=false"
            body = b'{"output": {"ok": true}}'
            async with http.post(url(gateway, ENDPOINT, route), data=body, headers=headers) as r:
                assert r.status == 200, f"job-done answered {r.status}"

    async with load.session(CLIENTS) as http:
        await asyncio.gather(*(worker(http) for _ in range(CLIENTS)))


async def submit(gateway: Service, endpoints: list[str], body: bytes, count: int) -> None:
    """`count` jobs spread over the endpoints (the first ones take the remainder)."""
    each, extra = divmod(count, len(endpoints))
    async with load.session(CLIENTS) as http:
        await asyncio.gather(*(
            load.burst(http, url(gateway, e, "run"), body, each + (i < extra),
                       CLIENTS // len(endpoints))
            for i, e in enumerate(endpoints)
        ))  # fmt: skip


async def full_jobs(gateway: Service, endpoints: list[str], count: int) -> None:
    """Submit `count` jobs over the endpoints and wait until workers finished them all."""
    from bench.redis_modes import finished_at

    async with load.session(CLIENTS) as http:
        start = await _finished(http, gateway, endpoints)
        watcher = asyncio.create_task(finished_at(http, gateway, endpoints, start + count))
        await submit(gateway, endpoints, SMALL_BODY, count)
        await watcher


async def _finished(http: aiohttp.ClientSession, gateway: Service, endpoints: list[str]) -> int:
    from bench.redis_modes import finished

    return await finished(http, gateway, endpoints)


async def purge(gateway: Service) -> None:
    async with load.session(1) as http:
        await load.post(http, url(gateway, ENDPOINT, "purge-queue"), b"{}")


# -- the two set-ups


async def one_redis(work: Path, jobs: int) -> dict[str, str]:
    """Every per-transition figure on one standalone Redis, as table cells."""
    cells: dict[str, str] = {}
    with standalone(work) as topology, gateways(work, topology, 1) as (gateway,):
        port, gw = topology.masters[0].port, gateway.process.pid
        _, worker_keys = await register_endpoints(topology, [ENDPOINT])
        key = worker_keys[ENDPOINT]
        mem0 = Reading.of(port).memory
        sub = await measured(port, gw, jobs, submit(gateway, [ENDPOINT], SMALL_BODY, jobs))
        cells["memory per queued job, small input"] = _per_job(Reading.of(port), mem0, jobs)
        taken: list = []

        async def take_all() -> None:
            taken.extend(await takes(gateway, key, jobs))

        take = await measured(port, gw, jobs, take_all())
        done = await measured(port, gw, jobs, dones(gateway, key, taken))
        mem0 = Reading.of(port).memory
        await submit(gateway, [ENDPOINT], KB_BODY, jobs)
        cells["memory per queued job, 1 KB input"] = _per_job(Reading.of(port), mem0, jobs)
        await purge(gateway)
        with workers(work, [(gateway, ENDPOINT, key)] * 2, _ids(work)):
            await asyncio.sleep(2)  # the workers call in
            full = await measured(port, gw, jobs, full_jobs(gateway, [ENDPOINT], jobs))
    for name, c in (("submit", sub), ("take", take), ("done", done), ("full job", full)):
        cells[f"{name}: script calls / commands"] = f"{c.scripts:.2f} / {c.commands:.1f}"
        cells[f"{name}: Redis CPU / gateway CPU"] = f"{c.redis_us:,.0f} / {c.gateway_us:,.0f} us"
        cells[f"{name}: top commands"] = c.top
    cells["jobs/s one Redis core sustains"] = f"{1e6 / full.redis_us:,.0f}"
    cells["gateway cores per Redis core"] = f"{full.gateway_us / full.redis_us:.1f}"
    return cells


def _per_job(now: Reading, before: int, jobs: int) -> str:
    return f"{(now.memory - before) / jobs:,.0f} B"


async def three_masters(work: Path, jobs: int) -> dict[str, str]:
    """A full job over 3 endpoints on 3 masters: each master's share of commands and CPU."""
    with cluster(work) as topology, gateways(work, topology, 1) as (gateway,):
        endpoints = endpoints_on_masters(topology, 3)
        _, worker_keys = await register_endpoints(topology, endpoints)
        placements = [(gateway, e, worker_keys[e]) for e in endpoints]
        with workers(work, placements, _ids(work)):
            await asyncio.sleep(2)
            before = {n.port: Reading.of(n.port) for n in topology.masters}
            replicas = [n for n in topology.processes if n not in topology.masters]
            rep0, gw0 = _cpu(replicas), cpu_seconds(gateway.process.pid)
            await full_jobs(gateway, endpoints, jobs)
            after = {n.port: Reading.of(n.port) for n in topology.masters}
            rep, gw = _cpu(replicas) - rep0, cpu_seconds(gateway.process.pid) - gw0
    cells = {}
    costs = [cost(before[p], after[p], 0, jobs) for p in before]
    for i, c in enumerate(costs):  # per job of its own endpoint: x3 (a third of the jobs)
        cells[f"cluster master {i + 1}: Redis CPU per own job, share of script calls"] = (
            f"{c.redis_us * 3:,.0f} us, {c.scripts / sum(x.scripts for x in costs):.0%}"
        )
    cells["cluster: 3 replicas' CPU per job, gateway CPU per job"] = (
        f"{rep / jobs * 1e6:,.0f} us, {gw / jobs * 1e6:,.0f} us"
    )
    return cells


def _cpu(nodes: list) -> float:
    return sum(cpu_seconds(n.process.pid) for n in nodes if n.process)


def _ids(work: Path) -> Path:
    folder = work / f"ids-{time.monotonic_ns()}"
    folder.mkdir()
    return folder


# -- the report


def spread(values: list[str]) -> str:
    """How far apart the runs' first numbers are, relative to the smallest."""
    found = [re.match(r"[\d,.]+", v.replace(",", "")) for v in values]
    nums = [float(m[0]) for m in found if m]
    if len(nums) < 2 or min(nums) <= 0:
        return ""
    return f"{(max(nums) - min(nums)) / min(nums):.0%}"


def report(runs: list[dict[str, str]]) -> str:
    names = list(runs[0])
    width = max(map(len, names))
    heads = [f"run {i + 1}" for i in range(len(runs))]
    lines = [f"{'figure'.ljust(width)}  " + "  ".join(h.ljust(22) for h in heads) + "  spread"]
    for name in names:
        cells = [r.get(name, "") for r in runs]
        lines.append(f"{name.ljust(width)}  " + "  ".join(c.ljust(22) for c in cells)
                     + f"  {spread(cells)}")  # fmt: skip
    return "\n".join(line.rstrip() for line in lines)


async def run_all(work: Path, jobs: int, runs: int) -> list[dict[str, str]]:
    results = []
    for i in range(runs):
        log(f"run {i + 1}/{runs}: one Redis")
        cells = await one_redis(work / f"run{i}-one", jobs)
        log(f"run {i + 1}/{runs}: 3-master cluster")
        cells |= await three_masters(work / f"run{i}-cluster", jobs)
        results.append(cells)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sizing", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per transition")
    parser.add_argument("--runs", type=int, default=2, help="repeat everything this often")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lockgate-sizing-"))
    started = time.monotonic()
    try:
        for i in range(args.runs):
            (work / f"run{i}-one").mkdir()
            (work / f"run{i}-cluster").mkdir()
        results = asyncio.run(run_all(work, args.jobs, args.runs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_avg = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, {cpu_model()}; load average {load_avg}; "
          f"{args.jobs} jobs per figure; {time.monotonic() - started:.0f} s")  # fmt: skip
    print(report(results))


if __name__ == "__main__":
    main()
