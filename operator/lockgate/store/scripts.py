"""Load the Lua transition scripts once, each with the shared preamble."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

NAMES = (
    "submit",
    "take",
    "finish",
    "stream",
    "read_stream",
    "cancel",
    "retry",
    "purge",
    "snapshot",
    "stops",
    "set_ttl",
    "release_worker",
    "delete_endpoint",
    "sweep",
    "reconcile",
    "claim_webhooks",
    "settle_webhook",
    "limit",
)


def _source(name: str) -> str:
    return (resources.files("lockgate.store") / "lua" / f"{name}.lua").read_text()


@dataclass(frozen=True)
class Scripts:
    """One registered script per transition. redis-py reloads them after a Redis restart."""

    by_name: dict[str, AsyncScript]

    @classmethod
    def register(cls, redis: Redis) -> Scripts:
        common = _source("common")
        return cls({n: redis.register_script(common + "\n" + _source(n)) for n in NAMES})

    def __getattr__(self, name: str) -> AsyncScript:
        try:
            return self.by_name[name]
        except KeyError as err:
            raise AttributeError(name) from err
