"""API keys: scopes, the record kept per key, and an entry of the mounted key file."""

from __future__ import annotations

import re
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


class KeyFileEntry(KeyRecord):
    """One key in the mounted key file (a JSON list of these): the digest, never the key."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=DIGEST_PATTERN, description="hex SHA-256 of the key")


def key_name_problem(name: str) -> str | None:
    """Why `name` cannot name a key, in words (not the pattern), or None when it can."""
    if re.fullmatch(KEY_NAME_PATTERN, name):
        return None
    return f"name: {KEY_NAME_RULE}; got {name!r}"
