"""What a build Job and its pod say about the build (pure; docs/builds.md).

`progress(job, pod)` reads the Job's conditions and the pod's container statuses (the
clone's termination message holds the commit, the build's on failure its last log lines,
the push container's the pushed digest: `kube.manifests.build`) and answers the build's
state and the fields to record, or None while nothing is known yet; `passed` the steps the
pod shows the build went through that the record has not said yet (the push ran: UPLOADING,
even when the operator first looks once it has ended).
"""

from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lockgate.kube.manifests.build import (
    BUILD_CONTAINER,
    CLONE_CONTAINER,
    PUSH_CONTAINER,
    TESTS_MARKER,
)
from lockgate.models.build import ORDER, BuildStatus
from lockgate.models.hub import TESTS_FILE, HubFileError, parse_tests
from lockgate.timestamps import parse_time

Obj = dict[str, Any]
SHORT_HASH = 7
DIGEST_PREFIX = "sha256:"


@dataclass(frozen=True)
class Progress:
    """A build's state as its Job shows it, and the fields to record with it."""

    status: BuildStatus
    fields: dict[str, Any] = field(default_factory=dict)


def _condition(job: Obj, kind: str) -> Obj | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def _container(pod: Obj | None, name: str, *, init: bool) -> Obj:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in ((pod or {}).get("status") or {}).get(key) or []:
        if status.get("name") == name:
            return status
    return {}


def _terminated(status: Obj) -> Obj | None:
    return (status.get("state") or {}).get("terminated")


def last_line(text: str) -> str:
    """The last non-blank line of a log or message ('' when none)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _split(message: str) -> tuple[str, str | None]:
    """The clone's termination message as its commit lines and its packed tests.json
    (None when the repository has none: `kube.manifests.build.CLONE_SCRIPT`)."""
    head, marker, packed = message.partition(f"\n{TESTS_MARKER}\n")
    return head, packed.strip() if marker else None


def handed_tests(message: str) -> str | None:
    """The repository's tests.json as the clone handed it over (None: none, or a message
    cut short or changed: never a guess)."""
    packed = _split(message)[1]
    if not packed:
        return None
    try:
        return gzip.decompress(base64.b64decode(packed, validate=True)).decode()
    except (ValueError, OSError, EOFError):
        return None


def clone_tests(pod: Obj | None) -> str | None:
    """The tests.json the build's clone found (None: none, or no clone ended yet)."""
    ended = _terminated(_container(pod, CLONE_CONTAINER, init=True)) or {}
    return handed_tests(ended.get("message") or "") if ended.get("exitCode") == 0 else None


def untested_line(text: str) -> str:
    """What a completed build's log says of its tests.json when no canary tests it (a
    caller of `kube.builds.on_job` without `canaries`; the operator always has them)."""
    try:
        what = f"{len(parse_tests(text).tests)} test(s)"
    except HubFileError as err:
        what = f"unusable ({err})"
    return (
        f"{TESTS_FILE}: {what}, not run (no canary tests builds here): the build is taken untested"
    )


def commit_fields(message: str) -> dict[str, Any]:
    """The clone's termination message (hash, date, branch, subject: one a line, then
    perhaps the tests) as the build's commit fields; {} when it holds no hash."""
    lines = _split(message)[0].splitlines()
    full = lines[0].strip() if lines else ""
    if len(full) < SHORT_HASH or not all(c in "0123456789abcdef" for c in full):
        return {}
    rest = [line.strip() for line in lines[1:3]] + ["", ""]
    return {
        "commit": full,
        "commitHash": full[:SHORT_HASH],
        "commitDate": rest[0] or None,
        "branch": rest[1] or None,
        "commitMessage": "\n".join(lines[3:]).strip() or None,
    }


def failure(status: Obj, what: str) -> str:
    """Why a container failed: its last log line (the termination message falls back to
    the log), else its exit code and reason."""
    ended = _terminated(status) or {}
    line = last_line(ended.get("message") or "")
    if line:
        return f"{what} failed: {line}"
    return f"{what} failed: exit code {ended.get('exitCode')} ({ended.get('reason') or 'Error'})"


def deadline(job: Obj) -> datetime | None:
    """When the Job's `activeDeadlineSeconds` runs out (None: no deadline, or not started)."""
    seconds = (job.get("spec") or {}).get("activeDeadlineSeconds")
    started = parse_time((job.get("status") or {}).get("startTime"))
    if not seconds or started is None:
        return None
    return started + timedelta(seconds=seconds)


def stopped_at(ended: Obj, pod: Obj | None) -> datetime | None:
    """When a terminated container stopped: its `finishedAt`, else (the kubelet lost it as
    its pod was deleted: `ContainerStatusUnknown`, no end time) when the pod's deletion was
    asked for (its `deletionTimestamp` less the grace period). None: not known."""
    if at := ended.get("finishedAt"):
        return parse_time(at)
    meta = (pod or {}).get("metadata") or {}
    if (deleted := parse_time(meta.get("deletionTimestamp"))) is not None:
        return deleted - timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)
    return None


def ended_past_deadline(job: Obj, ended: Obj, pod: Obj | None) -> bool:
    """A container that failed stopped at or after the Job's deadline: the Job controller
    stopped it (it deletes the pod first and says DeadlineExceeded after, so the pod's
    failed containers can be read before the Job's condition)."""
    end, at = deadline(job), stopped_at(ended, pod)
    return end is not None and at is not None and at >= end


def finished(job: Obj) -> bool:
    """The Job has ended (its Complete or Failed condition)."""
    return _condition(job, "Complete") is not None or _condition(job, "Failed") is not None


def past_deadline(job: Obj, now: datetime) -> bool:
    """The Job still runs at `now`, past its deadline."""
    end = deadline(job)
    return end is not None and now >= end and not finished(job)


# The kubelet's reasons for a container waiting on an image it cannot have: the builder
# image (a Dockerfile's FROM is pulled by buildah, inside the build container).
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def pull_failure(pod: Obj | None) -> str | None:
    """Why the build pod's builder image cannot be pulled (None: it can, or not yet known)."""
    status = (pod or {}).get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or []
    ):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES:
            why = f"{waiting['reason']}: {waiting.get('message') or 'no message'}"
            return f"the builder image {container.get('image')} could not be pulled ({why})"
    return None


def stopped(job: Obj, pod: Obj | None, now: datetime, timeout_min: int) -> str | None:
    """Why a build whose Job still runs cannot end well: its builder image cannot be pulled,
    or it is past its time limit (None: neither)."""
    if past_deadline(job, now):
        return f"build time limit: {timeout_min} min"
    return None if finished(job) else pull_failure(pod)


def _push(pod: Obj | None) -> tuple[Obj, str]:
    """The container that pushes and what it is called in an error: `push`; a Job made
    before the push was a container of its own ran `build` as its main container."""
    old = _container(pod, BUILD_CONTAINER, init=False)
    if old:
        return old, "build"
    return _container(pod, PUSH_CONTAINER, init=False), "push"


def _began(status: Obj) -> bool:
    state = status.get("state") or {}
    return "running" in state or "terminated" in state


def started_containers(pod: Obj | None) -> list[str]:
    """The build pod's containers that have started (their log can be read), in the order
    they run."""
    status = (pod or {}).get("status") or {}
    every = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    return [c["name"] for c in every if c.get("name") and _began(c)]


def ended_containers(pod: Obj | None) -> set[str]:
    """The build pod's containers that have ended (their log is whole)."""
    status = (pod or {}).get("status") or {}
    every = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    return {c["name"] for c in every if c.get("name") and _terminated(c)}


def progress(
    job: Obj, pod: Obj | None, *, image_name: str, timeout_min: int, now: datetime | None = None
) -> Progress | None:
    """The build's state from its Job and (when it has one) its pod; None while pending.
    Given `now`, a Job still running is FAILED when it cannot end well (`stopped`): past
    its deadline (the Job controller enforces `activeDeadlineSeconds` late or not at all on
    some Kubernetes versions: a 1.20 node ran a build for minutes past it,
    tests/test_node_builds.py), or its builder image cannot be pulled (the Job would wait
    for its deadline). The push container started (the build ended well): UPLOADING."""
    clone = _container(pod, CLONE_CONTAINER, init=True)
    build = _container(pod, BUILD_CONTAINER, init=True)
    push, push_name = _push(pod)
    fields: dict[str, Any] = {}
    if (ended := _terminated(clone)) and ended.get("exitCode") == 0:
        fields = commit_fields(ended.get("message") or "")
    if (
        done := _ended(job, pod, fields, image_name=image_name, timeout_min=timeout_min)
    ) is not None:
        return done
    failed = _condition(job, "Failed")
    if now is not None and (why := stopped(job, pod, now, timeout_min)):
        return Progress(BuildStatus.FAILED, {**fields, "error": why})
    if failed is not None:
        why = failed.get("message") or failed.get("reason") or "the build Job failed"
        return Progress(BuildStatus.FAILED, {**fields, "error": why})
    if push_name == "push" and (_began(push) or _terminated(build)):
        return Progress(BuildStatus.UPLOADING, {**fields, "imageName": image_name})
    if clone.get("state", {}).get("running") or build or push or fields:
        return Progress(BuildStatus.BUILDING, fields)
    return None


def _ended(
    job: Obj, pod: Obj | None, fields: dict[str, Any], *, image_name: str, timeout_min: int
) -> Progress | None:
    """The build's end as its Job's deadline and its containers' exits say (None: not
    ended so). A container that failed at or past the deadline was stopped by it: the
    build is past its time limit, whatever the container's last line."""
    clone = _container(pod, CLONE_CONTAINER, init=True)
    build = _container(pod, BUILD_CONTAINER, init=True)
    push, push_name = _push(pod)
    failed = _condition(job, "Failed")
    past_limit = Progress(
        BuildStatus.FAILED, {**fields, "error": f"build time limit: {timeout_min} min"}
    )
    if failed is not None and failed.get("reason") == "DeadlineExceeded":
        return past_limit
    for status, what in ((clone, "clone"), (build, "build"), (push, push_name)):
        if (ended := _terminated(status)) and ended.get("exitCode") != 0:
            if ended_past_deadline(job, ended, pod):
                return past_limit
            # (a failed clone left no commit fields)
            return Progress(BuildStatus.FAILED, {**fields, "error": failure(status, what)})
    if not (ended := _terminated(push)):
        return None
    digest = (ended.get("message") or "").strip()
    if digest.startswith(DIGEST_PREFIX):
        return Progress(
            BuildStatus.COMPLETED, {**fields, "imageName": image_name, "imageDigest": digest}
        )
    return Progress(BuildStatus.FAILED, {**fields, "error": "the builder pushed no digest"})


def passed(
    current: BuildStatus, step: Progress, pod: Obj | None, *, image_name: str
) -> list[Progress]:
    """The live steps between the record's `current` status and `step` that the pod shows
    the build went through (BUILDING: a container of it started; UPLOADING: the push
    container started), so that the record says each once, in order, even when the
    operator first looks after them (a push takes a second; the operator looks every few)."""
    push, push_name = _push(pod)
    shown = {
        BuildStatus.BUILDING: bool(started_containers(pod)),
        BuildStatus.UPLOADING: push_name == "push" and _began(push),
    }
    top = ORDER.index(step.status) if step.status in ORDER else len(ORDER)
    commit = {
        k: v for k, v in step.fields.items() if k not in ("error", "imageName", "imageDigest")
    }
    uploading = {**commit, "imageName": image_name}
    fields = {BuildStatus.BUILDING: commit, BuildStatus.UPLOADING: uploading}
    return [
        Progress(status, fields[status])
        for status, seen in shown.items()
        if seen and ORDER.index(current) < ORDER.index(status) < top
    ]
