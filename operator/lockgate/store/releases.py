"""An endpoint's releases in Redis (keys `rel`, `relv`): newest first, the last
`RELEASES_KEPT`, each with the configuration it produced.

The same store serves dev mode and a cluster (lockgate's Redis holds the registry too).
Writers may race (the management API and the operator both record what they wrote or
saw): `append` adds a release only when its version is above the newest one's, in one
script, so each version is recorded exactly once and the loser gets the winner back.
"""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from lockgate.models.releases import (
    RELEASES_KEPT,
    Release,
    ReleaseConfig,
    new_release,
    next_version,
)
from lockgate.store import keys

# KEYS: the release list, the newest version; ARGV: the version, the release (JSON), how
# many to keep. Returns nil when appended, else the newest release kept (JSON).
APPEND = """
local newest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= newest then
  return redis.call('LINDEX', KEYS[1], 0) or ''
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return false
"""


class ReleaseStore:
    """Releases by endpoint, in Redis."""

    def __init__(self, redis: Redis, *, kept: int = RELEASES_KEPT) -> None:
        self.redis = redis
        self.kept = kept
        self._append = redis.register_script(APPEND)

    async def all(self, endpoint_id: str) -> list[Release]:
        """Every release kept, newest first."""
        raw = await self.redis.lrange(keys.releases(endpoint_id), 0, -1)
        return [Release.model_validate_json(r) for r in raw]

    async def newest(self, endpoint_id: str) -> Release | None:
        raw = await self.redis.lindex(keys.releases(endpoint_id), 0)
        return Release.model_validate_json(raw) if raw else None

    async def append(self, endpoint_id: str, release: Release) -> Release:
        """Keep `release` unless one of its version or newer is kept: then that newest one
        is returned instead (the release recorded for this change by another writer)."""
        body = orjson.dumps(release.model_dump(mode="json"))
        ks = [keys.releases(endpoint_id), keys.release_version(endpoint_id)]
        found = await self._append(keys=ks, args=[release.version, body, self.kept])
        return Release.model_validate_json(found) if found else release

    async def record(self, endpoint_id: str, config: ReleaseConfig, known: int) -> Release:
        """The release of `config`: the newest kept when it is that configuration already
        (another writer recorded this change), else a new one (`next_version`) with its
        diff against the newest. Two writers of different configurations at once: the
        loser records its own as the next version."""
        newest = await self.newest(endpoint_id)
        for _ in range(3):
            version = next_version(newest, config, known)
            if version is None and newest is not None:
                return newest
            old = newest.config if newest is not None else None
            release = new_release(version or known, old, config)
            newest = await self.append(endpoint_id, release)
            if newest.config == config:
                return newest
        raise RuntimeError(f"endpoint {endpoint_id}: releases changed under us three times")
