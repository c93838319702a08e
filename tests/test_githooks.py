"""Push webhooks (issue 48, item 2), pure: which server sent a hook, its signature checked
(properties over generated secrets and bodies), what its payload says, and the trigger
policy as a table; any JSON is read without an exception."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.manage.githooks import (
    GitEvent,
    Kind,
    NotAHook,
    Server,
    decide,
    event_of,
    server_of,
    signature,
    verified,
)
from lockgate.models.build import BuildReason
from lockgate.models.source import BuildTrigger

# what a header value can carry (a GitLab token is sent as is): visible ASCII
secrets_ = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=64)
bodies = st.binary(max_size=2048)


def signed(server: Server, secret: str, body: bytes, event: str = "push") -> dict[str, str]:
    """The headers `server` sends with a hook signed by `secret`."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if server == Server.GITHUB:
        return {"X-GitHub-Event": event, "X-Hub-Signature-256": f"sha256={digest}"}
    if server == Server.GITEA:  # Gitea sends GitHub's event header too
        return {"X-Gitea-Event": event, "X-GitHub-Event": event, "X-Gitea-Signature": digest}
    return {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret}


@pytest.mark.parametrize("server", list(Server))
@given(secret=secrets_, other=secrets_, body=bodies)
def test_a_hook_verifies_with_its_secret_only(
    server: Server, secret: str, other: str, body: bytes
) -> None:
    headers = signed(server, secret, body)
    assert server_of(headers) == server
    assert verified(server, headers, body, secret)
    assert verified(server, headers, body, other) is (other == secret)
    assert not verified(server, headers, body, "")


@pytest.mark.parametrize("server", [Server.GITHUB, Server.GITEA])
@given(secret=secrets_, body=bodies, extra=st.binary(min_size=1, max_size=16))
def test_a_changed_body_fails_an_hmac_signature(
    server: Server, secret: str, body: bytes, extra: bytes
) -> None:
    assert not verified(server, signed(server, secret, body), body + extra, secret)


@pytest.mark.parametrize("server", list(Server))
@given(secret=secrets_, body=bodies, garbage=st.text(max_size=80))
def test_a_missing_or_forged_signature_fails(
    server: Server, secret: str, body: bytes, garbage: str
) -> None:
    headers = {k: v for k, v in signed(server, secret, body).items() if "Event" in k}
    assert not verified(server, headers, body, secret)
    name = {Server.GITHUB: "X-Hub-Signature-256", Server.GITEA: "X-Gitea-Signature",
            Server.GITLAB: "X-Gitlab-Token"}[server]  # fmt: skip
    forged = {**headers, name: garbage}
    real = signed(server, secret, body)[name]
    assert verified(server, forged, body, secret) is (garbage == real)


def test_header_names_are_case_insensitive_and_unknown_senders_refused() -> None:
    body = b"{}"
    headers = {"x-github-event": "push", "x-hub-signature-256": "sha256=" + signature("s", body)}
    assert server_of(headers) == Server.GITHUB and verified(Server.GITHUB, headers, body, "s")
    with pytest.raises(NotAHook):
        server_of({"Content-Type": "application/json"})


PUSH = {"ref": "refs/heads/main", "after": "a" * 40, "repository": {"default_branch": "main"}}


@pytest.mark.parametrize(
    ("server", "event", "payload", "expected"),
    [
        (Server.GITHUB, "push", PUSH, GitEvent(Kind.PUSH, "main", "a" * 40, "main")),
        (Server.GITHUB, "push", {"ref": "refs/tags/v1", "after": "b" * 40},
         GitEvent(Kind.TAG, "v1", "b" * 40)),
        (Server.GITHUB, "push", {**PUSH, "deleted": True},
         GitEvent(Kind.OTHER, "refs/heads/main", None, "main")),
        (Server.GITHUB, "release", {"action": "published", "release": {"tag_name": "v2"}},
         GitEvent(Kind.RELEASE, "v2")),
        (Server.GITHUB, "release", {"action": "edited", "release": {"tag_name": "v2"}},
         GitEvent(Kind.OTHER)),
        (Server.GITHUB, "ping", {"zen": "…"}, GitEvent(Kind.PING)),
        (Server.GITHUB, "issues", {"action": "opened"}, GitEvent(Kind.OTHER)),
        (Server.GITEA, "push", PUSH, GitEvent(Kind.PUSH, "main", "a" * 40, "main")),
        (Server.GITEA, "push", {"ref": "refs/heads/x", "after": "0" * 40},
         GitEvent(Kind.OTHER, "refs/heads/x")),
        (Server.GITEA, "release", {"action": "published", "release": {"tag_name": "v3"}},
         GitEvent(Kind.RELEASE, "v3")),
        (Server.GITLAB, "Push Hook",
         {"ref": "refs/heads/dev", "after": "c" * 40, "project": {"default_branch": "main"}},
         GitEvent(Kind.PUSH, "dev", "c" * 40, "main")),
        (Server.GITLAB, "Tag Push Hook", {"ref": "refs/tags/v4", "after": "d" * 40},
         GitEvent(Kind.TAG, "v4", "d" * 40)),
        (Server.GITLAB, "Release Hook", {"action": "create", "tag": "v5"},
         GitEvent(Kind.RELEASE, "v5")),
        (Server.GITLAB, "Merge Request Hook", {}, GitEvent(Kind.OTHER)),
    ],
)  # fmt: skip
def test_what_each_servers_payload_says(
    server: Server, event: str, payload: dict, expected: GitEvent
) -> None:
    header = {Server.GITHUB: "X-GitHub-Event", Server.GITEA: "X-Gitea-Event",
              Server.GITLAB: "X-Gitlab-Event"}[server]  # fmt: skip
    assert event_of(server, {header: event}, payload) == expected


scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and objects of `inner` (a named function: Hypothesis reads a lambda's source)."""
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)


json_values = st.recursive(
    scalars,
    containers,
    max_leaves=20,
)
payloads = json_values | st.fixed_dictionaries(
    {}, optional={"ref": json_values, "after": json_values, "deleted": json_values,
                  "action": json_values, "release": json_values, "tag": json_values,
                  "repository": json_values, "project": json_values}
)  # fmt: skip


@pytest.mark.parametrize("server", list(Server))
@given(
    payload=payloads,
    event=st.sampled_from(["push", "release", "ping", "Push Hook", "Tag Push Hook",
                           "Release Hook", "x"]),
    trigger=st.sampled_from(list(BuildTrigger)),
    tracked=st.sampled_from(["", "main", "dev"]),
)  # fmt: skip
def test_any_json_payload_is_read_and_decided_without_an_exception(
    server: Server, payload: object, event: str, trigger: BuildTrigger, tracked: str
) -> None:
    headers = {"X-GitHub-Event": event, "X-Gitea-Event": event, "X-Gitlab-Event": event}
    found = event_of(server, headers, json.loads(json.dumps(payload)))
    decision = decide(trigger, tracked, found)
    assert (decision.ref is None) is (decision.reason is None)
    if decision.ref is not None:
        assert decision.ref == found.ref and found.kind.value == decision.reason.value.lower()


@pytest.mark.parametrize(
    ("trigger", "tracked", "event", "builds"),
    [
        (BuildTrigger.PUSH, "main", GitEvent(Kind.PUSH, "main"), ("main", BuildReason.PUSH)),
        (BuildTrigger.PUSH, "main", GitEvent(Kind.PUSH, "dev"), None),
        (BuildTrigger.PUSH, "", GitEvent(Kind.PUSH, "main", None, "main"),
         ("main", BuildReason.PUSH)),
        (BuildTrigger.PUSH, "", GitEvent(Kind.PUSH, "main"), None),  # no default branch known
        (BuildTrigger.PUSH, "main", GitEvent(Kind.TAG, "v1"), None),
        (BuildTrigger.TAG, "main", GitEvent(Kind.TAG, "v1"), ("v1", BuildReason.TAG)),
        (BuildTrigger.TAG, "main", GitEvent(Kind.PUSH, "main"), None),
        (BuildTrigger.RELEASE, "", GitEvent(Kind.RELEASE, "v2"), ("v2", BuildReason.RELEASE)),
        (BuildTrigger.RELEASE, "", GitEvent(Kind.TAG, "v2"), None),  # RunPod: releases only
        (BuildTrigger.RELEASE, "", GitEvent(Kind.PUSH, "main", None, "main"), None),
        (BuildTrigger.MANUAL, "main", GitEvent(Kind.PUSH, "main"), None),
        (BuildTrigger.MANUAL, "", GitEvent(Kind.RELEASE, "v2"), None),
        (BuildTrigger.PUSH, "main", GitEvent(Kind.PING), None),
    ],
)  # fmt: skip
def test_the_trigger_policy(
    trigger: BuildTrigger, tracked: str, event: GitEvent, builds: tuple | None
) -> None:
    decision = decide(trigger, tracked, event)
    assert (None if decision.ref is None else (decision.ref, decision.reason)) == builds
    assert decision.why
