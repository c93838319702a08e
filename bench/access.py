"""`/status` requests/s with API keys and rate limiting on, against both off.

Each setting gets its own `lockgate dev` (no workers, one queued job to read); the two
alternate for `rounds` rounds and the best rate of each counts, since other processes on
the machine only ever make a figure lower. Run alone: `python -m bench.core --only status`.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bench import load
from bench.measure import job_url
from bench.procs import Service, lockgate_dev, log
from bench.report import Row

OFF = {"LOCKGATE_AUTH": "false", "LOCKGATE_RATE_LIMITED": "false"}
MAX_OVERHEAD = 0.15


async def status_rate(dev: Service, count: int, clients: int) -> float:
    """Requests/s of `count` GET /status of one queued job, after a warm-up."""
    async with load.session(clients) as http:
        job = orjson.loads(await load.post(http, job_url(dev, "run"), load.SMALL_BODY))
        url = job_url(dev, f"status/{job['id']}")
        await load.burst(http, url, b"", max(1, count // 10), clients, method="GET")
        return (await load.burst(http, url, b"", count, clients, method="GET")).rate


async def status_overhead(cfg, work: Path, _floor: Service) -> list[Row]:
    """Best /status rate with auth and limits on and off, over alternating rounds."""
    best = {"on": 0.0, "off": 0.0}
    count = cfg.n(10_000)
    for round_ in range(cfg.rounds):
        for label, env in (("off", OFF), ("on", {})):
            with lockgate_dev(work, f"status-{label}-{round_}", 0, env) as dev:
                log(f"lockgate: {count} /status, {cfg.clients} clients, auth+limits {label}")
                rate = await status_rate(dev, count, cfg.clients)
            log(f"  {rate:,.0f} req/s")
            best[label] = max(best[label], rate)
    overhead = 1 - best["on"] / best["off"]
    return [
        Row(f"/status, auth + rate limits on, {cfg.clients} clients", f"{best['on']:,.0f} req/s",
            "", f"overhead < 15% (is {overhead:.1%})", overhead < MAX_OVERHEAD),
        Row(f"/status, auth + rate limits off, {cfg.clients} clients",
            f"{best['off']:,.0f} req/s", "", f"best of {cfg.rounds} rounds each"),
    ]  # fmt: skip
