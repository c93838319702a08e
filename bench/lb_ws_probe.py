"""Issue 45's WebSocket probes, by hand (`python -m bench.lb_ws_probe`), loopback only,
bounded (about 30 s): one `lockgate dev --endpoint-type LB` with one bench worker
(bench/lb_worker.py).

1. Refused upgrades: one WebSocket upgrade to the worker's HTTP-only `/deny` (403) every
   2 s while another client sends sequential GETs; that client's count, median, mean and
   p95, and the statuses the refused callers got.
2. Compressed messages: a client offering permessage-deflate sends 20 messages of 15 MB
   of zeros at once, echoed by the worker (about 15 KB each on the wire when compression
   is negotiated); the dev process's RSS before and at its peak, and whether compression
   was negotiated.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.lb_proxy import first_answer, lockgate_lb
from bench.procs import API_KEY, ENDPOINT, log, rss_bytes

REFUSED_EVERY_S = 2.0
REFUSED_RUN_S = 12.0
MESSAGES = 20
MESSAGE = bytes(15 * 1024 * 1024)
MB = 1024 * 1024


async def refused_upgrades(base: str) -> None:
    headers = {"authorization": API_KEY}
    latencies: list[float] = []
    statuses: list[int] = []
    async with aiohttp.ClientSession(headers=headers) as http:
        await first_answer(http, f"{base}/small")
        end = time.monotonic() + REFUSED_RUN_S

        async def refuse() -> None:
            while time.monotonic() < end:
                try:
                    async with http.ws_connect(f"{base}/deny"):
                        statuses.append(101)
                except aiohttp.WSServerHandshakeError as err:
                    statuses.append(err.status)
                await asyncio.sleep(REFUSED_EVERY_S)

        async def other() -> None:
            while time.monotonic() < end:
                started = time.perf_counter()
                async with http.get(f"{base}/small") as reply:
                    await reply.read()
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(refuse(), other())
    latencies.sort()
    p95 = latencies[int(len(latencies) * 0.95)]
    log(
        f"refused upgrades: the other client's {len(latencies)} GETs in {REFUSED_RUN_S:g} s: "
        f"median {statistics.median(latencies) * 1000:.1f} ms, mean "
        f"{statistics.mean(latencies) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms; the refused "
        f"callers got {statuses}"
    )


async def compressed(base: str, pid: int) -> None:
    before = peak = rss_bytes(pid)
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes(pid))
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    answered, closed = 0, None
    async with (
        aiohttp.ClientSession(headers={"authorization": API_KEY}) as http,
        http.ws_connect(f"{base}/ws?echo", compress=15, max_msg_size=0) as ws,
    ):
        negotiated = ws.compress

        async def send() -> None:
            for _ in range(MESSAGES):  # all sent at once, as a client may
                await ws.send_bytes(MESSAGE)

        sender = asyncio.create_task(send())  # read meanwhile: echoes must not block it
        for _ in range(MESSAGES):
            msg = await ws.receive(timeout=60)
            if msg.type != aiohttp.WSMsgType.BINARY:
                closed = (msg.type.name, ws.close_code)
                break
            answered += 1
        sender.cancel()
    done.set()
    await sampler
    log(
        f"compressed messages: deflate negotiated: {bool(negotiated)} (wbits {negotiated}); "
        f"{answered}/{MESSAGES} answered, closed: {closed}; dev RSS {before / MB:.0f} MB "
        f"before, peak {peak / MB:.0f} MB"
    )


async def main(port: int, pid: int) -> None:
    base = f"http://127.0.0.1:{port}/lb/{ENDPOINT}"
    await refused_upgrades(base)
    await compressed(base, pid)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp, lockgate_lb(Path(tmp), "ws-probe") as dev:
        asyncio.run(main(dev.port, dev.process.pid))
