"""The Kubernetes client's rate limit (kube/cluster.py `RateLimit`): a burst at once after
a lull, then calls spaced 1/qps apart, in the order they came; qps 0 is no limit."""

from __future__ import annotations

import pytest

from lockgate.kube.cluster import RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_calls_are_spaced() -> None:
    clock = Clock()
    limit = RateLimit(qps=10, burst=3, clock=clock)
    waits = [limit.reserve() for _ in range(6)]
    assert waits[:3] == [0, 0, 0]
    assert waits[3:] == pytest.approx([0.1, 0.2, 0.3])


def test_a_lull_refills_the_burst_but_no_more() -> None:
    clock = Clock()
    limit = RateLimit(qps=10, burst=2, clock=clock)
    assert [limit.reserve() for _ in range(4)] == pytest.approx([0, 0, 0.1, 0.2])
    clock.now += 60  # a long lull: the burst is back, not sixty seconds' worth of calls
    assert [limit.reserve() for _ in range(3)] == pytest.approx([0, 0, 0.1])


def test_calls_spread_over_time_never_wait() -> None:
    clock = Clock()
    limit = RateLimit(qps=5, burst=1, clock=clock)
    for _ in range(20):
        assert limit.reserve() == 0
        clock.now += 0.2


def test_no_limit() -> None:
    limit = RateLimit(qps=0, burst=1, clock=Clock())
    assert all(limit.reserve() == 0 for _ in range(1000))
