"""Load the Lua transition scripts once, each with the shared preamble, and call them.

Calls made in the same event-loop tick (many concurrent requests on a busy gateway) go to
Redis as one pipeline: one write and one read for the lot instead of one round trip each,
which is most of the gateway's CPU per request. A call alone in its tick is sent as is.
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


def _source(name: str) -> str:
    return (resources.files("lockgate.store") / "lua" / f"{name}.lua").read_text()


Call = tuple[AsyncScript, Sequence[Any], Sequence[Any], asyncio.Future]


@dataclass
class Scripts:
    """One registered script per transition. redis-py reloads them after a Redis restart."""

    redis: Redis
    by_name: dict[str, AsyncScript]
    _pending: list[Call] = field(default_factory=list)
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
        self, script: AsyncScript, keys: Sequence[Any] = (), args: Sequence[Any] = ()
    ) -> Any:
        """Run `script`, batched with the other calls of this loop tick."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((script, keys, args, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.create_task(self._send(batch))
        self._tasks.add(task)  # held until done: a task nobody references may be collected
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[Call]) -> None:
        if len(batch) == 1:
            await _settle(batch[0], _direct(batch[0]))
            return
        try:
            replies = await self._pipelined(batch)
        except _AGAIN:  # the connection failed: each call alone, with the client's retries
            replies = [ConnectionError()] * len(batch)
        except Exception as err:
            replies = [err] * len(batch)
        for call, reply in zip(batch, replies, strict=True):
            if isinstance(reply, _AGAIN):  # sent alone, it gets the client's own retries
                await _settle(call, _direct(call))
            elif not call[3].done():
                if isinstance(reply, Exception):
                    call[3].set_exception(_translated(reply))
                else:
                    call[3].set_result(reply)

    async def _pipelined(self, batch: list[Call]) -> list[Any]:
        """The batch in one pipeline; a reply per call, errors as exceptions."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for script, keys, args, _ in batch:
                # As a raw command: a cluster pipeline refuses `evalsha()` (it routes the
                # raw one by its first key, the endpoint's hash-tagged prefix).
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            return await pipe.execute(raise_on_error=False)


# Replies in a batch that the same call sent alone gets past: the script is not loaded
# (Redis restarted, or a replica became master), or the endpoint's cluster node failed or
# moved while the batch was out (the standalone client retries such errors itself; in a
# cluster pipeline they come back per reply, without the cluster client's retries).
_AGAIN = (NoScriptError, ConnectionError, TimeoutError, ClusterDownError, TryAgainError)


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
