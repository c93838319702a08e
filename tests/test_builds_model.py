"""An endpoint's git source and its builds, as pure models (issue 48, items 1-2): which URLs
a builder may clone, the source's defaults and bounds, RunPod's Build object, and the one
transition rule every builder goes through."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from lockgate.models import EndpointSpec
from lockgate.models.build import (
    LIVE,
    TERMINAL,
    BuildReason,
    BuildStatus,
    IllegalTransition,
    advance,
    first_build_reason,
    new_build,
    new_build_id,
)
from lockgate.models.releases import config_of, release_diff
from lockgate.models.source import (
    BuildTrigger,
    EndpointSource,
    GitSource,
    cluster_problem,
    source_of,
    url_problem,
)

S = BuildStatus


@pytest.mark.parametrize(
    ("url", "dev", "cluster"),
    [
        ("https://github.com/org/repo.git", True, True),
        ("http://git.local:3000/org/repo", True, True),
        ("ssh://git@github.com/org/repo.git", True, True),
        ("git@github.com:org/repo.git", True, True),
        ("file:///srv/git/repo", True, False),
        ("ftp://example.test/repo", False, False),
        ("/srv/git/repo", False, False),
        ("https://", False, False),
        ("https:///no-host", False, False),
        ("https://github.com/org/re po", False, False),
        ("", False, False),
        ("javascript:alert(1)", False, False),
    ],
)
def test_which_urls_a_builder_may_clone(url: str, dev: bool, cluster: bool) -> None:
    assert (url_problem(url, local_allowed=True) is None) is dev
    assert (url_problem(url, local_allowed=False) is None) is cluster


def test_a_source_has_runpods_trigger_and_a_bounded_build_time_by_default() -> None:
    git = GitSource(url="https://github.com/org/repo")
    assert git.trigger == BuildTrigger.RELEASE
    assert (git.ref, git.dockerfilePath, git.contextPath, git.buildTimeoutMin) == (
        "", "Dockerfile", ".", 60
    )  # fmt: skip
    with pytest.raises(ValidationError, match="buildTimeoutMin"):
        GitSource(url="https://github.com/org/repo", buildTimeoutMin=0)
    with pytest.raises(ValidationError, match="buildTimeoutMin"):
        GitSource(url="https://github.com/org/repo", buildTimeoutMin=24 * 60 + 1)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"url": "ftp://x/y"}, "url"),
        ({"ref": "main..evil"}, "ref"),
        ({"ref": "-rf"}, "ref"),
        ({"dockerfilePath": "../../etc/passwd"}, "dockerfilePath"),
        ({"contextPath": "/abs"}, "contextPath"),
        ({"credentialsSecret": "Not_A_Name"}, "credentialsSecret"),
        ({"trigger": "NIGHTLY"}, "trigger"),
        ({"branch": "main"}, "branch"),
    ],
)
def test_a_bad_source_field_is_refused_naming_it(fields: dict, named: str) -> None:
    with pytest.raises(ValidationError) as err:
        EndpointSpec(source={"git": {"url": "https://github.com/o/r", **fields}})
    assert named in str(err.value)


def test_a_source_is_a_release_field_and_absent_by_default() -> None:
    assert EndpointSpec().source is None
    one = EndpointSpec(source={"git": {"url": "https://github.com/o/r"}})
    other = EndpointSpec(source={"git": {"url": "https://github.com/o/r", "ref": "v2"}})
    diff = release_diff(config_of(one, None), config_of(other, None))
    assert [d.field for d in diff] == ["source"]


def test_a_record_holding_its_source_as_json_reads_as_the_model() -> None:
    raw = {"git": {"url": "file:///srv/repo"}}
    assert source_of(raw) == EndpointSource.model_validate(raw)
    assert source_of(None) is None
    assert cluster_problem(source_of(raw)) is not None  # file:// is for dev mode only


def test_build_ids_look_like_runpods() -> None:
    assert re.fullmatch(r"build_[a-z0-9]{12}", new_build_id())
    build = new_build("v1")
    assert (build.status, build.startedAt, build.completedAt, build.ref) == (
        S.PENDING, None, None, "v1"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ([S.BUILDING, S.COMPLETED], True),
        ([S.BUILDING, S.UPLOADING, S.TESTING, S.TEST_FAILED], True),
        ([S.BUILDING, S.TESTING, S.COMPLETED], True),  # no UPLOADING in dev mode
        ([S.FAILED], True),  # a checkout that fails at once
        ([S.CANCELLED], True),
        ([S.BUILDING, S.PENDING], False),
        ([S.TESTING, S.BUILDING], False),
        ([S.COMPLETED, S.CANCELLED], False),
        ([S.CANCELLED, S.BUILDING], False),
    ],
)
def test_a_build_moves_forward_only_and_never_leaves_an_end(path: list, allowed: bool) -> None:
    build = new_build()
    try:
        for status in path:
            build = advance(build, status)
    except IllegalTransition:
        assert not allowed
    else:
        assert allowed


def test_times_are_set_as_runpod_shows_them() -> None:
    pending = new_build()
    cancelled = advance(pending, S.CANCELLED)
    assert cancelled.startedAt is None, "never started"
    assert cancelled.completedAt is not None
    building = advance(pending, S.BUILDING)
    assert building.startedAt is not None and building.completedAt is None
    failed = advance(building, S.FAILED, error="x" * 10_000)
    assert failed.startedAt == building.startedAt and len(failed.error) == 4096


@given(st.lists(st.sampled_from(list(BuildStatus)), max_size=8))
def test_any_sequence_of_changes_keeps_the_rule(steps: list[BuildStatus]) -> None:
    build = new_build()
    for status in steps:
        before = build
        try:
            build = advance(build, status)
        except IllegalTransition:
            assert before.status in TERMINAL or status in LIVE
            continue
        assert before.status not in TERMINAL
        assert (build.completedAt is not None) is (build.status in TERMINAL)


def _git(trigger: BuildTrigger, ref: str = "") -> EndpointSource:
    return EndpointSource(
        git=GitSource(url="https://git.example.test/o/r", ref=ref, trigger=trigger)
    )


@pytest.mark.parametrize("trigger", list(BuildTrigger))
def test_a_first_build_on_create_or_when_a_source_is_given_unless_manual(
    trigger: BuildTrigger,
) -> None:
    """RunPod builds at once when an endpoint is created from a repository: CREATE; an
    edit giving a source to an endpoint with none: SOURCE_SET; MANUAL builds only when
    asked, on create too; a source changed or removed, or none at all: nothing."""
    src, builds = _git(trigger), trigger != BuildTrigger.MANUAL
    assert first_build_reason(None, src, created=True) == (BuildReason.CREATE if builds else None)
    expected = BuildReason.SOURCE_SET if builds else None
    assert first_build_reason(None, src, created=False) == expected
    other = _git(BuildTrigger.RELEASE, ref="v2")
    assert first_build_reason(other, src, created=False) is None  # changed, not given
    assert first_build_reason(src, None, created=False) is None  # removed
    assert first_build_reason(None, None, created=True) is None
