"""Which build the workers run, the pure decisions (issue 48 items 3-4): only a COMPLETED
build with its digest runs (a failed or TEST_FAILED one never changes what runs), the newest
completed one not yet taken is taken, a rollback is not undone by it, the running build is
part of the release configuration (a `GIT_BUILD` release with its `buildId`), and the image
the worker Deployment runs."""

from __future__ import annotations

import pytest

from lockgate.kube.controlplane import (
    BUILD_ANNOTATION,
    BUILDS_TAKEN_ANNOTATION,
    builds_taken_of,
    running_build_of,
)
from lockgate.kube.manifests.names import Owner
from lockgate.kube.manifests.workloads import worker_deployment
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, TemplateSpec
from lockgate.models.build import Build, BuildStatus, advance, new_build
from lockgate.models.releases import (
    ReleaseConfig,
    ReleaseSource,
    config_of,
    new_release,
    release_diff,
    release_source,
)
from lockgate.models.running_build import (
    RunningBuild,
    applies,
    decoded,
    image_of,
    running_of_completed,
    to_take,
    worker_image,
)

URL = "https://git.example.test/org/worker.git"
IMAGE = "registry.example.test/lockgate/ep:abc"
DIGEST = "sha256:" + "1" * 64
TEMPLATE = TemplateSpec(image="example.test/worker:1", env={"V": "1"})
SPEC = EndpointSpec(templateId="tpl", source={"git": {"url": URL}})


def completed(digest: str = DIGEST, image: str = IMAGE) -> Build:
    build = advance(new_build(), BuildStatus.BUILDING)
    return advance(build, BuildStatus.COMPLETED, imageName=image, imageDigest=digest)


def ended(status: BuildStatus) -> Build:
    build = advance(new_build(), BuildStatus.BUILDING)
    if status == BuildStatus.TEST_FAILED:
        build = advance(build, BuildStatus.TESTING, imageName=IMAGE, imageDigest=DIGEST)
    return advance(build, status, error="no")


def running(build: Build) -> RunningBuild:
    found = running_of_completed(build, URL)
    assert found is not None
    return found


def test_a_completed_build_runs_by_its_digest() -> None:
    build = completed()
    assert image_of(build) == f"{IMAGE}@{DIGEST}"
    assert running(build) == RunningBuild(buildId=build.id, url=URL, image=f"{IMAGE}@{DIGEST}")
    # an imageName that carries a digest already is not doubled
    assert image_of(completed(image=f"{IMAGE}@sha256:{'0' * 64}")) == f"{IMAGE}@{DIGEST}"


@pytest.mark.parametrize(
    "status", [BuildStatus.FAILED, BuildStatus.CANCELLED, BuildStatus.TEST_FAILED]
)
def test_a_build_that_did_not_complete_never_runs(status: BuildStatus) -> None:
    build = ended(status)
    assert running_of_completed(build, URL) is None
    assert to_take([(1, build)], 0) is None  # what runs does not change: no rollback either


def test_a_live_build_or_one_without_a_digest_does_not_run() -> None:
    live = advance(new_build(), BuildStatus.BUILDING)
    no_digest = advance(live, BuildStatus.COMPLETED)  # dev mode's: no image
    assert to_take([(1, live), (2, no_digest)], 0) is None


def test_the_newest_completed_build_not_yet_taken_is_taken() -> None:
    one, two, failed = completed(), completed("sha256:" + "2" * 64), ended(BuildStatus.FAILED)
    assert to_take([(3, failed), (2, two), (1, one)], 0) == (2, two)
    # a failed newer build leaves the completed older one to run
    assert to_take([(2, failed), (1, one)], 0) == (1, one)
    # taken already: nothing new (a rollback to `one` leaves taken at 2: not undone)
    assert to_take([(2, two), (1, one)], 2) is None
    # an older build completing after a newer one was taken is not run
    assert to_take([(1, one), (2, failed)], 2) is None
    # builds numbered below the last taken only: Redis was emptied, numbering restarted
    assert to_take([(1, one)], 7) == (1, one)


def test_a_running_build_applies_while_the_source_is_the_one_it_was_built_from() -> None:
    build = running(completed())
    assert applies(SPEC.source, build)
    assert not applies(None, build)  # the source removed: the template's image
    assert not applies({"git": {"url": URL + "x"}}, build)  # another repository
    assert not applies(SPEC.source, None)
    assert worker_image(TEMPLATE.image, SPEC.source, build) == f"{IMAGE}@{DIGEST}"
    assert worker_image(TEMPLATE.image, None, build) == TEMPLATE.image
    assert worker_image(TEMPLATE.image, SPEC.source, None) == TEMPLATE.image


def test_the_running_build_is_part_of_the_release_configuration() -> None:
    one, two = running(completed()), running(completed("sha256:" + "2" * 64))
    template_only = config_of(SPEC, TEMPLATE)
    with_one = config_of(SPEC, TEMPLATE, one)
    assert template_only.build is None and with_one.build == one
    # a build that does not apply is not part of it (no release for it)
    assert config_of(SPEC.model_copy(update={"source": None}), TEMPLATE, one).build is None
    diff = release_diff(template_only, with_one)
    assert [d.model_dump() for d in diff] == [
        {"field": "build", "old": None, "new": {"buildId": one.buildId, "image": one.image}}
    ]
    assert [d.field for d in release_diff(with_one, config_of(SPEC, TEMPLATE, two))] == ["build"]


def test_a_release_that_runs_another_build_is_a_git_build_release() -> None:
    one, two = running(completed()), running(completed("sha256:" + "2" * 64))
    template_only = config_of(SPEC, TEMPLATE)
    with_one = config_of(SPEC, TEMPLATE, one)
    with_two = config_of(SPEC, TEMPLATE, two)
    assert release_source(template_only, with_one) == (ReleaseSource.GIT_BUILD, one.buildId)
    assert release_source(with_one, with_two) == (ReleaseSource.GIT_BUILD, two.buildId)
    # a rollback to the first build's release is that build's again
    assert release_source(with_two, with_one) == (ReleaseSource.GIT_BUILD, one.buildId)
    # an env edit while a build runs, and going back to the template, are MANUAL
    edited = config_of(SPEC, TEMPLATE.model_copy(update={"env": {"V": "2"}}), one)
    assert release_source(with_one, edited) == (ReleaseSource.MANUAL, None)
    assert release_source(with_one, template_only) == (ReleaseSource.MANUAL, None)
    assert release_source(None, template_only) == (ReleaseSource.MANUAL, None)
    release = new_release(3, with_one, with_two)
    view = release.view(1)
    assert view["source"] == "GIT_BUILD" and view["buildId"] == two.buildId
    assert view["diff"] == [
        {"field": "build", "old": one.view(), "new": two.view()},
    ]


def test_a_release_kept_before_builds_ran_reads_as_running_none() -> None:
    kept = {"endpoint": {"templateId": "tpl"}, "template": {"image": "x"}}
    assert ReleaseConfig.model_validate(kept).build is None


def test_the_endpoint_annotations_hold_the_running_build_and_the_last_taken() -> None:
    build = running(completed())
    body = {
        "metadata": {
            "annotations": {BUILD_ANNOTATION: build.encoded(), BUILDS_TAKEN_ANNOTATION: "7"}
        }
    }
    assert running_build_of(body) == build and builds_taken_of(body) == 7
    assert running_build_of({"metadata": {}}) is None and builds_taken_of({}) == 0
    assert decoded("{not json") is None  # a hand-edited annotation: the template's image
    dev = RunningBuild(buildId="build_x", url=URL, folder="/tmp/b", command=("py", "h.py"))
    assert decoded(dev.encoded()) == dev


def test_the_worker_deployment_runs_the_build_digest() -> None:
    build = running(completed())
    image = worker_image(TEMPLATE.image, SPEC.source, build)
    owner = Owner("ep", "ns", "uid-1")
    workload = TEMPLATE.model_copy(update={"image": image})
    deployment = worker_deployment(owner, SPEC, workload, "tpl", OperatorSettings(), replicas=0)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE}@{DIGEST}"
