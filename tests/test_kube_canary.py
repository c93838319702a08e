"""The pure parts of a cluster's canary (kube/canary.py): the canary Endpoint made from
the endpoint's object, the canary's own Template (tests.json's `config.env` over the
template's env), which objects are a build's canary (never a user's endpoint or template
of the same name), what the canary runs, a tests.json that cannot be used, and nothing
started once the operator is stopping."""

from __future__ import annotations

import json
from typing import Any, cast

from lockgate.kube.builds import Following, _look_again
from lockgate.kube.canary import (
    TESTS_ANNOTATION,
    Canaries,
    canary_endpoint,
    canary_template_object,
    is_canary_of,
    is_canary_template,
    running_of_testing,
    unusable_tests,
)
from lockgate.kube.manifests.build import BUILD_LABEL
from lockgate.models.build import Build, BuildStatus

URL = "https://git.example.test/org/worker.git"
DIGEST = "sha256:" + "cd" * 32
TESTS = json.dumps({"tests": [{"name": "basic", "input": {"prompt": "hi"}, "timeout": 1000}]})


def _parent() -> dict:
    return {
        "apiVersion": "lockgate.dev/v1alpha1",
        "kind": "Endpoint",
        "metadata": {"name": "ep", "namespace": "team-a", "uid": "u-1"},
        "spec": {
            "templateId": "tpl",
            "computeType": "CPU",
            "workersMin": 0,
            "workersMax": 5,
            "warmup": {"inputs": [{"prompt": "warm"}]},
            "source": {"git": {"url": URL, "ref": "main", "trigger": "PUSH"}},
        },
    }


def _testing() -> Build:
    return Build(
        id="build_abc123def456",
        status=BuildStatus.TESTING,
        imageName="registry.example.test/builds/ep:abc123def456",
        imageDigest=DIGEST,
        createdAt="2026-12-06T10:00:00Z",
    )


def test_the_canary_endpoint_is_one_worker_of_the_build_owned_by_the_endpoint() -> None:
    running = running_of_testing(_testing(), URL)
    assert running is not None
    assert running.image == f"registry.example.test/builds/ep:abc123def456@{DIGEST}"
    body = canary_endpoint(_parent(), running, TESTS)
    meta, spec = body["metadata"], body["spec"]
    assert (meta["name"], meta["namespace"]) == ("canary-abc123def456", "team-a")
    assert meta["labels"] == {"lockgate.dev/canary-of": "ep"}
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert meta["annotations"][TESTS_ANNOTATION] == TESTS
    assert json.loads(meta["annotations"]["lockgate.dev/build"])["buildId"] == _testing().id
    assert (spec["workersMin"], spec["workersMax"], spec["crashLoopThreshold"]) == (1, 1, 1)
    assert "warmup" not in spec
    # the source kept (the build applies to its URL) but never built from
    assert (spec["source"]["git"]["url"], spec["source"]["git"]["trigger"]) == (URL, "MANUAL")
    assert is_canary_of(body, "ep", _testing().id)


def test_only_the_builds_own_canary_counts_as_it() -> None:
    running = running_of_testing(_testing(), URL)
    assert running is not None
    body = canary_endpoint(_parent(), running, TESTS)
    assert not is_canary_of(body, "other-endpoint", _testing().id)
    assert not is_canary_of(body, "ep", "build_zzzzzzzzzzzz")
    users = {"metadata": {"name": "canary-abc123def456"}, "spec": {"templateId": "tpl"}}
    assert not is_canary_of(users, "ep", _testing().id)


def test_a_build_without_its_digest_runs_nothing_and_bad_tests_say_why() -> None:
    assert running_of_testing(_testing().model_copy(update={"imageDigest": None}), URL) is None
    assert unusable_tests(TESTS) is None
    assert unusable_tests("{") is not None
    assert unusable_tests('{"tests": []}') is not None


def test_config_env_gives_the_canary_a_template_of_its_own_owned_by_it() -> None:
    """With `own_template` the canary names a Template of its own name: the endpoint's,
    tests.json's env over its env (a variable it sets no longer read from a Secret),
    labelled as the canary and owned by the canary Endpoint."""
    running = running_of_testing(_testing(), URL)
    assert running is not None
    assert canary_endpoint(_parent(), running, TESTS)["spec"]["templateId"] == "tpl"
    body = canary_endpoint(_parent(), running, TESTS, own_template=True)
    assert body["spec"]["templateId"] == "canary-abc123def456"
    made = {**body, "metadata": {**body["metadata"], "uid": "u-canary"}}
    template = {
        "metadata": {"name": "tpl", "namespace": "team-a"},
        "spec": {
            "image": "example.test/base:1",
            "env": {"MODEL": "base", "KEEP": "yes"},
            "secretEnv": {"TOKEN": {"name": "s", "key": "t"}, "HF": {"name": "s", "key": "h"}},
        },
    }
    own = canary_template_object(template, made, {"MODEL": "tiny", "TOKEN": "test"})
    meta, spec = own["metadata"], own["spec"]
    assert (own["kind"], meta["name"], meta["namespace"]) == (
        "Template", "canary-abc123def456", "team-a",
    )  # fmt: skip
    assert meta["labels"] == {"lockgate.dev/canary-of": "ep"}
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Endpoint", "canary-abc123def456", "u-canary",
    )  # fmt: skip
    assert spec["image"] == "example.test/base:1"
    assert spec["env"] == {"MODEL": "tiny", "KEEP": "yes", "TOKEN": "test"}
    assert spec["secretEnv"] == {"HF": {"name": "s", "key": "h"}}
    assert template["spec"]["env"] == {"MODEL": "base", "KEEP": "yes"}  # untouched
    assert is_canary_template(own, "canary-abc123def456", "ep")
    assert not is_canary_template(own, "canary-abc123def456", "other-endpoint")
    users = {"metadata": {"name": "canary-abc123def456"}, "spec": {"image": "x"}}
    assert not is_canary_template(users, "canary-abc123def456", "ep")


async def test_a_stopping_operator_starts_no_test_and_no_build_timer() -> None:
    """A reconcile still running while kopf stops (after `stop` of what runs beside it)
    starts no canary test and no build Job timer: either would outlive the stop, and a
    test left running could delete the canary that the next operator resumes on. (No
    collaborator is reached: nothing may start.)"""
    unused = cast(Any, None)
    canaries = Canaries(unused, unused, unused, unused, "http://gateway.test:8080")
    await canaries.stop()
    canaries.start("team-a", "ep", _testing(), TESTS)
    await canaries.ensure("team-a", "ep", _testing())
    assert canaries.tasks == {} and not canaries.testing(_testing().id)

    following = Following()
    await following.stop()
    labels = {BUILD_LABEL: "build_abc"}
    job = {"metadata": {"name": "build-abc", "namespace": "b", "labels": labels}, "status": {}}
    _look_again(unused, unused, unused, job, following, None)
    assert following.looks == {}
