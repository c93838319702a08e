"""`GET /v2/{endpoint}/requests`: its query parameters and its items (pure functions).

The cursor is opaque to clients: the index position (see store/keys.py `ix:{state}`) where
the previous page stopped, so a page never repeats or skips a job while new jobs arrive
(they sort before it) or listed ones change state (their position is fixed).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from multidict import MultiMapping

from lockgate.gateway.errors import BadRequest
from lockgate.models import JobStatus
from lockgate.store import JobQuery, JobRecord

LIMIT_DEFAULT, LIMIT_MAX = 20, 100
CURSOR_PREFIX = "c1:"
STATES = tuple(JobStatus)
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def parse_states(values: list[str]) -> tuple[str, ...]:
    """`status`, repeated or comma-separated, as job states (empty: every state)."""
    states: list[str] = []
    for value in values:
        for part in filter(None, (p.strip() for p in value.split(","))):
            if part.upper() not in STATES:
                raise BadRequest(
                    f"query parameter 'status' must be one or more of {', '.join(STATES)}, "
                    f"got {part!r}"
                )
            if part.upper() not in states:
                states.append(part.upper())
    return tuple(states)


def parse_time(name: str, raw: str | None) -> int | None:
    """An ISO-8601 time (UTC when it names no zone) or epoch milliseconds, as epoch ms."""
    if raw is None or raw == "":
        return None
    if raw.isascii() and raw.isdigit():
        if len(raw) > len(str(MAX_EPOCH_MS)) or int(raw) > MAX_EPOCH_MS:
            raise BadRequest(f"query parameter {name!r} is past the year 9999, got {raw!r}")
        return int(raw)
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError as err:
        raise BadRequest(
            f"query parameter {name!r} must be an ISO-8601 time or epoch milliseconds, got {raw!r}"
        ) from err
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def encode_cursor(after: int) -> str:
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIX}{after}".encode()).decode().rstrip("=")


def decode_cursor(raw: str | None) -> int | None:
    """The index position a `nextCursor` names; 400 for anything this API did not issue."""
    if not raw:
        return None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        if text.startswith(CURSOR_PREFIX) and text[len(CURSOR_PREFIX) :].isdigit():
            return int(text[len(CURSOR_PREFIX) :])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise BadRequest(
        "query parameter 'cursor' is not a cursor this API returned (use a `nextCursor`)"
    )


def parse_query(query: MultiMapping[str], limit: int) -> JobQuery:
    """The listing asked for by the query string (`limit` already checked)."""
    since = parse_time("from", query.get("from"))
    until = parse_time("to", query.get("to"))
    if since is not None and until is not None and since >= until:
        raise BadRequest("query parameter 'from' must be before 'to'")
    return JobQuery(
        states=parse_states(query.getall("status", [])),
        since_ms=since,
        until_ms=until,
        after=decode_cursor(query.get("cursor")),
        limit=limit,
    )


def iso_ms(epoch_ms: int) -> str:
    """`2026-11-23T00:50:00.123Z`."""
    when = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


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
