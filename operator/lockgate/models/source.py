"""Where an endpoint's worker comes from when it is built rather than named: a git
repository (`EndpointSource`, the endpoint's `source`; docs/builds.md).

An endpoint with a `source` runs what its newest completed build produced: on a cluster
the build's image (by digest, once the in-cluster build exists), in dev mode the build's
checkout. Its template still holds the rest of the container (env, ports, disk, args).
Before the first build completes there is nothing built to run.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lockgate.models.gitrefs import ref_problem

BUILD_TIMEOUT_DEFAULT_MIN = 60  # issue 48: "default 60 min" (RunPod: 30 for docker build)
BUILD_TIMEOUT_MAX_MIN = 24 * 60
# `git@host:path` (scp-like ssh), as git takes it.
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:\S+$")
REMOTE_SCHEMES = ("https://", "http://", "ssh://")
LOCAL_SCHEME = "file://"  # dev mode only: a cluster's builder cannot see this machine
URL_RULE = "use an https://, http:// or ssh:// URL, or git@host:path (file:// only in dev mode)"


class BuildTrigger(StrEnum):
    """What starts a build besides `POST …/builds` (which always may): a push to the
    tracked branch, a new tag, a new release (RunPod's only trigger, so the default),
    or nothing (MANUAL)."""

    PUSH = "PUSH"
    TAG = "TAG"
    RELEASE = "RELEASE"
    MANUAL = "MANUAL"


def url_problem(url: str, *, local_allowed: bool) -> str | None:
    """Why `url` is no repository URL a builder may clone, or None. `file://` only when
    `local_allowed` (dev mode)."""
    if any(c.isspace() for c in url) or not url:
        return f"url: {url!r} is not a URL; {URL_RULE}"
    if url.startswith(LOCAL_SCHEME):
        return None if local_allowed else f"url: file:// is for dev mode only; {URL_RULE}"
    if url.startswith(REMOTE_SCHEMES):
        rest = url.split("://", 1)[1]
        return None if rest and not rest.startswith("/") else f"url: {url!r} names no host"
    if _SCP_LIKE.fullmatch(url):
        return None
    return f"url: {url!r}: {URL_RULE}"


def _relative_path(value: str, field: str) -> str:
    """A path inside the repository: relative, no `..` part, no NUL."""
    parts = value.replace("\\", "/").split("/")
    if value.startswith("/") or ".." in parts or "\0" in value:
        raise ValueError(f"{field}: a path inside the repository (relative, no '..')")
    return value


class GitSource(BaseModel):
    """A git repository to build from, at a ref."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=2048, description="the repository to clone")
    ref: str = Field(
        "", max_length=255, description="branch, tag or commit; empty: the default branch"
    )
    dockerfilePath: str = Field(
        "Dockerfile", min_length=1, max_length=1024, description="relative to the repository"
    )
    contextPath: str = Field(
        ".", min_length=1, max_length=1024, description="build context, relative to the repo"
    )
    credentialsSecret: str = Field(
        "",
        max_length=253,
        pattern=r"^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Secret with the clone's credentials (basic-auth or ssh-auth); empty: none",
    )
    trigger: BuildTrigger = Field(
        BuildTrigger.RELEASE,
        description="what starts a build: PUSH to the tracked branch, TAG, RELEASE (RunPod's), "
        "or MANUAL (POST …/builds only)",
    )
    buildTimeoutMin: int = Field(
        BUILD_TIMEOUT_DEFAULT_MIN,
        ge=1,
        le=BUILD_TIMEOUT_MAX_MIN,
        description="minutes a build may take before it ends FAILED",
    )

    @field_validator("url")
    @classmethod
    def _clonable(cls, url: str) -> str:
        # file:// passes the model (dev mode keeps it); a cluster refuses it (`cluster_problem`)
        if problem := url_problem(url, local_allowed=True):
            raise ValueError(problem)
        return url

    @field_validator("ref")
    @classmethod
    def _ref(cls, ref: str) -> str:
        if ref and (problem := ref_problem(ref)):
            raise ValueError(problem)
        return ref

    @field_validator("dockerfilePath")
    @classmethod
    def _dockerfile(cls, value: str) -> str:
        return _relative_path(value, "dockerfilePath")

    @field_validator("contextPath")
    @classmethod
    def _context(cls, value: str) -> str:
        return _relative_path(value, "contextPath")


class EndpointSource(BaseModel):
    """An endpoint's source: what its workers are built from (one kind today: git)."""

    model_config = ConfigDict(extra="forbid")

    git: GitSource


def source_of(value: EndpointSource | dict[str, Any] | None) -> EndpointSource | None:
    """An endpoint's source, whether a record holds it as a model or as JSON (a record
    read from a resource)."""
    if value is None or isinstance(value, EndpointSource):
        return value
    return EndpointSource.model_validate(value)


def cluster_problem(source: EndpointSource | None) -> str | None:
    """Why a cluster cannot take `source` (a `file://` URL: its builder runs elsewhere)."""
    if source is None:
        return None
    return url_problem(source.git.url, local_allowed=False)
