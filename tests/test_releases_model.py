"""Releases, the pure parts: which settings make a new version, the diff in RunPod's legacy
names, the version a release gets, the rollout summary, cursors and pages."""

from __future__ import annotations

import pytest

from lockgate.kube.manifests.names import VERSION_LABEL
from lockgate.kube.manifests.rollout import AT_ONCE, GENTLY, rollout_strategy
from lockgate.manage.releases import BadCursor, decode_cursor, encode_cursor, page_of
from lockgate.models import EndpointSpec, TemplateSpec
from lockgate.models.releases import (
    ENDPOINT_OTHER_FIELDS,
    ENDPOINT_RELEASE_FIELDS,
    TEMPLATE_OTHER_FIELDS,
    TEMPLATE_RELEASE_FIELDS,
    DiffEntry,
    config_of,
    new_release,
    next_version,
    release_diff,
    restored_spec,
    restored_template,
    rollout_of,
)

TEMPLATE = TemplateSpec(image="example.test/worker:1", env={"V": "1"})
SPEC = EndpointSpec(templateId="tpl", workersMax=3)


@pytest.mark.parametrize(
    ("model", "release", "other"),
    [
        (EndpointSpec, ENDPOINT_RELEASE_FIELDS, ENDPOINT_OTHER_FIELDS),
        (TemplateSpec, TEMPLATE_RELEASE_FIELDS, TEMPLATE_OTHER_FIELDS),
    ],
)
def test_every_field_is_classified_as_making_a_release_or_not(model, release, other) -> None:
    fields = set(model.model_fields)
    assert not release & other
    assert fields - release - other == set(), "classify the new field in models/releases.py"
    assert (release | other) - fields == set()


@pytest.mark.parametrize(
    ("spec", "template", "diff"),
    [
        ({"workersMax": 10}, {}, []),
        ({"idleTimeout": 60, "executionTimeoutMs": 60_000, "name": "x"}, {}, []),
        ({}, {"readme": "# notes", "name": "renamed"}, []),
        (
            {},
            {"env": {"V": "2"}},
            [DiffEntry(field="template.env", old={"V": "1"}, new={"V": "2"})],
        ),
        (
            {},
            {"image": "example.test/worker:2"},
            [
                DiffEntry(
                    field="template.imageName", old=TEMPLATE.image, new="example.test/worker:2"
                )
            ],
        ),
        (
            {},
            {"args": ["serve"]},
            [DiffEntry(field="template.dockerStartCmd", old=[], new=["serve"])],
        ),
        (
            {},
            {"containerDiskInGb": 30},
            [DiffEntry(field="template.containerDiskInGb", old=20, new=30)],
        ),
        (
            {},
            {"imagePullSecret": "creds"},
            [DiffEntry(field="template.containerRegistryAuthId", old="", new="creds")],
        ),
        (
            {},
            {"ports": ["8000/http"]},
            [DiffEntry(field="template.ports", old=[], new=["8000/http"])],
        ),
        (
            {"modelReferences": ["org/model"]},
            {},
            [DiffEntry(field="modelReferences", old=[], new=["org/model"])],
        ),
        ({"templateId": "other"}, {}, [DiffEntry(field="templateId", old="tpl", new="other")]),
        ({"gpuCount": 2}, {}, [DiffEntry(field="gpuCount", old=1, new=2)]),
    ],
)
def test_a_change_is_a_release_only_when_it_affects_the_container(spec, template, diff) -> None:
    old = config_of(SPEC, TEMPLATE)
    new = config_of(SPEC.model_copy(update=spec), TEMPLATE.model_copy(update=template))
    assert release_diff(old, new) == diff


def test_the_first_release_lists_every_field_set_as_added() -> None:
    diff = release_diff(None, config_of(SPEC, TEMPLATE))
    assert {d.field for d in diff} >= {"templateId", "template.imageName", "template.env"}
    assert not {"template.ports", "template.modelUrl", "networkVolumeId"} & {d.field for d in diff}
    assert all(d.old is None for d in diff)
    assert [d.field for d in diff] == sorted(d.field for d in diff)


def test_a_handler_without_a_template_has_no_template_fields() -> None:
    assert config_of(SPEC, None).template is None
    diff = release_diff(config_of(SPEC, None), config_of(SPEC, TEMPLATE))
    assert diff and all(d.field.startswith("template.") and d.old is None for d in diff)


@pytest.mark.parametrize(
    ("newest", "same", "known", "expected"),
    [
        (None, False, 1, 1),  # the first release
        (None, False, 4, 4),  # releases lost (Redis flushed): the endpoint's version goes on
        (3, True, 3, None),  # recorded already
        (3, False, 3, 4),  # a kubectl edit: the operator raises the version
        (3, False, 4, 4),  # the management API raised it already
        (5, False, 2, 6),  # never below the newest kept
    ],
)
def test_next_version(newest, same, known, expected) -> None:
    config = config_of(SPEC, TEMPLATE)
    other = config_of(SPEC, TEMPLATE.model_copy(update={"env": {"V": "9"}}))
    kept = None if newest is None else new_release(newest, None, config if same else other)
    assert next_version(kept, config, known) == expected


@pytest.mark.parametrize(
    ("versions", "latest", "expected"),
    [
        ({}, 2, (False, 0, 0, 0)),
        ({2: 2}, 2, (False, 2, 2, 100)),
        ({1: 1, 2: 1}, 2, (True, 1, 2, 50)),
        ({1: 2, 2: 1}, 2, (True, 1, 3, 33)),
        ({0: 1}, 1, (True, 0, 1, 0)),  # a worker of no known version
    ],
)
def test_the_rollout_summary(versions, latest, expected) -> None:
    r = rollout_of(versions, latest)
    assert (r.inProgress, r.workersOnLatest, r.workersTotal, r.percentOnLatest) == expected


def test_a_release_view_has_runpods_fields_and_not_the_kept_configuration() -> None:
    view = new_release(2, None, config_of(SPEC, TEMPLATE)).view(3)
    assert set(view) == {
        "id", "version", "source", "buildId", "createdByUserId", "workerCount", "createdAt",
        "diff",
    }  # fmt: skip
    assert view["source"] == "MANUAL" and view["buildId"] is None and view["workerCount"] == 3
    assert len(view["id"]) == 8


def test_a_rollback_restores_only_the_release_fields() -> None:
    config = config_of(SPEC, TEMPLATE)
    now_spec = SPEC.model_copy(update={"templateId": "other", "workersMax": 9})
    assert restored_spec(now_spec, config) == SPEC.model_copy(update={"workersMax": 9})
    now_tpl = TEMPLATE.model_copy(update={"env": {"V": "2"}, "readme": "kept"})
    assert restored_template(now_tpl, config) == TEMPLATE.model_copy(update={"readme": "kept"})


def test_cursors_round_trip_and_refuse_what_this_list_did_not_give() -> None:
    assert decode_cursor(encode_cursor("ep1", 7), "ep1") == 7
    for bad in ("x", "!!!", encode_cursor("ep2", 7), "eyJrIjoiam9icyJ9"):
        with pytest.raises(BadCursor):
            decode_cursor(bad, "ep1")


def test_pages_go_down_by_version_and_the_last_has_no_cursor() -> None:
    config = config_of(SPEC, TEMPLATE)
    kept = [new_release(v, None, config) for v in (5, 4, 3, 2, 1)]
    page, following = page_of(kept, "ep", below=None, limit=2)
    assert [r.version for r in page] == [5, 4] and following
    page, following = page_of(kept, "ep", below=decode_cursor(following, "ep"), limit=2)
    assert [r.version for r in page] == [3, 2] and following
    page, following = page_of(kept, "ep", below=decode_cursor(following, "ep"), limit=2)
    assert [r.version for r in page] == [1] and following is None


def deployment_on(version: str | None) -> dict:
    labels = {VERSION_LABEL: version} if version else {}
    return {"spec": {"template": {"metadata": {"labels": labels}}}}


@pytest.mark.parametrize(
    ("deployed", "version", "strategy"),
    [
        (None, 1, GENTLY),  # a new Deployment: nothing to roll
        (deployment_on("1"), 1, GENTLY),  # the same version: a placement or key change
        (deployment_on("1"), 2, AT_ONCE),  # a release: RunPod's rule
        (deployment_on(None), 3, AT_ONCE),  # pods from before versions were labelled
    ],
)
def test_a_release_rolls_at_once_and_any_other_change_gently(deployed, version, strategy) -> None:
    assert rollout_strategy(deployed, version) == strategy
