"""The load generator: one keep-alive aiohttp session, sequential or concurrent POSTs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import orjson

from bench.procs import API_KEY

SMALL_BODY = orjson.dumps({"input": {"x": 1}})  # the job every latency figure sends
HEADERS = {"authorization": API_KEY, "content-type": "application/json"}


@dataclass(frozen=True)
class Burst:
    """What a concurrent burst did: how long it took and every reply body."""

    seconds: float
    replies: list[bytes]

    @property
    def rate(self) -> float:
        return len(self.replies) / self.seconds


@asynccontextmanager
async def session(clients: int = 32) -> AsyncIterator[aiohttp.ClientSession]:
    """A client session with room for `clients` keep-alive connections (plus a spare)."""
    connector = aiohttp.TCPConnector(limit=clients + 2, force_close=False)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, headers=HEADERS, timeout=timeout) as http:
        yield http


async def post(http: aiohttp.ClientSession, url: str, body: bytes, method: str = "POST") -> bytes:
    """POST (or `method`) and return the reply body; raise on any status but 200."""
    async with http.request(method, url, data=body if method == "POST" else None) as reply:
        data = await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{method} {url} answered {reply.status}: {data[:200]!r}")
        return data


async def get_json(http: aiohttp.ClientSession, url: str) -> dict:
    """GET a JSON object; raise on any status but 200."""
    async with http.get(url) as reply:
        data = await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"GET {url} answered {reply.status}: {data[:200]!r}")
        return orjson.loads(data)


async def sequential(http: aiohttp.ClientSession, url: str, body: bytes, count: int) -> list[float]:
    """Latency (s) of `count` POSTs sent one after another."""
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        await post(http, url, body)
        latencies.append(time.perf_counter() - started)
    return latencies


async def burst(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    count: int,
    clients: int,
    *,
    method: str = "POST",
) -> Burst:
    """`count` POSTs (or GETs) from `clients` concurrent senders, each sending its next as
    soon as its previous reply arrived."""
    todo = iter(range(count))
    replies: list[bytes] = []

    async def sender() -> None:
        for _ in todo:
            replies.append(await post(http, url, body, method))

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(clients)))
    return Burst(time.perf_counter() - started, replies)


async def for_duration(
    http: aiohttp.ClientSession, url: str, body: bytes, clients: int, seconds: float
) -> Burst:
    """POSTs from `clients` concurrent senders for `seconds`, each sending its next as soon
    as its previous reply arrived (replies still in flight at the end are counted too)."""
    replies: list[bytes] = []
    started = time.perf_counter()
    until = started + seconds

    async def sender() -> None:
        while time.perf_counter() < until:
            replies.append(await post(http, url, body))

    await asyncio.gather(*(sender() for _ in range(clients)))
    return Burst(time.perf_counter() - started, replies)


def percentile(values: list[float], pct: float) -> float:
    """The `pct` percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered)) - 1))
    return ordered[rank]
