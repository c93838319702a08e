"""`GET /v2/{endpoint}/requests`: its query parameters and its items (pure functions).

The cursor is opaque to clients: the index position (see store/keys.py `ix:{state}`) where
the previous page stopped, so a page never repeats or skips a job while new jobs arrive
(they sort before it) or listed ones change state (their position is fixed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from multidict import MultiMapping

from lockgate.gateway.errors import BadRequest
from lockgate.gateway.http import iso_ms
from lockgate.models import JobStatus
from lockgate.store import JobQuery, JobRecord

LIMIT_DEFAULT, LIMIT_MAX = 20, 100
CURSOR_RE = re.compile(r"[0-9]{1,20}")
RFC3339_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATES = tuple(JobStatus)
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z; later times mean this
EPOCH_MS_DIGITS = len(str(MAX_EPOCH_MS))


def parse_states(values: list[str]) -> tuple[str, ...]:
    """`status`, repeated or comma-separated, as job states (empty: every state)."""
    states: list[str] = []
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            if part not in STATES:
                raise BadRequest(
                    f"query parameter 'status' must be one or more of {', '.join(STATES)}, "
                    f"got {part!r}"
                )
            if part not in states:
                states.append(part)
    return tuple(states)


def parse_time(name: str, raw: str | None) -> int | None:
    """An RFC 3339 (ISO-8601) time with its zone, or epoch milliseconds, as epoch ms."""
    if raw is None:
        return None
    if raw.isascii() and raw.isdigit():
        if len(raw) > EPOCH_MS_DIGITS:
            raise BadRequest(
                f"query parameter {name!r} as epoch milliseconds has at most "
                f"{EPOCH_MS_DIGITS} digits, got {raw!r}"
            )
        return min(int(raw), MAX_EPOCH_MS)
    text = raw.replace(" ", "+")  # a `+` of the zone arrives as a space when not encoded
    try:
        if not RFC3339_RE.fullmatch(text):
            raise ValueError(text)
        when = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError as err:
        raise BadRequest(
            f"query parameter {name!r} must be an RFC 3339 time with its zone "
            f"(2026-11-23T00:50:00.123Z) or epoch milliseconds, got {raw!r}"
        ) from err
    return (when - EPOCH) // timedelta(milliseconds=1)  # no overflow near year 1 or 9999


def encode_cursor(after: int) -> str:
    return str(after)


def decode_cursor(raw: str | None) -> int | None:
    """The index position a `nextCursor` names (any position is valid: the page starts
    below it); 400 for anything that cannot be one."""
    if raw is None:
        return None
    if not CURSOR_RE.fullmatch(raw):
        raise BadRequest(
            "query parameter 'cursor' is not a cursor this API returns (use a `nextCursor`)"
        )
    return int(raw)


def parse_query(query: MultiMapping[str], limit: int) -> JobQuery:
    """The listing asked for by the query string (`limit` already checked)."""
    since = parse_time("from", query.get("from"))
    until = parse_time("to", query.get("to"))
    return JobQuery(
        states=parse_states(query.getall("status", [])),
        since_ms=since,
        until_ms=until,
        after=decode_cursor(query.get("cursor")),
        limit=limit,
    )


def item(record: JobRecord, now: int) -> dict[str, Any]:
    """One listed job: never its input, output, webhook or s3Config."""
    body: dict[str, Any] = {
        "id": record.id,
        "status": record.status,
        "createdAt": iso_ms(record.created),
        "delayTime": record.delay_ms(now),
        "executionTime": record.execution_ms(now),
    }
    if record.worker is not None:
        body["workerId"] = record.worker
    if record.error is not None:
        body["error"] = record.error
    return body


def page(records: list[JobRecord], after: int | None, now: int) -> Mapping[str, Any]:
    """The answer: items newest first and the cursor of the next page (None: no more)."""
    return {
        "items": [item(r, now) for r in records],
        "nextCursor": encode_cursor(after) if after is not None else None,
    }
