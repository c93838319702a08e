"""A worker marked unhealthy (models/unhealthy.py, `JobStore.mark_unhealthy`): it gets no job
again, the job it held goes back to the queue, and why is kept for an hour, the older
records pruned as a new one is written."""

from __future__ import annotations

from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobStore, keys
from tests.test_job_api import get, submit, take


async def test_a_marked_worker_takes_nothing_and_its_job_runs_elsewhere(http, gateway, redis):
    store = JobStore(redis)
    job_id = (await submit(http, gateway, {"input": {}}))["id"]
    assert (await take(http, gateway, "sick"))["id"] == job_id
    why = UnhealthyWorker(
        worker="sick", kind="fitness", check="check_gpu", reason="RuntimeError: no GPU", at=0
    ).model_copy(update={"at": store.clock()})
    assert await store.mark_unhealthy(gateway.endpoint, why) == (1, 0)
    assert await take(http, gateway, "sick") is None  # released for good
    assert (await take(http, gateway, "well"))["id"] == job_id
    details = (await get(http, gateway, f"status/{job_id}?details=1"))[1]
    assert [a["workerId"] for a in details["attemptHistory"]] == ["sick", "well"]
    shown = await store.unhealthy_workers(gateway.endpoint)
    assert shown == {"sick": why}
    assert shown["sick"].text() == "fitness check check_gpu failed: RuntimeError: no GPU"


async def test_records_older_than_an_hour_are_pruned_and_not_shown(http, gateway, redis):
    now = [10 * keys.UNHEALTHY_KEEP_MS]
    store = JobStore(redis, clock=lambda: now[0])
    old = UnhealthyWorker(worker="old", kind="startup", reason="did not become ready", at=now[0])
    await store.mark_unhealthy(gateway.endpoint, old)
    now[0] += keys.UNHEALTHY_KEEP_MS + 1
    assert await store.unhealthy_workers(gateway.endpoint) == {}
    new = UnhealthyWorker(worker="new", kind="warmup", reason="KeyError: 'x'", at=now[0])
    await store.mark_unhealthy(gateway.endpoint, new)
    raw = await redis.hkeys(keys.prefix(gateway.endpoint) + "un")
    assert raw == [b"new"]
