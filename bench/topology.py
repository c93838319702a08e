"""Redis topologies and lockgate processes for the benches past one Redis: a standalone
redis-server, a 3-master Redis Cluster and a Sentinel set (tests/redis_topologies.py), the
endpoints registered on them, `lockgate gateway` processes and no-op worker processes.

Everything is a context manager that stops what it started, also when the block fails.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from redis.crc import key_slot

from bench.procs import (
    API_KEY,
    HANDLER,
    UNREACHED_RATES,
    Service,
    free_port,
    lockgate_command,
    log,
    spawn,
    stop,
    wait_for,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.redis_topologies

from lockgate.store import Registry, connect, keys
from lockgate.store.connection import RedisSettings
from tests.conftest import register
from tests.redis_topologies import (
    Node,
    RedisClusterProcs,
    SentinelProcs,
    _server_argv,
    binaries,
    start_cluster,
    start_sentinels,
)


@dataclass
class Topology:
    """A running Redis of some mode: the LOCKGATE_REDIS_* variables that reach it, and its
    data-holding servers (the masters, for INFO readings)."""

    name: str
    env: dict[str, str]
    masters: list[Node]
    processes: list[Node]
    cluster: RedisClusterProcs | None = None  # a cluster: which master serves which slot

    def settings(self) -> RedisSettings:
        """The same target as `env`, as settings for a client in this process."""
        fields = {k.removeprefix("LOCKGATE_").lower(): v for k, v in self.env.items()}
        return RedisSettings.of(**fields)

    def pids(self) -> list[int]:
        return [n.process.pid for n in self.processes if n.process]

    def master_of(self, endpoint: str) -> Node:
        """The server holding `endpoint`'s keys."""
        if self.cluster is None:
            return self.masters[0]
        return self.cluster.master_of_slot(key_slot(keys.prefix(endpoint).encode()))


@contextlib.contextmanager
def standalone(folder: Path) -> Iterator[Topology]:
    """One redis-server, configured as the cluster's nodes are (AOF, fsync every second)."""
    server, _, _ = binaries()
    port = free_port()
    node = Node(port, folder / "standalone", _server_argv(server, port)).start()
    try:
        env = {"LOCKGATE_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
        yield Topology("one Redis", env, [node], [node])
    finally:
        node.stop()


@contextlib.contextmanager
def cluster(folder: Path) -> Iterator[Topology]:
    """3 masters + 3 replicas (`redis-cli --cluster create`)."""
    procs: RedisClusterProcs = start_cluster(folder / "cluster")
    try:
        env = {"LOCKGATE_REDIS_CLUSTER_NODES": procs.startup_nodes}
        yield Topology("Redis Cluster, 3 masters", env, procs.masters(), procs.nodes, procs)
    finally:
        procs.stop()


@contextlib.contextmanager
def sentinels(folder: Path) -> Iterator[Topology]:
    """A master, 2 replicas and 3 sentinels."""
    procs: SentinelProcs = start_sentinels(folder / "sentinel")
    try:
        env = {
            "LOCKGATE_REDIS_SENTINELS": procs.sentinel_nodes,
            "LOCKGATE_REDIS_SENTINEL_MASTER": procs.master_name,
        }
        yield Topology("Sentinel", env, [procs.master()], [*procs.servers, *procs.sentinels])
    finally:
        procs.stop()


def endpoints_on_masters(topology: Topology, count: int) -> list[str]:
    """`count` endpoint ids whose slots sit on different masters (any ids on one Redis)."""
    if len(topology.masters) == 1:
        return [f"ep-{n}" for n in range(count)]
    found: dict[int, str] = {}
    for n in range(10_000):
        endpoint = f"ep-{n}"
        found.setdefault(topology.master_of(endpoint).port, endpoint)
        if len(found) == count:
            return list(found.values())
    raise RuntimeError(f"fewer than {count} masters serve slots")


async def register_endpoints(topology: Topology, endpoints: list[str]) -> tuple[str, dict]:
    """Register the endpoints on an empty store: a client key (and the bench's, which
    bench/load.py sends), and a worker key for each endpoint."""
    client = connect(topology.settings())
    try:
        await client.flushall()
        keys_of = {e: await register(client, e) for e in endpoints}
        await Registry(client).put_key(API_KEY, {"name": "bench", "scopes": ["jobs"]})
    finally:
        await client.aclose()
    client_key = next(iter(keys_of.values()))[0]
    return client_key, {e: w for e, (_, w) in keys_of.items()}


@contextlib.contextmanager
def gateways(
    workdir: Path, topology: Topology, count: int, env: dict[str, str] | None = None
) -> Iterator[list[Service]]:
    """`count` `lockgate gateway` processes on `topology`, each on its own port."""
    started: list[Service] = []
    try:
        for i in range(count):
            port, log_path = free_port(), workdir / f"gateway-{topology.name[:3]}-{i}.log"
            variables = {
                **os.environ, **topology.env, "LOCKGATE_PORT": str(port),
                "LOCKGATE_RATE_LIMITS": UNREACHED_RATES, **(env or {}),
            }  # fmt: skip
            command = [*lockgate_command(), "gateway", "--log-format", "text"]
            started.append(Service(spawn(command, log_path, variables), port, log_path))
            wait_for(started[-1], r"gateway listening on")
        log(f"{count} gateway(s) on {topology.name}: pids {[g.process.pid for g in started]}")
        yield started
    finally:
        for service in started:
            stop(service.process, "lockgate gateway")


@contextlib.contextmanager
def workers(
    workdir: Path, placements: list[tuple[Service, str, str]], ids_dir: Path
) -> Iterator[list[int]]:
    """One no-op worker process per (gateway, endpoint, worker key); yields their pids."""
    from lockgate.workerenv import worker_env

    started = []
    try:
        for i, (gateway, endpoint, worker_key) in enumerate(placements):
            variables = {
                **os.environ, **worker_env(gateway.base, endpoint, worker_key),
                "LOCKGATE_WORKER_ID": f"w{i}", "BENCH_IDS_DIR": str(ids_dir),
                "LOCKGATE_LOG_LEVEL": "WARNING",
            }  # fmt: skip
            command = [sys.executable, str(HANDLER)]
            started.append(spawn(command, workdir / f"worker-{i}.log", variables))
        yield [p.pid for p in started]
    finally:
        for process in started:
            stop(process, "worker")
