"""The load-balancing proxy's figures (`make bench-lb`, scenario `lb` of `make bench`):
one `lockgate dev --endpoint-type LB` with one warm worker (bench/lb_worker.py, bare
aiohttp on loopback), and the same requests sent straight to that worker (the floor), in
the same run:

1. p50/p95 of a small GET through `/lb/{endpoint}/small` and direct, sequential, in
   alternating blocks (others' load falls on both), and the p50 the gateway adds;
2. GETs/s of 32 concurrent clients through the gateway and direct, alternating rounds of
   the same count, the best round of each (others' load only lowers a figure); the CPU the
   `lockgate dev` process (gateway, health polls, scaler) used per proxied GET;
3. Server-Sent Events: time from the request sent to the stream's first byte, through the
   gateway and direct, alternating one stream at a time;
4. for information, GETs/s as in 2 with the FastAPI (uvicorn) example worker, a heavier
   worker as users write them, on a second `lockgate dev`.

`python -m bench.lb_proxy --scale 0.1` for a quick try. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import orjson

from bench import load
from bench.measure import CpuMeter
from bench.procs import (
    API_KEY,
    ENDPOINT,
    UNREACHED_RATES,
    Service,
    children,
    free_port,
    lockgate_command,
    log,
    spawn,
    stop,
    wait_for,
)
from bench.report import Row, ms

if TYPE_CHECKING:
    from bench.core import Config

WORKER = Path(__file__).with_name("lb_worker.py")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "loadbalancer" / "worker.py"
BLOCK = 100  # sequential requests per alternating block
SEQUENTIAL = 3_000  # per side, at full scale
THROUGHPUT = 6_000  # per round and side, at full scale
ROUNDS = 3
STREAMS = 300  # per side, at full scale
SSE_EVENTS = 3
ADDED_P50_S = 0.0003
MIN_SHARE = 0.5
SSE_WITHIN_S = 0.001
READY_S = 60.0


@dataclass(frozen=True)
class Sides:
    """The same route through the gateway and straight to the worker."""

    gateway: str
    direct: str


@contextlib.contextmanager
def lockgate_lb(workdir: Path, name: str, worker: Path = WORKER) -> Iterator[Service]:
    """`lockgate dev --endpoint-type LB` with exactly one `worker` (the bench's by default),
    healthy at once, in its own data dir."""
    port, data_dir, log_path = free_port(), workdir / f"{name}-data", workdir / f"{name}.log"
    command = [
        *lockgate_command(), "dev", "--worker-command", f"{sys.executable} {worker}",
        "--endpoint-type", "LB", "--port", str(port), "--data-dir", str(data_dir),
        "--api-key", API_KEY, "--endpoint-id", ENDPOINT, "--workers-min", "1",
        "--workers-max", "1", "--idle-timeout", "60",
    ]  # fmt: skip
    env = {**os.environ, "LOCKGATE_RATE_LIMITS": UNREACHED_RATES, "LOAD_SECONDS": "0"}
    service = Service(spawn(command, log_path, env), port, log_path)
    try:
        wait_for(service, r"endpoint '\S+' ready")
        log(f"lockgate dev '{name}' (LB) pid {service.process.pid} on port {port}")
        yield service
    finally:
        stop(service.process, f"lockgate dev '{name}'")


async def first_answer(http: aiohttp.ClientSession, url: str) -> dict:
    """The worker's /small answer through the gateway, once the worker is routable (the
    request is held while it starts)."""
    deadline = time.monotonic() + READY_S
    while True:
        async with http.get(url) as reply:
            data = await reply.read()
            if reply.status == 200:
                return orjson.loads(data)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} answered {reply.status}: {data[:200]!r}")
        await asyncio.sleep(0.2)


async def get(http: aiohttp.ClientSession, url: str) -> None:
    async with http.get(url) as reply:
        await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"GET {url} answered {reply.status}")


async def latencies(http: aiohttp.ClientSession, small: Sides, count: int) -> dict[str, list]:
    """Sequential GETs, `BLOCK` through the gateway then `BLOCK` direct, until `count` each."""
    out: dict[str, list[float]] = {"gateway": [], "direct": []}
    while len(out["gateway"]) < count:
        for side, url in (("gateway", small.gateway), ("direct", small.direct)):
            for _ in range(min(BLOCK, count - len(out[side]))):
                started = time.perf_counter()
                await get(http, url)
                out[side].append(time.perf_counter() - started)
    return out


def latency_rows(lat: dict[str, list[float]]) -> list[Row]:
    p = load.percentile
    g50, d50 = p(lat["gateway"], 50), p(lat["direct"], 50)
    added = g50 - d50
    n = f"{len(lat['gateway']):,} each, blocks of {BLOCK}"
    return [
        Row("LB small GET p50, gateway vs direct", ms(g50), ms(d50), f"({n})"),
        Row("LB small GET p95, gateway vs direct", ms(p(lat["gateway"], 95)),
            ms(p(lat["direct"], 95))),
        Row("LB small GET p50 added by the gateway", ms(added), "", "<= 0.30 ms",
            added <= ADDED_P50_S),
    ]  # fmt: skip


async def rates(
    dev: Service, worker_pid: int, small: Sides, cfg: Config, worker: str = ""
) -> list[Row]:
    """Best GETs/s of `cfg.clients` concurrent clients per side over alternating rounds,
    and the CPU each process used per GET in each side's best round. With a `worker`
    name, the rows are for information (the targets are against the bare worker)."""
    count = cfg.n(THROUGHPUT)
    best: dict[str, float] = {}
    cpu_rows: dict[str, Row] = {}
    per_get = 0.0
    groups = {"lockgate dev": [dev.process.pid], "worker": [worker_pid], "client": [os.getpid()]}
    async with load.session(cfg.clients) as http:
        await load.burst(http, small.gateway, b"", cfg.n(500), cfg.clients, method="GET")
        for round_ in range(cfg.rounds):
            for side, url in (("gateway", small.gateway), ("direct", small.direct)):
                cpu = CpuMeter(groups)
                sent = await load.burst(http, url, b"", count, cfg.clients, method="GET")
                log(f"LB {side} round {round_ + 1}: {sent.rate:,.0f} GET/s")
                if sent.rate > best.get(side, 0.0):
                    best[side] = sent.rate
                    name = f"CPU us per GET, {side}{f' ({worker})' if worker else ''}"
                    cpu_rows[side] = cpu.row(f"{name}, best round", count)
                    if side == "gateway":
                        per_get = cpu.per_op("lockgate dev", count)
    share = best["gateway"] / best["direct"]
    what = f"{cfg.clients} clients" + (f", {worker}" if worker else "")
    target = f">= 50% of direct (is {share:.0%})"
    rows = [
        Row(f"LB GETs/s, {what}, gateway vs direct", f"{best['gateway']:,.0f} /s",
            f"{best['direct']:,.0f} /s", f"({share:.0%} of direct)" if worker else target,
            None if worker else share >= MIN_SHARE),
        Row(f"LB gateway CPU per proxied GET{f', {worker}' if worker else ''}",
            f"{per_get:,.0f} us", "",
            f"the lockgate dev process; best of {cfg.rounds} rounds of {count:,}"),
    ]  # fmt: skip
    if worker:
        return [*rows, cpu_rows["gateway"]]
    return [*rows, cpu_rows["gateway"], cpu_rows["direct"]]


async def first_byte(http: aiohttp.ClientSession, url: str) -> float:
    """Seconds from sending a stream's request to reading its first body byte; the rest
    is read (and checked) after."""
    started = time.perf_counter()
    async with http.get(url) as reply:
        chunk = await reply.content.readany()
        took = time.perf_counter() - started
        rest = chunk + await reply.read()
        if reply.status != 200 or rest.count(b"data: ") != SSE_EVENTS:
            raise RuntimeError(f"SSE {url} answered {reply.status}: {rest[:200]!r}")
    return took


async def sse_rows(http: aiohttp.ClientSession, sse: Sides, count: int) -> list[Row]:
    """Time to first byte of `count` streams per side, alternating one at a time."""
    ttfb: dict[str, list[float]] = {"gateway": [], "direct": []}
    for _ in range(count):
        ttfb["gateway"].append(await first_byte(http, sse.gateway))
        ttfb["direct"].append(await first_byte(http, sse.direct))
    p = load.percentile
    g50, d50 = p(ttfb["gateway"], 50), p(ttfb["direct"], 50)
    return [
        Row("LB SSE time to first byte p50, gateway vs direct", ms(g50), ms(d50),
            f"within 1 ms of direct (+{(g50 - d50) * 1000:.2f} ms)", g50 - d50 <= SSE_WITHIN_S),
        Row("LB SSE time to first byte p95, gateway vs direct", ms(p(ttfb["gateway"], 95)),
            ms(p(ttfb["direct"], 95)), f"({count:,} streams each, alternating)"),
    ]  # fmt: skip


def worker_pid(dev: Service, port: int) -> int:
    """The bench worker's pid: the child of `lockgate dev` started with `PORT=<port>`."""
    for pid in children(dev.process.pid):
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"PORT={port}".encode() in environ:
                return pid
    raise RuntimeError(f"no child of lockgate dev has PORT={port}")


async def lb_proxy(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """The LB proxy's overhead beside the worker it proxies to, one `lockgate dev`."""
    with lockgate_lb(work, "lb") as dev:
        base = f"{dev.base}/lb/{ENDPOINT}"
        async with load.session(1) as http:
            port = (await first_answer(http, f"{base}/small"))["port"]
            direct = f"http://127.0.0.1:{port}"
            small = Sides(f"{base}/small", f"{direct}/small")
            sse = Sides(f"{base}/sse?n={SSE_EVENTS}", f"{direct}/sse?n={SSE_EVENTS}")
            await latencies(http, small, cfg.n(300))  # warm-up
            log(f"LB: {cfg.n(SEQUENTIAL)} sequential GETs each side")
            rows = latency_rows(await latencies(http, small, cfg.n(SEQUENTIAL)))
        rows += await rates(dev, worker_pid(dev, port), small, cfg)
        async with load.session(1) as http:
            log(f"LB: {cfg.n(STREAMS)} SSE streams each side")
            rows += await sse_rows(http, sse, cfg.n(STREAMS))
    return rows + await example_rates(cfg, work)


async def example_rates(cfg: Config, work: Path) -> list[Row]:
    """GETs/s through the gateway and direct with the FastAPI (uvicorn) example worker, a
    worker as users write them (`GET /echo/...` answers the request as JSON)."""
    with lockgate_lb(work, "lb-example", EXAMPLE) as dev:
        base = f"{dev.base}/lb/{ENDPOINT}"
        async with load.session(1) as http:
            host = (await first_answer(http, f"{base}/echo/x"))["headers"]["host"]
        port = int(host.rsplit(":", 1)[1])  # the gateway sends the worker's own Host
        small = Sides(f"{base}/echo/x", f"http://127.0.0.1:{port}/echo/x")
        log("LB: GETs/s with the FastAPI example worker")
        return await rates(dev, worker_pid(dev, port), small, cfg, "FastAPI example")


def main() -> None:
    """Run the scenario alone and print its table."""
    from bench.core import Config, new_loop
    from bench.procs import machine_busy
    from bench.report import machine, table

    parser = argparse.ArgumentParser(prog="python -m bench.lb_proxy", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every count (0.1)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="throughput rounds")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
    cfg = Config(scale=args.scale, rounds=args.rounds)
    work = Path(tempfile.mkdtemp(prefix="lockgate-bench-lb-"))
    busy = machine_busy()
    log(f"work dir {work}; {machine()}; CPU busy before: {busy:.0%}")
    with asyncio.Runner(loop_factory=new_loop) as runner:
        rows = runner.run(lb_proxy(cfg, work, None))  # type: ignore[arg-type]
    print(machine())
    print(table(rows))
    print(f"CPU busy with other work before it started: {busy:.0%}")
    if args.keep:
        log(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
