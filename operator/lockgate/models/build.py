"""Builds of an endpoint's `source` (pure): RunPod's `Build` object field for field, what
lockgate keeps beside it, and the state machine (docs/builds.md).

A build is PENDING until a builder takes it, then BUILDING, UPLOADING (pushing the image),
TESTING (`.runpod/tests.json`), and ends COMPLETED, FAILED, CANCELLED or TEST_FAILED.
`advance` is the one transition rule every builder (dev mode's, the cluster's) goes
through: a terminal build never changes again.
"""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models.source import BuildTrigger, EndpointSource

BUILD_ID_PREFIX = "build_"  # RunPod's look: build_abc123
BUILD_ID_RANDOM = 12
BUILD_ID_PATTERN = r"^build_[a-z0-9]{1,64}$"
_ALPHABET = string.ascii_lowercase + string.digits
ERROR_MAX = 4096  # characters of `error` kept (a builder's last lines, not its whole log)


class BuildStatus(StrEnum):
    """RunPod's build states; the last four are terminal."""

    PENDING = "PENDING"
    BUILDING = "BUILDING"
    UPLOADING = "UPLOADING"
    TESTING = "TESTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TEST_FAILED = "TEST_FAILED"


TERMINAL = frozenset(
    {BuildStatus.COMPLETED, BuildStatus.FAILED, BuildStatus.CANCELLED, BuildStatus.TEST_FAILED}
)
LIVE = frozenset(BuildStatus) - TERMINAL
# The order a build moves in; it may skip ahead (no UPLOADING in dev mode, no TESTING
# without tests.json) and end from any live state, never go back.
ORDER = (BuildStatus.PENDING, BuildStatus.BUILDING, BuildStatus.UPLOADING, BuildStatus.TESTING)


class BuildReason(StrEnum):
    """lockgate's: what started a build (the trigger that fired, or a person)."""

    MANUAL = "MANUAL"  # POST …/builds
    PUSH = "PUSH"
    TAG = "TAG"
    RELEASE = "RELEASE"
    CREATE = "CREATE"  # the endpoint was created with a source (its first build)
    SOURCE_SET = "SOURCE_SET"  # an edit gave a source to an endpoint that had none


class FailedTest(BaseModel):
    """lockgate's: the `tests.json` test a TEST_FAILED build failed, and why."""

    name: str
    reason: str


class Build(BaseModel):
    """A build as kept: RunPod's fields first, then lockgate's."""

    model_config = ConfigDict(extra="forbid")

    # -- RunPod's `Build` (required: id, status)
    id: str = Field(..., pattern=BUILD_ID_PATTERN, description="e.g. build_abc123")
    status: BuildStatus
    commitHash: str | None = Field(None, description="the short hash")
    commitMessage: str | None = None
    branch: str | None = None
    commitDate: str | None = Field(None, description="RFC 3339")
    imageName: str | None = Field(None, description="what was built, e.g. registry/repo:abc1234")
    startedAt: str | None = Field(None, description="RFC 3339; null while pending")
    completedAt: str | None = Field(None, description="RFC 3339; null while live")
    error: str | None = Field(None, description="why it FAILED or TEST_FAILED")
    # -- lockgate's
    ref: str = Field("", description="the ref asked for (empty: the source's)")
    reason: BuildReason = Field(BuildReason.MANUAL, description="what started it")
    commit: str | None = Field(None, description="the full commit hash")
    imageDigest: str | None = Field(None, description="sha256:… of the pushed image")
    failedTest: FailedTest | None = Field(None, description="set for TEST_FAILED")
    createdAt: str = Field(..., description="RFC 3339: when it was asked for")

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def view(self) -> dict[str, Any]:
        """The build as the API shows it (RunPod's fields and lockgate's)."""
        return self.model_dump(mode="json")


def first_build_reason(
    before: EndpointSource | None, after: EndpointSource | None, *, created: bool
) -> BuildReason | None:
    """Whether an endpoint builds at once, as RunPod does when an endpoint is created
    from a repository: `CREATE` when it was `created` with a source, `SOURCE_SET` when an
    edit gave a source to one that had `before` none; None otherwise (no source, a
    source only changed, or its trigger MANUAL: a MANUAL source builds only when asked)."""
    if after is None or after.git.trigger == BuildTrigger.MANUAL:
        return None
    if created:
        return BuildReason.CREATE
    return BuildReason.SOURCE_SET if before is None else None


def rfc3339(at: datetime | None = None) -> str:
    """`at` (now when None) as RFC 3339 UTC, whole seconds."""
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_build_id() -> str:
    """`build_` and 12 random lowercase letters and digits."""
    return BUILD_ID_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(BUILD_ID_RANDOM))


def new_build(ref: str = "", reason: BuildReason = BuildReason.MANUAL) -> Build:
    """A build just asked for: PENDING."""
    return Build(
        id=new_build_id(), status=BuildStatus.PENDING, ref=ref, reason=reason,
        createdAt=rfc3339(),
    )  # fmt: skip


class IllegalTransition(ValueError):
    """A change a build cannot make (it ended, or it would go back)."""


def advance(build: Build, status: BuildStatus, **fields: Any) -> Build:
    """`build` moved to `status` with `fields` set: `startedAt` when it leaves PENDING (not
    for one cancelled before it started),
    `completedAt` when it ends, `error` cut to ERROR_MAX. Raises `IllegalTransition` for a
    terminal build or a step back."""
    if build.terminal:
        raise IllegalTransition(f"build {build.id} is {build.status} already")
    if status in LIVE and ORDER.index(status) < ORDER.index(build.status):
        raise IllegalTransition(f"build {build.id}: {build.status} cannot go back to {status}")
    update = {**fields, "status": status}
    now = rfc3339()
    never_ran = status == BuildStatus.CANCELLED and build.status == BuildStatus.PENDING
    if status != BuildStatus.PENDING and build.startedAt is None and not never_ran:
        update.setdefault("startedAt", now)
    if status in TERMINAL:
        update.setdefault("completedAt", now)
    if isinstance(update.get("error"), str):
        update["error"] = update["error"][-ERROR_MAX:]
    return Build.model_validate({**build.model_dump(), **update})
