"""`LocalControlPlane`: the endpoints of `lockgate dev`, each run by local worker processes.

A local endpoint is one unit: its registry entry (what the gateway reads, such as
`executionTimeoutMs`), a worker key scoped to it, and `LocalWorkers` (a process pool and
its autoscaler) running what its `templateId` names (`lockgate.dev.launch`). Entries live
in the embedded Redis, so endpoints created through the API come back when `lockgate dev`
restarts; the command line's endpoint is applied from the command line at every start,
with the console's (or the API's) edits of it kept over the command line's defaults: only
the fields its flags name win (`apply`); its handler (`templateId`) is the command line's
alone, and an edit of it is refused.
Settings without a local meaning (GPU types, data centers, flashboot…) are kept and shown.

Templates made through `/v1/templates` are kept in the same Redis (`lg:templates`); an
endpoint whose `templateId` names one runs its `dockerEntrypoint` + `dockerStartCmd` with
its `env` (`dev.launch.template_launch`); its image name is kept and shown, never pulled.
An endpoint's `networkVolumeId` gives its workers the volume folder's path as
`RUNPOD_VOLUME_PATH` (`dev.storage`). An endpoint's `modelReferences` are downloaded
once (`dev.model_cache`) before its workers start; a failed download is its Ready
condition's message, and no worker starts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from lockgate.dev.batch_pool import batch_entry, has_batch_pool, remove_batch_pool
from lockgate.dev.builder import RUNS_KEPT, Built, LocalBuilder, Say
from lockgate.dev.canary import is_canary, remove_canary, run_canary
from lockgate.dev.datadir import SECRETS
from lockgate.dev.launch import Launch, launch_for, template_launch
from lockgate.dev.model_cache import ModelDownloads
from lockgate.dev.secret_values import FileSecretValues, SecretMissing
from lockgate.dev.storage import VOLUME_PATH_ENV, volume_dir
from lockgate.dev.worker_keys import WorkerKeys
from lockgate.dev.workers import LocalWorkers, WorkerStates, limits_of
from lockgate.gateway.errors import Unavailable
from lockgate.gateway.http import iso_ms
from lockgate.gateway.state import Gateway
from lockgate.hfcache import ModelFetchFailed, cache_env
from lockgate.manage import builds as build_ops
from lockgate.manage.controlplane import (
    EndpointExists,
    EndpointNotFound,
    TemplateExists,
    TemplateNotFound,
    UnusableSettings,
)
from lockgate.manage.listing import Cursor, EndpointPage, EndpointQuery, EndpointSummary, take
from lockgate.manage.logbook import LineSink, LocalLogs
from lockgate.manage.workersource import LogBatch, LogRead
from lockgate.models import (
    Condition,
    ConditionStatus,
    EndpointRecord,
    EndpointSpec,
    EndpointStatus,
    EndpointType,
    JobCounts,
    Phase,
    TemplateSpec,
    WorkerCounts,
)
from lockgate.models.batch import batch_pool_id, batch_pool_spec
from lockgate.models.build import Build, BuildReason, FailedTest
from lockgate.models.crashloop import CrashLoop
from lockgate.models.hub import HubTests, env_for_tests
from lockgate.models.registry_entry import RegistryEntry
from lockgate.models.releases import ReleaseConfig, config_of, release_diff
from lockgate.models.running_build import RunningBuild, applies
from lockgate.models.secrets import missing_problem
from lockgate.models.source import source_of
from lockgate.scaling.crashloop import CRASH_LOOP, loop_condition
from lockgate.store import Snapshot, key_digest
from lockgate.store.builds import BuildNotFound, BuildStore
from lockgate.store.lb_workers import LbWorkers
from lockgate.store.releases import ReleaseStore
from lockgate.workerenv import WORKER_DEFAULTS, resource_env, worker_env

log = logging.getLogger("lockgate.dev")

ORIGIN_API = "api"  # created through /v1/endpoints: resumed when dev mode restarts
ORIGIN_CLI = "cli"  # the command line's endpoint: applied again by the command line
STOP_GRACE_S = 30.0  # shutdown: workers finish the job in hand
SHUTDOWN_MARGIN_S = 15.0  # after a job's timeout: time to report the result and exit
DELETE_GRACE_S = 5.0  # the endpoint's jobs are deleted anyway: no reason to wait long
READY = "Ready"
WORKERS_HEALTHY = "WorkersHealthy"
MODELS_CACHED = "ModelsCached"
MODELS_DOWNLOADING = "downloading"  # `LocalEndpoint.models` while its models are fetched
MODELS_READY = "cached"
BUILDS = "builds"  # the data folder's folder of build checkouts and environments
SECRET_POLL_S = 1.0  # how often an endpoint waiting for an account secret looks again


def gpus_here() -> int:
    """GPUs a local worker can use: those `CUDA_VISIBLE_DEVICES` names, else the NVIDIA
    devices of this machine."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return len([p for p in Path("/dev").glob("nvidia*") if p.name[6:].isdigit()])


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class LocalEndpoint:
    """One dev-mode endpoint: settings, the worker key's digest, and its workers."""

    id: str
    spec: EndpointSpec
    origin: str
    work_dir: str  # where relative templateIds were resolved
    worker_key: str
    launch: Launch | None  # None: its templateId cannot run here (see `problem`)
    problem: str = ""
    workers: LocalWorkers | None = None
    retiring: list[LocalWorkers] = field(default_factory=list)  # old workers finishing jobs
    batch: LocalWorkers | None = None  # its batch pool's workers (`dev.batch_pool`)
    batches: bool = False  # it has batches: its batch pool is registered (`dev.batch_pool`)
    generation: int = 1
    since: str = field(default_factory=now)
    version: int = 1  # goes up with each release: a change of `config`
    config: ReleaseConfig | None = None  # the container configuration its workers run
    created_at: str = field(default_factory=now)
    edits: dict = field(default_factory=dict)  # the command line's endpoint: API edits kept
    models: str = ""  # its modelReferences: MODELS_DOWNLOADING, MODELS_READY or the failure
    secrets: str = ""  # why its workers wait: an account secret its env refers to is missing

    def entry(self, job_api_url: str) -> RegistryEntry:
        """The registry entry: every setting, plus what a restart needs to resume it."""
        return RegistryEntry(
            id=self.id,
            workerKeyDigest=key_digest(self.worker_key),
            jobApiUrl=job_api_url,
            origin=self.origin,
            workDir=self.work_dir,
            version=self.version,
            createdAt=self.created_at,
            edits=self.edits,
            crashLoop=self.workers.loop if self.workers is not None else None,
            **self.spec.model_dump(mode="json"),
        )


COMMAND_LINE_ONLY = ("templateId",)  # the command line's handler: never edited


def edited_fields(old: EndpointSpec, new: EndpointSpec) -> dict:
    """The settings `new` changes, as JSON values."""
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    return {k: v for k, v in after.items() if before.get(k) != v}


def refused_edit(edits: dict) -> str | None:
    """Why an edit of the command line's endpoint is refused (it changes what only the
    command line sets), or None."""
    for name in COMMAND_LINE_ONLY:
        if name in edits:
            return (
                f"{name}: the endpoint of the `lockgate dev` command line takes its {name} "
                "from the command line; change the command line (or create another endpoint)"
            )
    return None


def kept_edits(entry: RegistryEntry | None, named: Collection[str]) -> dict:
    """An earlier run's API edits of the command line's endpoint that still apply: those of
    fields the command line does not name."""
    edits = entry.edits if entry is not None and entry.origin == ORIGIN_CLI else {}
    return {
        k: v
        for k, v in edits.items()
        if k in EndpointSpec.model_fields and k not in named and k not in COMMAND_LINE_ONLY
    }


def template_of(entry: dict) -> TemplateSpec:
    """A kept template's fields (its entry also holds `createdAt`)."""
    return TemplateSpec.model_validate(
        {k: v for k, v in entry.items() if k in TemplateSpec.model_fields}
    )


def replacement_grace_s(spec: EndpointSpec) -> float:
    """How long a replaced worker may take to finish what it holds: its job's execution
    timeout (an LB worker's requests, `requestTimeoutS`) and a margin, as a worker pod's
    termination grace period on a cluster; no job is cut by a release."""
    if spec.type == EndpointType.LB:
        return spec.requestTimeoutS + SHUTDOWN_MARGIN_S
    return spec.executionTimeoutMs / 1000 + SHUTDOWN_MARGIN_S


def models_failed(ep: LocalEndpoint) -> bool:
    return ep.models not in ("", MODELS_DOWNLOADING, MODELS_READY)


def local_phase(ep: LocalEndpoint) -> Phase:
    """Ready while its workers can start; Failed when its templateId cannot run here or
    a model reference could not be fetched; Pending while an account secret its env
    refers to is missing."""
    if ep.launch is None or models_failed(ep):
        return Phase.FAILED
    if ep.secrets:
        return Phase.PENDING
    return Phase.CRASH_LOOP if ep.workers is not None and ep.workers.loop else Phase.READY


def local_summary(ep: LocalEndpoint) -> EndpointSummary:
    spec, phase = ep.spec, local_phase(ep).value
    return EndpointSummary(ep.id, spec.name, phase, spec.workersMin, spec.workersMax)


def local_status(
    ep: LocalEndpoint, job_api_url: str, snap: Snapshot, workers: int
) -> EndpointStatus:
    """Ready while its workers can start (however many run now); Failed, with the reason,
    when its templateId cannot run here."""
    ok = ep.launch is not None
    message = f"workers run {' '.join(ep.launch.command)!r}" if ep.launch else ep.problem
    reason = "LocalWorkers" if ok else "UnusableTemplate"
    if ok and models_failed(ep):
        ok, reason, message = False, "ModelFetchFailed", ep.models
    if ok and ep.secrets:
        ok, reason, message = False, "SecretNotFound", ep.secrets
    if ok and ep.workers is not None and ep.workers.loop is not None:
        ok, reason, message = False, "CrashLoop", f"no worker starts: {ep.workers.loop.text()}"
    condition = Condition(
        type=READY,
        status=ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
        reason=reason,
        message=message,
        lastTransitionTime=ep.since,
    )
    conditions = [condition]
    if ep.models:
        conditions.append(models_condition(ep))
    if ep.workers is not None:
        conditions.append(workers_condition(ep.workers.states, ep.since))
        conditions.append(crash_loop_condition(ep.id, ep.workers.loop, ep.spec, ep.since))
    return EndpointStatus(
        phase=local_phase(ep),
        endpointId=ep.id,
        jobApiUrl=job_api_url,
        workers=WorkerCounts(
            desired=workers,
            ready=snap.workers_idle + snap.workers_running,
            idle=snap.workers_idle,
            running=snap.workers_running,
        ),
        jobs=JobCounts(inQueue=snap.in_queue + snap.in_queue_low, inProgress=snap.in_progress),
        conditions=conditions,
        observedGeneration=ep.generation,
    )


def models_condition(ep: LocalEndpoint) -> Condition:
    """`ModelsCached`: True once every model reference is in the cache, else why not."""
    cached = ep.models == MODELS_READY
    reason = {MODELS_READY: "Cached", MODELS_DOWNLOADING: "Downloading"}.get(
        ep.models, "ModelFetchFailed"
    )
    message = {
        MODELS_READY: "models cached: " + ", ".join(ep.spec.modelReferences),
        MODELS_DOWNLOADING: "downloading " + ", ".join(ep.spec.modelReferences),
    }.get(ep.models, ep.models)
    return Condition(
        type=MODELS_CACHED, status=ConditionStatus.TRUE if cached else ConditionStatus.FALSE,
        reason=reason, message=message, lastTransitionTime=ep.since,
    )  # fmt: skip


def workers_condition(states: WorkerStates, since: str) -> Condition:
    """`WorkersHealthy`: False, with the cause and what to do, while workers crash-loop."""
    if states.reason:
        return Condition(
            type=WORKERS_HEALTHY, status=ConditionStatus.FALSE, reason=states.reason,
            message=states.message, lastTransitionTime=now(),
        )  # fmt: skip
    return Condition(
        type=WORKERS_HEALTHY, status=ConditionStatus.TRUE, reason="WorkersStart",
        message="Worker processes start and stay up", lastTransitionTime=since,
    )  # fmt: skip


def crash_loop_condition(
    endpoint_id: str, loop: CrashLoop | None, spec: EndpointSpec, since: str
) -> Condition:
    """`CrashLoop`: True, with the last failed start, while no worker starts."""
    check = loop_condition(loop, spec.crashLoopThreshold, endpoint_id)
    status = ConditionStatus.TRUE if check.looping else ConditionStatus.FALSE
    at = iso_ms(loop.since) if loop is not None else since
    return Condition(
        type=CRASH_LOOP, status=status, reason=check.reason, message=check.message,
        lastTransitionTime=at,
    )  # fmt: skip


class LocalControlPlane:
    """Endpoints as local worker pools beside an in-process gateway (`lockgate dev`)."""

    def __init__(
        self,
        gw: Gateway,
        *,
        gateway_url: str,
        base_dir: Path,
        volumes_dir: Path | None = None,
        python: str = sys.executable,
        stop_grace_s: float = STOP_GRACE_S,
        secret_values: FileSecretValues | None = None,
        launches: Mapping[str, Launch] | None = None,
    ) -> None:
        self.gw = gw
        gw.pool_needed = self.ensure_batch_pool  # the batch runner's, at a batch's run
        # Launches the command line made, by templateId (`lockgate dev --git`: the venv's
        # python in the checkout, with hub.json's variables), taken as they are.
        self.launches = dict(launches or {})
        self.gateway_url = gateway_url  # the gateway as workers reach it
        self.base_dir = base_dir
        self.volumes_dir = volumes_dir or base_dir / ".lockgate" / "volumes"
        # Account secrets' values, given to workers as they start (`dev.secret_values`).
        self.secret_values = secret_values or FileSecretValues(self.volumes_dir.parent / SECRETS)
        self.python = python
        self.stop_grace_s = stop_grace_s
        self._endpoints: dict[str, LocalEndpoint] = {}
        self._lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()
        self._fetching: set[asyncio.Task] = set()  # model downloads before workers start
        self.models = ModelDownloads()
        self._closing = False
        self.logs = LocalLogs()  # each worker's recent output (`GET /v1/endpoints/{id}/logs`)
        self.releases = ReleaseStore(gw.registry.redis)
        self.builds = BuildStore(gw.registry.redis)
        # builds of sources: checkouts and environments under the data folder
        self.builder = LocalBuilder(
            self.builds, self.volumes_dir.parent / BUILDS, on_built=self._run_build,
            tester=self._test_build,
        )  # fmt: skip
        self._canaries: list[LocalWorkers] = []  # builds' canary workers (`dev.canary`)
        # What an endpoint with a source runs once a build of it completed (`_run_build`)
        # or a rollback chose one (`run_build`), in place of its template's command, and
        # that build (part of its releases' configuration); by endpoint id
        self._built: dict[str, tuple[Launch, RunningBuild]] = {}

    def job_api_url(self, endpoint_id: str) -> str:
        return f"{self.gw.settings.public_base_url()}/v2/{endpoint_id}/"

    async def _launch(self, template_id: str, base_dir: Path | None = None) -> Launch:
        """What an endpoint's `templateId` runs: a kept template, else a handler file or
        a worker command (`dev.launch`)."""
        if template_id in self.launches:
            return self.launches[template_id]
        template = await self._template(template_id)
        if template is not None:
            return self._template_launch(template_id, template)
        return launch_for(template_id, base_dir=base_dir or self.base_dir, python=self.python)

    async def _template(self, template_id: str) -> TemplateSpec | None:
        """The kept template `template_id` names; None for a handler file or command."""
        stored = await self.gw.registry.get_template(template_id) if template_id else None
        return template_of(stored) if stored is not None else None

    def _template_launch(self, template_id: str, spec: TemplateSpec) -> Launch:
        words = [*spec.command, *spec.args]
        return template_launch(
            template_id, words, spec.env, base_dir=self.base_dir, python=self.python
        )

    def _find(self, endpoint_id: str) -> LocalEndpoint:
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            raise EndpointNotFound(endpoint_id)
        return ep

    # -- the ControlPlane protocol --------------------------------------------------------

    async def create(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        async with self._lock:
            self._refuse_when_closing()
            if endpoint_id in self._endpoints:
                raise EndpointExists(endpoint_id)
            launch = await self._launch(spec.templateId)
            await self._start(endpoint_id, spec, launch, ORIGIN_API)
        return await self.get(endpoint_id)

    async def get(self, endpoint_id: str) -> EndpointRecord:
        return await self._record(self._find(endpoint_id))

    async def page(self, query: EndpointQuery) -> EndpointPage:
        """Pages over the endpoints sorted by id; a cursor is the last id returned, so a
        page stays right however endpoints come and go between two pages."""
        endpoints = sorted(self._endpoints.values(), key=lambda ep: ep.id)
        rows = [(local_summary(ep), ep) for ep in endpoints]
        chosen, last = take(rows, query, query.cursor.after, query.limit)
        items = (
            [local_summary(ep) for ep in chosen]
            if query.summary
            else [await self._record(ep) for ep in chosen]
        )
        return EndpointPage(items, Cursor(after=last) if last else None)

    async def patch(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        """New settings take effect at once: limits rescale the running workers, a new
        `templateId` replaces them (the old ones finish their jobs in hand). The command
        line's endpoint remembers what was edited, for its next start (`apply`)."""
        async with self._lock:
            self._refuse_when_closing()
            ep = self._find(endpoint_id)
            edits = edited_fields(ep.spec, spec) if ep.origin == ORIGIN_CLI else {}
            if why := refused_edit(edits):
                raise UnusableSettings(why)
            launch = self._running(ep.id, spec, await self._launch(spec.templateId))
            ep.edits = {**ep.edits, **edits}
            await self._apply(ep, spec, launch, await self._template(spec.templateId))
        return await self.get(endpoint_id)

    def _running(self, endpoint_id: str, spec: EndpointSpec, launch: Launch) -> Launch:
        """What the endpoint runs with `spec`: its completed build while it keeps its source
        and template (its template's env over the build's command), else `launch`."""
        found = self._built.get(endpoint_id)
        built, running = found if found is not None else (None, None)
        if (
            built is None
            or not applies(spec.source, running)
            or (built.template_id != launch.template_id)
        ):
            self._built.pop(endpoint_id, None)  # a source or template changed: the template
            return launch
        return replace(built, env=launch.env)

    def _running_build(self, endpoint_id: str) -> RunningBuild | None:
        found = self._built.get(endpoint_id)
        return found[1] if found is not None else None

    async def _run_build(self, endpoint_id: str, build: Build, built: Built) -> None:
        """Run a completed build: a `GIT_BUILD` release, and the endpoint's workers
        replaced by the rolling rule (idle ones at once, busy ones after their job)."""
        async with self._lock:
            ep = self._endpoints.get(endpoint_id)
            source = source_of(ep.spec.source) if ep is not None else None
            if ep is None or self._closing or ep.launch is None or source is None:
                return
            if source.git.url != built.url:  # the source changed while it was built
                return
            template = await self._template(ep.spec.templateId)
            running = RunningBuild(
                buildId=build.id, url=built.url, folder=str(built.folder), command=built.command
            )
            self._built[endpoint_id] = (
                Launch(ep.spec.templateId, built.command, str(built.folder), ep.launch.env),
                running,
            )
            launch = self._running(endpoint_id, ep.spec, ep.launch)
            log.info("endpoint %s runs build %s (%s)", endpoint_id, build.id, build.commitHash)
            await self._apply(ep, ep.spec, launch, template)

    async def _test_build(
        self, endpoint_id: str, build: Build, built: Built, tests: HubTests, say: Say
    ) -> FailedTest | None:
        """Run a build's tests on a canary worker of its checkout (`dev.canary`): the
        endpoint's settings and template env, tests.json's `config.env` over it."""
        async with self._lock:
            ep = self._endpoints.get(endpoint_id)
            if ep is None or ep.launch is None or self._closing:
                raise BuildNotFound(build.id)  # deleted meanwhile: nothing to test for
            spec, env = ep.spec, dict(ep.launch.env) | env_for_tests(tests)
        folder, pairs = str(built.folder), tuple(sorted(env.items()))
        launch = Launch(spec.templateId, built.command, folder, pairs)

        started: list[LocalWorkers] = []

        def start(canary: str, canary_spec: EndpointSpec, sink: LineSink) -> LocalWorkers:
            unregistered = f"lgw_{secrets.token_urlsafe(24)}"  # each worker gets its own
            workers = self._workers(canary, launch, unregistered, canary_spec, 1, sink=sink)
            started.append(workers)
            self._canaries.append(workers)  # `kill` kills it too
            return workers

        try:
            return await run_canary(
                self.gw.registry, self.gw.store, self.gateway_url, build.id, spec, tests,
                start, say,
            )  # fmt: skip
        finally:
            self._canaries = [w for w in self._canaries if not any(w is s for s in started)]

    async def _apply(
        self, ep: LocalEndpoint, spec: EndpointSpec, launch: Launch, template: TemplateSpec | None
    ) -> None:
        """Bring a running endpoint to `spec` and `launch` (under the lock). A change of
        its container configuration is a release (a new version); its workers are then
        replaced: the old ones take nothing new, the idle ones exit at once, a busy one
        when its job (or its LB requests) is done, while the new ones start."""
        spec = spec.model_copy(update={"templateId": launch.template_id})
        config = config_of(spec, template, self._running_build(ep.id))
        released = bool(release_diff(ep.config, config))
        if released:
            ep.version = (await self.releases.record(ep.id, config, ep.version + 1)).version
        ep.config = config
        if ep.workers is None or launch != ep.launch or released:
            if ep.workers is not None:
                await ep.workers.withdraw()  # they take nothing new before this answers
            self._retire(ep)
            self._begin(ep, launch, spec)
        elif limits_of(spec) != limits_of(ep.spec):
            await ep.workers.rescale(limits_of(spec))
        batch_limits = limits_of(batch_pool_spec(spec))
        if ep.batch is not None and batch_limits != limits_of(batch_pool_spec(ep.spec)):
            await ep.batch.rescale(batch_limits)
        if ep.workers is not None:
            ep.workers.resume_window(float(spec.lbResumeWindowS))
        if ep.workers is not None and ep.workers.health is not None:
            ep.workers.health.startup_timeout_s = spec.startupTimeout  # from the next look
            ep.workers.threshold = spec.crashLoopThreshold
        ep.spec, ep.launch, ep.problem = spec, launch, ""
        ep.work_dir, ep.generation, ep.since = str(self.base_dir), ep.generation + 1, now()
        await self.gw.registry.put_endpoint(ep.id, ep.entry(self.job_api_url(ep.id)))
        await self._put_batch_entry(ep)

    async def restart_workers(self, endpoint_id: str) -> None:
        """Clear the endpoint's crash loop: its workers start again at once."""
        async with self._lock:
            ep = self._find(endpoint_id)
            if ep.workers is not None:
                await ep.workers.restart()

    async def stop_worker(self, endpoint_id: str, worker_id: str, *, restart: bool) -> bool:
        """Stop one worker process as a scale-down does (no new job; SIGTERM: the job in
        hand finishes, then it exits; it counts as no failed start). `restart`: a fresh
        worker starts in its place at once (the current pool's, unless a crash loop holds
        starts); without it the scaler starts another only if workersMin or the queue want
        one. False: no such running worker (or one stopping already)."""
        async with self._lock:
            ep = self._find(endpoint_id)
            for pool in _all_workers(ep):
                if worker_id not in pool.pool.active:
                    continue
                why = "restarted by request" if restart else "stopped by request"
                await pool.pool.stop_worker(worker_id, why)
                if restart and pool is ep.workers and pool.loop is None:
                    await pool.pool.start_worker()
                return True
            return False

    async def delete(self, endpoint_id: str) -> None:
        """Unregister (the gateway answers 404 at once), stop the workers, then remove the
        worker key, queued jobs and job history, as the operator's finalizer does."""
        async with self._lock:
            ep = self._endpoints.pop(endpoint_id, None)
            if ep is None:
                raise EndpointNotFound(endpoint_id)
            await self.gw.registry.delete_endpoint(endpoint_id)
        self.builder.forget(endpoint_id)
        self._built.pop(endpoint_id, None)
        pools = [*_all_workers(ep), *([ep.batch] if ep.batch is not None else [])]
        await asyncio.gather(*(w.stop(DELETE_GRACE_S) for w in pools))
        await self.gw.registry.delete_key(key_digest(ep.worker_key))
        await remove_batch_pool(self.gw, endpoint_id)
        removed = await self.gw.store.delete_endpoint_data(endpoint_id)
        self.logs.forget(endpoint_id)
        log.info("endpoint %s deleted with %d job(s)", endpoint_id, removed)

    def build_problem(self, build: RunningBuild) -> str | None:
        """A build runs here from its copy of the checkout (`dev.builder`): gone once
        newer builds replaced it, and never made for a cluster's build."""
        if not build.folder or not build.command:
            return f"build {build.buildId} was not built by lockgate dev: it has no checkout"
        if not Path(build.folder).is_dir() or not Path(build.command[0]).exists():
            return (
                f"build {build.buildId}'s checkout is no longer kept (lockgate dev keeps "
                f"the newest {RUNS_KEPT} completed builds of an endpoint): start a new "
                "build of that commit instead (POST …/builds with its ref)"
            )
        return None

    async def run_build(self, endpoint_id: str, build: RunningBuild | None) -> None:
        """Run `build` again from its copy of the checkout (None: the template's
        command), by the rolling rule, as a release; nothing when it runs already."""
        async with self._lock:
            self._refuse_when_closing()
            ep = self._find(endpoint_id)
            if self._running_build(endpoint_id) == build:
                return
            if build is not None and (why := self.build_problem(build)):
                raise UnusableSettings(why)
            base = await self._launch(ep.spec.templateId)
            if build is None:
                self._built.pop(endpoint_id, None)
            else:
                built = Launch(base.template_id, build.command, str(build.folder), base.env)
                self._built[endpoint_id] = (built, build)
            launch = self._running(endpoint_id, ep.spec, base)
            await self._apply(ep, ep.spec, launch, await self._template(ep.spec.templateId))

    async def start_build(self, endpoint_id: str, ref: str | None, reason: BuildReason) -> Build:
        """Record the build PENDING and run it here (`dev.builder`)."""
        record = await self.get(endpoint_id)
        build = await build_ops.ask(self.builds, record, ref, reason)
        source = source_of(record.source)
        assert source is not None  # `ask` refused an endpoint without one
        self.builder.start(endpoint_id, source.git, build)
        return build

    async def cancel_build(self, endpoint_id: str, build_id: str) -> Build:
        build = await build_ops.cancel(self.builds, endpoint_id, build_id)
        self.builder.cancel(endpoint_id, build_id)
        return build

    async def build_logs(self, endpoint_id: str, build_id: str, read: LogRead) -> LogBatch:
        return await build_ops.read_log(self.builds, endpoint_id, build_id, read)

    async def create_template(self, template_id: str, spec: TemplateSpec) -> TemplateSpec:
        registry = self.gw.registry
        async with self._lock:
            if await registry.get_template(template_id) is not None:
                raise TemplateExists(template_id)
            entry = {**spec.model_dump(mode="json"), "createdAt": now()}
            await registry.put_template(template_id, entry)
        return spec

    async def get_template(self, template_id: str) -> TemplateSpec:
        stored = await self.gw.registry.get_template(template_id)
        if stored is None:
            raise TemplateNotFound(template_id)
        return template_of(stored)

    async def list_templates(self) -> dict[str, TemplateSpec]:
        stored = await self.gw.registry.list_templates()
        return {i: template_of(entry) for i, entry in sorted(stored.items())}

    async def replace_template(self, template_id: str, spec: TemplateSpec) -> TemplateSpec:
        """Keep the new fields, then replace the workers of every endpoint using it whose
        command or env changed (the old ones finish their jobs in hand; queued jobs wait
        for the new ones). Refused, with nothing changed, when one could not run it."""
        registry = self.gw.registry
        async with self._lock:
            self._refuse_when_closing()
            stored = await registry.get_template(template_id)
            if stored is None:
                raise TemplateNotFound(template_id)
            users = [ep for ep in self._endpoints.values() if ep.spec.templateId == template_id]
            launches = [
                self._running(ep.id, ep.spec, self._template_launch(template_id, spec))
                for ep in users
            ]
            entry = {**spec.model_dump(mode="json"), "createdAt": stored.get("createdAt", now())}
            await registry.put_template(template_id, entry)
            for ep, launch in zip(users, launches, strict=True):
                await self._apply(ep, ep.spec, launch, spec)
        return spec

    async def delete_template(self, template_id: str) -> None:
        if not await self.gw.registry.delete_template(template_id):
            raise TemplateNotFound(template_id)

    # -- dev mode's own operations --------------------------------------------------------

    async def apply(
        self, endpoint_id: str, spec: EndpointSpec, named: Collection[str] = ()
    ) -> EndpointRecord:
        """The command line's endpoint: `spec`, with an earlier run's API edits of the
        fields the command line does not name (`named`) kept over it."""
        if endpoint_id in self._endpoints:
            return await self.patch(endpoint_id, spec)
        edits = kept_edits(await self.gw.registry.get_endpoint(endpoint_id), named)
        try:
            spec = EndpointSpec.model_validate({**spec.model_dump(mode="json"), **edits})
        except ValidationError as err:  # the edits do not fit the new command line
            log.warning("endpoint %s: earlier edits %s dropped: %s", endpoint_id, edits, err)
            edits = {}
        async with self._lock:
            self._refuse_when_closing()
            launch = await self._launch(spec.templateId)
            await self._start(endpoint_id, spec, launch, ORIGIN_CLI, edits=edits)
        return await self.get(endpoint_id)

    def edits_of(self, endpoint_id: str) -> dict:
        """The API edits the command line's endpoint keeps over the command line."""
        return dict(self._find(endpoint_id).edits)

    async def resume(self, *, skip: Collection[str] = ()) -> list[EndpointRecord]:
        """Start again the endpoints an earlier run created through the API (not those
        in `skip`). One whose handler is gone comes back Failed, saying why."""
        stored = await self.gw.registry.list_endpoints()
        async with self._lock:
            for endpoint_id, entry in sorted(stored.items()):
                if is_canary(entry):  # an earlier run stopped mid-test: its leftovers go
                    await remove_canary(self.gw.registry, self.gw.store, endpoint_id)
                    continue
                if entry.origin != ORIGIN_API or endpoint_id in skip:
                    continue
                try:
                    spec = entry.spec()
                except ValidationError as err:
                    log.warning("endpoint %s not resumed: %s", endpoint_id, err)
                    continue
                work_dir = Path(entry.workDir or self.base_dir)
                try:
                    launch, problem = await self._launch(spec.templateId, work_dir), ""
                except UnusableSettings as err:
                    launch, problem = None, str(err)
                ep = await self._start(
                    endpoint_id, spec, launch, ORIGIN_API, work_dir, problem,
                    version=entry.version or 1,
                )  # fmt: skip
                ep.created_at = entry.createdAt or ep.created_at
        return [await self.get(i) for i in sorted(stored) if i in self._endpoints]

    async def close(self) -> None:
        """Stop every endpoint's workers (they finish their jobs in hand) and forget their
        worker keys; registry entries stay, so queued jobs wait for the next run."""
        async with self._lock:
            self._closing = True  # no new workers from here on
        for task in self._fetching:
            task.cancel()  # a download under way goes on in its thread, unwaited
        await self.builder.close()
        for ep in self._endpoints.values():
            if ep.workers is not None:
                await ep.workers.halt()
            if ep.batch is not None:
                await ep.batch.halt()
        self.gw.drain()  # answer long-polls at once, so workers notice SIGTERM
        every = [w for ep in self._endpoints.values() for w in _all_workers(ep)]
        every += [ep.batch for ep in self._endpoints.values() if ep.batch is not None]
        await asyncio.gather(*(w.stop(self.stop_grace_s) for w in every))
        if self._background:
            await asyncio.wait(self._background)
        for ep in self._endpoints.values():
            await self.gw.registry.delete_key(key_digest(ep.worker_key))

    def pools(self, endpoint_id: str) -> list[LocalWorkers]:
        """The endpoint's worker pools: the current one, then those retiring (their
        workers finish their jobs on an older version); raises `EndpointNotFound`."""
        return _all_workers(self._find(endpoint_id))

    async def worker_versions(self, endpoint_id: str) -> dict[int, int]:
        """How many worker processes run each version of the endpoint: its current
        workers and the replaced ones still finishing what they hold."""
        counts: dict[int, int] = {}
        for workers in _all_workers(self._find(endpoint_id)):
            counts[workers.version] = counts.get(workers.version, 0) + workers.alive
        return {v: n for v, n in counts.items() if n}

    async def jobs_in_hand(self) -> int | None:
        """Jobs the workers of every endpoint hold now; None when Redis cannot say."""
        try:
            snaps = [await self.gw.store.snapshot(i) for i in self._endpoints]
        except Exception as err:  # Redis away: the stop line says less
            log.warning("jobs in hand not counted: %s", err)
            return None
        return sum(s.in_progress for s in snaps)

    def kill(self) -> None:
        """Stop at once (a second Ctrl-C): no new workers, no grace for the running ones,
        every worker killed with its process group. A `close` under way, or the next one,
        then finishes without waiting; the jobs the workers held go back to the queue."""
        self._closing = True
        self.stop_grace_s = 0.0
        for ep in self._endpoints.values():
            for workers in _all_workers(ep):
                workers.kill()
            if ep.batch is not None:
                ep.batch.kill()
        for canary in self._canaries:
            canary.kill()

    # -- internals ------------------------------------------------------------------------

    def _refuse_when_closing(self) -> None:
        if self._closing:
            raise Unavailable("lockgate dev is shutting down: no new workers")

    async def _record(self, ep: LocalEndpoint) -> EndpointRecord:
        url = self.job_api_url(ep.id)
        snap = await self.gw.store.snapshot(ep.id)
        workers = ep.workers.count if ep.workers else 0
        status = local_status(ep, url, snap, workers)
        return EndpointRecord(
            id=ep.id, jobApiUrl=url, status=status, version=ep.version,
            createdAt=ep.created_at, **ep.spec.model_dump(),
        )  # fmt: skip

    async def _start(
        self,
        endpoint_id: str,
        spec: EndpointSpec,
        launch: Launch | None,
        origin: str,
        work_dir: Path | None = None,
        problem: str = "",
        edits: dict | None = None,
        version: int = 1,
    ) -> LocalEndpoint:
        """Record its release (the first, or a new one when its configuration is not the
        newest release's: the command line's handler changed), register a new worker key
        and the endpoint, then start its workers."""
        if launch is not None:
            spec = spec.model_copy(update={"templateId": launch.template_id})
        worker_key = f"lgw_{secrets.token_urlsafe(24)}"
        ep = LocalEndpoint(
            endpoint_id, spec, origin, str(work_dir or self.base_dir), worker_key, launch, problem
        )
        ep.edits = dict(edits or {})
        ep.config = config_of(spec, await self._template(spec.templateId))
        ep.version = (await self.releases.record(endpoint_id, ep.config, version)).version
        registry = self.gw.registry
        record = {"name": f"dev-worker:{endpoint_id}", "scopes": ["workers"]}
        await registry.put_key(worker_key, {**record, "endpoints": [endpoint_id]})
        old = await registry.get_endpoint(endpoint_id)
        old_digest = old.workerKeyDigest if old is not None else None
        if old_digest and old_digest != key_digest(worker_key):
            await registry.delete_key(old_digest)  # an earlier run's key
        await registry.put_endpoint(endpoint_id, ep.entry(self.job_api_url(endpoint_id)))
        self._endpoints[endpoint_id] = ep
        ep.batches = has_batch_pool(spec) and await self.gw.batches.has_batches(endpoint_id)
        await self._put_batch_entry(ep)
        if launch is not None:
            self._begin(ep, launch, spec)
        return ep

    async def ensure_batch_pool(self, endpoint_id: str) -> None:
        """Make the endpoint's batch pool if it has none (the batch runner asks before it
        runs a batch; an endpoint that never had a batch has no pool, no registry entry
        and no workers for it): register it, and start its workers beside the endpoint's
        own (or with them, once they start)."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None or ep.batches or not has_batch_pool(ep.spec):
            return  # done already, the common case: no lock taken
        async with self._lock:
            if self._closing or self._endpoints.get(endpoint_id) is not ep or ep.batches:
                return
            ep.batches = True
            await self._put_batch_entry(ep)
            if ep.workers is not None and ep.launch is not None and ep.batch is None:
                self._start_batch_pool(ep, ep.launch, ep.spec)
            log.info("endpoint %s: its batch pool %s made", ep.id, batch_pool_id(ep.id))

    def _model_root(self, spec: EndpointSpec) -> Path:
        """Where its models are cached: its network volume folder, else the data dir."""
        if spec.networkVolumeId:
            return volume_dir(self.volumes_dir, spec.networkVolumeId)
        return self.volumes_dir.parent

    def _begin(self, ep: LocalEndpoint, launch: Launch, spec: EndpointSpec) -> None:
        """Start the endpoint's workers now, or once the account secrets its env refers
        to exist and its model references are cached."""
        ep.secrets = self._missing_secret(launch)
        if not spec.modelReferences and not ep.secrets:
            ep.models = ""
            ep.workers = self._workers(ep.id, launch, ep.worker_key, spec, ep.version)
            self._start_batch_pool(ep, launch, spec)
            return
        ep.models = MODELS_DOWNLOADING if spec.modelReferences else ""

        def current() -> bool:  # not deleted, edited or started meanwhile
            same = ep.spec == spec and ep.launch == launch and ep.workers is None
            return not self._closing and self._endpoints.get(ep.id) is ep and same

        async def fetch_then_start() -> None:
            if not await self._prepared(ep, launch, spec, current):
                return
            async with self._lock:
                if current():
                    ep.models = MODELS_READY if spec.modelReferences else ""
                    ep.workers = self._workers(ep.id, launch, ep.worker_key, spec, ep.version)
                    self._start_batch_pool(ep, launch, spec)

        task = asyncio.create_task(fetch_then_start(), name=f"lockgate-prepare-{ep.id}")
        self._fetching.add(task)
        task.add_done_callback(self._fetching.discard)

    async def _prepared(
        self, ep: LocalEndpoint, launch: Launch, spec: EndpointSpec, current: Callable[[], bool]
    ) -> bool:
        """Wait until the account secrets `launch`'s env refers to exist (no worker starts,
        nor crash-loops, meanwhile), then fetch the model references; whether the workers
        may start (`current()` still, and nothing failed: `ep` says what did)."""
        while ep.secrets:
            await asyncio.sleep(SECRET_POLL_S)
            if not current():
                return False
            ep.secrets = self._missing_secret(launch)
        try:
            env = self.secret_values.resolved_env(dict(launch.env))
            if spec.modelReferences:  # a gated model's token: the template's HF_TOKEN
                root = self._model_root(spec)
                await self.models.fetch(spec.modelReferences, root, env.get("HF_TOKEN"))
        except SecretMissing as err:  # its file removed by hand meanwhile: wait again
            ep.secrets = str(err)
            return current() and await self._prepared(ep, launch, spec, current)
        except ModelFetchFailed as err:
            log.warning("endpoint %s: %s", ep.id, err)
            if current():
                ep.models = str(err)
            return False
        return True

    def _missing_secret(self, launch: Launch) -> str:
        """Why the workers of `launch` cannot start yet ("": they can): the first account
        secret its env refers to that does not exist."""
        missing = self.secret_values.missing(dict(launch.env))
        return missing_problem(missing[0]) if missing else ""

    def _workers(
        self,
        endpoint_id: str,
        launch: Launch,
        worker_key: str,
        spec: EndpointSpec,
        version: int,
        sink: LineSink | None = None,
    ) -> LocalWorkers:
        defaults = {k: v for k, v in WORKER_DEFAULTS.items() if k not in os.environ}
        given = resource_env(spec, cpus_here=os.cpu_count() or 1, gpus_here=gpus_here())
        own = worker_env(self.gateway_url, endpoint_id, worker_key)
        if spec.networkVolumeId:  # a process cannot see /runpod-volume: the folder's path
            own[VOLUME_PATH_ENV] = str(volume_dir(self.volumes_dir, spec.networkVolumeId))
        if spec.modelReferences:
            own.update(cache_env(self._model_root(spec)))
        env = {**defaults, **dict(launch.env), **given, **own}  # a template's env first
        keys = WorkerKeys(self.gw.registry, endpoint_id)  # no process gets the shared key
        sink = sink or self.logs.sink(endpoint_id)  # a canary's: its build's log
        lb = LbWorkers(self.gw.store.redis) if spec.type == EndpointType.LB else None
        version = self._endpoints[endpoint_id].version if endpoint_id in self._endpoints else 1

        async def crash_loop_changed() -> None:  # the gateway's entry says it (`/run`)
            ep = self._endpoints.get(endpoint_id)
            if ep is not None and ep.workers is workers:
                await self.gw.registry.put_endpoint(ep.id, ep.entry(self.job_api_url(ep.id)))

        workers = LocalWorkers.start(
            self.gw.store, endpoint_id, launch, env, limits_of(spec), keys, sink,
            lb=lb, drain_s=float(spec.requestTimeoutS), version=version,
            env_at_start=self.secret_values.resolved_env,
            resume_window_s=float(spec.lbResumeWindowS),
            startup_timeout_s=spec.startupTimeout,
            threshold=spec.crashLoopThreshold,
            on_loop=crash_loop_changed,
        )  # fmt: skip
        return workers

    def _start_batch_pool(self, ep: LocalEndpoint, launch: Launch, spec: EndpointSpec) -> None:
        """Start the endpoint's batch pool beside its workers: the same launch, from zero
        workers up to its `batchWorkersMax`, on the hidden endpoint `batch-<id>`; none
        until the endpoint has batches (`ensure_batch_pool`)."""
        if not has_batch_pool(spec) or not ep.batches:
            return
        unregistered = f"lgw_{secrets.token_urlsafe(24)}"  # each worker gets its own
        pool = batch_pool_id(ep.id)
        ep.batch = self._workers(
            pool, launch, unregistered, batch_pool_spec(spec), ep.version,
            sink=self.logs.sink(ep.id),
        )  # fmt: skip

    async def _put_batch_entry(self, ep: LocalEndpoint) -> None:
        """Register (or remove) the endpoint's batch pool, once it has batches: hidden,
        never listed."""
        pool = batch_pool_id(ep.id)
        if has_batch_pool(ep.spec) and ep.batches:
            await self.gw.registry.put_endpoint(
                pool, batch_entry(pool, ep.spec, self.job_api_url(pool))
            )
        elif await self.gw.registry.get_endpoint(pool) is not None:
            await self.gw.registry.delete_endpoint(pool)

    def _retire(self, ep: LocalEndpoint) -> None:
        """Stop the endpoint's current workers in the background: each finishes what it
        holds (`replacement_grace_s` of its settings), the idle ones exit at once."""
        old, old_batch = ep.workers, ep.batch
        if old is None:
            return
        ep.workers, ep.batch = None, None
        ep.retiring.append(old)
        grace_s = max(self.stop_grace_s, replacement_grace_s(ep.spec))

        async def retire() -> None:
            if old_batch is not None:  # its batch jobs in hand finish, the rest wait
                await old_batch.withdraw()
            await asyncio.gather(
                old.stop(grace_s), *([old_batch.stop(grace_s)] if old_batch else [])
            )
            ep.retiring.remove(old)

        task = asyncio.create_task(retire(), name=f"lockgate-retire-{ep.id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _all_workers(ep: LocalEndpoint) -> list[LocalWorkers]:
    return [w for w in (ep.workers, *ep.retiring) if w is not None]
