"""An endpoint's builds in Redis (keys `bld`, `bldn`, `b:{id}`, `bl:{id}`, `blc:{id}`; its
push-webhook secret `bhk`): newest first,
each with its log, the newest `BUILDS_KEPT` kept for as long as the endpoint exists
(deleted with its data: delete_endpoint.lua).

Every state change is a compare-and-set on the stored status (`CHANGE`), so a cancel and a
builder's own progress never overwrite each other: whoever comes second sees the first's
status and decides again (`models.build.advance` refuses to leave a terminal state).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from secrets import token_urlsafe
from typing import cast

import orjson
from redis.asyncio import Redis

from lockgate.models.build import Build, BuildStatus, IllegalTransition, advance
from lockgate.store import keys

# KEYS: the build index, the sequence, the record; ARGV: the build id, its JSON, how many
# builds to keep, the endpoint's key prefix. Returns the sequence number given.
ADD = """
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], seq, ARGV[1])
redis.call('SET', KEYS[3], ARGV[2])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[1], 0, over - 1)) do
    redis.call('UNLINK', ARGV[4] .. 'b:' .. old, ARGV[4] .. 'bl:' .. old, ARGV[4] .. 'blc:' .. old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1)
end
return seq
"""
# KEYS: the record; ARGV: the status it must have, the new JSON. Returns false when
# written, else the record as it is (JSON; '' when it is gone).
CHANGE = """
local raw = redis.call('GET', KEYS[1])
if not raw then return '' end
if cjson.decode(raw)['status'] ~= ARGV[1] then return raw end
redis.call('SET', KEYS[1], ARGV[2])
return false
"""
# KEYS: the log; ARGV: the most lines kept, then lines (JSON). The first lines are kept:
# a log's positions are counted from its start (manage.workerlogs).
APPEND_LOG = """
local n = redis.call('LLEN', KEYS[1])
local room = tonumber(ARGV[1]) - n
for i = 2, math.min(#ARGV, room + 1) do redis.call('RPUSH', KEYS[1], ARGV[i]) end
return n
"""
# KEYS: the log, its cursors; ARGV: the container, the cursor it must have ('' for none),
# the new cursor, the most lines kept, then lines (JSON). Returns 0 when another follower
# moved the cursor first (nothing written), else 1.
APPEND_FOLLOWED = """
local was = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if was ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local room = tonumber(ARGV[4]) - redis.call('LLEN', KEYS[1])
for i = 5, math.min(#ARGV, room + 4) do redis.call('RPUSH', KEYS[1], ARGV[i]) end
return 1
"""


class BuildNotFound(LookupError):
    """No such build of this endpoint (never one, or older than the newest BUILDS_KEPT)."""


class BuildStore:
    """Builds by endpoint, in Redis."""

    def __init__(
        self,
        redis: Redis,
        *,
        kept: int = keys.BUILDS_KEPT,
        log_lines: int = keys.BUILD_LOG_LINES,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.redis = redis
        self.kept = kept
        self.log_lines = log_lines
        self.clock = clock  # epoch ms of a log line
        self._add = redis.register_script(ADD)
        self._change = redis.register_script(CHANGE)
        self._append = redis.register_script(APPEND_LOG)
        self._append_followed = redis.register_script(APPEND_FOLLOWED)

    async def add(self, endpoint_id: str, build: Build) -> int:
        """Keep a new build as the newest; its sequence number (its place in the list).
        The oldest beyond `kept` goes, with its log."""
        ks = [keys.builds(endpoint_id), keys.build_seq(endpoint_id)]
        ks.append(keys.build(endpoint_id, build.id))
        body = orjson.dumps(build.model_dump(mode="json"))
        args: list[str | bytes | int] = [build.id, body, self.kept, keys.prefix(endpoint_id)]
        return int(await self._add(keys=ks, args=args))

    async def get(self, endpoint_id: str, build_id: str) -> Build:
        """The build; raises `BuildNotFound`."""
        raw = await self.redis.get(keys.build(endpoint_id, build_id))
        if raw is None:
            raise BuildNotFound(build_id)
        return Build.model_validate_json(raw)

    async def page(
        self, endpoint_id: str, *, below: int | None, limit: int
    ) -> tuple[list[tuple[int, Build]], bool]:
        """Up to `limit` builds with a sequence number below `below` (all when None), newest
        first, each with its number; and whether older ones remain."""
        top = f"({below}" if below is not None else "+inf"
        found = await self.redis.zrange(
            keys.builds(endpoint_id), top, "-inf", desc=True, byscore=True,
            offset=0, num=limit + 1, withscores=True,
        )  # fmt: skip
        # withscores: (member, score) pairs
        chosen = cast(list[tuple[bytes | str, float]], found)[:limit]
        raws = await self.redis.mget([keys.build(endpoint_id, _text(i)) for i, _ in chosen])
        builds = [
            (int(seq), Build.model_validate_json(raw))
            for (_, seq), raw in zip(chosen, raws, strict=True)
            if raw is not None  # trimmed between the two reads
        ]
        return builds, len(found) > limit

    async def live(self, endpoint_id: str) -> list[Build]:
        """The endpoint's builds not yet ended, oldest first (among the newest 100)."""
        page, _ = await self.page(endpoint_id, below=None, limit=100)
        return [b for _, b in reversed(page) if not b.terminal]

    async def change(
        self, endpoint_id: str, build_id: str, status: BuildStatus, **fields: object
    ) -> Build:
        """Move the build to `status` (`models.build.advance`), atomically against other
        writers; raises `BuildNotFound`, or `IllegalTransition` when it has ended."""
        key = keys.build(endpoint_id, build_id)
        current = await self.get(endpoint_id, build_id)
        for _ in range(5):
            changed = advance(current, status, **fields)
            body = orjson.dumps(changed.model_dump(mode="json"))
            found = await self._change(keys=[key], args=[current.status.value, body])
            if found is None:
                return changed
            if not found:
                raise BuildNotFound(build_id)
            current = Build.model_validate_json(found)  # another writer came first
        raise IllegalTransition(f"build {build_id}: changed under us five times")

    async def log(self, endpoint_id: str, build_id: str, source: str, lines: Iterable[str]) -> None:
        """Add lines to the build's log (`source`: container for the builder's output,
        system for lockgate's own steps), stamped now; past `log_lines` they are dropped."""
        now = self.clock()
        rows = [orjson.dumps([now, source, line]) for line in lines]
        if rows:
            await self._append(
                keys=[keys.build_log(endpoint_id, build_id)], args=[self.log_lines, *rows]
            )

    async def log_cursor(self, endpoint_id: str, build_id: str, container: str) -> str | None:
        """Where the operator is in the build container's log (`kube.buildlogs.Cursor`,
        encoded); None before it took any of it."""
        raw = await self.redis.hget(keys.build_log_cursors(endpoint_id, build_id), container)
        return None if raw is None else _text(raw)

    async def log_followed(
        self, endpoint_id: str, build_id: str, container: str, was: str | None, now: str,
        lines: Iterable[str],
    ) -> bool:  # fmt: skip
        """Add a build container's lines (source `container`) and move its cursor from
        `was` to `now`, in one step; False (nothing written) when the cursor is no longer
        `was`: another follower took those lines first. Past `log_lines` lines are dropped
        and the cursor still moves."""
        stamp = self.clock()
        rows = [orjson.dumps([stamp, "container", line]) for line in lines]
        ks = [keys.build_log(endpoint_id, build_id), keys.build_log_cursors(endpoint_id, build_id)]
        args: list[str | bytes | int] = [container, was or "", now, self.log_lines, *rows]
        return bool(await self._append_followed(keys=ks, args=args))

    async def log_room(self, endpoint_id: str, build_id: str) -> int:
        """How many more lines the build's log keeps."""
        return self.log_lines - int(await self.redis.llen(keys.build_log(endpoint_id, build_id)))

    async def log_lines_of(self, endpoint_id: str, build_id: str) -> list[tuple[int, str, str]]:
        """Every kept line of the build's log, oldest first: (epoch ms, source, text)."""
        raw = await self.redis.lrange(keys.build_log(endpoint_id, build_id), 0, -1)
        rows = [orjson.loads(r) for r in raw]
        return [(int(ms), str(source), str(text)) for ms, source, text in rows]


class HookSecrets:
    """Each endpoint's push-webhook secret (key `bhk`): generated, kept as is (an HMAC needs
    it), shown once when made; deleted with the endpoint."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def renew(self, endpoint_id: str) -> str:
        """A new secret for the endpoint (the old one stops working at once)."""
        secret = "lgh_" + token_urlsafe(32)
        await self.redis.set(keys.hook_secret(endpoint_id), secret)
        return secret

    async def get(self, endpoint_id: str) -> str | None:
        """The endpoint's secret; None before one is made."""
        raw = await self.redis.get(keys.hook_secret(endpoint_id))
        return None if raw is None else _text(raw)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
