"""Times as the Kubernetes API and the kubelet write them (RFC 3339), read in one place.

User input (a `since=` of the logs API, a listing's `from=`) has rules of its own and is
read where it is validated (manage/loglines.py, manage/workerlogs.py, gateway/listing.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

NS = 1_000_000_000  # nanoseconds per second


def parse_time(value: object) -> datetime | None:
    """An API time (`2026-06-01T12:05:04Z`: a `Z` or an offset, any fraction, nanoseconds
    cut to microseconds; as a string, or a datetime the Kubernetes client made), aware: UTC
    when it names no zone. None when missing or unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def stamp_ns(stamp: str) -> int | None:
    """A kubelet timestamp (RFC 3339 with its zone and up to nine fraction digits, as
    `timestamps=true` logs begin) as epoch nanoseconds, exactly; None when it is none."""
    whole, dot, rest = stamp.partition(".")
    digits, zone = rest, ""
    if dot:
        cut = len(rest) - len(rest.lstrip("0123456789"))
        digits, zone = rest[:cut], rest[cut:]
    try:
        seconds = datetime.fromisoformat(whole + zone)
    except ValueError:
        return None
    if seconds.tzinfo is None or len(digits) > 9:
        return None
    return int(seconds.timestamp()) * NS + int((digits or "0").ljust(9, "0"))


def epoch_ms(value: object) -> int | None:
    """An API time (as `parse_time` reads it) in epoch milliseconds; None when missing or
    unreadable."""
    moment = parse_time(value)
    return None if moment is None else int(moment.timestamp() * 1000)
