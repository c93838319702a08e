"""lockgate/timestamps.py: the API's and the kubelet's RFC 3339 times, read in one place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from lockgate.timestamps import NS, parse_time, stamp_ns

T0 = datetime(2026, 6, 1, 12, 5, 4, tzinfo=UTC)


def test_api_times_in_every_form_the_api_writes_are_aware() -> None:
    assert parse_time("2026-06-01T12:05:04Z") == T0
    assert parse_time("2026-06-01T14:05:04+02:00") == T0
    assert parse_time("2026-06-01T12:05:04.123456Z") == T0 + timedelta(microseconds=123456)
    assert parse_time("2026-06-01T12:05:04.123456789Z") == T0 + timedelta(microseconds=123456)
    assert parse_time("2026-06-01T12:05:04") == T0  # no zone: UTC
    assert parse_time(datetime(2026, 6, 1, 12, 5, 4)) == T0  # the client's own datetime
    east = datetime(2026, 6, 1, 14, 5, 4, tzinfo=timezone(timedelta(hours=2)))
    assert parse_time(east) == T0
    for value in (None, "", "soon", 1_780_000_000, "2026-13-01T00:00:00Z"):
        assert parse_time(value) is None


def test_kubelet_stamps_keep_every_nanosecond() -> None:
    base = int(T0.timestamp()) * NS
    assert stamp_ns("2026-06-01T12:05:04Z") == base
    assert stamp_ns("2026-06-01T12:05:04.000000001Z") == base + 1
    assert stamp_ns("2026-06-01T14:05:04.5+02:00") == base + NS // 2
    for bad in ("", "STEP", "2026-06-01T12:05:04", "2026-06-01T12:05:04.1234567890Z"):
        assert stamp_ns(bad) is None
