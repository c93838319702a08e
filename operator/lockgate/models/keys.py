"""API keys: scopes, the record kept per key, and an entry of the mounted key file."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# Key names appear in Redis key names (rate-limit counters) and logs: no spaces or braces.
KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}$"
KEY_NAME_RULE = (
    "1 to 128 characters: letters, digits and _ . : / @ -, starting with a letter or digit "
    "(no spaces)"
)
DIGEST_PATTERN = r"^[0-9a-f]{64}$"


class Scope(StrEnum):
    """What a key may do."""

    JOBS = "jobs"  # every client route of the job API
    JOBS_READ = "jobs:read"  # /status, /stream and /health only
    WORKERS = "workers"  # the worker API
    ADMIN = "admin"  # the management API and key management


# A scope grants these others too; nothing else is implied (`admin` is not `jobs`).
IMPLIES: dict[Scope, frozenset[Scope]] = {Scope.JOBS: frozenset({Scope.JOBS_READ})}


def effective_scopes(scopes: list[Scope] | frozenset[Scope]) -> frozenset[str]:
    """The scopes held, with the ones they imply."""
    held = set(scopes)
    for scope in scopes:
        held |= IMPLIES.get(scope, frozenset())
    return frozenset(str(s) for s in held)


class KeyRecord(BaseModel):
    """What is stored for a key (under its SHA-256, never the key itself)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(pattern=KEY_NAME_PATTERN, description="owner; limits count per name")
    scopes: list[Scope] = Field(min_length=1)
    endpoints: list[str] | None = Field(None, description="endpoint ids; absent: every endpoint")
    created: int | None = Field(None, description="ms since the epoch")
    expires: int | None = Field(
        None, description="ms since the epoch after which the key is refused; absent: never"
    )


class KeyFileEntry(KeyRecord):
    """One key in the mounted key file (a JSON list of these): the digest, never the key."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=DIGEST_PATTERN, description="hex SHA-256 of the key")


def key_name_problem(name: str) -> str | None:
    """Why `name` cannot name a key, in words (not the pattern), or None when it can."""
    if re.fullmatch(KEY_NAME_PATTERN, name):
        return None
    return f"name: {KEY_NAME_RULE}; got {name!r}"


# `--expires-in` units: seconds, minutes, hours, days.
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_RE = re.compile(r"^([1-9][0-9]{0,8})([smhd])$")


def duration_s(text: str) -> int | None:
    """`30d`, `12h`, `15m`, `90s` as seconds, or None when `text` is not one."""
    match = DURATION_RE.fullmatch(text.strip())
    return int(match[1]) * DURATION_UNITS[match[2]] if match else None


def timestamp_ms(text: str) -> int | None:
    """An RFC 3339 timestamp with a zone (`2027-01-01T00:00:00Z`) as epoch ms, or None.
    A fraction of a second is rounded up to the next whole one (expiries are shown and
    stored to the second)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is None or "T" not in text.upper():
        return None
    return whole_second(int(moment.timestamp() * 1000))


def whole_second(ms: int) -> int:
    """`ms` rounded up to a whole second."""
    return -(-ms // 1000) * 1000


def expiry_problem(expires_ms: int | None, now_ms: int) -> str | None:
    """Why `expires_ms` cannot be a new key's expiry (`expiresAt: ...`), or None."""
    if expires_ms is None:
        return "expiresAt: an RFC 3339 UTC time such as 2027-01-01T00:00:00Z"
    if expires_ms <= now_ms:
        return f"expiresAt: {rfc3339(expires_ms)} is in the past; give a later time"
    return None


def rfc3339(ms: int) -> str:
    """Epoch ms as an RFC 3339 UTC time to the second: `2027-01-01T00:00:00Z`."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_expired(expires_ms: int | None, now_ms: int) -> bool:
    """Whether a key with this expiry (None: never) is refused at `now_ms`."""
    return expires_ms is not None and now_ms >= expires_ms
