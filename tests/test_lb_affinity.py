"""Worker affinity's pure decisions (`gateway.affinity`, `scaling.parking`): the header's
modes, what a pinned request does about its worker, and which parked workers expire or
are adopted by a scale-up. Over HTTP: tests/test_lb_resume.py."""

from __future__ import annotations

import pytest

from lockgate.gateway.affinity import (
    ABSENT,
    DRAINING,
    GO,
    GONE,
    NONE,
    PARKED,
    RESUME,
    ROUTABLE,
    SOFT,
    STRICT,
    STRICT_RESUME,
    WAIT,
    WAITING,
    Affinity,
    parse_affinity,
    pinned_step,
)
from lockgate.scaling.parking import adopt_first, expired, parks


@pytest.mark.parametrize(
    ("header", "affinity"),
    [
        (None, Affinity(None, NONE)),
        ("", Affinity(None, NONE)),
        ("   ", Affinity(None, NONE)),
        ("w-1", Affinity("w-1", SOFT)),
        (" w-1 ", Affinity("w-1", SOFT)),
        ("strict w-1", Affinity("w-1", STRICT)),
        ("STRICT w-1", Affinity("w-1", STRICT)),
        ("strict-resume w-1", Affinity("w-1", STRICT_RESUME)),
        ("Strict-Resume   w-1 ", Affinity("w-1", STRICT_RESUME)),
        ("strict", Affinity("strict", SOFT)),  # a mode word alone names a worker
        ("strict-resume", Affinity("strict-resume", SOFT)),
        ("resume w-1", Affinity("resume w-1", SOFT)),  # not a mode: soft, never routable
    ],
)
def test_the_affinity_header_has_four_modes(header, affinity) -> None:
    assert parse_affinity(header) == affinity
    assert affinity.pinned == (affinity.mode in (STRICT, STRICT_RESUME))


@pytest.mark.parametrize(
    ("mode", "seen", "step"),
    [
        (STRICT, ROUTABLE, GO),
        (STRICT_RESUME, ROUTABLE, GO),
        (STRICT, WAITING, WAIT),  # starting, unhealthy, or already tried by this request
        (STRICT_RESUME, WAITING, WAIT),
        (STRICT, PARKED, GONE),  # strict does not resume a scaled-down worker
        (STRICT_RESUME, PARKED, RESUME),
        (STRICT, DRAINING, GONE),  # leaving: it will not serve a new request
        (STRICT_RESUME, DRAINING, RESUME),  # a scale-down's victim may be parked, then back
        (STRICT, ABSENT, GONE),
        (STRICT_RESUME, ABSENT, GONE),  # removed, past its window, or never existed
    ],
)
def test_a_pinned_request_goes_waits_resumes_or_is_gone(mode, seen, step) -> None:
    assert pinned_step(mode, seen) == step


@pytest.mark.parametrize(
    ("window_s", "why", "parked"),
    [
        (60, "idle", True),  # a scale-down with a window parks
        (0, "idle", False),  # no window: gone at once
        (60, "closing", False),  # a shutdown stops
        (60, "refresh_worker: replaced after its job", False),
    ],
)
def test_only_a_scale_down_with_a_window_parks(window_s, why, parked) -> None:
    assert parks(window_s, why) is parked


def test_parked_workers_expire_at_their_deadline() -> None:
    deadlines = {"b": 10.0, "a": 5.0, "c": 20.0}
    assert expired(deadlines, 4.9) == []
    assert expired(deadlines, 10.0) == ["a", "b"]
    assert expired({}, 100.0) == []


@pytest.mark.parametrize(
    ("wanted", "adopted"),
    [(0, []), (-2, []), (1, ["c"]), (2, ["c", "b"]), (5, ["c", "b", "a"])],
)
def test_a_scale_up_adopts_the_most_recently_parked_first(wanted, adopted) -> None:
    assert adopt_first({"a": 5.0, "b": 10.0, "c": 20.0}, wanted) == adopted
