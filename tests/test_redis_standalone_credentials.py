"""A standalone Redis URL without a password, with the password given apart
(LOCKGATE_REDIS_PASSWORD: the chart mounts it from the user's own Secret), on a real
redis-server that requires one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as sync_redis
from redis.exceptions import AuthenticationError

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.store import connect
from lockgate.store.connection import RedisSettings

PASSWORD = "s3cret"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(Path(tmp_path_factory.mktemp("guarded")))
    server.start()
    client = sync_redis.Redis(port=server.port)
    client.config_set("requirepass", PASSWORD)
    client.close()
    try:
        yield server
    finally:
        server.stop()


async def test_a_password_given_apart_opens_a_standalone_url_without_one(guarded) -> None:
    url = f"redis://127.0.0.1:{guarded.port}/0"
    client = connect(RedisSettings.of(redis_url=url, redis_password=PASSWORD))
    try:
        assert await client.ping()
    finally:
        await client.aclose()


async def test_the_urls_own_password_wins_over_the_one_given_apart(guarded) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{guarded.port}/0"
    client = connect(RedisSettings.of(redis_url=url, redis_password="wrong"))
    try:
        assert await client.ping()
    finally:
        await client.aclose()


async def test_without_any_password_the_guarded_redis_refuses(guarded) -> None:
    client = connect(RedisSettings.of(redis_url=f"redis://127.0.0.1:{guarded.port}/0"))
    try:
        with pytest.raises(AuthenticationError):
            await client.ping()
    finally:
        await client.aclose()
