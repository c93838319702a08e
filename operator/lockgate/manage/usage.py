"""Pure: usage reports — bucket boundaries, the report's window, hours folded into buckets,
amounts from prices, and API keys' usage folded into buckets.

All times are UTC. Buckets start on the hour, at midnight, on Monday at midnight (`week`),
on the first of the month and on New Year's Day; every boundary is an hour's, so the hourly
usage `store.usage` keeps folds into any bucket size exactly.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from lockgate.settings import Prices
from lockgate.store.usage import HourUsage, KeyUsage

DEFAULT_SPAN = timedelta(days=30)  # the report's start when none is given: 30 days ago


class BucketSize(enum.StrEnum):
    """RunPod's `bucketSize`."""

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    YEAR = "year"


def bucket_start(t: datetime, size: BucketSize) -> datetime:
    """The start of the bucket `t` lies in (`t` snapped down)."""
    t = t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if size is BucketSize.HOUR:
        return t
    day = t.replace(hour=0)
    if size is BucketSize.DAY:
        return day
    if size is BucketSize.WEEK:
        return day - timedelta(days=day.weekday())
    if size is BucketSize.MONTH:
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def shifted(start: datetime, size: BucketSize, n: int) -> datetime:
    """The start of the bucket `n` buckets after the one starting at `start` (n < 0:
    before); ValueError or OverflowError past the calendar's years 1..9999."""
    if size is BucketSize.HOUR:
        return start + timedelta(hours=n)
    if size is BucketSize.DAY:
        return start + timedelta(days=n)
    if size is BucketSize.WEEK:
        return start + timedelta(weeks=n)
    months = n * (12 if size is BucketSize.YEAR else 1)
    year, month = divmod(start.year * 12 + start.month - 1 + months, 12)
    return start.replace(year=year, month=month + 1)


def snap_up(t: datetime, size: BucketSize) -> datetime:
    """`t` if it is a bucket boundary, else the end of the bucket it lies in."""
    start = bucket_start(t, size)
    return start if start == t else shifted(start, size, 1)


class BadWindow(ValueError):
    """The asked window is empty or out of the calendar; the message names the parameter."""


def window(
    size: BucketSize,
    now: datetime,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    last_n: int | None = None,
) -> tuple[datetime, datetime]:
    """The report's [start, end) on bucket boundaries: the last `last_n` buckets up to and
    with the current one; else from `start` (default 30 days before `now`) snapped down to
    `end` (exclusive, default `now`) snapped up."""
    if start is not None and end is not None and start >= end:
        raise BadWindow("startTime must be before endTime")
    try:
        if last_n is not None:
            current = bucket_start(now, size)
            return shifted(current, size, 1 - last_n), shifted(current, size, 1)
        first = bucket_start(start if start is not None else now - DEFAULT_SPAN, size)
        last = snap_up(end if end is not None else now, size)
    except (OverflowError, ValueError) as err:
        raise BadWindow(f"the window reaches out of the calendar's years 1 to 9999: {err}") from err
    if first >= last:
        raise BadWindow("startTime must be before endTime (which defaults to now)")
    return first, last


@dataclass(slots=True)
class Usage:
    """Usage summed over hours (seconds)."""

    worker_seconds: int = 0
    vcpu_seconds: int = 0
    gpu_seconds: dict[str, int] = field(default_factory=dict)  # GPU type id -> seconds

    def add(self, other: HourUsage | Usage) -> None:
        self.worker_seconds += other.worker_seconds
        self.vcpu_seconds += other.vcpu_seconds
        for gpu_type, seconds in other.gpu_seconds.items():
            self.gpu_seconds[gpu_type] = self.gpu_seconds.get(gpu_type, 0) + seconds


@dataclass(frozen=True, slots=True)
class Record:
    """One endpoint's usage in one bucket."""

    start: datetime
    end: datetime
    endpoint_id: str
    usage: Usage


class _Sum(Protocol):
    def add(self, other: Any, /) -> None: ...


S = TypeVar("S", bound=_Sum)


def _summed(
    hours: Mapping[str, Mapping[int, Any]],
    size: BucketSize,
    first: datetime,
    last: datetime,
    empty: Callable[[], S],
    used: Callable[[Any], object],
) -> list[tuple[datetime, str, S]]:
    """Each name's hourly usage (hour: epoch s) within [first, last) that was `used`, summed
    per bucket into `empty()`: (bucket start, name, sum), ordered by bucket then name."""
    sums: dict[tuple[datetime, str], S] = {}
    for name, by_hour in hours.items():
        for hour, usage in by_hour.items():
            at = datetime.fromtimestamp(hour, UTC)
            if first <= at < last and used(usage):
                sums.setdefault((bucket_start(at, size), name), empty()).add(usage)
    return [(start, name, sums[start, name]) for start, name in sorted(sums)]


def pools_folded(
    hours: Mapping[str, Mapping[int, HourUsage]], parent_of: Callable[[str], str | None]
) -> dict[str, dict[int, HourUsage]]:
    """Each endpoint's hourly usage with that of its hidden batch pool added (`parent_of`
    names the endpoint a pool is of, None for any other): a pool's workers run the
    endpoint's Batch Jobs, so their time is the endpoint's, and no report shows a pool."""
    out: dict[str, dict[int, HourUsage]] = {}
    for name, by_hour in hours.items():
        into = out.setdefault(parent_of(name) or name, {})
        for hour, usage in by_hour.items():
            total = into.setdefault(hour, HourUsage())
            total.worker_seconds += usage.worker_seconds
            total.vcpu_seconds += usage.vcpu_seconds
            for gpu_type, seconds in usage.gpu_seconds.items():
                total.gpu_seconds[gpu_type] = total.gpu_seconds.get(gpu_type, 0) + seconds
    return out


def fold(
    hours: Mapping[str, Mapping[int, HourUsage]], size: BucketSize, first: datetime, last: datetime
) -> list[Record]:
    """Each endpoint's hourly usage (hour: epoch s) within [first, last) summed per bucket,
    one record per endpoint and bucket with any, ordered by bucket then endpoint."""
    summed = _summed(hours, size, first, last, Usage, lambda u: u.worker_seconds)
    return [Record(start, shifted(start, size, 1), name, u) for start, name, u in summed]


@dataclass(frozen=True, slots=True)
class Amounts:
    """RunPod's money fields of a record; disk and fees are not charged by lockgate."""

    gpu: float = 0.0
    cpu: float = 0.0
    disk: float = 0.0
    fee: float = 0.0

    @property
    def total(self) -> float:
        return self.gpu + self.cpu + self.disk + self.fee

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(
            self.gpu + other.gpu, self.cpu + other.cpu, self.disk + other.disk, self.fee + other.fee
        )


def amounts(usage: Usage, prices: Prices) -> Amounts:
    """What `usage` costs at `prices` (per hour); a GPU type without a price costs 0."""
    gpu = sum(s / 3600 * prices.gpu_prices.get(t, 0.0) for t, s in usage.gpu_seconds.items())
    return Amounts(gpu=gpu, cpu=usage.vcpu_seconds / 3600 * prices.vcpu_price)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One API key's usage (ms) in one bucket; key id `store.usage.NO_KEY`: no key."""

    start: datetime
    end: datetime
    key_id: str
    usage: KeyUsage


def fold_keys(
    hours: Mapping[str, Mapping[int, KeyUsage]], size: BucketSize, first: datetime, last: datetime
) -> list[KeyRecord]:
    """Each API key's hourly usage (hour: epoch s) within [first, last) summed per bucket,
    one record per key and bucket with any, ordered by bucket then key id."""
    summed = _summed(hours, size, first, last, KeyUsage, lambda u: u.execution_ms)
    return [KeyRecord(start, shifted(start, size, 1), name, u) for start, name, u in summed]


def key_amounts(usage: KeyUsage, prices: Prices) -> Amounts:
    """What an API key's usage costs at `prices` (per hour)."""
    gpu = sum(ms / 3_600_000 * prices.gpu_prices.get(t, 0.0) for t, ms in usage.gpu_ms.items())
    return Amounts(gpu=gpu, cpu=usage.vcpu_ms / 3_600_000 * prices.vcpu_price)
