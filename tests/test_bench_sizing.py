"""The sizing benchmark's arithmetic (`make bench-sizing`): per-job costs from two readings
of Redis' counters, and the spread between runs."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.sizing import Reading, cost, spread


def test_a_cost_is_each_counter_delta_per_job_without_the_readings_own_info_calls() -> None:
    before = Reading(Counter(evalsha=10, hset=40, info=4), cpu_s=1.0, memory=0)
    after = Reading(Counter(evalsha=210, hset=640, publish=10, info=8), cpu_s=1.02, memory=0)
    c = cost(before, after, gw_s=0.08, jobs=200)
    assert c.scripts == 1.0
    assert c.commands == (200 + 600 + 10) / 200
    assert c.redis_us == pytest.approx(100)
    assert c.gateway_us == pytest.approx(400)
    assert c.top == "hset 3.0, publish 0.1"


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (["1,900", "2,280"], "20%"),
        (["75 / 410 us", "100 / 500 us"], "33%"),
        (["evalsha 1.0", "evalsha 1.0"], ""),
        (["830 B"], ""),
    ],
)
def test_the_spread_is_the_gap_between_runs_over_the_smallest(cells, expected) -> None:
    assert spread(cells) == expected
