"""Dev mode's builder on its own (issue 48, item 1): a build past its source's
`buildTimeoutMin` ends FAILED saying so, with the record in a real Redis (a minute made
short here: `minute_s`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from lockgate.dev.builder import LocalBuilder
from lockgate.models.build import BuildStatus, new_build
from lockgate.models.source import GitSource
from lockgate.store.builds import BuildStore
from tests.conftest import eventually
from tests.test_v2_builds import silent_git_server

pytestmark = pytest.mark.asyncio


async def test_a_build_past_its_time_limit_fails_saying_so(redis: Redis, tmp_path: Path) -> None:
    store = BuildStore(redis)
    builder = LocalBuilder(store, tmp_path, minute_s=0.5)
    build = new_build()
    await store.add("ep-slow", build)
    async with silent_git_server() as url:
        builder.start("ep-slow", GitSource(url=url, buildTimeoutMin=1), build)

        async def ended() -> bool:
            return (await store.get("ep-slow", build.id)).terminal

        await eventually(ended, timeout=30)
    done = await store.get("ep-slow", build.id)
    assert done.status == BuildStatus.FAILED
    assert done.error == "the build took over its buildTimeoutMin (1 min)"
    lines = [text for _, _, text in await store.log_lines_of("ep-slow", build.id)]
    assert lines[-1] == "build failed: the build took over its buildTimeoutMin (1 min)"
    await builder.close()
