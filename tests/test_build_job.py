"""The build Job (kube/manifests/build.py) and what its status says (kube/buildjobs.py):
pure, no cluster. The operator's use of both runs on envtest in test_operator_builds.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockgate.kube.buildjobs import (
    commit_fields,
    deadline,
    last_line,
    passed,
    past_deadline,
    progress,
    pull_failure,
    started_containers,
    stopped_at,
)
from lockgate.kube.manifests.build import (
    BUILD_CAPABILITIES,
    BUILD_LABEL,
    build_job,
    build_job_name,
    cache_repository,
    image_name,
)
from lockgate.kube.manifests.names import ENDPOINT_LABEL, Owner
from lockgate.kube.settings import OperatorSettings
from lockgate.models.build import BuildStatus, new_build
from lockgate.models.source import GitSource

OWNER = Owner("ep-build", "endpoints", "uid-1")
SETTINGS = OperatorSettings(
    builds_registry="registry.example.test/builds/",
    builds_namespace="lockgate-builds",
    builds_push_secret="push-creds",
    builder_image="registry.example.test/lockgate/builder:1",
)
SOURCE = GitSource(
    url="https://git.example.test/org/worker.git",
    ref="main",
    dockerfilePath="docker/Dockerfile",
    contextPath="app",
    credentialsSecret="git-creds",
    buildTimeoutMin=25,
)
HASH = "4f1c2e9aa1b2c3d4e5f60718293a4b5c6d7e8f90"
DIGEST = "sha256:" + "ab" * 32


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_the_job_clones_builds_and_pushes_within_the_time_limit() -> None:
    build = new_build(ref="v2")
    job = build_job(OWNER, build, SOURCE, SETTINGS)
    meta, spec = job["metadata"], job["spec"]
    assert meta["name"] == build_job_name(build.id) == "build-" + build.id.removeprefix("build_")
    assert meta["namespace"] == "lockgate-builds"
    assert meta["labels"][BUILD_LABEL] == build.id and meta["labels"][ENDPOINT_LABEL] == OWNER.name
    assert "ownerReferences" not in meta  # another namespace: no owner reference possible
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 25 * 60
    assert spec["ttlSecondsAfterFinished"] == SETTINGS.builds_ttl_s
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["terminationGracePeriodSeconds"] == 5  # a stopped build is killed soon
    [clone, builder], [pusher] = pod["initContainers"], pod["containers"]
    assert [c["name"] for c in (clone, builder, pusher)] == ["clone", "build", "push"]
    assert _env(clone)["GIT_REF"] == "v2"  # the build's ref over the source's
    assert _env(clone)["GIT_URL"] == SOURCE.url
    env = _env(builder)
    assert env["IMAGE"] == image_name(SETTINGS, OWNER.name, build.id)
    assert env["IMAGE"].startswith("registry.example.test/builds/ep-build:")
    assert env["CACHE_REPO"] == cache_repository(SETTINGS, OWNER.name)
    assert env["CACHE_REPO"] == "registry.example.test/builds/ep-build-cache"
    assert (env["DOCKERFILE"], env["CONTEXT"], env["TLS_VERIFY"]) == (
        "docker/Dockerfile",
        "app",
        "true",
    )
    assert env["AUTHFILE"] == "/run/lockgate/push/auth.json"
    script = builder["command"][-1]
    assert "--cache-to" in script and " push " not in script
    assert builder["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # the push: a container of its own (UPLOADING), its digest its termination message
    push = _env(pusher)
    assert (push["IMAGE"], push["AUTHFILE"]) == (env["IMAGE"], env["AUTHFILE"])
    assert "--digestfile /dev/termination-log" in pusher["command"][-1]
    assert pusher["volumeMounts"] == builder["volumeMounts"]  # the image storage it built
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["git-credentials"]["secret"]["secretName"] == "git-creds"
    assert volumes["push-auth"]["secret"]["secretName"] == "push-creds"
    # the git credential only in the clone, the push credential only in the build
    assert {m["name"] for m in clone["volumeMounts"]} == {"workspace", "git-credentials"}
    assert {m["name"] for m in builder["volumeMounts"]} == {"workspace", "storage", "push-auth"}


def test_the_builder_runs_with_the_profile_docs_security_names() -> None:
    job = build_job(OWNER, new_build(), SOURCE, SETTINGS)
    pod = job["spec"]["template"]
    [clone, builder], [pusher] = pod["spec"]["initContainers"], pod["spec"]["containers"]
    assert pusher["securityContext"] == builder["securityContext"]
    ctx = builder["securityContext"]
    assert ctx["privileged"] is False and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": list(BUILD_CAPABILITIES)}
    baseline = {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
    assert set(BUILD_CAPABILITIES) <= baseline
    assert ctx["seccompProfile"] == {"type": "Unconfined"}
    assert ctx["appArmorProfile"] == {"type": "Unconfined"}
    assert pod["metadata"]["annotations"] == {
        "container.apparmor.security.beta.kubernetes.io/build": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/push": "unconfined",
    }
    clone_ctx = clone["securityContext"]  # the clone needs nothing: restricted
    assert clone_ctx["runAsNonRoot"] is True and clone_ctx["capabilities"] == {"drop": ["ALL"]}
    assert clone_ctx["seccompProfile"] == {"type": "RuntimeDefault"}


def test_without_credentials_nor_a_builds_namespace() -> None:
    settings = OperatorSettings(builds_registry="10.0.0.1:5000", builds_insecure_registry=True)
    source = GitSource(url="https://git.example.test/org/worker.git")
    job = build_job(OWNER, new_build(), source, settings)
    assert job["metadata"]["namespace"] == OWNER.namespace
    [ref] = job["metadata"]["ownerReferences"]  # same namespace: the Endpoint owns it
    assert (ref["name"], ref["uid"]) == (OWNER.name, OWNER.uid)
    pod = job["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"]} == {"workspace", "storage"}
    env = _env(pod["containers"][0])
    assert env["TLS_VERIFY"] == "false" and "AUTHFILE" not in env
    assert _env(pod["initContainers"][0])["GIT_REF"] == ""  # the default branch


# -- what the Job and its pod say ----------------------------------------------------------


def _job(*conditions: tuple[str, str]) -> dict:
    return {
        "spec": {"activeDeadlineSeconds": 1500},
        "status": {
            "conditions": [{"type": t, "status": "True", "reason": r} for t, r in conditions]
        },
    }


def _pod(clone: dict | None = None, build: dict | None = None, push: dict | None = None) -> dict:
    """The build pod's status: the init containers `clone` and `build`, the container `push`."""
    status: dict[str, Any] = {}
    inits = [("clone", clone), ("build", build)]
    status["initContainerStatuses"] = [{"name": n, "state": s} for n, s in inits if s is not None]
    if push is not None:
        status["containerStatuses"] = [{"name": "push", "state": push}]
    return {"metadata": {"name": "p"}, "status": status}


CLONED = {"terminated": {"exitCode": 0, "message": f"{HASH}\n2026-12-06T10:01:00Z\nmain\nfaster\n"}}
RUNNING = {"running": {"startedAt": "2026-12-06T10:01:02Z"}}
BUILT = {"terminated": {"exitCode": 0, "message": ""}}


def _progress(job: dict, pod: dict | None) -> tuple[BuildStatus, dict] | None:
    step = progress(job, pod, image_name="r/ep:x", timeout_min=25)
    return None if step is None else (step.status, step.fields)


def test_pending_until_the_pod_runs_then_building_with_the_commit() -> None:
    assert _progress(_job(), None) is None
    assert _progress(_job(), _pod()) is None
    assert _progress(_job(), _pod(clone=RUNNING)) == (BuildStatus.BUILDING, {})
    status, fields = _progress(_job(), _pod(clone=CLONED, build=RUNNING))
    assert status == BuildStatus.BUILDING
    assert fields == {
        "commit": HASH,
        "commitHash": HASH[:7],
        "commitDate": "2026-12-06T10:01:00Z",
        "branch": "main",
        "commitMessage": "faster",
    }


def test_completed_with_the_pushed_digest() -> None:
    pushed = {"terminated": {"exitCode": 0, "message": DIGEST}}
    status, fields = _progress(_job(("Complete", "")), _pod(CLONED, BUILT, pushed))
    assert status == BuildStatus.COMPLETED
    assert (fields["imageName"], fields["imageDigest"], fields["commitHash"]) == (
        "r/ep:x",
        DIGEST,
        HASH[:7],
    )
    nothing = {"terminated": {"exitCode": 0, "message": ""}}
    assert _progress(_job(), _pod(CLONED, BUILT, nothing))[0] == BuildStatus.FAILED


def test_a_job_made_before_the_push_was_a_container_of_its_own_still_completes() -> None:
    """An operator upgraded while a build runs: its Job's main container is `build`, which
    builds and pushes (no UPLOADING then)."""
    old = {"initContainerStatuses": [{"name": "clone", "state": CLONED}]}
    running = {**old, "containerStatuses": [{"name": "build", "state": RUNNING}]}
    assert _progress(_job(), {"status": running})[0] == BuildStatus.BUILDING
    pushed = {"terminated": {"exitCode": 0, "message": DIGEST}}
    done = {**old, "containerStatuses": [{"name": "build", "state": pushed}]}
    assert _progress(_job(("Complete", "")), {"status": done})[0] == BuildStatus.COMPLETED
    failed = {"terminated": {"exitCode": 1, "message": "Error: pushing: denied"}}
    broken = {**old, "containerStatuses": [{"name": "build", "state": failed}]}
    assert _progress(_job(), {"status": broken}) == (
        BuildStatus.FAILED, {**commit_fields(CLONED["terminated"]["message"]),
                             "error": "build failed: Error: pushing: denied"},
    )  # fmt: skip


def test_uploading_while_the_push_runs_and_said_even_when_first_seen_ended() -> None:
    """The push container started (the build ended well): UPLOADING with the image's name.
    An operator that first looks when the push has ended records the steps the pod shows
    it went through (`passed`), in order, then the end."""
    assert _progress(_job(), _pod(CLONED, RUNNING))[0] == BuildStatus.BUILDING
    assert _progress(_job(), _pod(CLONED, BUILT)) == (
        BuildStatus.UPLOADING, {**commit_fields(CLONED["terminated"]["message"]),
                                "imageName": "r/ep:x"},
    )  # fmt: skip
    assert _progress(_job(), _pod(CLONED, BUILT, RUNNING))[0] == BuildStatus.UPLOADING
    pushed = _pod(CLONED, BUILT, {"terminated": {"exitCode": 0, "message": DIGEST}})
    done = progress(_job(("Complete", "")), pushed, image_name="r/ep:x", timeout_min=25)
    assert done is not None
    steps = passed(BuildStatus.PENDING, done, pushed, image_name="r/ep:x")
    assert [s.status for s in steps] == [BuildStatus.BUILDING, BuildStatus.UPLOADING]
    assert steps[0].fields["commitHash"] == HASH[:7] and "imageName" not in steps[0].fields
    assert steps[1].fields["imageName"] == "r/ep:x" and "imageDigest" not in steps[1].fields
    assert passed(BuildStatus.UPLOADING, done, pushed, image_name="r/ep:x") == []
    assert passed(BuildStatus.BUILDING, done, pushed, image_name="r/ep:x") == steps[1:]
    # a build that failed never passed through UPLOADING; a failed push did
    broke = _pod(CLONED, {"terminated": {"exitCode": 1, "message": "Error: x"}})
    failed = progress(_job(), broke, image_name="r/ep:x", timeout_min=25)
    assert failed is not None and failed.status == BuildStatus.FAILED
    assert [s.status for s in passed(BuildStatus.BUILDING, failed, broke, image_name="i")] == []
    denied = _pod(CLONED, BUILT, {"terminated": {"exitCode": 1, "message": "Error: denied"}})
    push_failed = progress(_job(), denied, image_name="r/ep:x", timeout_min=25)
    assert push_failed is not None and push_failed.fields["error"] == "push failed: Error: denied"
    assert [
        s.status for s in passed(BuildStatus.BUILDING, push_failed, denied, image_name="i")
    ] == [BuildStatus.UPLOADING]
    # the containers whose log can be read, in the order they ran
    assert started_containers(pushed) == ["clone", "build", "push"]
    assert started_containers(_pod(CLONED, {"waiting": {}})) == ["clone"]
    assert started_containers(None) == []


@pytest.mark.parametrize(
    ("job", "pod", "error"),
    [
        (_job(("Failed", "DeadlineExceeded")), _pod(CLONED, RUNNING), "build time limit: 25 min"),
        (_job(("Failed", "DeadlineExceeded")), None, "build time limit: 25 min"),
        (
            _job(),
            _pod(
                CLONED,
                {
                    "terminated": {
                        "exitCode": 1,
                        "message": "STEP 2/3: RUN make\nmake: *** No rule\nError: building at STEP",
                    }
                },
            ),
            "build failed: Error: building at STEP",
        ),
        (
            _job(("Failed", "BackoffLimitExceeded")),
            _pod({"terminated": {"exitCode": 1, "message": "ref 'nope' is not a branch\n"}}),
            "clone failed: ref 'nope' is not a branch",
        ),
        (
            _job(),
            _pod(CLONED, {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}),
            "build failed: exit code 137 (OOMKilled)",
        ),
    ],
)
def test_failed_with_the_builders_last_line_or_the_time_limit(
    job: dict, pod: dict | None, error: str
) -> None:
    status, fields = _progress(job, pod)
    assert status == BuildStatus.FAILED and fields["error"] == error


def test_a_job_running_past_its_deadline_is_a_build_past_its_time_limit() -> None:
    """The Job controller of some Kubernetes versions lets a Job run on past
    `activeDeadlineSeconds` (a 1.20 node did, for minutes): the operator judges it too."""
    started = {"startTime": "2026-12-06T10:00:00Z"}
    job = {"spec": {"activeDeadlineSeconds": 60}, "status": started}
    end = datetime(2026, 12, 6, 10, 1, tzinfo=UTC)
    assert deadline(job) == end
    assert deadline({"spec": {"activeDeadlineSeconds": 60}, "status": {}}) is None  # not started
    assert not past_deadline(job, end - timedelta(seconds=1)) and past_deadline(job, end)
    pod = _pod(CLONED, RUNNING)
    step = progress(job, pod, image_name="r/ep:x", timeout_min=1, now=end)
    assert step is not None and step.status == BuildStatus.FAILED
    assert step.fields["error"] == "build time limit: 1 min" and step.fields["commitHash"]
    early = progress(job, pod, image_name="r/ep:x", timeout_min=1, now=end - timedelta(seconds=1))
    assert early is not None and early.status == BuildStatus.BUILDING
    # a build that pushed just at its deadline completed; a Job that ended is not past it
    pushed = _pod(CLONED, BUILT, {"terminated": {"exitCode": 0, "message": DIGEST}})
    done = progress(job, pushed, image_name="r/ep:x", timeout_min=1, now=end)
    assert done is not None and done.status == BuildStatus.COMPLETED
    ended = {**job, "status": {**started, "conditions": [{"type": "Complete", "status": "True"}]}}
    assert not past_deadline(ended, end + timedelta(hours=1))


def test_a_builder_stopped_at_the_deadline_is_past_the_time_limit_before_the_job_says_so() -> None:
    """The Job controller deletes the pod at the deadline and says DeadlineExceeded after:
    a look between the two sees only the build container's end (CI, stop 57: the kubelet's
    ContainerStatusUnknown, no end time, the pod's deletion asked for at the deadline)."""
    job = {"spec": {"activeDeadlineSeconds": 60}, "status": {"startTime": "2026-12-06T10:00:00Z"}}
    unknown = "The container could not be located when the pod was terminated"
    lost = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "message": unknown}}
    pod = _pod(CLONED, lost)
    assert stopped_at(lost["terminated"], pod) is None
    deleted = {"deletionTimestamp": "2026-12-06T10:01:30Z", "deletionGracePeriodSeconds": 30}
    pod["metadata"] |= deleted
    assert stopped_at(lost["terminated"], pod) == datetime(2026, 12, 6, 10, 1, tzinfo=UTC)
    step = progress(job, pod, image_name="r/ep:x", timeout_min=1)
    assert step is not None and step.status == BuildStatus.FAILED
    assert step.fields["error"] == "build time limit: 1 min" and step.fields["commitHash"]
    # a container's own end time, at the deadline or before it
    for at, error in (("10:01:00", "build time limit: 1 min"), ("10:00:59", "build failed: no")):
        ended = {"terminated": {"exitCode": 1, "message": "no", "finishedAt": f"2026-12-06T{at}Z"}}
        step = progress(job, _pod(CLONED, ended), image_name="r/ep:x", timeout_min=1)
        assert step is not None and step.fields["error"] == error
    # the pod deleted (by someone) before the deadline: the container's own failure
    pod["metadata"]["deletionTimestamp"] = "2026-12-06T10:01:29Z"
    step = progress(job, pod, image_name="r/ep:x", timeout_min=1)
    assert step is not None and step.fields["error"].startswith("build failed: The container")


def test_a_builder_image_that_cannot_be_pulled_fails_the_build_at_once() -> None:
    """Not at the deadline: the kubelet's ErrImagePull or ImagePullBackOff is the error."""
    job = {"spec": {"activeDeadlineSeconds": 3600}, "status": {"startTime": "2026-12-06T10:00Z"}}
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling "b:x"'}}
    pod = {"status": {"initContainerStatuses": [{"name": "clone", "image": "b:x",
                                                 "state": waiting}]}}  # fmt: skip
    assert pull_failure(pod) == (
        'the builder image b:x could not be pulled (ImagePullBackOff: Back-off pulling "b:x")'
    )
    now = datetime(2026, 12, 6, 10, 1, tzinfo=UTC)
    step = progress(job, pod, image_name="r/ep:x", timeout_min=60, now=now)
    assert step is not None and step.status == BuildStatus.FAILED
    assert step.fields["error"].startswith("the builder image b:x could not be pulled")
    creating = {"waiting": {"reason": "ContainerCreating"}}
    assert pull_failure(_pod(clone=creating)) is None and pull_failure(None) is None


def test_commit_fields_and_last_line() -> None:
    assert commit_fields("") == {} and commit_fields("not a hash\n") == {}
    assert commit_fields(HASH)["branch"] is None  # a tag or commit: no branch
    assert last_line("a\n  b  \n\n") == "b" and last_line("") == ""
