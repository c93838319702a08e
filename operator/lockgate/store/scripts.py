"""Load the Lua transition scripts once, each with the shared preamble, and call them.

Calls made in the same event-loop tick (many concurrent requests on a busy gateway) go to
Redis as one pipeline: one write and one read for the lot instead of one round trip each,
which is most of the gateway's CPU per request. A call alone in its tick is sent as is.

Accepting writes may ask for replication (`Replication`, LOCKGATE_REDIS_MIN_REPLICAS_ACK):
those of a tick go as their own pipeline ending in `WAIT n timeout`, on the same
connection (WAIT counts the replicas that have that connection's writes), so one WAIT
covers the lot and the other calls of the tick never wait for replicas.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    NoScriptError,
    OutOfMemoryError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from lockgate.store.connection import NotReplicated

NAMES = (
    "submit",
    "take",
    "finish",
    "progress",
    "stream",
    "read_stream",
    "cancel",
    "retry",
    "purge",
    "snapshot",
    "stops",
    "set_ttl",
    "release_worker",
    "heartbeat",
    "delete_endpoint",
    "sweep",
    "reconcile",
    "claim_webhooks",
    "settle_webhook",
    "limit",
    "list_jobs",
    "history",
    "worker_states",
)


class StoreFull(OutOfMemoryError):
    """Redis is at its maxmemory (noeviction) and refused a script at its first write, so
    the script changed nothing."""


def _translated(err: Exception) -> Exception:
    """A script refused for want of memory as StoreFull: Redis 6 reports it as a plain
    script error ("... -OOM command not allowed ..."), Redis 7 as an OOM error (which
    redis-py raises as OutOfMemoryError); any other error as it is."""
    if isinstance(err, StoreFull):
        return err
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


def _source(name: str) -> str:
    return (resources.files("lockgate.store") / "lua" / f"{name}.lua").read_text()


Call = tuple[AsyncScript, Sequence[Any], Sequence[Any], asyncio.Future]
Pending = dict[Replication, list[Call]]


@dataclass
class Scripts:
    """One registered script per transition. redis-py reloads them after a Redis restart."""

    redis: Redis
    by_name: dict[str, AsyncScript]
    _pending: Pending = field(default_factory=dict)
    _tasks: set[asyncio.Task] = field(default_factory=set)

    @classmethod
    def register(cls, redis: Redis) -> Scripts:
        common = _source("common")
        return cls(redis, {n: redis.register_script(common + "\n" + _source(n)) for n in NAMES})

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
            task = asyncio.create_task(self._send(batch, replication))
            self._tasks.add(task)  # held until done: a task nobody references may be collected
            task.add_done_callback(self._tasks.discard)

    async def _send(
        self, batch: list[Call], replication: Replication, *, reload: bool = True
    ) -> None:
        if len(batch) == 1 and not replication.replicas:
            await _settle(batch[0], _direct(batch[0]))
            return
        try:
            replies = await self._pipeline(batch, replication)
        except Exception as err:  # the connection failed
            if replication.replicas or not isinstance(err, _AGAIN):
                _fail(batch, err)
                return
            replies = [err] * len(batch)  # each call alone, with the client's retries
        unloaded = [c for c, r in zip(batch, replies, strict=True) if _unloaded(r)]
        if unloaded and replication.replicas and reload:  # a new master: load, send again
            try:
                for script in {c[0] for c in unloaded}:
                    await self.redis.script_load(script.script)
            except Exception as err:
                _fail(unloaded, err)
            else:
                await self._send(unloaded, replication, reload=False)
        for call, reply in zip(batch, replies, strict=True):
            if isinstance(reply, _AGAIN) and not replication.replicas:
                await _settle(call, _direct(call))  # alone, it gets the client's own retries
            else:
                _deliver(call, reply)

    async def _pipeline(self, batch: list[Call], replication: Replication) -> list[Any]:
        """The batch's replies; each one a NotReplicated error instead when fewer than
        `replication.replicas` replicas confirmed the batch's writes within its timeout."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for script, keys, args, _ in batch:
                # As a raw command: a cluster pipeline refuses `evalsha()` (it routes the
                # raw one by its first key, the endpoint's hash-tagged prefix).
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            if replication.replicas:
                pipe.wait(replication.replicas, replication.timeout_ms)
            replies = await pipe.execute(raise_on_error=False)
        if not replication.replicas:
            return replies
        replies, acked = replies[:-1], replies[-1]
        if isinstance(acked, int) and acked >= replication.replicas:
            return replies
        short = NotReplicated(
            f"{acked} of the {replication.replicas} replicas asked for confirmed the write "
            f"within {replication.timeout_ms} ms"
        )
        return [r if isinstance(r, Exception) else short for r in replies]


# Replies in a batch that the same call sent alone gets past: the script is not loaded
# (Redis restarted, or a replica became master), or the endpoint's cluster node failed or
# moved while the batch was out (the standalone client retries such errors itself; in a
# cluster pipeline they come back per reply, without the cluster client's retries).
_AGAIN = (NoScriptError, ConnectionError, TimeoutError, ClusterDownError, TryAgainError)


def _unloaded(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)


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


def _direct(call: Call) -> Awaitable[Any]:
    script, keys, args, _ = call
    return script(keys=keys, args=args)


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
