"""Celery's side of `make bench`'s peer scenario (bench/celery_peer.py), run by the bench's
own venv (`make bench-venv`: `$BENCH_VENV`, `.venv-bench` by default), never the
project's: Celery and kombu pin their own versions of what lockgate also uses.

`python -m bench.celery_side --redis URL --shape SHAPE [--scale S] [--clients C]` (from
the repository's root, with the worker of bench/celery_app.py on that Redis) runs one of
Celery's load shapes with its synchronous client API, one thread per client, and prints
its figures as one JSON object:

- `latency`: `latencies` (s) of 1,500 sequential `apply_async().get()`, after a warm-up;
- `sync`: `sync_rate`, jobs/s of 2,000 `apply_async().get()` from C threads;
- `polled`: 5,000 jobs by C threads that `delay()` then poll `ready()` every
  POLL_INTERVAL_S (`seconds`, `seen` submit-to-seen of each, `ids`, `polls`, `failed`,
  `unfinished`);
- `drained`: as ../shared/bench-peers/celery_bench.py does: 5,000 `apply_async` from one
  client, then `.get()` on each (`seconds`, `completed`, `ids`).

Imports nothing of lockgate (and `celery` only when run): its helpers are importable from
the project's venv too.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

POLL_INTERVAL_S = 0.1  # between two sweeps of a client's pending jobs
DEADLINE_S = 50.0  # each load shape gives up here (a scenario stays < 60 s)
GET_TIMEOUT_S = 30.0


def shares(total: int, clients: int) -> list[int]:
    """`total` jobs split between `clients` as evenly as can be (the first get one more)."""
    base, extra = divmod(total, clients)
    return [base + (i < extra) for i in range(clients)]


def scaled(count: int, scale: float) -> int:
    """`count` shrunk by `scale` (at least 1), as bench.core's Config.n does."""
    return max(1, int(count * scale))


def in_threads(clients: int, work: Callable[[int], Any], args: list[int]) -> list[Any]:
    """`work(arg)` for each of `args`, `clients` threads at once; the results in order."""
    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(work, args))


def sequential(count: int) -> list[float]:
    """Latency (s) of `count` `apply_async(...).get()` one after another."""
    from bench.celery_app import noop

    latencies: list[float] = []
    deadline = time.perf_counter() + DEADLINE_S
    for _ in range(count):
        started = time.perf_counter()
        if started > deadline:
            break
        noop.apply_async().get(timeout=GET_TIMEOUT_S)
        latencies.append(time.perf_counter() - started)
    return latencies


def sync_rate(count: int, clients: int) -> float:
    """Jobs/s of `count` `apply_async(...).get()` from `clients` threads."""
    from bench.celery_app import noop

    deadline = time.perf_counter() + DEADLINE_S

    def client(n: int) -> int:
        for done in range(n):
            if time.perf_counter() > deadline:
                return done
            noop.apply_async().get(timeout=GET_TIMEOUT_S)
        return n

    started = time.perf_counter()
    done = sum(in_threads(clients, client, shares(count, clients)))
    return done / (time.perf_counter() - started)


def polled(total: int, clients: int) -> dict[str, Any]:
    """`total` jobs by `clients` threads that submit with `delay()`, then poll `ready()`."""
    from bench.celery_app import noop

    deadline = time.perf_counter() + DEADLINE_S

    def client(count: int) -> tuple[list[float], list[str], int, int, int]:
        pending = []
        for _ in range(count):
            sent = time.perf_counter()
            pending.append((noop.delay(), sent))
        ids, seen, polls, failed = [], [], 0, 0
        while pending and time.perf_counter() < deadline:
            still = []
            for result, sent in pending:
                polls += 1
                if not result.ready():
                    still.append((result, sent))
                    continue
                seen.append(time.perf_counter() - sent)
                ids.append(result.id)
                failed += not result.successful()
            pending = still
            time.sleep(POLL_INTERVAL_S if pending else 0)
        return seen, ids, polls, failed, len(pending)

    started = time.perf_counter()
    done = in_threads(clients, client, shares(total, clients))
    took = time.perf_counter() - started
    return {
        "seconds": took,
        "seen": [x for d in done for x in d[0]],
        "ids": [x for d in done for x in d[1]],
        "polls": sum(d[2] for d in done),
        "failed": sum(d[3] for d in done),
        "unfinished": sum(d[4] for d in done),
    }


def drained(total: int) -> dict[str, Any]:
    """The side-by-side harness's Celery batch: `total` `apply_async` one after another,
    then `.get()` on each; completed jobs/s is `completed / seconds`."""
    from bench.celery_app import noop

    started = time.perf_counter()
    results = [noop.apply_async() for _ in range(total)]
    ids, completed = [], 0
    for result in results:
        if result.get(timeout=GET_TIMEOUT_S) == {"ok": True}:
            completed += 1
            ids.append(result.id)
    return {"seconds": time.perf_counter() - started, "completed": completed, "ids": ids}


SHAPES = ("latency", "sync", "polled", "drained")


def run_shape(shape: str, scale: float, clients: int) -> dict[str, Any]:
    """One load shape's figures (its counts shrunk by `scale`)."""
    n = lambda count: scaled(count, scale)  # noqa: E731
    if shape == "latency":
        sequential(n(200))  # warm-up
        return {"latencies": sequential(n(1500))}
    if shape == "sync":
        return {"sync_rate": sync_rate(n(2000), clients)}
    if shape == "polled":
        return polled(n(5000), clients)
    return drained(n(5000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", required=True, help="broker and result backend URL")
    parser.add_argument("--shape", choices=SHAPES, required=True)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    from bench.celery_app import app

    app.conf.update(broker_url=args.redis, result_backend=args.redis)
    out = run_shape(args.shape, args.scale, args.clients)
    app.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
