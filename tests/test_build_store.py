"""An endpoint's builds in a real Redis (issue 48, item 2): newest first in pages, the
newest kept with their logs, status changes that never overwrite each other, and nothing
left once the endpoint's data is deleted."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from lockgate.models.build import BuildStatus, IllegalTransition, new_build
from lockgate.store import JobStore
from lockgate.store.builds import BuildNotFound, BuildStore

pytestmark = pytest.mark.asyncio
EP = "ep-builds"


async def test_builds_come_newest_first_in_pages_and_any_kept_one_by_id(redis: Redis) -> None:
    store = BuildStore(redis)
    made = [new_build(f"v{i}") for i in range(5)]
    for build in made:
        await store.add(EP, build)
    first, more = await store.page(EP, below=None, limit=2)
    assert [b.id for _, b in first] == [made[4].id, made[3].id] and more
    second, more = await store.page(EP, below=first[-1][0], limit=2)
    assert [b.id for _, b in second] == [made[2].id, made[1].id] and more
    last, more = await store.page(EP, below=second[-1][0], limit=2)
    assert [b.id for _, b in last] == [made[0].id] and not more
    assert (await store.get(EP, made[0].id)).ref == "v0"
    with pytest.raises(BuildNotFound):
        await store.get(EP, "build_nosuch")


async def test_past_the_kept_count_the_oldest_build_goes_with_its_log(redis: Redis) -> None:
    store = BuildStore(redis, kept=3)
    made = [new_build() for _ in range(4)]
    for build in made:
        await store.add(EP, build)
        await store.log(EP, build.id, "system", ["asked"])
    with pytest.raises(BuildNotFound):
        await store.get(EP, made[0].id)
    assert await store.log_lines_of(EP, made[0].id) == []
    page, more = await store.page(EP, below=None, limit=10)
    assert [b.id for _, b in page] == [b.id for b in reversed(made[1:])] and not more


async def test_a_cancel_and_a_builders_completion_never_overwrite_each_other(
    redis: Redis,
) -> None:
    store = BuildStore(redis)
    build = new_build()
    await store.add(EP, build)
    await store.change(EP, build.id, BuildStatus.BUILDING)
    outcomes = await asyncio.gather(
        store.change(EP, build.id, BuildStatus.CANCELLED),
        store.change(EP, build.id, BuildStatus.COMPLETED, commitHash="abc1234"),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, Exception)]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], IllegalTransition)
    assert (await store.get(EP, build.id)).status == won[0].status


async def test_a_builds_log_keeps_its_first_lines_in_order(redis: Redis) -> None:
    store = BuildStore(redis, log_lines=3)
    build = new_build()
    await store.add(EP, build)
    await store.log(EP, build.id, "system", ["one", "two"])
    await store.log(EP, build.id, "container", ["three", "four"])
    rows = await store.log_lines_of(EP, build.id)
    assert [(src, text) for _, src, text in rows] == [
        ("system", "one"), ("system", "two"), ("container", "three")
    ]  # fmt: skip


async def test_deleting_an_endpoints_data_removes_its_builds_and_logs(redis: Redis) -> None:
    store = BuildStore(redis)
    build = new_build()
    await store.add(EP, build)
    await store.log(EP, build.id, "system", ["asked"])
    assert await store.log_followed(EP, build.id, "build", None, "1:1", ["a line"])
    await JobStore(redis).delete_endpoint_data(EP)
    assert [k async for k in redis.scan_iter(match=f"lg:{{{EP}}}:*")] == []


async def test_a_followed_containers_lines_and_cursor_are_written_once(redis: Redis) -> None:
    """The operator's follower of a build pod's log (kube/buildlogs.py): lines and cursor in
    one step, refused to a second follower that read the same cursor (no line twice), the
    cursor moving on when the log is full; the cursors go with a build trimmed away."""
    store = BuildStore(redis, kept=1, log_lines=4)
    build = new_build()
    await store.add(EP, build)
    assert await store.log_cursor(EP, build.id, "build") is None
    assert await store.log_followed(EP, build.id, "build", None, "100:2", ["one", "two"])
    assert not await store.log_followed(EP, build.id, "build", None, "100:2", ["one", "two"])
    assert await store.log_cursor(EP, build.id, "build") == "100:2"
    assert await store.log_followed(EP, build.id, "push", None, "101:1", ["three"])
    assert await store.log_room(EP, build.id) == 1
    assert await store.log_followed(EP, build.id, "build", "100:2", "102:3", ["four", "five"])
    rows = await store.log_lines_of(EP, build.id)
    assert [(src, text) for _, src, text in rows] == [
        ("container", "one"), ("container", "two"), ("container", "three"), ("container", "four")
    ]  # fmt: skip
    assert await store.log_cursor(EP, build.id, "build") == "102:3"  # moved on, log full
    await store.add(EP, new_build())  # kept=1: the first build goes, with its cursors
    assert await redis.exists(f"lg:{{{EP}}}:blc:{build.id}") == 0
