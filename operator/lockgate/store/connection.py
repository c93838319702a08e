"""The one Redis connection factory: standalone, Redis Cluster or Sentinel, chosen by
`RedisSettings` (LOCKGATE_REDIS_*). Nothing else in lockgate knows which mode is in use.

Every client retries a command a few times across a reconnect before failing; what it
raises then is in `UNAVAILABLE` (the gateway answers 503 + Retry-After).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, PipelineCommand, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MaxConnectionsError,
    MovedError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from lockgate.store.pipe import is_cluster

if TYPE_CHECKING:  # redis.event is newer than the oldest redis-py we accept
    from redis.event import EventDispatcherInterface


class NotReplicated(Exception):
    """An accepting write reached the master but fewer replicas than
    LOCKGATE_REDIS_MIN_REPLICAS_ACK confirmed it in time: it may exist, and may be lost by a
    failover, so it is not reported as done."""


class RedisSettingsError(ValueError):
    """A LOCKGATE_REDIS_* setting is malformed or contradicts another; the message names it."""


# What a command raises when Redis cannot serve it now (after the client's retries): down,
# unreachable, or mid-failover (a demoted master refusing writes, a cluster slot without a
# master, a slot being migrated). A refused write changed nothing; NotReplicated is the
# exception: the write is on the master, unconfirmed by its replicas.
UNAVAILABLE: tuple[type[Exception], ...] = (
    ConnectionError,  # MasterNotFoundError (Sentinel) and BusyLoadingError are ones too
    TimeoutError,
    ConnectionRefusedError,
    ReadOnlyError,
    ClusterDownError,
    TryAgainError,
    NotReplicated,  # an accepting write not confirmed by enough replicas
)


def raise_if_cancelled() -> None:
    """Raise CancelledError in a task whose cancellation was swallowed. redis-py does so
    for one landing inside some of its awaits (a cluster client's topology refresh; on
    Python 3.11 every command sent under `socket_timeout`, whose `asyncio.wait_for` drops a
    cancel that comes as the send completes). A background loop checks this every round:
    else its task outlives the cancel, and whatever awaits it (a shutdown, `asyncio.run`,
    dev mode stopping an endpoint's scaler) waits forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RedisSettings(BaseSettings):
    """Where Redis is and how to reach it; the same for gateway, operator, `lockgate keys`
    and `lockgate dev --redis-url`. Cluster nodes, else sentinels, else the URL."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", extra="ignore")

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="standalone Redis: redis:// or rediss:// (TLS)"
    )
    redis_cluster_nodes: str = Field(
        "", description="Redis Cluster: host:port,... (any nodes; the topology is discovered)"
    )
    redis_sentinels: str = Field("", description="Sentinel: host:port,... of the sentinels")
    redis_sentinel_master: str = Field("", description="Sentinel: the name of the master set")
    redis_sentinel_username: str = Field(
        "", description="Sentinel: ACL user of the sentinels themselves (empty: none)"
    )
    redis_sentinel_password: str = Field(
        "", description="Sentinel: password of the sentinels themselves (empty: none)"
    )
    redis_username: str = Field("", description="ACL user (a standalone URL's own wins)")
    redis_password: str = Field("", description="password (a standalone URL's own wins)")
    redis_tls: bool = Field(False, description="TLS to Redis (cluster and Sentinel modes)")
    redis_tls_ca_file: str = Field("", description="CA bundle that signed Redis's certificate")
    redis_max_connections: int = Field(256, gt=0, description="Redis connections per process")
    redis_pool_timeout_s: float = Field(
        10.0, gt=0, description="how long a request waits for a free Redis connection"
    )
    redis_min_replicas_ack: int = Field(
        0,
        ge=0,
        description="replicas that must confirm an accepting write (a job submitted, a "
        "result recorded) before it is acknowledged (WAIT); 0: the master's word is enough",
    )
    redis_replicas_ack_timeout_s: float = Field(
        1.0, gt=0, description="how long an accepting write waits for those replicas; then 503"
    )

    @model_validator(mode="after")
    def _coherent(self) -> RedisSettings:
        check(self)
        return self

    @classmethod
    def of(cls, **fields: Any) -> RedisSettings:
        """Settings from these fields alone, the others at their defaults (not read from
        LOCKGATE_* variables, and not validated: `connect` checks them)."""
        defaults = {name: f.default for name, f in cls.model_fields.items()}
        return cls.model_construct(**{**defaults, **fields})

    def describe(self) -> str:
        """Which Redis these settings reach, without any password (for a startup line)."""
        if self.redis_cluster_nodes:
            return f"Redis Cluster via {self.redis_cluster_nodes}"
        if self.redis_sentinels:
            return f"Sentinel master {self.redis_sentinel_master!r} via {self.redis_sentinels}"
        return f"Redis at {without_password(self.redis_url)}"


def connect(
    target: RedisSettings | str,
    *,
    max_connections: int | None = None,
    pool_timeout_s: float | None = None,
) -> Redis:
    """A client for `target` (settings, or a standalone URL). `max_connections` and
    `pool_timeout_s` override the settings' (a process that needs few connections)."""
    if isinstance(target, str):
        target = RedisSettings.of(redis_url=target)
    check(target)  # settings made without validation (model_construct) are checked too
    most = max_connections or target.redis_max_connections
    wait_s = pool_timeout_s or target.redis_pool_timeout_s
    if target.redis_cluster_nodes:
        return _cluster(target, max_connections=most, pool_timeout_s=wait_s)
    if target.redis_sentinels:
        return _sentinel(target, max_connections=most, pool_timeout_s=wait_s)
    options = standalone_options(target)
    return _standalone(target.redis_url, max_connections=most, pool_timeout_s=wait_s, **options)


def check(settings: RedisSettings) -> None:
    """RedisSettingsError naming the LOCKGATE_REDIS_* variable that is malformed or clashes
    with another; called when settings are read and again by `connect`."""
    for variable, spec in (
        ("LOCKGATE_REDIS_CLUSTER_NODES", settings.redis_cluster_nodes),
        ("LOCKGATE_REDIS_SENTINELS", settings.redis_sentinels),
    ):
        try:
            if spec and not nodes(spec):
                raise ValueError(f"{spec!r}: no host:port in it")
        except ValueError as err:
            raise RedisSettingsError(f"{variable}: {err}") from None
    if settings.redis_sentinels and not settings.redis_sentinel_master.strip():
        raise RedisSettingsError(
            "LOCKGATE_REDIS_SENTINEL_MASTER: required with LOCKGATE_REDIS_SENTINELS "
            "(the name the sentinels monitor the master set as)"
        )
    if settings.redis_sentinel_master and not settings.redis_sentinels:
        raise RedisSettingsError(
            "LOCKGATE_REDIS_SENTINELS: required with LOCKGATE_REDIS_SENTINEL_MASTER "
            "(host:port,... of the sentinels)"
        )


def standalone(url: str) -> dict[str, str]:
    """Settings fields that make `url` win over any cluster or Sentinel setting (what a
    `--redis-url` flag means)."""
    cleared = ("redis_cluster_nodes", "redis_sentinels", "redis_sentinel_master")
    return {"redis_url": url, **dict.fromkeys(cleared, "")}


def describe_settings_error(err: ValidationError) -> str:
    """A settings ValidationError as one line naming each LOCKGATE_* variable at fault."""
    parts = []
    for e in err.errors(include_url=False):
        message = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"LOCKGATE_{str(e['loc'][0]).upper()}: {message}" if e["loc"] else message)
    return "; ".join(parts)


def without_password(url: str) -> str:
    """`url` with its password (if any) replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _standalone(url: str, *, max_connections: int, pool_timeout_s: float, **options: Any) -> Redis:
    """A pool of at most `max_connections`; a command finding them all busy (e.g. while
    Redis stalls under a burst) waits up to `pool_timeout_s` for one instead of failing
    at once with "Too many connections". What the URL itself says wins over `options`."""
    pool = BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout_s, **_resilience(), **options
    )
    return Redis.from_pool(pool)


def _retry(retries: int = 3) -> Retry:
    """Up to `retries` more tries, 10 ms doubling, at most 0.5 s apart."""
    return Retry(ExponentialBackoff(cap=0.5, base=0.01), retries=retries)


def _resilience() -> dict[str, Any]:
    """Connection options of every mode: a command is retried 3 times (10 ms doubling, at
    most 0.5 s apart) across a reconnect, connecting gives up after 2 s, and a connection
    idle for 30 s is checked before use."""
    return {
        "retry": _retry(),
        "retry_on_error": [ConnectionError, TimeoutError],
        "socket_connect_timeout": 2,
        "health_check_interval": 30,
    }


def client_options(settings: RedisSettings) -> dict[str, Any]:
    """Credentials and TLS for the cluster and Sentinel clients (a standalone URL carries
    its own: `rediss://user:password@host:port/0?ssl_ca_certs=...`)."""
    options: dict[str, Any] = {}
    if settings.redis_username:
        options["username"] = settings.redis_username
    if settings.redis_password:
        options["password"] = settings.redis_password
    if settings.redis_tls:
        options["ssl"] = True
        if settings.redis_tls_ca_file:
            options["ssl_ca_certs"] = settings.redis_tls_ca_file
    return options


def standalone_options(settings: RedisSettings) -> dict[str, Any]:
    """Credentials and CA of a standalone URL given apart (LOCKGATE_REDIS_USERNAME,
    _PASSWORD, _TLS_CA_FILE: a password kept in its own Secret); the URL's own win. TLS
    itself is the URL's scheme (`rediss://`): a CA file is passed only with it."""
    options = client_options(settings)
    options.pop("ssl", None)
    options.pop("ssl_ca_certs", None)  # client_options gives it only with LOCKGATE_REDIS_TLS
    if settings.redis_url.startswith("rediss://") and settings.redis_tls_ca_file:
        options["ssl_ca_certs"] = settings.redis_tls_ca_file
    return options


def nodes(spec: str) -> list[tuple[str, int]]:
    """`host:port,host:port` as pairs; ValueError naming a malformed one."""
    pairs = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{item!r}: expected host:port")
        pairs.append((host.strip("[]"), int(port)))
    return pairs


# How often a cluster command is tried again after a connection error, CLUSTERDOWN or an
# uncovered slot (each time after rediscovering the topology); MOVED, ASK and TRYAGAIN are
# followed by redis-py within one try. A failover takes the cluster's node timeout plus
# about a second: requests in between get 503 + Retry-After.
CLUSTER_RETRIES = 5


def _cluster(settings: RedisSettings, *, max_connections: int, pool_timeout_s: float) -> Redis:
    """A Redis Cluster client from any of the nodes (the topology is discovered and
    followed: MOVED, ASK, failovers). `max_connections` is per node; redis-py's cluster
    pool does not wait for a free connection, so `pool_timeout_s` has no use here."""
    startup = [ClusterNode(host, port) for host, port in nodes(settings.redis_cluster_nodes)]
    client = _RedisCluster(
        startup_nodes=startup,
        max_connections=max_connections,
        # After MOVED (a slot moved), patch that slot in the client's map; redis-py's
        # default (a full refresh every 5 MOVED) closes every connection, also those other
        # requests are using, which then fail outside its retries (AttributeError).
        reinitialize_steps=0,
        retry=_retry(CLUSTER_RETRIES),
        socket_connect_timeout=2,
        health_check_interval=30,
        **client_options(settings),
    )
    return cast(Redis, client)  # the commands lockgate uses behave the same (store/scripts.py)


class _RedisCluster(RedisCluster):
    """redis-py's cluster client, where a command whose connection another request's
    topology refresh closed under it (a failover) fails as the ConnectionError it is, so it
    is retried (or answered 503) instead of surfacing as redis-py's AttributeError."""

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._execute_command(target_node, *args, **kwargs)
        except AttributeError as err:
            raise _closed(err) from err

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        return _ClusterPipeline(self, transaction)


class _ClusterPipeline(ClusterPipeline):
    """A cluster pipeline whose failover errors are UNAVAILABLE: a closed connection (as
    `_RedisCluster`), and a transaction still redirected (MOVED, ASK) after redis-py's
    retries, whose EXEC the node aborted (nothing written): TryAgainError, as
    store/scripts.py answers a script still redirected. CI saw a MOVED escape a worker
    binding's transaction mid-failover as a 500 (test_redis_cluster, session 33)."""

    # redis-py's typing protocol declares this attribute for every client, so mypy takes
    # it for abstract here; a pipeline never reads it (redis-py sets none on one either).
    _event_dispatcher: EventDispatcherInterface

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except AttributeError as err:
            raise _closed(err) from err
        except AskError as err:  # MovedError is one too
            raise TryAgainError(f"the slot moved under a transaction ({err})") from err


def _closed(err: AttributeError) -> ConnectionError:
    return ConnectionError(f"connection closed by a cluster topology refresh ({err})")


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """The Sentinel pool (each new connection asks the sentinels where the master is, and
    a connection to a demoted master is dropped) with the blocking wait of the standalone
    pool when all `max_connections` are busy."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:  # the client is closing: so do the sentinels' connections
            for sentinel in self.sentinel_manager.sentinels:
                await sentinel.connection_pool.disconnect()


def _sentinel(settings: RedisSettings, *, max_connections: int, pool_timeout_s: float) -> Redis:
    """A client of the master the sentinels name, following it through a failover: each
    new connection asks the sentinels again, and what fails meanwhile is UNAVAILABLE.

    The data nodes get the settings' credentials and TLS; the sentinels get TLS and their
    own credentials (LOCKGATE_REDIS_SENTINEL_USERNAME/_PASSWORD, often none: a sentinel's
    password is distinct from the data nodes' `requirepass`)."""
    tls = {k: v for k, v in client_options(settings).items() if k.startswith("ssl")}
    sentinel_auth = {
        "username": settings.redis_sentinel_username or None,
        "password": settings.redis_sentinel_password or None,
    }
    sentinels = Sentinel(
        nodes(settings.redis_sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": 2,
            "socket_timeout": 2,
            # redis-py's default (1 s doubling, up to 10 s apart) also retries a refused
            # AUTH (an AuthenticationError is a ConnectionError): a wrong sentinel password
            # took ~17 s to fail, each new master connection as long again.
            "retry": _retry(),  # as the data connections (_resilience)
            **tls,
            **sentinel_auth,
        },
        **client_options(settings),
        **_resilience(),
    )
    master: Redis = sentinels.master_for(
        settings.redis_sentinel_master.strip(),
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=pool_timeout_s,
    )
    return master


# -- commands sent together on one connection (what WAIT needs: it counts the replicas that
# have the writes of the connection it is sent on)

Command = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Route:
    """The connection a group of commands goes on: standalone and Sentinel, the client's
    (`node` None); cluster, one of `node`'s, each command after ASKING when `asking` (the
    slot is being migrated to that node)."""

    node: ClusterNode | None = None
    asking: bool = False


async def route(client: Redis, key: Any, after: Any = None) -> Route:
    """Where commands on `key` go; `after`: the reply the previous try got, an ASK
    redirection sends them to its node (a MOVED one was noted in the slot map already).
    A cluster client first rediscovers the topology if a connection error asked for it; a
    slot without a master (a failover) is a ClusterDownError."""
    return await _cluster_route(client, key, after) if is_cluster(client) else Route()


async def _cluster_route(client: RedisCluster, key: Any, after: Any) -> Route:
    try:
        await client.initialize()  # a no-op unless a rediscovery is due
        if isinstance(after, AskError) and not isinstance(after, MovedError):
            node = client.get_node(after.host, after.port)
            if node is not None:
                return Route(node, asking=True)
        return Route(client.get_node_from_key(key))
    except RedisClusterException as err:  # SlotNotCoveredError, or no startup node answered
        _rediscover(client)
        raise ClusterDownError(f"the cluster's topology is unknown now: {err}") from err


async def send_together(client: Redis, to: Route, commands: Sequence[Command]) -> list[Any]:
    """The replies of `commands`, sent in order as one pipeline on one connection (an error
    reply as its exception). A connection error fails them all (raised); in a cluster the
    client then rediscovers the topology before its next command, and a MOVED reply moves
    the slot in the client's map, as redis-py does for the commands it routes itself."""
    if to.node is None:
        return await send_on_one(client, commands)
    cluster, node = cast(RedisCluster, client), to.node
    sent = list(commands)
    if to.asking:  # ASKING admits the one command after it
        sent = [c for command in commands for c in (("ASKING",), command)]
    pipeline = [PipelineCommand(i, *command) for i, command in enumerate(sent)]
    try:
        await node.execute_pipeline(pipeline)
        lost = next((c.result for c in pipeline if isinstance(c.result, _LOST)), None)
        if lost is not None:
            raise lost
    except MaxConnectionsError:  # all of the node's connections busy: the node is fine
        raise
    except (*_LOST, AttributeError) as err:  # AttributeError: closed by a topology refresh
        # As redis-py after a command's connection error: drop the node's connections, try
        # it last, and rediscover the topology before the next command.
        node.update_active_connections_for_reconnect()
        await node.disconnect_free_connections()
        cluster.nodes_manager.move_node_to_end_of_cached_nodes(node.name)
        _rediscover(cluster)
        raise (_closed(err) if isinstance(err, AttributeError) else err) from err
    replies = [c.result for c in pipeline]
    if to.asking:
        replies = replies[1::2]  # not ASKING's
    for reply in replies:
        if isinstance(reply, MovedError):
            await cluster.nodes_manager.move_slot(reply)
    return replies


_LOST = (ConnectionError, TimeoutError)


async def send_on_one(client: Redis, commands: Sequence[Command]) -> list[Any]:
    """The replies of `commands` sent in order on one pooled connection of a standalone or
    Sentinel client: one write, then one read per command, an error reply as its exception.
    What a non-transactional pipeline does, without redis-py's Pipeline object, whose
    bookkeeping cost the gateway more CPU than the round trip itself. A connection error is
    raised, the connection dropped (its unread replies would answer the next command), and
    nothing retried: a script may have run."""
    pool = client.connection_pool
    conn = await pool.get_connection()
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as err:
                replies.append(err)
        return replies
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


def _rediscover(cluster: RedisCluster) -> None:
    """Make the cluster client reload the topology before its next command (what its own
    retries do after a connection error; redis-py has no public call for it)."""
    cluster._initialize = True
