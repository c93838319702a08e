"""Commands of concurrent callers on one shared connection (standalone Redis or the
Sentinel master): all those issued in one event-loop turn go out in one write, and the
replies, which Redis sends in order, are handed back in order (what ioredis calls
auto-pipelining).

redis-py spends about 100-150 µs of CPU per command on its own path (a pooled connection
taken and given back, a retry wrapper, a task for the send timeout, a timeout scope per
read); here a command costs a few µs: one packed write per turn, one `hiredis` parse per
reply, matched to its caller by a FIFO of futures. The connection itself is opened by
redis-py (`pool.get_connection`: credentials, TLS, `SELECT`, Sentinel's master lookup all
stay its business), then its socket is read by this module's protocol.

Only for commands that neither block nor wait for replicas: one `WAIT` or `BLPOP` would
hold up every caller behind it. A lost connection fails every command in flight with
ConnectionError (a write may or may not have run: nothing is re-sent here); a reply that
takes longer than the connection's socket timeout fails them with TimeoutError; a
`READONLY` reply (a master demoted by a failover) fails them with ConnectionError. Each
drops the connection; the next command opens a new one.

`listen` reads a subscription the same way: each published message is parsed and handed
to its sink as it arrives, without redis-py's PubSub machinery per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError, InvalidResponse, ReadOnlyError, TimeoutError

Command = Sequence[Any]
REPLY_TIMEOUT_S = 5.0  # redis-py's default socket timeout, when the connection has none
KEEPALIVE_S = 15.0  # a subscribed connection is PINGed this often


MessageSink = Callable[[Any], None]


class _Link(asyncio.Protocol):
    """One open connection: queued writes and the futures of the replies still due; on a
    subscribed connection, each published message's data goes to `on_message` instead."""

    def __init__(
        self, conn: AbstractConnection, timeout_s: float, on_message: MessageSink | None = None
    ) -> None:
        self.conn = conn
        self.timeout_s = timeout_s
        self.on_message = on_message
        encoder = conn.encoder
        options: dict[str, Any] = {"protocolError": InvalidResponse}
        options["replyError"] = BaseParser.parse_error  # error replies as redis-py's classes
        if encoder.decode_responses:
            options.update(encoding=encoder.encoding, errors=encoder.encoding_errors)
        self.reader = hiredis.Reader(**options)
        self.due: deque[tuple[asyncio.Future[Any], float]] = deque()  # (reply future, sent at)
        self.out: list[bytes] = []
        self.loop = asyncio.get_running_loop()
        self.broken: Exception | None = None
        # set (to the error) once the link breaks
        self.ended: asyncio.Future[Exception] = self.loop.create_future()
        self._timer: asyncio.TimerHandle | None = None
        # redis-py has no public way to hand over a connection's socket: take its transport
        # from the connection's stream writer, and pass the end of the connection on to the
        # stream protocol it had (its `disconnect` waits for that).
        writer = conn._writer
        if writer is None:
            raise ConnectionError("the connection closed as it opened")
        self.transport = writer.transport
        self.previous = self.transport.get_protocol()
        self.transport.set_protocol(self)

    def send(self, commands: Sequence[Command]) -> list[asyncio.Future[Any]]:
        """Queue `commands` for this turn's write; the futures of their replies."""
        if self.broken is not None:
            raise self.broken
        now = self.loop.time()
        futures = [self.loop.create_future() for _ in commands]
        if not self.out:
            self.loop.call_soon(self._write)
        self.out.extend(hiredis.pack_command(tuple(c)) for c in commands)
        self.due.extend((f, now) for f in futures)
        if self._timer is None:
            self._timer = self.loop.call_later(self.timeout_s, self._check)
        return futures

    def _write(self) -> None:
        out, self.out = self.out, []
        if out and self.broken is None:
            self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            if self.on_message is not None and _is_message(reply):
                self.on_message(reply[2])
                continue
            if not self.due:  # a reply nobody asked for: the stream is out of step
                self._break(ConnectionError(f"unexpected reply from Redis: {reply!r:.100}"))
                return
            future, _ = self.due.popleft()
            if isinstance(reply, ReadOnlyError):
                self.due.appendleft((future, 0.0))  # failed with the others, below
                self._break(ConnectionError(f"Redis is a replica now (failover): {reply}"))
                return
            if not future.done():  # done: its caller was cancelled meanwhile
                future.set_result(reply)  # an error reply is a value: the caller decides

    def connection_lost(self, exc: Exception | None) -> None:
        self._break(ConnectionError(f"connection to Redis lost: {exc or 'closed'}"))
        with contextlib.suppress(Exception):
            self.previous.connection_lost(exc)

    def _check(self) -> None:
        """Every `timeout_s` while replies are due: the oldest waited too long, the link
        breaks."""
        self._timer = None
        if not self.due:
            return
        waited = self.loop.time() - self.due[0][1]
        if waited >= self.timeout_s:
            self._break(TimeoutError(f"no reply from Redis for {waited:.1f} s"))
        else:
            self._timer = self.loop.call_later(self.timeout_s - waited, self._check)

    def _break(self, err: Exception) -> None:
        """Fail every reply due and close the connection; later sends raise `err`."""
        if self.broken is None:
            self.broken = err
            self.transport.abort()
            self.ended.set_result(err)
        while self.due:
            future, _ = self.due.popleft()
            if not future.done():
                future.set_exception(err)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Pipe:
    """The shared connection of one client, opened on first use and after a failure."""

    def __init__(self, client: Redis) -> None:
        self.pool = client.connection_pool
        self._link: _Link | None = None
        self._opening = asyncio.Lock()

    @property
    def link(self) -> _Link | None:
        """The connection, when it is open and unbroken (`send` opens one otherwise)."""
        link = self._link
        return link if link is not None and link.broken is None else None

    async def send(self, commands: Sequence[Command]) -> list[Any]:
        """The replies of `commands`, in order (an error reply as its exception, returned);
        ConnectionError or TimeoutError when the connection failed meanwhile."""
        link = self.link or await self._open()
        return [await future for future in link.send(commands)]

    async def _open(self) -> _Link:
        async with self._opening:
            if (link := self.link) is not None:
                return link  # opened by another caller meanwhile
            broken, self._link = self._link, None
            if broken is not None:
                await _give_back(self.pool, broken.conn)
            self._link = await _open(self.pool)
            return self._link


async def _open(pool: ConnectionPool, on_message: MessageSink | None = None) -> _Link:
    """A link over a connection taken from `pool` (opened by redis-py: credentials, TLS,
    `SELECT`, the Sentinel master)."""
    conn = await pool.get_connection()
    try:
        await conn.connect()  # a no-op when the pool's connection is open already
        timeout_s = getattr(conn, "socket_timeout", None) or REPLY_TIMEOUT_S
        return _Link(conn, timeout_s, on_message)
    except BaseException:
        await _give_back(pool, conn)
        raise


async def _give_back(pool: ConnectionPool, conn: AbstractConnection) -> None:
    """Close a connection taken from the pool and return it (reopened when next used)."""
    with contextlib.suppress(Exception):
        await conn.disconnect(nowait=True)
    await pool.release(conn)


def _is_message(reply: Any) -> bool:
    """A published message (`message`, channel, data) on a subscribed connection."""
    return isinstance(reply, list) and len(reply) == 3 and reply[0] in (b"message", "message")


async def listen(
    client: Redis, channel: str, on_message: MessageSink, ready: Callable[[], None]
) -> Exception:
    """Subscribe to `channel` on a connection of its own and hand each message's data to
    `on_message` as it is parsed, until the connection fails: its error is returned.
    `ready` is called once subscribed. A PING every `KEEPALIVE_S` finds a connection that
    died silently (after the socket timeout)."""
    link = await _open(client.connection_pool, on_message)
    try:
        (confirmed,) = await asyncio.gather(*link.send([("SUBSCRIBE", channel)]))
        if isinstance(confirmed, Exception):
            raise confirmed
        ready()
        while not link.ended.done():
            await asyncio.wait({link.ended}, timeout=KEEPALIVE_S)
            if not link.ended.done():
                with contextlib.suppress(ConnectionError, TimeoutError):
                    await asyncio.gather(*link.send([("PING",)]))
        return link.ended.result()
    finally:
        link._break(ConnectionError("unsubscribed"))
        await _give_back(client.connection_pool, link.conn)


def is_cluster(client: Redis) -> TypeGuard[RedisCluster]:
    """`isinstance(client, RedisCluster)` at a dict lookup's cost: redis-py's command
    classes include a `typing.Protocol`, which makes that check ~1 µs for a client that
    is not one, and it is asked on every call."""
    return _cluster_class(type(client))


@functools.cache
def _cluster_class(cls: type) -> bool:
    return issubclass(cls, RedisCluster)


_PIPES: weakref.WeakKeyDictionary[Redis, Pipe] = weakref.WeakKeyDictionary()


def pipe_of(client: Redis) -> Pipe:
    """The client's shared connection (one per client and event loop's lifetime)."""
    pipe = _PIPES.get(client)
    if pipe is None:
        pipe = _PIPES[client] = Pipe(client)
    return pipe


async def read(client: Redis, *command: Any) -> Any:
    """One command that only reads, through the client's shared connection outside a
    cluster; when that connection fails, once more through the client (with its retries)."""
    if is_cluster(client):
        return await client.execute_command(*command)
    try:
        (reply,) = await pipe_of(client).send([command])
    except (ConnectionError, TimeoutError):
        return await client.execute_command(*command)
    if isinstance(reply, Exception):
        raise reply
    return reply
