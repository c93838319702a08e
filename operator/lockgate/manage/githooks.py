"""Push webhooks of git servers (pure): which server sent one, whether its signature is the
endpoint's secret's, what happened (a push, a tag, a release), and whether the endpoint's
`trigger` builds it (docs/builds.md, "The push webhook").

- GitHub: `X-GitHub-Event`, `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
- GitLab: `X-Gitlab-Event`, `X-Gitlab-Token: <the secret itself>`.
- Gitea (and Forgejo): `X-Gitea-Event`, `X-Gitea-Signature: <hex HMAC-SHA256 of the body>`.
  Gitea sends GitHub's headers too, so it is recognised first.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lockgate.models.build import BuildReason
from lockgate.models.source import BuildTrigger

BRANCH_PREFIX = "refs/heads/"
TAG_PREFIX = "refs/tags/"
ZERO_COMMIT = "0" * 40  # a push's `after` when the ref was deleted


class Server(StrEnum):
    GITHUB = "github"
    GITLAB = "gitlab"
    GITEA = "gitea"


class Kind(StrEnum):
    """What a hook says happened."""

    PING = "ping"  # the server checks the hook works
    PUSH = "push"  # commits pushed to a branch
    TAG = "tag"  # a tag pushed
    RELEASE = "release"  # a release published
    OTHER = "other"  # anything else (an issue, a deleted branch…): never a build


@dataclass(frozen=True, slots=True)
class GitEvent:
    """A hook's event: its kind, the branch or tag it names, the commit, and the
    repository's default branch when the payload says it."""

    kind: Kind
    ref: str = ""
    commit: str | None = None
    default_branch: str | None = None


class NotAHook(ValueError):
    """A request no supported git server sends (no event header)."""


def server_of(headers: Mapping[str, str]) -> Server:
    """Which server sent the hook, by its event header (case-insensitive); `NotAHook`."""
    names = {k.lower() for k in headers}
    if "x-gitea-event" in names:
        return Server.GITEA
    if "x-gitlab-event" in names:
        return Server.GITLAB
    if "x-github-event" in names:
        return Server.GITHUB
    raise NotAHook("not a git push webhook: no X-GitHub-Event, X-Gitlab-Event or X-Gitea-Event")


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")


def signature(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of `body` with `secret` (GitHub's and Gitea's)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verified(server: Server, headers: Mapping[str, str], body: bytes, secret: str) -> bool:
    """Whether the hook carries the proof of `secret` its server sends (compared in
    constant time); False when it carries none or the secret is empty."""
    if not secret:
        return False
    if server == Server.GITLAB:
        given, wanted = _header(headers, "x-gitlab-token"), secret
    elif server == Server.GITEA:
        given, wanted = _header(headers, "x-gitea-signature"), signature(secret, body)
    else:
        given = _header(headers, "x-hub-signature-256")
        wanted = "sha256=" + signature(secret, body)
    return bool(given) and hmac.compare_digest(given.encode(), wanted.encode())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _default_branch(payload: Mapping[str, Any]) -> str | None:
    for holder in ("repository", "project"):  # GitHub and Gitea; GitLab
        found = payload.get(holder)
        if isinstance(found, Mapping) and _text(found.get("default_branch")):
            return _text(found.get("default_branch"))
    return None


def _ref_event(payload: Mapping[str, Any]) -> GitEvent:
    """A push of a branch or a tag (every server's push payload has `ref` and `after`)."""
    ref, after = _text(payload.get("ref")), _text(payload.get("after"))
    default = _default_branch(payload)
    if payload.get("deleted") is True or after == ZERO_COMMIT:
        return GitEvent(Kind.OTHER, ref, None, default)
    if ref.startswith(TAG_PREFIX):
        return GitEvent(Kind.TAG, ref.removeprefix(TAG_PREFIX), after or None, default)
    if ref.startswith(BRANCH_PREFIX):
        return GitEvent(Kind.PUSH, ref.removeprefix(BRANCH_PREFIX), after or None, default)
    return GitEvent(Kind.OTHER, ref, None, default)


def _release_event(payload: Mapping[str, Any], tag: str, published: bool) -> GitEvent:
    if not published or not tag:
        return GitEvent(Kind.OTHER)
    return GitEvent(Kind.RELEASE, tag, None, _default_branch(payload))


def event_of(server: Server, headers: Mapping[str, str], payload: Any) -> GitEvent:
    """What the hook says happened. Any payload is taken: what is not understood is OTHER."""
    if not isinstance(payload, Mapping):
        return GitEvent(Kind.OTHER)
    if server == Server.GITLAB:
        name = _header(headers, "x-gitlab-event")
        if name in ("Push Hook", "Tag Push Hook"):
            return _ref_event(payload)
        if name == "Release Hook":
            published = _text(payload.get("action")) == "create"
            return _release_event(payload, _text(payload.get("tag")), published)
        return GitEvent(Kind.OTHER)
    name = _header(headers, "x-gitea-event" if server == Server.GITEA else "x-github-event")
    if name == "ping":
        return GitEvent(Kind.PING)
    if name == "push":
        return _ref_event(payload)
    if name == "release":
        release = payload.get("release")
        tag = _text(release.get("tag_name")) if isinstance(release, Mapping) else ""
        return _release_event(payload, tag, _text(payload.get("action")) == "published")
    return GitEvent(Kind.OTHER)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a hook does: build `ref` (for `reason`), or nothing, saying why."""

    ref: str | None
    reason: BuildReason | None
    why: str


def decide(trigger: BuildTrigger, tracked: str, event: GitEvent) -> Decision:
    """Whether `event` starts a build of an endpoint whose source has `trigger` and tracks
    the branch `tracked` ("": the repository's default branch, as the payload names it)."""
    if trigger == BuildTrigger.MANUAL:
        return Decision(None, None, "the source's trigger is MANUAL: only POST …/builds builds")
    if trigger == BuildTrigger.PUSH and event.kind == Kind.PUSH:
        branch = tracked or event.default_branch or ""
        if event.ref == branch:
            return Decision(event.ref, BuildReason.PUSH, f"a push to {branch}")
        return Decision(
            None, None, f"a push to {event.ref}, not to the tracked branch {branch or '?'}"
        )
    if trigger == BuildTrigger.TAG and event.kind == Kind.TAG:
        return Decision(event.ref, BuildReason.TAG, f"the tag {event.ref}")
    if trigger == BuildTrigger.RELEASE and event.kind == Kind.RELEASE:
        return Decision(event.ref, BuildReason.RELEASE, f"the release {event.ref}")
    return Decision(
        None, None, f"a {event.kind.value} event; the source's trigger is {trigger.value}"
    )
