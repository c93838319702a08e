"""The OpenAI route's figures (`python -m bench.core --only openai`), one `lockgate dev` with
the vLLM-style handler of bench/openai_handler.py:

1. streaming through `/openai/v1/chat/completions`: per chunk, the time from the handler's
   yield to the client reading its SSE event (the gateway's per-chunk overhead, with the
   worker runtime's POST of the chunk), and time to first token beside the handler's own;
   the client reads raw SSE bytes with aiohttp (no SDK parsing), one stream at a time;
2. chat completions/s of 32 concurrent non-streaming clients on `/openai/...` against the
   same clients posting the same job input to `/runsync`, alternating for `rounds` rounds
   of equal duration; the best rate of each counts (others' load only lowers a figure).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import orjson

from bench import load
from bench.measure import job_url, meter, wait_workers
from bench.procs import Service, lockgate_dev, log
from bench.report import Row, ms

if TYPE_CHECKING:
    from bench.core import Config

HANDLER = Path(__file__).with_name("openai_handler.py")
ROUTE = "openai/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Say ok."}]
CHUNKS_PER_STREAM = 10
STREAMS = 40  # x CHUNKS_PER_STREAM chunks at full scale
SECONDS = 5  # each throughput round, per route
MAX_CHUNK_P50_S = 0.002
MIN_RATIO = 0.9


@dataclass
class StreamTimes:
    """What the streams showed, in seconds: each chunk's yield -> read, and per stream the
    time to first token, the handler's own time to it, and request sent -> handler start."""

    chunk: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    direct: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)


def split_events(data: bytes) -> tuple[list[bytes], bytes]:
    """The `data:` payloads of the complete SSE events in `data` (comments dropped), and the
    incomplete rest."""
    *events, rest = data.split(b"\n\n")
    payloads = [line[6:] for e in events for line in e.split(b"\n") if line.startswith(b"data: ")]
    return payloads, rest


def add_stream(times: StreamTimes, sent: float, events: list[tuple[float, bytes]]) -> None:
    """Add one stream's figures: `events` are (monotonic time read, payload), `sent` when
    its request was sent."""
    chunks = [(at, orjson.loads(p)) for at, p in events if p != b"[DONE]"]
    if not chunks or events[-1][1] != b"[DONE]":
        raise RuntimeError(f"stream ended without chunks or [DONE]: {events[-3:]!r}")
    times.chunk += [at - c["bench_emitted"] for at, c in chunks]
    at, first = chunks[0]
    times.first.append(at - sent)
    times.direct.append(first["bench_emitted"] - first["bench_started"])
    times.queued.append(first["bench_started"] - sent)


async def read_stream(
    http: aiohttp.ClientSession, url: str, body: bytes, times: StreamTimes
) -> None:
    """One streamed chat completion, its figures added to `times`."""
    events: list[tuple[float, bytes]] = []
    sent, rest = time.monotonic(), b""
    async with http.post(url, data=body) as reply:
        if reply.status != 200:
            raise RuntimeError(f"stream answered {reply.status}: {(await reply.read())[:200]!r}")
        async for data in reply.content.iter_any():
            read = time.monotonic()
            payloads, rest = split_events(rest + data)
            events += [(read, p) for p in payloads]
    add_stream(times, sent, events)


def request(stream: bool) -> dict:
    """An OpenAI chat completion request body."""
    tokens = CHUNKS_PER_STREAM if stream else 16
    return {"model": "bench-model", "messages": MESSAGES, "stream": stream, "max_tokens": tokens}


async def stream_times(dev: Service, streams: int) -> StreamTimes:
    """`streams` streamed completions one after another."""
    url, body = job_url(dev, ROUTE), orjson.dumps(request(stream=True))
    times = StreamTimes()
    async with load.session(1) as http:
        for _ in range(streams):
            await read_stream(http, url, body, times)
    return times


def stream_rows(times: StreamTimes, streams: int) -> list[Row]:
    """The streaming figures: per-chunk overhead, and time to first token beside direct."""
    p = load.percentile
    chunk50, chunk99 = p(times.chunk, 50), p(times.chunk, 99)
    n = f"{len(times.chunk)} chunks over {streams} streams"
    return [
        Row("OpenAI stream, worker yield -> SSE event p50", ms(chunk50), "",
            f"<= 2.00 ms ({n})", chunk50 <= MAX_CHUNK_P50_S),
        Row("OpenAI stream, worker yield -> SSE event p99", ms(chunk99)),
        Row("OpenAI stream, time to first token p50", ms(p(times.first, 50)),
            ms(p(times.direct, 50)), "floor: the handler's own"),
        Row("OpenAI stream, time to first token p99", ms(p(times.first, 99)),
            ms(p(times.direct, 99))),
        Row("OpenAI stream, request sent -> handler starts (p50 / p99)",
            f"{ms(p(times.queued, 50))} / {ms(p(times.queued, 99))}", detail=True),
    ]  # fmt: skip


# -- chat completions/s


@dataclass(frozen=True)
class Route:
    """One way to ask for the same chat completion: URL, body, and what every reply holds."""

    name: str
    url: str
    body: bytes
    marker: bytes


def routes(dev: Service) -> list[Route]:
    """`/openai/v1/chat/completions` and `/runsync` with the job input the first makes."""
    body = request(stream=False)
    job_input = {"openai_route": "/v1/chat/completions", "openai_input": body}
    return [
        Route("/openai", job_url(dev, ROUTE), orjson.dumps(body), b'"chat.completion"'),
        Route("/runsync", job_url(dev, "runsync"), orjson.dumps({"input": job_input}),
              b'"COMPLETED"'),
    ]  # fmt: skip


async def route_rate(dev: Service, route: Route, clients: int, seconds: float) -> tuple[float, Row]:
    """Completions/s of `clients` senders for `seconds`; every reply must be a completion."""
    async with load.session(clients) as http:
        cpu = meter(dev)
        burst = await load.for_duration(http, route.url, route.body, clients, seconds)
    if wrong := [r for r in burst.replies if route.marker not in r]:
        raise RuntimeError(f"{route.name}: {len(wrong)} replies without a completion: {wrong[0]!r}")
    return burst.rate, cpu.row(f"CPU us per chat completion via {route.name}", len(burst.replies))


async def completion_rates(dev: Service, cfg: Config) -> list[Row]:
    """Best completions/s of each route over alternating rounds of the same duration."""
    seconds = cfg.n(SECONDS)
    best: dict[str, tuple[float, Row]] = {}
    for round_ in range(cfg.rounds):
        for route in routes(dev):
            log(f"lockgate: {route.name} round {round_ + 1}, {cfg.clients} clients, {seconds} s")
            rate, cpu = await route_rate(dev, route, cfg.clients, seconds)
            log(f"  {rate:,.0f} completions/s")
            if rate > best.get(route.name, (0.0,))[0]:
                best[route.name] = (rate, cpu)
    (openai, openai_cpu), (runsync, runsync_cpu) = best["/openai"], best["/runsync"]
    ratio = openai / runsync
    what = f"{cfg.clients} clients, {cfg.e2e_workers} workers"
    return [
        Row(f"chat completions/s via /openai, {what}", f"{openai:,.0f} /s", "",
            f">= 90% of /runsync (is {ratio:.0%})", ratio >= MIN_RATIO),
        Row(f"chat completions/s via /runsync, {what}", f"{runsync:,.0f} /s", "",
            f"best of {cfg.rounds} rounds of {seconds} s each"),
        openai_cpu,
        runsync_cpu,
    ]  # fmt: skip


async def openai_route(cfg: Config, work: Path, _floor: Service) -> list[Row]:
    """Streaming overhead and completions/s of the OpenAI route, one `lockgate dev`."""
    streams = cfg.n(STREAMS)
    with lockgate_dev(work, "openai", cfg.e2e_workers, {}, handler=HANDLER) as dev:
        async with load.session(1) as http:
            await wait_workers(http, dev, cfg.e2e_workers)
        await stream_times(dev, 1)  # warm-up: each worker's first job pays its imports
        log(f"lockgate: {streams} OpenAI streams of {CHUNKS_PER_STREAM} chunks, one at a time")
        cpu = meter(dev)
        times = await stream_times(dev, streams)
        per_chunk = cpu.row("CPU us per streamed chunk", len(times.chunk))
        rows = [*stream_rows(times, streams), per_chunk]
        rows += await completion_rates(dev, cfg)
    return rows
