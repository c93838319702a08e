"""The operator's side of in-cluster builds (docs/builds.md): a Job per build, and the
build's record following what the Job and its pod show.

- `sync_endpoint` runs at each reconcile of an Endpoint with a source (the management
  API's `start_build` and `cancel_build` touch the Endpoint's `BUILDS_ANNOTATION`, which
  starts one): a PENDING build without a Job gets one (`kube.manifests.build`), the Job of
  a build that has ended (CANCELLED) is deleted with its pod.
- `on_job` runs at each event of a build Job, and every LOOK_S while it runs: the Job's
  conditions and its pod's container statuses (`kube.buildjobs.progress`) move the build
  on (BUILDING, UPLOADING while the push container runs); the builder's new log lines are
  appended to the build's log each time (`kube.buildlogs`: a cursor per container in
  Redis, so no line is taken twice), and all that is left when it ends (the pod goes with
  the Job's TTL). A
  completed build whose clone handed over a tests.json is TESTING instead, tested on a
  canary (`kube.canary`), which ends it COMPLETED or TEST_FAILED.
- `delete_endpoint_jobs`: an Endpoint's deletion deletes its build Jobs (a Job in another
  namespace cannot name the Endpoint as owner).
- `take_completed` runs at each reconcile of an Endpoint with a source: a build completed
  since the last one taken becomes what the workers run (the Endpoint's `BUILD_ANNOTATION`,
  `models.running_build.to_take`); the reconcile then records its `GIT_BUILD` release
  and rolls the workers to its digest. A completed build's Job event touches the Endpoint
  (`BUILDS_ANNOTATION`) so that reconcile comes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from lockgate.kube.buildjobs import (
    Progress,
    clone_tests,
    deadline,
    ended_containers,
    finished,
    passed,
    progress,
    started_containers,
    untested_line,
)
from lockgate.kube.buildlogs import (
    LINES_PER_READ,
    READ_BYTES,
    Cursor,
    marked_done,
    read_options,
    rows,
    take,
)
from lockgate.kube.canary import Canaries, unusable_tests
from lockgate.kube.cluster import ClusterError, Conflict, NotFound
from lockgate.kube.controlplane import (
    BUILD_ANNOTATION,
    BUILDS_ANNOTATION,
    BUILDS_TAKEN_ANNOTATION,
    builds_taken_of,
    running_build_of,
)
from lockgate.kube.manifests.build import (
    BUILD_COMPONENT,
    BUILD_CONTAINER,
    BUILD_LABEL,
    CLONE_CONTAINER,
    ENDPOINT_NAMESPACE_ANNOTATION,
    PUSH_CONTAINER,
    build_job,
    builds_namespace,
    image_name,
)
from lockgate.kube.manifests.names import COMPONENT_LABEL, ENDPOINT_LABEL, Obj, Owner
from lockgate.manage.workerlogs import SYSTEM
from lockgate.models.build import Build, BuildStatus, IllegalTransition, rfc3339
from lockgate.models.running_build import RunningBuild, running_of_completed, to_take
from lockgate.models.source import GitSource, source_of
from lockgate.store.builds import BuildNotFound, BuildStore

if TYPE_CHECKING:
    from lockgate.kube.cluster import Cluster
    from lockgate.kube.settings import OperatorSettings
    from lockgate.models import EndpointSpec

log = logging.getLogger(__name__)

JOB = "Job"
BUILD_JOBS = ("batch", "v1", "jobs")
# Only the operator's build Jobs are watched (a server-side label selector).
BUILD_JOB_SELECTOR = (
    f"{COMPONENT_LABEL}={BUILD_COMPONENT},app.kubernetes.io/managed-by=lockgate-operator"
)
# The steps at which the builder has ended: what is left of its log is taken then.
BUILDER_DONE = (BuildStatus.TESTING, BuildStatus.COMPLETED, BuildStatus.FAILED)
# A live step is said (in the record and the log) before the lines of the containers that
# make it: BUILDING before the clone's and the build's, UPLOADING before the push's.
PHASES = (
    (BuildStatus.BUILDING, (CLONE_CONTAINER, BUILD_CONTAINER)),
    (BuildStatus.UPLOADING, (PUSH_CONTAINER,)),
)
DRAIN_READS = 25  # reads of LINES_PER_READ a container when it ends (the log keeps 20 000)
# Foreground would leave the Job until its pod is gone; Background deletes both, at once.
DELETE_WITH_POD = {"propagation_policy": "Background"}
# An unfinished Job is looked at again every LOOK_S (its pod's status, which changes no
# Job, moves the build on or says its builder image cannot be pulled; its log has new
# lines), and DEADLINE_GRACE_S after its deadline (the Job controller's own
# DeadlineExceeded, when it comes, is seen first).
LOOK_S = 2.0
DEADLINE_GRACE_S = 5.0


@dataclass
class Following:
    """What one operator process keeps of the build Jobs it follows (in its `Context`,
    never in module globals): a lock per build, which keeps the Job watch and a reconcile
    of the same build apart (the builder's log is copied once); and the timer of each
    unfinished Job (`_look_again`), cancelled when the operator stops."""

    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    looks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    stopped: bool = False  # no timer starts after `stop` (a reconcile during kopf's stop)

    async def stop(self) -> None:
        """Cancel the timers (the operator stopping; the next one's resync follows on)."""
        self.stopped = True
        tasks = list(self.looks.values())
        self.looks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


def _endpoint_jobs(endpoint_id: str) -> str:
    return f"{ENDPOINT_LABEL}={endpoint_id},{COMPONENT_LABEL}={BUILD_COMPONENT}"


async def sync_endpoint(
    cluster: Cluster, store: BuildStore, settings: OperatorSettings, owner: Owner,
    spec: EndpointSpec, following: Following, canaries: Canaries | None,
) -> None:  # fmt: skip
    """Create the Job of each PENDING build that has none; follow each unfinished Job
    (`on_job`: its build moved on, or the Job deleted when the build was cancelled); test
    each TESTING build no task tests (`Canaries.ensure`: the operator restarted). A
    refusal of the API server (the builds namespace not watched, RBAC) is logged, not
    raised: builds must not stop the endpoint's own reconcile; the next one tries again."""
    source = source_of(spec.source)
    if not settings.builds_registry or source is None:
        return
    try:
        await _sync(cluster, store, settings, owner, source.git, following, canaries)
    except ClusterError as err:
        log.warning("builds of endpoint %s not synced: %s", owner.name, err)


async def _sync(
    cluster: Cluster, store: BuildStore, settings: OperatorSettings, owner: Owner,
    git: GitSource, following: Following, canaries: Canaries | None,
) -> None:  # fmt: skip
    namespace = builds_namespace(settings, owner.namespace)
    jobs = await cluster.list_objects(JOB, namespace, _endpoint_jobs(owner.name))
    by_build = {(j["metadata"].get("labels") or {}).get(BUILD_LABEL): j for j in jobs}
    live = await store.live(owner.name)
    for build in live:
        if build.status == BuildStatus.PENDING and build.id not in by_build:
            job = build_job(owner, build, git, settings)
            try:
                await cluster.create(job)
            except Conflict:
                continue  # another reconcile of the Endpoint (a resync) made it first
            except ClusterError as err:
                if not 400 <= err.status < 500:
                    raise  # the API server failing: the next reconcile tries again
                # refused for good (no such namespace, RBAC, an invalid Job): say why
                await _fail(store, owner.name, build, f"the build Job was refused: {err}")
                continue
            await store.log(
                owner.name, build.id, SYSTEM,
                [f"build Job {job['metadata']['name']} created in namespace {namespace}"],
            )  # fmt: skip
    live_ids = {b.id for b in live}
    for build_id, job in by_build.items():
        if build_id in live_ids or (build_id and not finished(job)):
            # level-based, beside the Job watch: a missed event (a restart) is caught up
            await on_job(cluster, store, settings, job, following, canaries)
    if canaries is not None:
        await _resume_testing(store, owner, live, following, canaries)


async def _resume_testing(
    store: BuildStore, owner: Owner, live: list[Build], following: Following,
    canaries: Canaries,
) -> None:  # fmt: skip
    """Test each TESTING build that no task of this process tests (the operator
    restarted), under the build's lock: the Job's event that made it TESTING has started
    its task before it lets go."""
    held = following.locks
    for build in live:
        if build.status != BuildStatus.TESTING:
            continue
        async with held.setdefault(build.id, asyncio.Lock()):
            with contextlib.suppress(BuildNotFound):
                if (await store.get(owner.name, build.id)).status == BuildStatus.TESTING:
                    await canaries.ensure(owner.namespace, owner.name, build)


async def _drop_if_ended(
    cluster: Cluster, store: BuildStore, endpoint_id: str, build_id: str, job: Obj
) -> bool:
    """Delete a running Job whose build has ended (cancelled) or is gone; True if so."""
    try:
        build = await store.get(endpoint_id, build_id)
    except BuildNotFound:
        build = None
    if build is not None and not build.terminal:
        return False
    meta = job["metadata"]
    await cluster.delete(JOB, meta["namespace"], meta["name"], **DELETE_WITH_POD)
    if build is not None:
        await store.log(endpoint_id, build_id, SYSTEM, [f"build Job {meta['name']} deleted"])
    return True


async def _fail(store: BuildStore, endpoint_id: str, build: Build, error: str) -> None:
    try:
        await store.change(endpoint_id, build.id, BuildStatus.FAILED, error=error)
    except (IllegalTransition, BuildNotFound):
        return
    await store.log(endpoint_id, build.id, SYSTEM, [f"build FAILED: {error}"])


def _newest(pods: Iterable[Obj]) -> Obj | None:
    ordered = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
    return ordered[-1] if ordered else None


def _changes(build: Build, step: Progress) -> bool:
    """Whether `step` says anything the record does not hold yet."""
    held = build.model_dump()
    return step.status != build.status or any(held.get(k) != v for k, v in step.fields.items())


async def on_job(
    cluster: Cluster,
    store: BuildStore,
    settings: OperatorSettings,
    job: Obj,
    following: Following,
    canaries: Canaries | None,
) -> Build | None:
    """Follow one build Job event: the build's record moved on as the Job and its pod
    show (`kube.buildjobs.progress`); the builder's log kept when it ends; a completed
    build with tests TESTING on a canary (`canaries`, `kube.canary`; None, and required
    so that no caller forgets it: taken untested, its log saying so). Returns the
    record as written (None when nothing changed). `following`'s lock of the build keeps the
    Job watch and a reconcile of the same build apart, so the builder's log is copied once."""
    labels = job["metadata"].get("labels") or {}
    endpoint_id, build_id = labels.get(ENDPOINT_LABEL), labels.get(BUILD_LABEL)
    if not endpoint_id or not build_id:
        return None
    held = following.locks
    async with held.setdefault(build_id, asyncio.Lock()):
        changed, ended = await _follow(
            cluster, store, settings, job, endpoint_id, build_id, canaries
        )
    if ended:
        held.pop(build_id, None)
    else:
        _look_again(cluster, store, settings, job, following, canaries)
    return changed


def _look_again(
    cluster: Cluster, store: BuildStore, settings: OperatorSettings, job: Obj,
    following: Following, canaries: Canaries | None,
) -> None:  # fmt: skip
    """Follow an unfinished Job again soon (one timer per build, until the Job or its build
    ends), whatever else happens: a build whose builder image cannot be pulled, or past its
    deadline while the Job controller lets the Job run on, is FAILED then
    (`kube.buildjobs.stopped`), and its Job deleted (`_follow`)."""
    build_id = (job["metadata"].get("labels") or {}).get(BUILD_LABEL)
    if not build_id or finished(job) or build_id in following.looks or following.stopped:
        return
    delay = LOOK_S
    if (end := deadline(job)) is not None:
        left = (end - datetime.now(UTC)).total_seconds() + DEADLINE_GRACE_S
        delay = min(delay, max(0.0, left))
    meta = job["metadata"]

    async def look_again() -> None:
        await asyncio.sleep(delay)
        following.looks.pop(build_id, None)
        try:
            fresh = await cluster.read(JOB, meta["namespace"], meta["name"])
            if fresh is not None:
                await on_job(cluster, store, settings, fresh, following, canaries)
        except Exception as err:  # a background task: say it, the resync tries again
            log.warning("build %s not followed: %s", build_id, err)

    following.looks[build_id] = asyncio.get_running_loop().create_task(look_again())


async def _follow(
    cluster: Cluster, store: BuildStore, settings: OperatorSettings, job: Obj,
    endpoint_id: str, build_id: str, canaries: Canaries | None,
) -> tuple[Build | None, bool]:  # fmt: skip
    """`on_job` for one build: the record written (or None), and whether the build has
    ended (or is gone)."""
    if not finished(job) and await _drop_if_ended(cluster, store, endpoint_id, build_id, job):
        return None, True
    build = await _live(store, endpoint_id, build_id)
    if build is None:
        return None, True
    if build.status == BuildStatus.TESTING:
        return None, False  # the Job's part is done: its canary's task has the build
    namespace = job["metadata"]["namespace"]
    pod = _newest(await cluster.list_objects("Pod", namespace, f"{BUILD_LABEL}={build_id}"))
    deadline_s = (job.get("spec") or {}).get("activeDeadlineSeconds") or 0
    image = image_name(settings, endpoint_id, build_id)
    # judged DEADLINE_GRACE_S late: the Job controller's own DeadlineExceeded comes first
    # when it comes at all (the looks are more often than that)
    judged = datetime.now(UTC) - timedelta(seconds=DEADLINE_GRACE_S)
    step = progress(job, pod, image_name=image, timeout_min=int(deadline_s) // 60, now=judged)
    if step is None:
        return None, False
    tests = untested = final = None
    if _changes(build, step):
        tests = clone_tests(pod) if step.status == BuildStatus.COMPLETED else None
        if tests is not None:
            step, untested = _tested_step(step, tests, canaries)
        final = step
    steps = [*passed(build.status, step, pod, image_name=image), final] if final else []
    said, changed = await _say(
        cluster, store, endpoint_id, build_id, pod, steps, drain=step.status in BUILDER_DONE
    )
    if not said:
        return None, True  # cancelled meanwhile: the next event deletes the Job
    if changed is None:
        return None, False
    if changed.terminal and not finished(job):
        await _drop_if_ended(cluster, store, endpoint_id, build_id, job)  # stopped: no pull, …
    await _after(cluster, store, job, changed, tests, untested, canaries)
    return changed, changed.terminal


async def _live(store: BuildStore, endpoint_id: str, build_id: str) -> Build | None:
    """The build while it has not ended (None: ended, or gone)."""
    try:
        build = await store.get(endpoint_id, build_id)
    except BuildNotFound:
        return None
    return None if build.terminal else build


async def _say(
    cluster: Cluster, store: BuildStore, endpoint_id: str, build_id: str, pod: Obj | None,
    steps: list[Progress], *, drain: bool,
) -> tuple[bool, Build | None]:  # fmt: skip
    """Record `steps` (the live ones, then the end) with the pod's new log lines between
    them (PHASES: a step before the lines of its containers; the end after every line).
    Returns False when a step was refused (the build was cancelled meanwhile), and the
    record as last written (None: no step)."""
    changed: Build | None = None
    for phase, containers in PHASES:
        for step in (s for s in steps if s.status == phase):
            if (changed := await _record(store, endpoint_id, build_id, step)) is None:
                return False, None
        if pod is not None:
            mine = [c for c in started_containers(pod) if c in containers]
            await _follow_logs(cluster, store, endpoint_id, build_id, pod, mine, drain=drain)
    live = {phase for phase, _ in PHASES}
    for step in (s for s in steps if s.status not in live):
        if (changed := await _record(store, endpoint_id, build_id, step)) is None:
            return False, None
    return True, changed


async def _after(
    cluster: Cluster, store: BuildStore, job: Obj, changed: Build, tests: str | None,
    untested: str | None, canaries: Canaries | None,
) -> None:  # fmt: skip
    """What follows a build's step once recorded: TESTING starts its canary's tests (before
    the build's lock is let go); COMPLETED touches the endpoint, which takes it."""
    endpoint_id = job["metadata"]["labels"][ENDPOINT_LABEL]
    if changed.status == BuildStatus.TESTING and canaries is not None and tests is not None:
        canaries.start(_endpoint_namespace(job), endpoint_id, changed, tests)
    elif changed.status == BuildStatus.COMPLETED:
        if untested is not None:  # said, never silently skipped
            await store.log(endpoint_id, changed.id, SYSTEM, [untested])
        await _touch_endpoint(cluster, job, endpoint_id)


def _tested_step(
    step: Progress, tests: str, canaries: Canaries | None
) -> tuple[Progress, str | None]:
    """A completed build's step when its clone handed over `tests`: TESTING (its canary
    tests it: `kube.canary`), FAILED when they cannot be used, or COMPLETED with the line
    saying why they are not run."""
    if (why := unusable_tests(tests)) is not None:
        return Progress(BuildStatus.FAILED, {**step.fields, "error": why}), None
    if canaries is None:
        return step, untested_line(tests)
    return Progress(BuildStatus.TESTING, step.fields), None


def _endpoint_namespace(job: Obj) -> str:
    """The namespace of the build Job's Endpoint."""
    meta = job["metadata"]
    return (meta.get("annotations") or {}).get(ENDPOINT_NAMESPACE_ANNOTATION) or meta["namespace"]


async def _touch_endpoint(cluster: Cluster, job: Obj, endpoint_id: str) -> None:
    """Start a reconcile of the build's Endpoint (which takes the completed build); the
    resync takes it anyway should this fail."""
    patch = {"metadata": {"annotations": {BUILDS_ANNOTATION: rfc3339()}}}
    try:
        await cluster.patch_endpoint(_endpoint_namespace(job), endpoint_id, patch)
    except ClusterError as err:  # NotFound: deleted meanwhile
        if not isinstance(err, NotFound):
            log.warning("endpoint %s not told of its completed build: %s", endpoint_id, err)


async def _record(
    store: BuildStore, endpoint_id: str, build_id: str, step: Progress
) -> Build | None:
    """Write the step (None when the build was cancelled meanwhile) and say so in its log."""
    try:
        changed = await store.change(endpoint_id, build_id, step.status, **step.fields)
    except (IllegalTransition, BuildNotFound):
        return None  # cancelled meanwhile: the next event deletes the Job
    line = f"build {step.status.value}"
    if step.status == BuildStatus.UPLOADING:
        line += f": pushing {changed.imageName}"
    elif changed.error:
        line += f": {changed.error}"
    elif changed.imageDigest:
        line += f": {changed.imageName}@{changed.imageDigest}"
    elif changed.commitHash:
        line += f" {changed.commitHash} ({changed.branch or changed.ref or 'the default branch'})"
    await store.log(endpoint_id, build_id, SYSTEM, [line])
    return changed


async def _follow_logs(
    cluster: Cluster, store: BuildStore, endpoint_id: str, build_id: str, pod: Obj,
    containers: list[str], *, drain: bool,
) -> None:  # fmt: skip
    """Append the new lines of the build pod's `containers` to the build's log
    (`kube.buildlogs`): at most LINES_PER_READ a container, or all that is left when the
    builder has ended (`drain`), within the room the log has. Each container's cursor and
    its lines are written together, only if no other follower moved it meanwhile: a line
    is never taken twice, by a second look nor by a restarted operator. A log that cannot
    be read (the pod or its node gone) is left: the next look tries again."""
    meta = pod["metadata"]
    ended = ended_containers(pod)
    for container in containers:
        for _ in range(DRAIN_READS if drain else 1):
            if await store.log_room(endpoint_id, build_id) <= 0:
                return
            was = await store.log_cursor(endpoint_id, build_id, container)
            cursor = Cursor.decoded(was)
            if cursor.done:
                break
            try:
                text = await cluster.pod_log(
                    meta["namespace"], meta["name"], container=container,
                    **read_options(cursor, time.time()),
                )  # fmt: skip
            except ClusterError as err:
                log.debug("build %s: the log of %s not read: %s", build_id, container, err)
                break
            cut = len(text.encode()) >= READ_BYTES
            lines, moved = take(cursor, rows(text, cut=cut))
            moved = marked_done(moved, len(lines), ended=container in ended, cut=cut)
            if moved == cursor or not await store.log_followed(
                endpoint_id, build_id, container, was, moved.encoded(), lines
            ):
                break  # nothing new, or another follower took these first
            if len(lines) < LINES_PER_READ:
                break


async def delete_endpoint_jobs(
    cluster: Cluster, settings: OperatorSettings, endpoint_id: str, namespace: str
) -> int:
    """Delete every build Job of a deleted Endpoint (with their pods); how many."""
    if not settings.builds_registry:
        return 0
    where = builds_namespace(settings, namespace)
    jobs = await cluster.list_objects(JOB, where, _endpoint_jobs(endpoint_id))
    for job in jobs:
        await cluster.delete(JOB, where, job["metadata"]["name"], **DELETE_WITH_POD)
    return len(jobs)


TAKE_SCAN = 100  # the newest builds looked at for one completed since the last taken


async def take_completed(
    cluster: Cluster, store: BuildStore, owner: Owner, spec: EndpointSpec, body: Obj
) -> RunningBuild | None:
    """The build the Endpoint's workers run: a build completed since the last one taken
    (`running_build.to_take`: COMPLETED with its digest; a failed, cancelled or
    TEST_FAILED one never), written on the Endpoint (`BUILD_ANNOTATION` and
    `BUILDS_TAKEN_ANNOTATION`, one patch) and said in the build's log; else the one its
    annotation names (None: the template's image)."""
    running = running_build_of(body)
    source = source_of(spec.source)
    if source is None:
        return running
    builds, _ = await store.page(owner.name, below=None, limit=TAKE_SCAN)
    found = to_take(builds, builds_taken_of(body))
    if found is not None:  # read afresh: a body that lags must not undo a rollback
        fresh = await cluster.get_endpoint(owner.namespace, owner.name)
        if fresh is None:
            return running
        running = running_build_of(fresh)
        found = to_take(builds, builds_taken_of(fresh))
    if found is None:
        return running
    seq, build = found
    taken = running_of_completed(build, source.git.url)
    assert taken is not None  # `to_take` gives completed builds with an image only
    annotations = {BUILD_ANNOTATION: taken.encoded(), BUILDS_TAKEN_ANNOTATION: str(seq)}
    await cluster.patch_endpoint(
        owner.namespace, owner.name, {"metadata": {"annotations": annotations}}
    )
    line = f"the workers run {taken.image} (a GIT_BUILD release of endpoint {owner.name})"
    await store.log(owner.name, build.id, SYSTEM, [line])
    return taken
