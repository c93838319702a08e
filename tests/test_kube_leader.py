"""Leader election for the scaler: the pure decision and Lease bodies, then the elector's
rounds against an in-memory Lease store that behaves like the API server (409s)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockgate.kube.cluster import ClusterError, Conflict
from lockgate.kube.leader import (
    LeaderElector,
    Step,
    claimed,
    decide,
    identity,
    micro_time,
    parse_time,
    released,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def lease(holder: str | None, renewed_ago_s: float | None = 0, duration_s: int = 15) -> dict:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration_s}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed_ago_s is not None:
        spec["renewTime"] = micro_time(NOW - timedelta(seconds=renewed_ago_s))
    meta = {"name": "lockgate-scaler", "namespace": "ops", "resourceVersion": "7"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("found", "step"),
    [
        (None, Step.ACQUIRE),  # absent
        (lease("me"), Step.RENEW),
        (lease("me", renewed_ago_s=60), Step.RENEW),  # ours, even when late: renew it
        (lease(""), Step.ACQUIRE),  # released
        (lease(None), Step.ACQUIRE),  # never held
        (lease("other", renewed_ago_s=3), Step.STANDBY),
        (lease("other", renewed_ago_s=15), Step.STANDBY),  # expires only after the duration
        (lease("other", renewed_ago_s=15.5), Step.ACQUIRE),  # expired
        (lease("other", renewed_ago_s=2, duration_s=1), Step.ACQUIRE),  # released by a holder
        (lease("other", renewed_ago_s=None), Step.ACQUIRE),  # no renewTime: cannot be alive
    ],
)
def test_decide(found: dict | None, step: Step) -> None:
    assert decide(found, "me", NOW) == step


def test_an_unreadable_renew_time_counts_as_expired() -> None:
    found = lease("other")
    found["spec"]["renewTime"] = "yesterday"
    assert decide(found, "me", NOW) == Step.ACQUIRE


def test_micro_times_always_carry_six_fraction_digits_and_read_back() -> None:
    assert micro_time(NOW) == "2024-05-01T12:00:00.000000Z"
    assert parse_time(micro_time(NOW)) == NOW
    assert parse_time("2024-05-01T12:00:00Z") == NOW
    assert parse_time(None) is None


def test_claiming_an_absent_lease_builds_one() -> None:
    body = claimed(None, "me", NOW, name="l", namespace="ops", duration_s=15)
    assert body["metadata"] == {"name": "l", "namespace": "ops"}
    assert body["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "2024-05-01T12:00:00.000000Z",
        "renewTime": "2024-05-01T12:00:00.000000Z",
    }


def test_renewing_moves_only_the_renew_time_and_keeps_the_resource_version() -> None:
    ours = lease("me", renewed_ago_s=5)
    ours["spec"] |= {"acquireTime": "earlier", "leaseTransitions": 2}
    body = claimed(ours, "me", NOW, name="l", namespace="ops", duration_s=15)
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"]["acquireTime"] == "earlier" and body["spec"]["leaseTransitions"] == 2
    assert body["spec"]["renewTime"] == micro_time(NOW)


def test_taking_over_counts_a_transition() -> None:
    body = claimed(lease("other", 60), "me", NOW, name="l", namespace="ops", duration_s=15)
    assert body["spec"]["holderIdentity"] == "me"
    assert body["spec"]["acquireTime"] == micro_time(NOW)
    assert body["spec"]["leaseTransitions"] == 1


def test_a_released_lease_has_no_holder_and_expires_at_once() -> None:
    body = released(lease("me"), NOW)
    assert body["spec"]["holderIdentity"] == "" and body["spec"]["leaseDurationSeconds"] == 1
    assert decide(body, "other", NOW) == Step.ACQUIRE


def test_identities_are_the_pod_name_and_a_fresh_suffix() -> None:
    first, second = identity("operator-7d9f"), identity("operator-7d9f")
    assert first.startswith("operator-7d9f_") and first != second


# -- the elector against an in-memory API -----------------------------------------------


class FakeLeases:
    """get/create/replace of one Lease with resourceVersion checks, as the API server does."""

    def __init__(self) -> None:
        self.stored: dict | None = None
        self.version = 0
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise ClusterError("the API server is unreachable", 503)

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        self._check()
        return copy.deepcopy(self.stored)

    def _store(self, body: dict) -> dict:
        self.version += 1
        self.stored = copy.deepcopy(body)
        self.stored["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.stored)

    async def create_lease(self, body: dict) -> dict:
        self._check()
        if self.stored is not None:
            raise Conflict("already exists", 409)
        return self._store(body)

    async def replace_lease(self, body: dict) -> dict:
        self._check()
        if self.stored is None or body["metadata"].get("resourceVersion") != str(self.version):
            raise Conflict("the object has been modified", 409)
        return self._store(body)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def wall(self) -> datetime:
        return NOW + timedelta(seconds=self.t)

    def __call__(self) -> float:
        return self.t


def elector(api: FakeLeases, clock: Clock, me: str) -> LeaderElector:
    return LeaderElector(
        api,  # type: ignore[arg-type]
        name="l", namespace="ops", me=me, duration_s=15, renew_s=5, now=clock.wall, clock=clock,
    )  # fmt: skip


async def test_of_two_electors_one_leads_and_the_other_takes_over_when_it_goes_silent() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert (await a.try_once(), await b.try_once()) == (True, False)
    clock.t = 10
    assert (await a.try_once(), await b.try_once()) == (True, False)  # renewed at 10
    clock.t = 24  # a silent since 10: its Lease runs to 25
    assert await b.try_once() is False
    clock.t = 25.5
    assert await b.try_once() is True
    assert await a.try_once() is False  # a sees b's fresh Lease and stands by
    assert api.stored["spec"]["leaseTransitions"] == 1


async def test_a_race_for_a_free_lease_has_one_winner() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    seen = await api.get_lease("ops", "l")
    await a.try_once()
    # b read the Lease before a wrote it: its write carries a stale version, so it loses.
    b.cluster = _Stale(api, seen)  # type: ignore[assignment]
    assert await b.try_once() is False and a.leading


class _Stale:
    def __init__(self, api: FakeLeases, seen: dict | None) -> None:
        self.api, self.seen = api, seen

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.seen)

    async def create_lease(self, body: dict) -> dict:
        return await self.api.create_lease(body)

    async def replace_lease(self, body: dict) -> dict:
        return await self.api.replace_lease(body)


async def test_a_leader_that_cannot_renew_steps_down_before_its_lease_expires() -> None:
    api, clock = FakeLeases(), Clock()
    a = elector(api, clock, "a")
    assert await a.try_once()
    api.failing = True
    clock.t = 5
    assert await a.try_once() is True  # one failed renewal: still within the deadline
    clock.t = 10  # renew deadline: duration 15 - renew interval 5
    assert await a.try_once() is False


async def test_release_hands_the_lease_to_the_next_reader() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_once()
    await a.release()
    assert not a.leading and await b.try_once() is True


class _RenewedMeanwhile(FakeLeases):
    """A renewal of the holder's, cut short by its stop, lands after the release's first
    read: that read's version is stale once."""

    def __init__(self) -> None:
        super().__init__()
        self.renewals_left = 0

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        seen = await super().get_lease(namespace, name)
        if self.renewals_left and self.stored is not None:
            self.renewals_left -= 1
            self._store(self.stored)
        return seen


async def test_release_reads_again_when_a_renewal_of_its_own_landed_meanwhile(caplog) -> None:
    api, clock = _RenewedMeanwhile(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_once()
    api.renewals_left = 1
    await a.release()
    assert api.stored["spec"]["holderIdentity"] == ""
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert await b.try_once() is True
