"""Passwords and TLS in every Redis mode (issue 16): lockgate's one connection factory,
configured by the LOCKGATE_REDIS_* variables alone, runs a job cycle through a real gateway
on a password-protected Redis Cluster, on a Sentinel set whose sentinels have a password of
their own, and on TLS-only Redis (standalone, and a cluster with `tls-cluster yes`). A
missing or wrong password, or TLS without the CA, is refused at once with a clear error.

Debian's redis-server/redis-sentinel/redis-cli on loopback (tests/redis_topologies.py);
skipped without them unless LOCKGATE_REQUIRE_REDIS_TOPOLOGIES=1."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import redis as sync_redis
from redis.exceptions import AuthenticationError, RedisError

from envtest import EC_KEY, _openssl
from lockgate.dev.redis_server import free_port
from lockgate.store import connect
from lockgate.store.connection import RedisSettings
from tests.conftest import LiveGateway, make_settings, register, start_gateway, wait_until
from tests.redis_topologies import SENTINEL_MASTER, Node, _server_argv, binaries
from tests.test_job_api import done, get, submit, take

PASSWORD = "data-s3cret"
SENTINEL_PASSWORD = "sentinel-s3cret"
REFUSED_WITHIN_S = 10.0  # a refused connection must say so well before this


# -- certificates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    """A CA and a server certificate for 127.0.0.1 it signed (PEM files)."""

    ca: Path
    cert: Path
    key: Path

    def server_args(self, port: int) -> list[str]:
        """redis-server options: TLS on `port` only (no plain port), no client certs."""
        return [
            "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(self.cert),
            "--tls-key-file", str(self.key), "--tls-ca-cert-file", str(self.ca),
            "--tls-auth-clients", "no",
        ]  # fmt: skip


def make_tls(folder: Path) -> Tls:
    """A fresh CA and a server certificate (SAN 127.0.0.1, localhost) in `folder`, made
    with the `openssl` command as envtest's are (skip without it)."""
    shutil.which("openssl") or pytest.skip("no openssl command here")
    folder.mkdir(parents=True, exist_ok=True)
    tls = Tls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for argv in (
        ["req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test CA",
         "-days", "1"],
        ["req", *EC_KEY, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.ext"],
    ):  # fmt: skip
        _openssl(*argv, cwd=folder)
    return tls


# -- servers ------------------------------------------------------------------------------


def client(port: int, password: str = PASSWORD, tls: Tls | None = None) -> sync_redis.Redis:
    """A plain redis-py client of one node, for the fixtures' own checks."""
    options = {"ssl": True, "ssl_ca_certs": str(tls.ca)} if tls else {}
    return sync_redis.Redis(
        port=port, password=password or None, decode_responses=True,
        socket_timeout=2, socket_connect_timeout=2, **options,
    )  # fmt: skip


def answers(node: Node, password: str = PASSWORD, tls: Tls | None = None) -> Callable[[], bool]:
    """Whether `node` answers PING when asked with `password` (and TLS); an error naming
    the log if its process exited (a bad option, no TLS support)."""

    def check() -> bool:
        if node.process is not None and node.process.poll() is not None:
            logs = [p.read_text()[-800:] for p in node.folder.glob("*.log")]
            raise RuntimeError(f"{node.argv[0]} on port {node.port} exited: {logs}")
        try:
            with client(node.port, password, tls) as c:
                return bool(c.ping())
        except RedisError:
            return False

    return check


def start_server(folder: Path, *extra: str, tls: Tls | None = None) -> Node:
    """A redis-server with `requirepass` and `masterauth` PASSWORD; TLS-only with `tls`."""
    port = free_port()
    tls_args = tls.server_args(port) if tls else []
    auth = ["--requirepass", PASSWORD, "--masterauth", PASSWORD]
    node = Node(port, folder, _server_argv(binaries()[0], port, *auth, *tls_args, *extra))
    node.ready = answers(node, tls=tls)
    return node.start()


def stop_all(nodes: list[Node]) -> None:
    for node in nodes:
        node.stop()


def start_guarded_cluster(folder: Path, tls: Tls | None = None) -> list[Node]:
    """3 masters, no replicas, every node behind PASSWORD (and TLS-only, cluster bus too,
    with `tls`)."""
    cli = binaries()[2]
    nodes: list[Node] = []
    try:
        for i in range(3):
            options = [
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000", "--cluster-port", str(free_port()),
            ]  # fmt: skip
            if tls:
                options += ["--tls-cluster", "yes", "--tls-replication", "yes"]
            nodes.append(start_server(folder / f"node-{i}", *options, tls=tls))
        tls_cli = ["--tls", "--cacert", str(tls.ca)] if tls else []
        subprocess.run(
            [cli, "-a", PASSWORD, "--no-auth-warning", *tls_cli, "--cluster", "create",
             *(n.address for n in nodes), "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

        def cluster_ok() -> bool:
            for node in nodes:
                with client(node.port, tls=tls) as c:
                    if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
            return True

        wait_until(cluster_ok, "cluster_state:ok on the 3 guarded nodes", 30)
        return nodes
    except BaseException:
        stop_all(nodes)
        raise


@dataclass
class GuardedSentinel:
    """A master and a replica behind PASSWORD, one sentinel (quorum 1) behind its own."""

    servers: list[Node] = field(default_factory=list)
    sentinel: Node | None = None

    @property
    def nodes(self) -> list[Node]:
        return [*([self.sentinel] if self.sentinel else []), *self.servers]


def start_guarded_sentinel(folder: Path) -> GuardedSentinel:
    procs = GuardedSentinel()
    try:
        master = start_server(folder / "master")
        procs.servers.append(master)
        replica = start_server(folder / "replica", "--replicaof", "127.0.0.1", str(master.port))
        procs.servers.append(replica)
        port = free_port()
        conf = folder / "sentinel" / "sentinel.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\nprotected-mode no\nlogfile sentinel.log\n"
            f"requirepass {SENTINEL_PASSWORD}\n"
            f"sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master.port} 1\n"
            f"sentinel auth-pass {SENTINEL_MASTER} {PASSWORD}\n"
            f"sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n"
            f"sentinel failover-timeout {SENTINEL_MASTER} 5000\n"
        )
        sentinel = Node(port, conf.parent, [binaries()[1], str(conf)])
        sentinel.ready = answers(sentinel, SENTINEL_PASSWORD)
        procs.sentinel = sentinel.start()

        def replica_online() -> bool:
            with client(master.port) as c:
                info = c.info("replication")
            return info["connected_slaves"] == 1 and info["slave0"]["state"] == "online"

        def sentinel_sees_both() -> bool:
            # It found the replica through the master's INFO: it authenticated to it.
            with client(port, SENTINEL_PASSWORD) as c:
                quorum = c.execute_command("SENTINEL", "CKQUORUM", SENTINEL_MASTER)
                replicas = c.execute_command("SENTINEL", "REPLICAS", SENTINEL_MASTER)
            return "OK 1 usable" in quorum and len(replicas) == 1

        wait_until(replica_online, "the replica in sync with the guarded master")
        wait_until(sentinel_sees_both, "the guarded sentinel to see the master and replica")
        return procs
    except BaseException:
        stop_all(procs.nodes)
        raise


def require_tls() -> None:
    """Skip (fail in CI) unless this redis-server can serve TLS (links OpenSSL: Debian's
    does); a TLS server that then fails to start fails its tests."""
    server = binaries()[0]
    linked = subprocess.run(["ldd", server], capture_output=True, text=True, timeout=10).stdout
    if "libssl" in linked:
        return
    message = f"{server} is built without TLS"
    if os.environ.get("LOCKGATE_REQUIRE_REDIS_TOPOLOGIES") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def guarded_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    nodes = start_guarded_cluster(tmp_path_factory.mktemp("guarded-cluster"))
    yield nodes
    stop_all(nodes)


@pytest.fixture(scope="module")
def guarded_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardedSentinel]:
    procs = start_guarded_sentinel(tmp_path_factory.mktemp("guarded-sentinel"))
    yield procs
    stop_all(procs.nodes)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, tls: Tls) -> Iterator[Node]:
    require_tls()
    node = start_server(tmp_path_factory.mktemp("tls-standalone"), tls=tls)
    yield node
    node.stop()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, tls: Tls) -> Iterator[list[Node]]:
    require_tls()
    nodes = start_guarded_cluster(tmp_path_factory.mktemp("tls-cluster"), tls=tls)
    yield nodes
    stop_all(nodes)


# -- lockgate on them ---------------------------------------------------------------------


@pytest.fixture
def lockgate_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., RedisSettings]:
    """Settings read from exactly these LOCKGATE_REDIS_* variables (any others unset), as
    the gateway and operator read them."""

    def settings(**variables: str) -> RedisSettings:
        for name in [n for n in os.environ if n.startswith("LOCKGATE_REDIS")]:
            monkeypatch.delenv(name)
        for name, value in variables.items():
            monkeypatch.setenv(f"LOCKGATE_REDIS_{name}", value)
        return RedisSettings()

    return settings


async def run_job_cycle(target: RedisSettings) -> None:
    """Register an endpoint with `target`'s client, start a gateway on `target`, and have
    a job submitted, taken by a worker, finished and reported COMPLETED over HTTP."""
    redis = connect(target)
    try:
        client_key, worker_key = await register(redis, "guarded")
        port = free_port()
        settings = make_settings(target, port)
        runner = await start_gateway(settings)
        try:
            url = f"http://127.0.0.1:{port}"
            gw = LiveGateway(url, "guarded", client_key, worker_key, settings, runner.app)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
                job = await submit(http, gw, {"input": {"x": 1}})
                taken = await take(http, gw)
                assert taken is not None and taken["id"] == job["id"]
                assert taken["input"] == {"x": 1}
                assert (await done(http, gw, job["id"], {"output": {"y": 2}}))["accepted"]
                status, body = await get(http, gw, f"status/{job['id']}")
                assert status == 200 and body["status"] == "COMPLETED", body
                assert body["output"] == {"y": 2}
        finally:
            await runner.cleanup()
    finally:
        await redis.aclose()


async def refusal(target: RedisSettings) -> Exception:
    """What a PING through `target` raises; it must come within REFUSED_WITHIN_S."""
    redis = connect(target)
    started = time.monotonic()
    try:
        await asyncio.wait_for(redis.ping(), REFUSED_WITHIN_S)
    except TimeoutError:
        pytest.fail(f"no answer within {REFUSED_WITHIN_S} s: a refusal must not hang")
    except Exception as err:
        assert time.monotonic() - started < REFUSED_WITHIN_S
        return err
    finally:
        await redis.aclose()
    pytest.fail("Redis answered a client it should have refused")


def names_auth(err: Exception) -> bool:
    """Whether `err` says the password was missing or wrong (redis-py's cluster client
    wraps the AuthenticationError in a RedisClusterException with Redis's message)."""
    text = str(err).lower()
    return isinstance(err, AuthenticationError) or "auth" in text or "password" in text


# -- Redis Cluster ------------------------------------------------------------------------


async def test_a_password_protected_cluster_runs_a_job_cycle(guarded_cluster, lockgate_env):
    nodes = ",".join(n.address for n in guarded_cluster[:2])
    await run_job_cycle(lockgate_env(CLUSTER_NODES=nodes, PASSWORD=PASSWORD))


@pytest.mark.parametrize("password", ["", "wrong"], ids=["no-password", "wrong-password"])
async def test_a_cluster_refuses_a_missing_or_wrong_password_at_once(
    guarded_cluster, lockgate_env, password: str
):
    nodes = ",".join(n.address for n in guarded_cluster[:2])
    err = await refusal(lockgate_env(CLUSTER_NODES=nodes, PASSWORD=password))
    assert names_auth(err), repr(err)


# -- Sentinel -----------------------------------------------------------------------------


def sentinel_env(procs: GuardedSentinel, **variables: str) -> dict[str, str]:
    assert procs.sentinel is not None
    return {"SENTINELS": procs.sentinel.address, "SENTINEL_MASTER": SENTINEL_MASTER, **variables}


async def test_a_sentinel_set_with_its_own_password_runs_a_job_cycle(
    guarded_sentinel, lockgate_env
):
    env = sentinel_env(guarded_sentinel, PASSWORD=PASSWORD, SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    await run_job_cycle(lockgate_env(**env))


@pytest.mark.parametrize("password", ["", "wrong"], ids=["no-password", "wrong-password"])
async def test_a_missing_or_wrong_sentinel_password_is_refused_at_once(
    guarded_sentinel, lockgate_env, password: str
):
    """Until lockgate bounded the sentinels' own retries, this took ~17 s (redis-py's
    default backoff retried the refused AUTH)."""
    env = sentinel_env(guarded_sentinel, PASSWORD=PASSWORD, SENTINEL_PASSWORD=password)
    err = await refusal(lockgate_env(**env))
    assert names_auth(err), repr(err)


async def test_a_wrong_data_password_behind_sentinel_is_refused_at_once(
    guarded_sentinel, lockgate_env
):
    env = sentinel_env(guarded_sentinel, PASSWORD="wrong", SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    err = await refusal(lockgate_env(**env))
    assert isinstance(err, AuthenticationError), repr(err)


# -- TLS ----------------------------------------------------------------------------------


async def test_tls_standalone_with_the_ca_and_a_password_runs_a_job_cycle(
    tls_server, tls, lockgate_env
):
    env = {"URL": f"rediss://127.0.0.1:{tls_server.port}/0", "TLS_CA_FILE": str(tls.ca)}
    await run_job_cycle(lockgate_env(**env, PASSWORD=PASSWORD))


def test_a_ca_file_given_apart_reaches_a_rediss_url_without_lockgate_redis_tls() -> None:
    """TLS to a standalone Redis is the URL's scheme: LOCKGATE_REDIS_TLS_CA_FILE must reach
    a rediss:// URL's connections (it was dropped unless LOCKGATE_REDIS_TLS was set too)."""
    ca = {"redis_tls_ca_file": "/ca.pem"}
    rediss = RedisSettings.of(redis_url="rediss://127.0.0.1:1/0", **ca)
    assert connect(rediss).connection_pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"
    plain = RedisSettings.of(redis_url="redis://127.0.0.1:1/0", redis_tls=True, **ca)
    assert "ssl_ca_certs" not in connect(plain).connection_pool.connection_kwargs


async def test_tls_without_the_ca_or_without_tls_is_refused_at_once(tls_server, lockgate_env):
    unverified = await refusal(
        lockgate_env(URL=f"rediss://127.0.0.1:{tls_server.port}/0", PASSWORD=PASSWORD)
    )
    assert "certificate verify failed" in str(unverified), repr(unverified)
    await refusal(lockgate_env(URL=f"redis://127.0.0.1:{tls_server.port}/0", PASSWORD=PASSWORD))


async def test_a_tls_cluster_with_the_ca_and_a_password_runs_a_job_cycle(
    tls_cluster, tls, lockgate_env
):
    nodes = ",".join(n.address for n in tls_cluster[:2])
    env = {"CLUSTER_NODES": nodes, "TLS": "true", "TLS_CA_FILE": str(tls.ca)}
    await run_job_cycle(lockgate_env(**env, PASSWORD=PASSWORD))
