"""`kube.scale_first`: what a wake-up writes first and what waits for it (issue 51)."""

from __future__ import annotations

import asyncio

from lockgate.kube.scale_first import Report, ScaleFirst, cannot_configure, key_check_due

AT_REST = {"phase": "Ready", "workers": {"desired": 0, "ready": 0}, "jobs": {"inQueue": 0}}
WOKEN = {"phase": "Ready", "workers": {"desired": 1, "ready": 0}, "jobs": {"inQueue": 1}}
PENDING = {"metadata": {"name": "w-1"}, "status": {"phase": "Pending"}}


def waiting(reason: str, *, init: bool = False) -> dict:
    container = {"name": "worker", "state": {"waiting": {"reason": reason, "message": "..."}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": "w-2"}, "status": {"phase": "Pending", key: [container]}}


def test_a_pod_that_cannot_create_its_container_is_the_only_reason_to_check_the_key() -> None:
    assert cannot_configure([PENDING, waiting("CreateContainerConfigError")])
    assert cannot_configure([waiting("CreateContainerConfigError", init=True)])
    assert not cannot_configure([PENDING, waiting("ContainerCreating"), waiting("ErrImagePull")])
    # watched pods: a wake-up (a count changed, pods Pending) is no reason
    assert not key_check_due(WOKEN, [])
    assert not key_check_due(WOKEN, [PENDING])
    assert key_check_due(WOKEN, [waiting("CreateContainerConfigError")])
    assert not key_check_due(AT_REST, [])
    # without kopf's index: as before, whenever the Endpoint is not at rest
    assert key_check_due(WOKEN, None)
    assert not key_check_due(AT_REST, None)


def test_reports_of_an_endpoint_merge_into_one_status_write() -> None:
    scaled = Report([{"reason": "ScaledUp"}], workers={"desired": 1, "ready": 0})
    pods = Report([{"reason": "Unschedulable"}], refresh=True)
    again = Report(workers={"desired": 2, "ready": 0})
    merged = scaled.merged(pods).merged(again)
    assert [e["reason"] for e in merged.events] == ["ScaledUp", "Unschedulable"]
    assert merged.refresh and not merged.force
    assert merged.workers == {"desired": 2, "ready": 0}  # the last decision's counts
    assert Report().empty() and not again.empty()
    assert scaled.merged(Report()).workers == {"desired": 1, "ready": 0}


async def test_reports_wait_for_the_wake_ups_pending_when_they_came() -> None:
    first = ScaleFirst()
    await first.clear()  # none pending: at once
    first.waking("a")
    first.waking("b")
    waiter = asyncio.create_task(first.clear())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done()
    first.decided("a")
    first.waking("c")  # woken after the waiter came: it does not hold it
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done()
    first.decided("b")
    await asyncio.wait_for(waiter, 5)
    assert first.pending == {"c"}
    first.keep({"x"})  # a full tick with nothing to decide of "c"
    assert first.pending == set()


async def test_a_wake_up_never_decided_holds_reports_at_most_the_longest_wait() -> None:
    first = ScaleFirst(longest_wait_s=0.0)
    first.waking("lost")
    await asyncio.wait_for(first.clear(), 5)
    assert first.pending == {"lost"}
