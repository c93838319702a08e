"""Usage reports, pure: bucket boundaries, the report's window, hours folded into buckets,
amounts from prices, the rate an endpoint's workers count at, the usage hash's fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from lockgate.manage.usage import (
    Amounts,
    BadWindow,
    BucketSize,
    Usage,
    amounts,
    bucket_start,
    fold,
    pools_folded,
    shifted,
    snap_up,
    window,
)
from lockgate.models.batch import batch_pool_id, batch_pool_parent
from lockgate.settings import Prices
from lockgate.store.usage import UNSPECIFIED_GPU, HourUsage, UsageRate, chunks, parse_hours, rate_of

H, D, W, M, Y = BucketSize.HOUR, BucketSize.DAY, BucketSize.WEEK, BucketSize.MONTH, BucketSize.YEAR
NOW = datetime(2026, 12, 6, 10, 17, 25, tzinfo=UTC)  # a Sunday


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("size", "start"),
    [
        (H, at(2026, 12, 6, 10)),
        (D, at(2026, 12, 6)),
        (W, at(2026, 11, 30)),  # the Monday before
        (M, at(2026, 12, 1)),
        (Y, at(2026, 1, 1)),
    ],
)
def test_a_time_snaps_down_to_the_start_of_its_bucket(size: BucketSize, start: datetime) -> None:
    assert bucket_start(NOW, size) == start
    assert bucket_start(start, size) == start  # a boundary stays


def test_bucket_start_reads_any_offset_as_utc() -> None:
    berlin = datetime(2026, 12, 6, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    assert bucket_start(berlin, D) == at(2026, 12, 5)


@pytest.mark.parametrize(
    ("start", "size", "n", "shifted_to"),
    [
        (at(2026, 12, 6, 23), H, 1, at(2026, 12, 7)),
        (at(2026, 12, 31), D, 1, at(2027, 1, 1)),
        (at(2026, 11, 30), W, -1, at(2026, 11, 23)),
        (at(2026, 12, 1), M, 1, at(2027, 1, 1)),
        (at(2026, 3, 1), M, -3, at(2025, 12, 1)),
        (at(2026, 1, 1), Y, -2, at(2024, 1, 1)),
    ],
)
def test_buckets_shift_by_the_calendar(
    start: datetime, size: BucketSize, n: int, shifted_to: datetime
) -> None:
    assert shifted(start, size, n) == shifted_to


def test_an_end_snaps_up_unless_it_is_a_boundary() -> None:
    assert snap_up(NOW, D) == at(2026, 12, 7)
    assert snap_up(at(2026, 12, 7), D) == at(2026, 12, 7)
    assert snap_up(NOW, M) == at(2027, 1, 1)


def test_the_default_window_is_30_days_back_to_now_snapped_out() -> None:
    assert window(D, NOW) == (at(2026, 11, 6), at(2026, 12, 7))
    assert window(H, NOW) == (at(2026, 11, 6, 10), at(2026, 12, 6, 11))
    assert window(Y, NOW) == (at(2026, 1, 1), at(2027, 1, 1))


def test_last_n_buckets_end_with_the_current_one() -> None:
    assert window(M, NOW, last_n=3) == (at(2026, 10, 1), at(2027, 1, 1))
    assert window(D, NOW, last_n=1) == (at(2026, 12, 6), at(2026, 12, 7))
    assert window(W, NOW, last_n=2) == (at(2026, 11, 23), at(2026, 12, 7))


def test_given_times_are_snapped_out() -> None:
    got = window(D, NOW, start=at(2026, 12, 1, 5), end=at(2026, 12, 3, 0, 0, 1))
    assert got == (at(2026, 12, 1), at(2026, 12, 4))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"start": at(2026, 12, 3), "end": at(2026, 12, 3)},
        {"start": at(2026, 12, 4), "end": at(2026, 12, 3)},
        {"start": at(2026, 12, 8)},  # after now, the default end
        {"last_n": 10**9},  # before year 1
    ],
)
def test_an_empty_or_impossible_window_is_refused(kwargs: dict) -> None:
    with pytest.raises(BadWindow):
        window(D, NOW, **kwargs)


def hour(*parts: int) -> int:
    return int(at(*parts).timestamp())


def test_hours_fold_into_one_record_per_endpoint_and_bucket() -> None:
    hours = {
        "b": {
            hour(2026, 12, 5, 23): HourUsage(600, 0, {"NVIDIA L4": 1200}),
            hour(2026, 12, 6, 1): HourUsage(30, 0, {"NVIDIA L4": 60}),
            hour(2026, 12, 6, 2): HourUsage(10, 0, {"NVIDIA A100 80GB PCIe": 10}),
        },
        "a": {
            hour(2026, 12, 6, 3): HourUsage(3600, 7200, {}),
            hour(2026, 12, 7, 0): HourUsage(10, 20, {}),  # outside [first, last)
        },
    }
    records = fold(hours, D, at(2026, 12, 5), at(2026, 12, 7))
    assert [(r.start, r.endpoint_id) for r in records] == [
        (at(2026, 12, 5), "b"),
        (at(2026, 12, 6), "a"),
        (at(2026, 12, 6), "b"),
    ]
    assert records[2].end == at(2026, 12, 7)
    assert records[2].usage == Usage(40, 0, {"NVIDIA L4": 60, "NVIDIA A100 80GB PCIe": 10})
    assert records[1].usage == Usage(3600, 7200, {})


def test_amounts_are_the_seconds_in_hours_times_the_prices() -> None:
    usage = Usage(7200, 1800, {"NVIDIA L4": 7200, "unpriced": 3600})
    money = amounts(usage, Prices(gpu_prices={"NVIDIA L4": 0.44}, vcpu_price=0.04))
    assert money == Amounts(gpu=pytest.approx(0.88), cpu=pytest.approx(0.02))
    assert money.total == pytest.approx(0.90)
    assert amounts(usage, Prices()) == Amounts()  # no prices: nothing costs anything


@pytest.mark.parametrize(
    ("entry", "rate"),
    [
        ({"computeType": "GPU", "gpuTypeIds": ["NVIDIA L4", "NVIDIA A40"], "gpuCount": 2},
         UsageRate("NVIDIA L4", 2, 0)),
        ({"gpuTypeIds": []}, UsageRate(UNSPECIFIED_GPU, 1, 0)),
        ({"computeType": "CPU", "vcpuCount": 4, "gpuTypeIds": ["NVIDIA L4"]}, UsageRate("", 0, 4)),
        (None, UsageRate()),
    ],
)  # fmt: skip
def test_a_worker_counts_its_gpus_of_the_first_type_or_its_vcpus(
    entry: dict | None, rate: UsageRate
) -> None:
    assert rate_of(entry) == rate


def test_a_usage_hash_reads_back_by_hour() -> None:
    fields = {b"3600:w": b"20", b"3600:g:NVIDIA GeForce RTX 4090": b"40", "7200:c": "8"}
    fields[b"7200:w"] = b"4"
    assert parse_hours(fields) == {
        3600: HourUsage(20, 0, {"NVIDIA GeForce RTX 4090": 40}),
        7200: HourUsage(4, 8, {}),
    }


def test_the_usage_hashes_read_cover_the_window() -> None:
    week = 7 * 24 * 3600
    assert list(chunks(week + 5, week + 6)) == [week]
    assert list(chunks(week - 1, 2 * week + 1)) == [0, week, 2 * week]


LONG = "a" * 63  # its pool's id is cut and a digest added


@pytest.mark.parametrize(
    ("endpoint_id", "known", "parent"),
    [
        ("batch-ep", (), "ep"),
        ("ep", (), None),
        ("batch-", (), None),
        (batch_pool_id(LONG), ("ep", LONG), LONG),  # cut: a known endpoint names it back
        ("batch-" + "b" * 58, (), None),  # too long to be a pool's own id
    ],
)
def test_a_batch_pool_names_its_endpoint_back(
    endpoint_id: str, known: tuple[str, ...], parent: str | None
) -> None:
    assert batch_pool_parent(endpoint_id, known) == parent


def test_a_batch_pools_usage_is_its_endpoints_and_no_row_of_its_own() -> None:
    pool = HourUsage(worker_seconds=30, vcpu_seconds=60, gpu_seconds={"A100": 30})
    own = HourUsage(worker_seconds=10, vcpu_seconds=0, gpu_seconds={"A100": 10, "L4": 5})
    hours = {"ep": {0: own}, "batch-ep": {0: pool, 3600: pool}, "batch-gone": {0: pool}}
    folded = pools_folded(hours, lambda i: batch_pool_parent(i, hours))
    assert set(folded) == {"ep", "gone"}  # a deleted endpoint's pool: under its id still
    assert folded["ep"][0] == HourUsage(40, 60, {"A100": 40, "L4": 5})
    assert folded["ep"][3600] == pool and folded["ep"][3600] is not pool
    assert own == HourUsage(10, 0, {"A100": 10, "L4": 5})  # the inputs are left as they were
