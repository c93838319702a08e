"""REQUEST_COUNT on load-balancing requests (pure): held and in-flight requests drive
`decide`; routing and health states from the router's pure helpers."""

from __future__ import annotations

import pytest

from lockgate.gateway.lb_workers import Target, health_state, pick
from lockgate.models.endpoint import ScalerType
from lockgate.scaling.decision import EndpointMetrics, Limits, Workers, decide
from lockgate.store.lb_workers import LbWorker

LB = Limits(0, 4, 5.0, scaler_type=ScalerType.REQUEST_COUNT, scaler_value=1)


@pytest.mark.parametrize(
    ("metrics", "workers", "desired"),
    [
        (EndpointMetrics(requests_held=1), Workers(0), 1),  # a held request at zero
        (EndpointMetrics(requests_held=9), Workers(0), 4),  # within workersMax
        (EndpointMetrics(requests_in_flight=3, worker_jobs={"a": 3}), Workers(1), 3),
        (EndpointMetrics(requests_in_flight=1, worker_jobs={"a": 1}), Workers(1), 1),
        (EndpointMetrics(), Workers(2, (60.0, 60.0)), 0),  # idle long enough: down to 0
        (EndpointMetrics(requests_in_flight=1), Workers(2, (60.0,)), 1),  # the busy one stays
    ],
)
def test_request_count_counts_held_and_in_flight_requests(metrics, workers, desired) -> None:
    assert decide(metrics, LB, workers, now=100.0).desired == desired


@pytest.mark.parametrize(
    ("code", "answered", "starting", "state"),
    [
        (200, True, True, "healthy"),
        (204, True, True, "initializing"),
        (0, False, True, "initializing"),  # not listening yet
        (0, False, False, "unhealthy"),  # never listened within the start grace
        (0, True, True, "unhealthy"),  # answered before, silent now
        (503, True, True, "unhealthy"),
        (404, True, True, "unhealthy"),  # a wrong health path shows at once
    ],
)
def test_health_codes_map_to_states(code, answered, starting, state) -> None:
    assert health_state(code, answered=answered, starting=starting) == state


def _target(worker_id: str, in_flight: int = 0, state: str = "healthy") -> Target:
    worker = LbWorker(f"127.0.0.1:{9000 + len(worker_id)}", "127.0.0.1:1", "/ping")
    return Target(worker_id, worker, None, None, state=state, in_flight=in_flight)  # type: ignore[arg-type]


def test_pick_prefers_the_asked_worker_then_the_least_busy_and_spreads_ties() -> None:
    a, b, c = _target("a", 2), _target("b", 1), _target("c", 1)
    sick = _target("d", 0, state="unhealthy")
    assert pick([a, b, c, sick], "a") is a  # asked for, and routable
    assert pick([a, b, sick], "d") is b  # asked for but not routable: the least busy
    assert pick([a, b, c], None, exclude={"b", "c"}) is a
    assert pick([sick], None) is None and pick([a], None, exclude={"a"}) is None
    chosen = {pick([a, b, c], None).id for _ in range(200)}  # type: ignore[union-attr]
    assert chosen == {"b", "c"}  # the tied least busy, each of them
