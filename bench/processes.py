"""`make bench` rows for `lockgate gateway --processes N` (scenario `procs` of bench/core.py).

/run acceptance with 32 concurrent clients and no workers, as the `run` scenario measures it
on `lockgate dev`, here through one `lockgate gateway` with --processes 1 and then 2 on one
standalone Redis, beside the floor's rate measured in the same scenario. On 2 cores the load
generator and Redis share the CPUs with the gateway processes: the gain is what this machine
shows, not a per-core scaling figure.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load
from bench.measure import CpuMeter, job_url
from bench.procs import ENDPOINT, READY_TIMEOUT_S, Service, children, log
from bench.report import Row
from bench.topology import Topology, gateways, register_endpoints, standalone

if TYPE_CHECKING:
    from bench.core import Config

BODY = b'{"input": {"x": 1}}'
PROCESSES = (1, 2)


async def acceptance(
    url: str, cfg: Config, new_meter: Callable[[], CpuMeter] | None = None
) -> tuple[float, Row | None]:
    """Requests/s of `cfg.clients` concurrent senders after a warm-up, and (with a meter)
    the CPU per request."""
    count = cfg.n(10_000)
    async with load.session(cfg.clients) as http:
        await load.burst(http, url, BODY, cfg.n(1_000), cfg.clients)
        cpu = new_meter() if new_meter else None
        sent = await load.burst(http, url, BODY, count, cfg.clients)
    return sent.rate, cpu.row("CPU us per /run", count) if cpu else None


def wait_listening(gateway: Service, processes: int) -> None:
    """Wait until every process has bound the port (else the clients' connections, made
    once and kept, would all go to the first)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = gateway.log_path.read_text(errors="replace")
        if len(re.findall(r"gateway listening on", text)) >= processes:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{gateway.log_path.name}: fewer than {processes} processes listening")


def gateway_meter(gateway: Service, topology: Topology) -> CpuMeter:
    """CPU of the gateway parent and its processes, Redis and this load generator."""
    pids = [gateway.process.pid, *children(gateway.process.pid)]
    return CpuMeter({"gateway": pids, "Redis": topology.pids(), "client": [os.getpid()]})


async def acceptance_by_processes(cfg: Config, work: Path, floor: Service) -> list[Row]:
    """/run acceptance through --processes 1 and 2, beside the floor's concurrent POSTs."""
    log(f"floor: {cfg.n(10_000)} POSTs from {cfg.clients} clients")
    floor_rate, _ = await acceptance(f"{floor.base}/echo", cfg)
    rows, details, rates = [], [], []
    with standalone(work) as topology:
        await register_endpoints(topology, [ENDPOINT])
        for n in PROCESSES:
            env = {"LOCKGATE_GATEWAY_PROCESSES": str(n)}
            with gateways(work, topology, 1, env) as (gateway,):
                wait_listening(gateway, n)
                log(f"lockgate gateway --processes {n}: {cfg.n(10_000)} /run, no workers")
                per_s, cpu = await acceptance(
                    job_url(gateway, "run"), cfg, lambda g=gateway: gateway_meter(g, topology)
                )
            assert cpu is not None
            rates.append(per_s)
            gain = f"{per_s / rates[0]:.2f}x --processes 1" if n > 1 else ""
            rows.append(
                Row(f"/run acceptance, {cfg.clients} clients, --processes {n}",
                    f"{per_s:,.0f} req/s", f"{floor_rate:,.0f} req/s",
                    gain or f"is {per_s / floor_rate:.0%} of floor")
            )  # fmt: skip
            details.append(Row(f"{cpu.figure}, --processes {n}", cpu.value, detail=True,
                               noisy=cpu.noisy))  # fmt: skip
    return rows + details
