"""The Celery peer's pure helpers (`make bench`, bench/celery_peer.py): how a batch is split
between clients, lockgate's figure as a multiple of Celery's, the table's Celery column, and
the side-by-side harness's verdict line."""

from __future__ import annotations

import pytest

from bench.celery_peer import Batch, Figures, shares, verdict, versus
from bench.report import Row, table


@pytest.mark.parametrize(
    ("total", "clients", "expected"),
    [(5000, 32, [157] * 8 + [156] * 24), (3, 4, [1, 1, 1, 0]), (64, 32, [2] * 32)],
)
def test_a_batch_is_split_between_clients_as_evenly_as_can_be(total, clients, expected) -> None:
    assert shares(total, clients) == expected
    assert sum(expected) == total


@pytest.mark.parametrize(
    ("ours", "celery", "limits", "expected"),
    [
        (1.4, 2.0, {"at_most": 0.7}, ("<= 0.7x Celery (is 0.70x)", True)),
        (1.5, 2.0, {"at_most": 0.7}, ("<= 0.7x Celery (is 0.75x)", False)),
        (1402, 701, {"at_least": 2}, (">= 2x Celery (is 2.00x)", True)),
        (226, 701, {"at_least": 2}, (">= 2x Celery (is 0.32x)", False)),
        (300, 200, {}, ("1.50x Celery", None)),
        (1.0, 0.0, {}, ("infx Celery", None)),
    ],
)
def test_lockgates_figure_is_judged_as_a_multiple_of_celerys(ours, celery, limits, expected):
    assert versus(ours, celery, **limits) == expected


def test_the_celery_column_shows_only_when_a_row_has_a_figure_for_it() -> None:
    plain = table([Row("a", "1 ms", "2 ms", "t", True)])
    assert plain.splitlines()[0].split() == ["figure", "lockgate", "floor", "target", "result"]
    both = table([Row("a", "1 ms", "", "t", True, peer="3 ms"), Row("b", "2 ms")])
    head, _, first, second = both.splitlines()
    assert head.split() == ["figure", "lockgate", "floor", "Celery", "target", "result"]
    assert first.split() == ["a", "1", "ms", "3", "ms", "t", "PASS"]
    assert second.split() == ["b", "2", "ms"]


def _figures(p50: float, sync_rate: float, drained: float) -> Figures:
    batch = Batch(1.0, [0.1], ["a"], 1, 0, 0)
    return Figures(p50, p50, sync_rate, batch, (0, 0), Row("cpu", ""), drained)


@pytest.mark.parametrize(
    ("ours", "celery", "expected"),
    [
        (
            _figures(0.0014, 900, 1500),
            _figures(0.002, 700, 700),
            "OK runsync_p50/celery_p50=0.70 (goal <=0.7); runsync_p50/floor=4.7; "
            "completed/s vs celery=2.14 (goal >=2); runsync_thr/floor=0.09",
        ),
        (
            _figures(0.002, 900, 1300),
            _figures(0.002, 700, 700),
            "SHORT runsync_p50/celery_p50=1.00 (goal <=0.7); runsync_p50/floor=6.7; "
            "completed/s vs celery=1.86 (goal >=2); runsync_thr/floor=0.09",
        ),
    ],
)
def test_the_side_by_side_verdict_reads_as_the_harness_prints_it(ours, celery, expected) -> None:
    line, ok = verdict(ours, celery, (0.0003, 10_000))
    assert line == expected
    assert ok is expected.startswith("OK ")
