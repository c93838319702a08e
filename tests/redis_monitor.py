"""What the code under test sends to Redis, exactly (MONITOR): for tests that count one
script's or one command's calls for given keys, instead of every call a shared Redis
served in a time window (sweeps, pings and other tests' traffic fall into such a window
on a loaded machine; issue 45)."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from redis.asyncio import Redis

_LINE = re.compile(r"[\d.]+ \[\d+ (?P<client>[^\]]*)\] (?P<args>.*)", re.S)
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclass
class Commands:
    """The commands clients sent (not those scripts ran inside), each as its arguments."""

    seen: list[tuple[str, ...]] = field(default_factory=list)

    def count(self, *head: str, key: str | None = None) -> int:
        """How many began with `head` (the command's name in any case) and, given `key`,
        held it among their arguments."""
        return sum(1 for args in self.seen if _begins(args, head) and (key is None or key in args))

    def keys_of(self, *head: str, at: int) -> list[str]:
        """The argument at `at` of each command beginning with `head`, in order."""
        return [args[at] for args in self.seen if _begins(args, head) and len(args) > at]


def _begins(args: tuple[str, ...], head: tuple[str, ...]) -> bool:
    if len(args) < len(head) or not head:
        return not head
    return args[0].upper() == head[0].upper() and args[1 : len(head)] == head[1:]


@asynccontextmanager
async def monitored(redis: Redis) -> AsyncIterator[Commands]:
    """Every command the Redis of `redis` (standalone) runs from entry to exit: on exit an
    ECHO of a marker goes through `redis`, and the record is read up to it, so it holds all
    that ran before the exit (MONITOR reports in the order Redis runs them) and nothing
    after."""
    marker = f"monitor-end-{secrets.token_hex(8)}"
    commands = Commands()
    monitor = redis.monitor()
    async with monitor:
        connection = monitor.connection
        assert connection is not None

        async def read() -> None:
            while True:
                reply = await connection.read_response()
                text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
                line = _LINE.match(text)
                if line is None or line["client"] == "lua":
                    continue
                args = tuple(a.replace('\\"', '"') for a in _ARG.findall(line["args"]))
                if len(args) == 2 and args[0].upper() == "ECHO" and args[1] == marker:
                    return
                commands.seen.append(args)

        reading = asyncio.create_task(read())
        try:
            yield commands
            await redis.echo(marker)
            await asyncio.wait_for(reading, 30)
        finally:
            reading.cancel()
