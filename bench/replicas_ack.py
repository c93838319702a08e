"""The latency cost of LOCKGATE_REDIS_MIN_REPLICAS_ACK: /run p50 and p90 over sequential
requests with 0 and 1 replica acknowledgements, on a real Sentinel set (a master, 2
replicas, 3 sentinels) and a real Redis Cluster (3 masters + 3 replicas) on loopback
(tests/redis_topologies.py). One gateway in this process; nothing is asserted.
`python -m bench.replicas_ack [--requests N] [--topology sentinel|cluster]`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockgate.dev.redis_server import free_port
from lockgate.store import connect
from lockgate.store.connection import RedisSettings
from tests.conftest import make_settings, redis_settings, register, start_gateway
from tests.redis_topologies import RedisClusterProcs, SentinelProcs, start_cluster, start_sentinels


def target_of(procs: SentinelProcs | RedisClusterProcs, acks: int) -> RedisSettings:
    """Settings reaching `procs`, each accepting write waiting for `acks` replicas."""
    if isinstance(procs, RedisClusterProcs):
        return redis_settings(redis_cluster_nodes=procs.startup_nodes, redis_min_replicas_ack=acks)
    return redis_settings(
        redis_sentinels=procs.sentinel_nodes,
        redis_sentinel_master=procs.master_name,
        redis_min_replicas_ack=acks,
    )


async def run_latencies(target: RedisSettings, requests: int) -> list[float]:
    """Seconds each of `requests` sequential /run calls took (after 50 to warm up)."""
    client = connect(target)
    await client.flushall()
    key, _ = await register(client, "echo")
    await client.aclose()
    port = free_port()
    runner = await start_gateway(make_settings(target, port, rate_limited=False))
    url, headers = f"http://127.0.0.1:{port}/v2/echo/run", {"authorization": key}
    took = []
    try:
        async with aiohttp.ClientSession() as http:
            for i in range(50 + requests):
                start = time.perf_counter()
                async with http.post(url, json={"input": {"n": i}}, headers=headers) as r:
                    assert r.status == 200, await r.text()
                if i >= 50:
                    took.append(time.perf_counter() - start)
    finally:
        await runner.cleanup()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument(
        "--topology", choices=("sentinel", "cluster"), action="append",
        help="where to measure (repeatable; default: both)",
    )  # fmt: skip
    args = parser.parse_args()
    for topology in args.topology or ("sentinel", "cluster"):
        folder = Path(tempfile.mkdtemp(prefix=f"lockgate-ack-{topology}-"))
        procs = start_cluster(folder) if topology == "cluster" else start_sentinels(folder)
        try:
            for acks in (0, 1, 0, 1):  # twice each, interleaved: the machine's noise shows
                took = asyncio.run(run_latencies(target_of(procs, acks), args.requests))
                p50, p90 = (statistics.quantiles(took, n=10)[i] * 1000 for i in (4, 8))
                print(f"{topology} MIN_REPLICAS_ACK={acks}: /run p50 {p50:.2f} ms, "
                      f"p90 {p90:.2f} ms ({args.requests} sequential requests)")  # fmt: skip
        finally:
            procs.stop()


if __name__ == "__main__":
    main()
