"""A job submitted while a job-take of the same gateway waits is handed over
(`Notifier.hand_over`): that taker is woken before the submit is sent, so its take goes to
Redis in the submit's batch, and the submit's `q:` event (it names the job) wakes no
second taker of this gateway. The gateways here re-check Redis only every 30 s, so a taker
that slept through a job would be caught."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lockgate.gateway.notify import Notifier
from lockgate.gateway.state import GATEWAY
from lockgate.store.scripts import Scripts
from tests.conftest import LiveGateway, eventually
from tests.redis_monitor import monitored
from tests.test_idle_token import takes_run
from tests.test_job_api import submit

GATEWAY_SETTINGS = {"poll_fallback_s": 30.0, "take_wait_s": 20.0}
PROMPTLY_S = 10.0


async def take(http, gw: LiveGateway, worker: str) -> dict:
    """A job-take long-poll of `worker`: the job it got, or {} (204)."""
    async with http.get(gw.job_url(f"job-take/{worker}"), headers=gw.worker_headers()) as r:
        assert r.status in (200, 204), await r.text()
        return await r.json() if r.status == 200 else {}


async def waiting(gw: LiveGateway, count: int) -> None:
    """Until `count` job-takes of the gateway wait for a job."""
    notifier = gw.app[GATEWAY].notifier
    for _ in range(200):
        if len(notifier._jobs.get(gw.endpoint, ())) == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not {count} waiting job-takes")


@contextmanager
def batches_sent(scripts: Scripts) -> Iterator[list[list[str]]]:
    """The names of the scripts of each batch the store writes to Redis meanwhile."""
    names = {id(script): name for name, script in scripts.by_name.items()}
    sent: list[list[str]] = []
    real = scripts._sent_now

    def recording(batch):
        sent.append([names[id(call[0])] for call in batch])
        return real(batch)

    scripts._sent_now = recording  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del scripts._sent_now


async def handed(http, gw: LiveGateway, worker: str = "w-1") -> None:
    """A job submitted while `worker` waits reaches it promptly."""
    taking = asyncio.create_task(take(http, gw, worker))
    await waiting(gw, 1)
    job = await submit(http, gw, {"input": {"n": 1}})
    assert (await asyncio.wait_for(taking, PROMPTLY_S))["id"] == job["id"]


async def test_a_waiting_take_goes_to_redis_in_the_submits_batch(http, gateway):
    await handed(http, gateway)  # Redis has loaded the scripts
    with batches_sent(gateway.app[GATEWAY].store.scripts) as sent:
        await handed(http, gateway)
    assert ["submit", "take"] in sent, sent  # one round trip for both


async def test_a_submit_sent_again_after_its_take_still_reaches_the_taker(http, gateway, redis):
    """Redis lost its scripts (a restart): the submit is refused and sent again, after the
    take of its batch ran on an empty queue. The taker, back to waiting, is woken by the
    submit's event (with the 30 s re-check, a slept-through job fails the test)."""
    await redis.script_flush()
    await handed(http, gateway)


async def test_the_submits_event_wakes_no_second_taker(http, gateway, redis):
    older = asyncio.create_task(take(http, gateway, "w-1"))
    await waiting(gateway, 1)
    newer = asyncio.create_task(take(http, gateway, "w-2"))
    await waiting(gateway, 2)
    notifier = gateway.app[GATEWAY].notifier
    queued_before = notifier.generation(gateway.endpoint)
    async with monitored(redis) as sent:
        job = await submit(http, gateway, {"input": {"n": 1}})
        assert (await asyncio.wait_for(newer, PROMPTLY_S))["id"] == job["id"]
        came = lambda: asyncio.sleep(0, notifier.generation(gateway.endpoint) > queued_before)  # noqa: E731
        await eventually(came, "the submit's q: event")
        await asyncio.sleep(0.5)  # time for a taker the event wrongly woke to take
    assert not older.done()
    assert takes_run(redis, gateway, sent) == 1  # the handed take's; w-1 never took
    older.cancel()


async def test_a_job_handed_to_a_taker_that_hung_up_goes_to_the_next(http, gateway, redis):
    older = asyncio.create_task(take(http, gateway, "w-1"))
    await waiting(gateway, 1)
    gone = asyncio.create_task(take(http, gateway, "w-2"))
    await waiting(gateway, 2)
    gone.cancel()  # its connection closes; its take still waits in the gateway
    await asyncio.sleep(0.3)
    job = await submit(http, gateway, {"input": {"n": 1}})
    assert (await asyncio.wait_for(older, PROMPTLY_S))["id"] == job["id"]
    assert await redis.hget(f"lg:{{{gateway.endpoint}}}:j:{job['id']}", "wk") == b"w-1"


@pytest.mark.parametrize(
    ("event", "wakes"),
    [(b"q:ep:j-1", 0), (b"q:ep:j-2", 1), (b"q:ep", 1)],
    ids=["this-job", "another-job", "a-requeue"],
)
async def test_only_the_event_of_the_handed_job_wakes_no_one(redis, event: bytes, wakes: int):
    notifier = Notifier(redis)
    queued: list[str] = []
    notifier.on_queued = queued.append
    first = asyncio.create_task(notifier.wait_for_job("ep", "w-1", 5))
    second = asyncio.create_task(notifier.wait_for_job("ep", "w-2", 5))
    await asyncio.sleep(0)
    notifier.hand_over("ep", "j-1")
    await asyncio.sleep(0)
    assert second.done() and not first.done()  # the newer taker is handed the job
    before = notifier.generation("ep")
    notifier.dispatch(event)
    await asyncio.sleep(0)
    assert first.done() == bool(wakes)
    assert notifier.generation("ep") == before + 1  # takes that did not wait take again
    assert queued == ["ep"]
    first.cancel()


async def test_the_event_wakes_the_handed_taker_come_back_to_wait(redis):
    """Its take found nothing (it ran before the submit): the event is its wake-up."""
    notifier = Notifier(redis)
    taker = asyncio.create_task(notifier.wait_for_job("ep", "w-1", 5))
    await asyncio.sleep(0)
    notifier.hand_over("ep", "j-1")
    await asyncio.sleep(0)
    again = asyncio.create_task(notifier.wait_for_job("ep", "w-1", 5))
    await asyncio.sleep(0)
    notifier.dispatch(b"q:ep:j-1")
    await asyncio.sleep(0)
    assert taker.done() and again.done()


async def test_with_no_taker_waiting_nothing_is_handed(redis):
    notifier = Notifier(redis)
    notifier.hand_over("ep", "j-1")
    taker = asyncio.create_task(notifier.wait_for_job("ep", "w-1", 5))
    await asyncio.sleep(0)
    notifier.dispatch(b"q:ep:j-1")
    await asyncio.sleep(0)
    assert taker.done()  # the event wakes it: it was not handed the job
