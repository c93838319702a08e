"""Load the Lua transition scripts once, each with the shared preamble, and call them.

Calls made in the same event-loop tick (many concurrent requests on a busy gateway) go to
Redis as one pipeline: one write and one read for the lot instead of one round trip each,
which is most of the gateway's CPU per request. Outside a cluster a tick's calls, even a
call alone, go as raw EVALSHAs on the client's shared connection (`pipe`), not through
redis-py's Pipeline or Script objects, whose bookkeeping cost more CPU than the round
trip (while that connection is open, with no task per batch: each reply settles its call
as it is read); a call cut by a connection error is sent once more alone, with the client's
own retries. In a cluster a call alone is sent as is, a tick's calls through the cluster
client's pipeline.

A call refused for want of its script (NOSCRIPT: Redis restarted, a replica without the
scripts promoted by a failover, a SCRIPT FLUSH), in a batch, alone or sent again after a
redirection, is sent once more as EVAL with the script's source: the node that runs it
loads it (later EVALSHAs find it) in the same command, so no other NOSCRIPT can come between
the load and the run (a SCRIPT LOAD sent apart may reach another node, by a slot map not
yet updated after a failover, or be undone by a flush before the call). What redis-py's
`Script` does alone (load, then call once more), without its gap.

Accepting writes may ask for replication (`Replication`, LOCKGATE_REDIS_MIN_REPLICAS_ACK):
those of a tick go as their own pipeline ending in `WAIT n timeout`, on the same
connection (WAIT counts the replicas that have that connection's writes), so one WAIT
covers the lot and the other calls of the tick never wait for replicas. In a cluster that
is one such pipeline per master the tick's calls go to (`connection.send_together`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    NoScriptError,
    OutOfMemoryError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from lockgate.store.connection import (
    Command,
    NotReplicated,
    Route,
    route,
    send_together,
)
from lockgate.store.lua_preamble import ARGS, source
from lockgate.store.pipe import is_cluster, pipe_of
from lockgate.store.script_args import ScriptArgs

NAMES = tuple(ARGS)  # every script, by name (store/lua/<name>.lua)


class StoreFull(OutOfMemoryError):
    """Redis is at its maxmemory (noeviction) and refused a script at its first write, so
    the script changed nothing."""


def _translated(err: Exception) -> Exception:
    """A script refused for want of memory as StoreFull: Redis 6 reports it as a plain
    script error ("... -OOM command not allowed ..."), Redis 7 as an OOM error (which
    redis-py raises as OutOfMemoryError); a cluster redirection (MOVED, ASK) a replicated
    call still got when sent again as TryAgainError (UNAVAILABLE); any other error as it
    is."""
    if isinstance(err, StoreFull):
        return err
    if isinstance(err, AskError):  # still redirected after a re-send: the slot is moving
        return TryAgainError(f"the endpoint's slot is moving ({err})")
    if isinstance(err, OutOfMemoryError) or (
        isinstance(err, ResponseError) and "OOM command not allowed" in str(err)
    ):
        return StoreFull(str(err))
    return err


@dataclass(frozen=True, slots=True)
class Replication:
    """How many replicas must confirm an accepting write, within `timeout_ms` (WAIT)."""

    replicas: int = 0
    timeout_ms: int = 1000


NO_REPLICATION = Replication()


Call = tuple[AsyncScript, Sequence[Any], Sequence[Any], asyncio.Future[Any]]
Pending = dict[Replication, list[Call]]


@dataclass
class Scripts:
    """One registered script per transition; one Redis lacks is sent as EVAL (above)."""

    redis: Redis
    by_name: dict[str, AsyncScript]
    _pending: Pending = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def register(cls, redis: Redis) -> Scripts:
        return cls(redis, {n: redis.register_script(source(n)) for n in NAMES})

    def run(self, args: ScriptArgs, *, replication: Replication = NO_REPLICATION) -> Awaitable[Any]:
        """Run the script `args` names (its SCRIPT) with them: KEYS and ARGV built from
        the one dataclass both sides read (store/script_args.py)."""
        script = self.by_name[args.SCRIPT]
        return self.call(script, args.keys(), args.argv(), replication=replication)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        try:
            script = self.by_name[name]
        except KeyError as err:
            raise AttributeError(name) from err
        return functools.partial(self.call, script)

    async def call(
        self,
        script: AsyncScript,
        keys: Sequence[Any] = (),
        args: Sequence[Any] = (),
        *,
        replication: Replication = NO_REPLICATION,
    ) -> Any:
        """Run `script`, batched with the other calls of this loop tick. With
        `replication.replicas`, return only once that many replicas have its writes;
        NotReplicated when they do not confirm them in time (the writes are on the master)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.setdefault(replication, []).append((script, keys, args, future))
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for replication, batch in pending.items():
            if replication.replicas or not self._sent_now(batch):
                self._spawn(self._send(batch, replication))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)  # held until done: a task nobody references may be collected
        task.add_done_callback(self._tasks.discard)

    def _sent_now(self, batch: list[Call]) -> bool:
        """Outside a cluster, while the shared connection is open: write the batch now and
        settle each call as its reply arrives, with no task of its own (the common case).
        False when the batch must go through `_send` (a cluster; no open connection)."""
        link = None if is_cluster(self.redis) else pipe_of(self.redis).link
        if link is None:
            return False
        for call, reply in zip(batch, link.send([_evalsha(c) for c in batch]), strict=True):
            reply.add_done_callback(functools.partial(self._arrived, call))
        return True

    def _arrived(self, call: Call, reply: asyncio.Future[Any]) -> None:
        """Settle `call` with its reply from `_sent_now`; one cut by a connection error, or
        refused for want of its script, is sent once more alone (as `_send` does)."""
        value = reply.exception() or reply.result()
        if isinstance(value, _AGAIN):
            self._spawn(_settle(call, _alone(self.redis, call, value)))
        else:
            _deliver(call, value)

    async def _send(
        self,
        batch: list[Call],
        replication: Replication,
        *,
        again: bool = True,
        after: Sequence[Any] = (),
    ) -> None:
        """Send `batch` and settle its futures. A replicated call whose script the master
        lacks (a promoted replica) or whose slot moved is sent once more (`again`), as EVAL,
        routed by the reply it got (`after`, aligned with the batch)."""
        if len(batch) == 1 and not replication.replicas and is_cluster(self.redis):
            await _settle(batch[0], _alone(self.redis, batch[0]))
            return
        try:
            if replication.replicas:
                replies = await self._replicated(batch, replication, after or [None] * len(batch))
            else:
                replies = await self._pipeline(batch)
        except Exception as err:  # the connection failed
            if replication.replicas or not isinstance(err, _AGAIN):
                _fail(batch, err)
                return
            replies = [err] * len(batch)  # each call alone, with the client's retries
        if again and replication.replicas:
            await self._resend(
                [(c, r) for c, r in zip(batch, replies, strict=True) if _resent(r)], replication
            )
        for call, reply in zip(batch, replies, strict=True):
            if isinstance(reply, _AGAIN) and not replication.replicas:
                # alone, it gets the client's own retries
                await _settle(call, _alone(self.redis, call, reply))
            else:
                _deliver(call, reply)

    async def _resend(self, resend: list[tuple[Call, Any]], replication: Replication) -> None:
        """Send these replicated calls once more, as EVAL (a new master may lack their
        scripts), each routed by the reply it got."""
        if resend:
            calls, prior = zip(*resend, strict=True)
            await self._send(list(calls), replication, again=False, after=prior)

    async def _pipeline(self, batch: list[Call]) -> list[Any]:
        """The batch's replies, on one connection; in a cluster through the client's
        pipeline (it routes each call by its first key, the endpoint's hash-tagged prefix,
        and follows redirections)."""
        if not is_cluster(self.redis):
            return await pipe_of(self.redis).send([_evalsha(call) for call in batch])
        async with self.redis.pipeline(transaction=False) as pipe:
            for call in batch:
                # As a raw command: a cluster pipeline refuses `evalsha()`.
                pipe.execute_command(*_evalsha(call))
            return await pipe.execute(raise_on_error=False)

    async def _replicated(
        self, batch: list[Call], replication: Replication, after: Sequence[Any]
    ) -> list[Any]:
        """The batch's replies, each one a NotReplicated error instead when fewer than
        `replication.replicas` replicas confirmed its writes in time. The calls served by
        one node (all of them but in a cluster) go together on one of its connections,
        followed by a WAIT (which counts the replicas that have that connection's writes).
        A call sent again (`after` holds the reply of its first try) goes as EVAL."""
        groups: dict[Route, list[int]] = {}
        replies: list[Any] = [None] * len(batch)
        for i, (call, prior) in enumerate(zip(batch, after, strict=True)):
            try:
                to = await route(self.redis, call[1][0] if call[1] else "", prior)
            except ClusterDownError as err:  # its slot has no master now
                replies[i] = err
            else:
                groups.setdefault(to, []).append(i)
        wait = ("WAIT", replication.replicas, replication.timeout_ms)

        async def send(to: Route, indexes: list[int]) -> None:
            again = [after[i] is not None for i in indexes]
            calls = [
                (_eval if a else _evalsha)(batch[i]) for i, a in zip(indexes, again, strict=True)
            ]
            commands = [*calls, wait]
            try:
                sent = await send_together(self.redis, to, commands)
            except Exception as err:  # the connection failed: the writes' fate is unknown
                sent = [err] * len(commands)
            for i, reply in zip(indexes, _confirmed(sent, replication), strict=True):
                replies[i] = reply

        await asyncio.gather(*(send(to, indexes) for to, indexes in groups.items()))
        return replies


def _evalsha(call: Call) -> Command:
    script, keys, args, _ = call
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


def _eval(call: Call) -> Command:
    """The call with its script's source: the node that runs it loads it (no NOSCRIPT)."""
    script, keys, args, _ = call
    return ("EVAL", script.script, len(keys), *keys, *args)


def _confirmed(replies: list[Any], replication: Replication) -> list[Any]:
    """The scripts' replies of a pipeline ending in WAIT, each one NotReplicated instead
    when WAIT counted fewer replicas than asked for (an error reply stays as it is)."""
    replies, acked = replies[:-1], replies[-1]
    if isinstance(acked, int) and acked >= replication.replicas:
        return replies
    if isinstance(acked, Exception):
        short: Exception = NotReplicated(f"WAIT for the replicas failed: {acked}")
    else:
        short = NotReplicated(
            f"{acked} of the {replication.replicas} replicas asked for confirmed the write "
            f"within {replication.timeout_ms} ms"
        )
    return [r if isinstance(r, Exception) else short for r in replies]


def _resent(reply: Any) -> bool:
    """Whether a replicated call is worth one more try: its script was not loaded, or its
    slot is served by another node (MOVED, ASK: nothing ran)."""
    return isinstance(reply, NoScriptError | AskError)


# Replies in a batch that the same call sent alone gets past: the script is not loaded
# (Redis restarted, or a replica became master), or the endpoint's cluster node failed or
# moved while the batch was out (the standalone client retries such errors itself; in a
# cluster pipeline they come back per reply, without the cluster client's retries).
_AGAIN = (NoScriptError, ConnectionError, TimeoutError, ClusterDownError, TryAgainError)


def _fail(batch: list[Call], err: Exception) -> None:
    for *_, future in batch:
        if not future.done():
            future.set_exception(err)


def _deliver(call: Call, reply: Any) -> None:
    """Settle the call's future with its pipeline reply (an error reply is raised)."""
    future = call[3]
    if future.done():
        return
    if isinstance(reply, Exception):
        future.set_exception(_translated(reply))
    else:
        future.set_result(reply)


async def _alone(redis: Redis | RedisCluster, call: Call, reply: Any = None) -> Any:
    """`call` sent alone, with the client's own retries (and, in a cluster, its routing and
    redirections): as EVAL after a NOSCRIPT `reply`, else as EVALSHA, and as EVAL once more
    if that is refused for want of the script."""
    if not isinstance(reply, NoScriptError):
        try:
            return await redis.execute_command(*_evalsha(call))
        except NoScriptError:
            pass
    return await redis.execute_command(*_eval(call))


async def _settle(call: Call, reply: Awaitable[Any]) -> None:
    future = call[3]
    try:
        result = await reply
    except Exception as err:
        if not future.done():
            future.set_exception(_translated(err))
    else:
        if not future.done():
            future.set_result(result)
