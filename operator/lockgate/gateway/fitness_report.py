"""The runpod SDK's unhealthy report, read from a ping's query (runpod >= 1.11).

A worker whose fitness check fails sends one
`GET …/ping/{worker}?status=unhealthy&check=<name>&reason=<text>&runpod_version=…` before it
exits with code 1 (reference §8). Any other `status` (or none) is an ordinary heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockgate.gateway.errors import BadRequest
from lockgate.models.unhealthy import CHECK_CHARS, REASON_CHARS, UnhealthyWorker

UNHEALTHY = "unhealthy"
NO_REASON = "(no reason given)"


def unhealthy_report(
    worker_id: str, query: Mapping[str, str], now_ms: int
) -> UnhealthyWorker | None:
    """The record a ping's query asks for: None unless `status=unhealthy`. The reason is cut
    to what is kept (a long one is never refused); a check name longer than `CHECK_CHARS` or
    holding characters that do not print is refused with 400."""
    if query.get("status") != UNHEALTHY:
        return None
    check = query.get("check") or None
    if check is not None:
        if len(check) > CHECK_CHARS:
            raise BadRequest(
                f"query parameter 'check' must be at most {CHECK_CHARS} characters "
                f"(a fitness check's function name), got {len(check)}"
            )
        if not check.isprintable():
            raise BadRequest(
                "query parameter 'check' must be printable text (a fitness check's "
                f"function name), got {check!r}"
            )
    reason = (query.get("reason") or "").strip() or NO_REASON
    return UnhealthyWorker(
        worker=worker_id, kind="fitness", check=check, reason=reason[:REASON_CHARS], at=now_ms
    )
