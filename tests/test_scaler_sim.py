"""The scaler simulation (deterministic) meets the issue's target on the bursty trace."""

from __future__ import annotations

import pytest

from bench.scaler_sim import Scenario, bursty_trace, meets_target, report, run_all


def test_the_trace_is_the_same_every_run_and_bursty() -> None:
    trace = bursty_trace()
    assert trace == bursty_trace()
    per_minute = [0] * 31
    for job in trace:
        per_minute[int(job.arrival // 60)] += 1
    assert max(per_minute) >= 20 and sorted(per_minute)[len(per_minute) // 2] <= 2


@pytest.mark.parametrize("which", [1, 2], ids=["QUEUE_DELAY", "REQUEST_COUNT"])
def test_scaled_pool_keeps_p95_delay_near_the_fixed_pool_for_under_half_the_worker_seconds(
    which: int,
) -> None:
    sc = Scenario()
    results = run_all(sc)
    fixed, scaled = results[0], results[which]
    assert len(scaled.delays) == len(fixed.delays) == len(bursty_trace())  # every job ran
    assert scaled.peak == sc.workers_max
    assert meets_target(scaled, fixed, sc.cold_start_s)


def test_the_target_is_missed_when_idle_workers_are_kept_for_ten_minutes() -> None:
    sc = Scenario(idle_timeout_s=600)
    fixed, scaled, _ = run_all(sc)
    assert not meets_target(scaled, fixed, sc.cold_start_s)


def test_the_report_is_a_table_with_a_verdict_per_scaler_type() -> None:
    text = report()
    assert "p95 delay" in text and text.count("PASS") == 2
