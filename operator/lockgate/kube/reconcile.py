"""One reconcile of an Endpoint: validate it, find its Template, register it in Redis,
apply its workloads, then observe and compute its status.

Idempotent and level-based: the create/update/resume handlers, the periodic resync and
Template changes all call `reconcile`, and a second call with nothing changed writes
nothing. Transient failures (Redis or the API server unreachable) raise
`kopf.TemporaryError`; problems a person must fix become conditions, never a crash loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lockgate.kube import builds as build_jobs
from lockgate.kube import placement
from lockgate.kube.batch_pool import ensure_batch_pool
from lockgate.kube.canary import Canaries
from lockgate.kube.cluster import Cluster, ClusterError, WorkerKey
from lockgate.kube.controlplane import (
    BUILD_ANNOTATION,
    RESTART_ANNOTATION,
    VERSION_ANNOTATION,
    running_build_of,
    version_of,
)
from lockgate.kube.events import endpoint_event
from lockgate.kube.manifests.keys import key_digest_of
from lockgate.kube.manifests.lb import lb_network_policy
from lockgate.kube.manifests.names import (
    Owner,
    daemonset_name,
    deployment_name,
    network_policy_name,
    selector,
)
from lockgate.kube.manifests.rollout import rollout_strategy
from lockgate.kube.manifests.workloads import flashboot_daemonset, worker_deployment
from lockgate.kube.registry_record import registry_entry, scaled_externally
from lockgate.kube.scale_first import ScaleFirst
from lockgate.kube.settings import OperatorSettings
from lockgate.kube.status import (
    REGISTERED,
    SECRETS_ALLOWED,
    SPEC_VALID,
    TEMPLATE_FOUND,
    WORKLOADS_APPLIED,
    Activity,
    Check,
    Observed,
    crash_loop_check,
    endpoint_status,
    same_status,
)
from lockgate.kube.watched import WatchedWorkers
from lockgate.models import (
    ComputeType,
    EndpointSpec,
    EndpointType,
    TemplateSpec,
    describe_validation_error,
    podfields,
    secrets,
)
from lockgate.models.releases import ReleaseConfig, config_of
from lockgate.models.running_build import RunningBuild, worker_image
from lockgate.scaling.crashloop import still_holds
from lockgate.store import JobStore, Liveness, Registry, connect
from lockgate.store.batches import BatchStore
from lockgate.store.builds import BuildStore
from lockgate.store.keys import ENDPOINT_ID_RE
from lockgate.store.keys import batches as batches_key
from lockgate.store.registry import RegisteredIds, SharedIds
from lockgate.store.releases import ReleaseStore
from lockgate.timestamps import parse_time

Body = Mapping[str, Any]
Obj = Mapping[str, Any]  # a Kubernetes object as the API gives it
RETRY_DELAY_S = 5


@dataclass(frozen=True, slots=True)
class OwnedInputs:
    """What the rows of `OWNED_OBJECTS` read: whether an object is wanted, and its build."""

    owner: Owner
    spec: EndpointSpec
    template: TemplateSpec
    settings: OperatorSettings


@dataclass(frozen=True, slots=True)
class OwnedObject:
    """An object an Endpoint owns only while `wanted`: applied then (`build`), deleted
    otherwise (its `kind`, named by `name` from the endpoint id)."""

    kind: str
    name: Callable[[str], str]
    wanted: Callable[[OwnedInputs], bool]
    build: Callable[[OwnedInputs], Obj]


# The objects an Endpoint owns only while a setting wants them, applied or deleted by
# `apply_owned` in this order: a new kind of such object is a row here. (The worker
# Deployment and the worker-key Secret are always wanted and have steps of their own: the
# Deployment's replicas and rollout, the key's rotation.)
OWNED_OBJECTS: tuple[OwnedObject, ...] = (
    # pre-pulls the worker image on the nodes workers may use, while flashboot is on
    OwnedObject(
        "DaemonSet",
        daemonset_name,
        wanted=lambda w: w.spec.flashboot,
        build=lambda w: flashboot_daemonset(w.owner, w.spec, w.template, w.settings),
    ),
    # admits only gateway pods to a load-balancing endpoint's workers, when their labels
    # are known
    OwnedObject(
        "NetworkPolicy",
        network_policy_name,
        wanted=lambda w: w.spec.type == EndpointType.LB and bool(w.settings.lb_gateway_labels),
        build=lambda w: lb_network_policy(w.owner, w.template, w.settings),
    ),
)


@dataclass
class Context:
    """What every handler needs; kept in kopf's `memo`, never in module globals."""

    settings: OperatorSettings
    cluster: Cluster
    redis: Redis
    registry: Registry
    jobs: JobStore
    scaling: dict[str, Check] = field(default_factory=dict)  # endpoint id -> MetricsAvailable
    pods: dict[str, Check] = field(default_factory=dict)  # endpoint id -> WorkersHealthy
    # endpoint id -> `CrashLoop`, as its last registration found it (`_register`)
    crash_loops: dict[str, Check] = field(default_factory=dict)
    # One registration at a time per endpoint in this process: the worker key is never read
    # back, so two concurrent ones (a handler and the resync daemon) must not interleave.
    registering: dict[str, asyncio.Lock] = field(default_factory=dict)
    # One reconcile at a time per endpoint in this process: a resync (or a Template's
    # change) that read the Endpoint before a change (a rollback's build annotation) must
    # not write its Deployment after the change's own reconcile did, undoing it.
    converging: dict[str, asyncio.Lock] = field(default_factory=dict)
    # Uids of Endpoints cleaned up: a registration that comes after (a resync begun before
    # the delete) must not bring their registry entry and worker key back.
    forgotten: set[str] = field(default_factory=set)
    # What this process knows of objects it wrote, so a resync (level-based, no change
    # seen) makes no call that fails by design: the worker-key Secret's digest by Endpoint
    # uid (created, or found to exist, with that key), whose Secret a resync checks with a
    # dry-run update (no create answered 409); and, in `absent`, which of an Endpoint's
    # optional objects (`OWNED_OBJECTS`) are known absent (no delete answered 404). An
    # Endpoint's change, or a restart, checks both the full way again.
    confirmed_keys: dict[str, str] = field(default_factory=dict)
    # Templates as kopf's watch last delivered them, by (namespace, name): a resync reads
    # its Endpoint's Template here instead of with a GET (`track_template` keeps it).
    templates: dict[tuple[str, str], Obj] = field(default_factory=dict)
    # (namespace, Secret names) a Template handed workers and `check_secrets` allowed: a
    # resync does not read them again (a refused set is read again at every resync, so
    # labelling the Secret is enough to go on).
    secrets_allowed: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    # Endpoint uid -> (its container configuration, its version) as last recorded, so a
    # resync with nothing changed reads no release from Redis (`settle_release`).
    released: dict[str, tuple[ReleaseConfig, int]] = field(default_factory=dict)
    # Endpoint uid -> its optional objects (rows of `OWNED_OBJECTS`) known absent.
    absent: dict[str, set[OwnedObject]] = field(default_factory=dict)
    # Endpoint uid -> (generation, running build) its batch pool was made or updated for
    # (`kube.batch_pool`): a resync with nothing changed makes no call for it.
    batch_pools: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    builds: BuildStore | None = None  # `build_store()`
    canaries: Canaries | None = None  # `canary_tests()`
    following: build_jobs.Following | None = None  # `build_following()`
    # Worker Deployments and pods as kopf's watches deliver them (`kube.watched`); None
    # outside kopf (tests that run the scaler alone), and not `ready` until kopf filled it.
    workers: WatchedWorkers | None = None
    # Told of each worker pod the watch delivers (not deletions), while a scaler term runs
    # here (`ScalingLoop.worker_pod`: a load-balancing worker is routed as it starts).
    on_worker_pod: Callable[[Obj], None] | None = None
    # What runs beside kopf (the scaler, an in-process management API), each stopped by
    # `stop_beside` (apps/operator.py registers them).
    beside: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Endpoints woken by a job whose scale decision is not yet applied: the scaler's
    # reports and the resyncs wait for them (`kube.scale_first`).
    scale_first: ScaleFirst = field(default_factory=ScaleFirst)
    resyncs_ended: int = 0  # Endpoints' resync daemons stopped (`handlers.DaemonEnds`)
    # The registered ids, read once per half resync period for every Endpoint's resync.
    registered: RegisteredIds = field(init=False)
    # The endpoints with a running batch, read as seldom: an Endpoint at rest whose batch
    # pool is not made yet is resynced at once (`batch_pool_due`).
    running_batches: SharedIds = field(init=False)
    releases: ReleaseStore = field(init=False)

    def __post_init__(self) -> None:
        self.registered = RegisteredIds(self.registry, self.settings.resync_s / 2)
        self.running_batches = SharedIds(
            BatchStore(self.redis).running_endpoints, self.settings.resync_s / 2
        )
        self.releases = ReleaseStore(self.redis)

    @classmethod
    def open(cls, settings: OperatorSettings, cluster: Cluster) -> Context:
        redis = connect(settings, max_connections=32)
        liveness = Liveness(heartbeat_timeout_ms=int(settings.heartbeat_timeout_s * 1000))
        return cls(settings, cluster, redis, Registry(redis), JobStore(redis, liveness=liveness))

    async def stop_beside(self) -> None:
        """Stop what runs beside kopf, before kopf's own shutdown (its cleanup handler):
        kopf gives the tasks it did not start 5 s to end by themselves, then cancels them,
        so an operator told to stop (a rollout, an uninstall) would wait that long."""
        stops, self.beside = self.beside, []
        for stop in stops:
            await stop()

    def build_store(self) -> BuildStore:
        """The builds' records (kube/builds.py), made at first use."""
        if self.builds is None:
            self.builds = BuildStore(self.redis)
        return self.builds

    def build_following(self) -> build_jobs.Following:
        """What this process keeps of the build Jobs it follows (kube/builds.py: a lock per
        build, the timer per unfinished Job), made at first use; stopped with what runs
        beside kopf."""
        if self.following is None:
            self.following = build_jobs.Following()
            self.beside.append(self.following.stop)
        return self.following

    def canary_tests(self) -> Canaries:
        """The builds tested on a canary in this process (kube/canary.py), made at first
        use; stopped with what runs beside kopf."""
        if self.canaries is None:
            self.canaries = Canaries(
                self.cluster, self.build_store(), self.registry, self.jobs,
                self.settings.gateway_url,
            )  # fmt: skip
            self.beside.append(self.canaries.stop)
        return self.canaries

    async def close(self) -> None:
        await self.redis.aclose()


def owner_of(body: Body) -> Owner:
    meta = body["metadata"]
    created = meta.get("creationTimestamp") or ""
    return Owner(meta["name"], meta["namespace"], meta["uid"], created=str(created))


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the steps, each ending in a condition -------------------------------------------------


def validate(name: str, raw: Mapping[str, Any]) -> tuple[EndpointSpec | None, Check]:
    """The spec, or a fatal `SpecValid` condition naming what to fix. The CRD schema checks
    types and bounds; this also checks what Kubernetes 1.20 cannot (`workersMin <= workersMax`)."""
    if not ENDPOINT_ID_RE.fullmatch(name):
        message = (
            f"metadata.name {name!r} is not a valid endpoint id: use at most 63 lowercase "
            "letters, digits and '-', starting and ending with a letter or digit"
        )
        return None, Check(SPEC_VALID, False, "InvalidName", message, fatal=True)
    try:
        spec = EndpointSpec.model_validate(dict(raw))
    except ValidationError as err:
        message = "spec." + describe_validation_error(err).replace("; ", "; spec.")
        return None, Check(SPEC_VALID, False, "InvalidSpec", message, fatal=True)
    return spec, Check(SPEC_VALID, True, "Valid", "")


async def find_template(
    ctx: Context, namespace: str, name: str
) -> tuple[TemplateSpec | None, Check]:
    """The Template the spec names, or a `TemplateFound` condition saying what is missing:
    as kopf's watch last delivered it, when it did (else a GET: a Template created a moment
    ago). A Template's change re-reconciles its Endpoints (`handlers.roll_template_users`)."""
    if not name:
        message = "spec.templateId is empty: name a Template in this namespace"
        return None, Check(TEMPLATE_FOUND, False, "NoTemplate", message)
    obj = ctx.templates.get((namespace, name))
    if obj is None:
        obj = await ctx.cluster.get_template(namespace, name)
    if obj is None:
        message = (
            f"Template {name!r} not found in namespace {namespace!r}: "
            "create it, or point spec.templateId at an existing one"
        )
        return None, Check(TEMPLATE_FOUND, False, "TemplateNotFound", message)
    try:
        template = TemplateSpec.model_validate(obj.get("spec") or {})
    except ValidationError as err:
        message = f"Template {name!r}: spec.{describe_validation_error(err)}"
        return None, Check(TEMPLATE_FOUND, False, "TemplateInvalid", message, fatal=True)
    return template, Check(TEMPLATE_FOUND, True, "Found", f"Template {name!r}")


async def check_secrets(
    ctx: Context, namespace: str, template: TemplateSpec, template_name: str, *, steady: bool
) -> Check:
    """`SecretsAllowed`: every Secret the Template hands workers (`secretEnv`,
    `envFromSecrets`, the account secrets its `env` refers to) carries
    `lockgate.dev/worker-secret: "true"` and is not lockgate's own (by name, or by its
    `app.kubernetes.io/part-of: lockgate` label); else False naming the first refused and
    where the Template names it. One metadata-only GET per Secret."""
    names = tuple(template.worker_secrets())
    if steady and (namespace, names) in ctx.secrets_allowed:
        return Check(SECRETS_ALLOWED, True, "Allowed", "")
    accounts = {secrets.object_name(n): n for n in template.account_secrets().values()}
    for name in names:
        problem = podfields.lockgate_secret_problem(name, ctx.settings.reserved_secrets)
        if problem is None:
            meta = await ctx.cluster.read_metadata("Secret", namespace, name)
            labels = None if meta is None else (meta.get("labels") or {})
            problem = podfields.worker_secret_problem(name, labels)
            if meta is None and name in accounts:
                problem = secrets.missing_problem(accounts[name])
        if problem is not None:
            ctx.secrets_allowed.discard((namespace, names))
            where = ", ".join(template.secret_uses(name))
            message = f"Template {template_name!r} ({where}): {problem}"
            return Check(SECRETS_ALLOWED, False, "SecretRefused", message)
    ctx.secrets_allowed.add((namespace, names))
    return Check(SECRETS_ALLOWED, True, "Allowed", "")


def key_may_rotate(created: str, at: datetime, settle_s: float) -> bool:
    """Whether a worker-key Secret whose digest nobody knows may get a new key: not while
    its Endpoint is younger than `settle_s`, when a concurrent reconcile (the resync
    daemon, another replica) may have created it and not yet registered its digest."""
    born = parse_time(created)
    return born is None or (at - born).total_seconds() >= settle_s


async def deployed_key_digest(ctx: Context, owner: Owner) -> str | None:
    """The worker key's digest as the worker Deployment remembers it (an annotation): as
    kopf watches it once its index is filled, else read. (A Deployment created a moment
    ago and not yet delivered belongs to an Endpoint too young for its key to rotate,
    `key_may_rotate`: that reconcile retries.)"""
    if ctx.workers is not None and ctx.workers.ready:
        deployment = ctx.workers.deployment(owner.namespace, owner.name)
    else:
        name = deployment_name(owner.name)
        deployment = await ctx.cluster.read("Deployment", owner.namespace, name)
    return key_digest_of(deployment) if deployment else None


def restart_requested_ms(annotations: Mapping[str, str] | None) -> int | None:
    """When a restart of the workers was last asked (`RESTART_ANNOTATION`), epoch ms; None
    when never, or the value is not a time."""
    when = parse_time((annotations or {}).get(RESTART_ANNOTATION))
    return None if when is None else int(when.timestamp() * 1000)


async def register(
    ctx: Context,
    owner: Owner,
    spec: EndpointSpec,
    *,
    external_scaler: bool = False,
    steady: bool = False,
    rest: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> tuple[str | None, Check]:
    """Register the worker key and the endpoint in Redis; returns the key's digest.
    `steady` (a resync): a worker key this process confirmed is checked with a dry-run
    update only; `rest` (a resync of an Endpoint at rest, with no pod to need it): not at
    all (it is checked again once the Endpoint leaves its rest)."""
    async with ctx.registering.setdefault(owner.name, asyncio.Lock()):
        if owner.uid in ctx.forgotten:
            return None, Check(REGISTERED, False, "Deleted", "the Endpoint was deleted")
        return await _register(
            ctx, owner, spec, external_scaler=external_scaler, steady=steady, rest=rest,
            meta=meta or {},
        )  # fmt: skip


async def _register(
    ctx: Context,
    owner: Owner,
    spec: EndpointSpec,
    *,
    external_scaler: bool,
    steady: bool,
    rest: bool = False,
    meta: Mapping[str, Any],
) -> tuple[str | None, Check]:
    entry = await ctx.registry.get_endpoint(owner.name)
    if entry is not None and entry.namespace not in (None, owner.namespace):
        message = (
            f"endpoint id {owner.name!r} is already used by an Endpoint in namespace "
            f"{entry.namespace!r}: endpoint ids are cluster-wide, choose another name"
        )
        return None, Check(REGISTERED, False, "EndpointIdTaken", message, fatal=True)
    known = (entry.workerKeyDigest if entry else None) or await deployed_key_digest(ctx, owner)
    settle_s = ctx.settings.worker_key_settle_s
    may_rotate = key_may_rotate(owner.created, datetime.now(UTC), settle_s)
    confirmed = steady and known and ctx.confirmed_keys.get(owner.uid) == known
    if confirmed and (rest or await ctx.cluster.worker_key_exists(owner)):
        worker_key = WorkerKey(known, None)
    else:
        worker_key = await ctx.cluster.worker_key(owner, known, may_rotate=may_rotate)
    digest = worker_key.digest
    ctx.confirmed_keys[owner.uid] = digest
    record = {
        "name": f"worker:{owner.namespace}/{owner.name}",
        "scopes": ["workers"],
        "endpoints": [owner.name],
    }
    if worker_key.new_key is not None:
        await ctx.registry.put_key(worker_key.new_key, record)
    elif await ctx.registry.get_key(digest) != record:
        await ctx.registry.put_key_digest(digest, record)
    wanted = registry_entry(
        owner,
        spec,
        key_digest=digest,
        job_api_url=ctx.settings.job_api_url(owner.name),
        external_scaler=external_scaler,
        crash_loop=still_holds(
            entry.crashLoop if entry is not None else None,
            version=version_of({"metadata": meta}),
            restart_at_ms=restart_requested_ms(meta.get("annotations")),
        ),
    )
    ctx.crash_loops[owner.name] = crash_loop_check(
        wanted.crashLoop, spec.crashLoopThreshold, owner.name
    )
    if entry != wanted:
        old_digest = entry.workerKeyDigest if entry else None
        if old_digest and old_digest != digest:
            await ctx.registry.delete_key(old_digest)
        await ctx.registry.put_endpoint(owner.name, wanted)
    message = "the gateway accepts jobs for this endpoint"
    return digest, Check(REGISTERED, True, "Registered", message)


async def choose_gpu_type(
    ctx: Context, owner: Owner, spec: EndpointSpec, annotations: Mapping[str, str] | None
) -> placement.Choice | None:
    """The GPU type the workers require now (`kube.placement`), from their pods'
    scheduling; a change is recorded on the Endpoint (annotations) and told in an Event.
    None for endpoints with fewer than two GPU types (nothing to choose)."""
    if spec.computeType != ComputeType.GPU or len(set(spec.gpuTypeIds)) < 2:
        return None
    # Read afresh: a body from before this operator's last choice would undo it.
    fresh = await ctx.cluster.get_endpoint(owner.namespace, owner.name)
    if fresh is not None:
        annotations = fresh["metadata"].get("annotations")
    previous = placement.from_annotations(annotations)
    workers = ",".join(f"{k}={v}" for k, v in selector(owner.name, "worker").items())
    pods = await ctx.cluster.list_objects("Pod", owner.namespace, workers)
    settings = ctx.settings
    choice = placement.choose(
        spec.gpuTypeIds, previous, map(placement.pod_scheduling, pods),
        now=datetime.now(UTC).replace(microsecond=0),
        fallback_s=settings.gpu_fallback_s, retry_first_s=settings.gpu_retry_first_s,
    )  # fmt: skip
    if choice != previous:
        patch = {"metadata": {"annotations": choice.annotations()}}
        await ctx.cluster.patch_endpoint(owner.namespace, owner.name, patch)
        message = choice.message(spec.gpuTypeIds)
        await ctx.cluster.create_event(endpoint_event(owner, choice.reason, message, now=now()))
    return choice


async def settle_release(
    ctx: Context,
    owner: Owner,
    body: Body,
    spec: EndpointSpec,
    template: TemplateSpec,
    running: RunningBuild | None = None,
) -> int:
    """The version the workers of this pass run. A configuration the newest release does
    not have (a `kubectl edit`, a Template applied) is recorded as a new release, and the
    Endpoint's `lockgate.dev/version` raised; one the management API recorded already (or
    is about to: it raised the annotation first) is not recorded twice
    (`ReleaseStore.record`). What is recorded is read afresh (the Endpoint and its
    Template by GET), never from a watch that may lag: a pass on a stale Template would
    otherwise record the old configuration back as a new release. The first release (a
    new Endpoint) is recorded as this pass sees it, reading nothing the watches deliver.
    `running`: the build the workers run (`kube.builds.take_completed`), part of the
    configuration (a build taken is a `GIT_BUILD` release)."""
    config, known = config_of(spec, template, running), version_of(body)
    if ctx.released.get(owner.uid) == (config, known):
        return known
    newest = await ctx.releases.newest(owner.name)
    if newest is None:  # the first release (a new Endpoint): nothing older to get wrong
        newest = await ctx.releases.record(owner.name, config, known)
    elif newest.config != config:
        fresh = await _fresh_config(ctx, owner)
        if fresh is None:
            return known  # deleted, or not valid now: the next pass decides
        if fresh[0] != config:  # this pass is stale: the change that made it so comes next
            return known
        newest = await ctx.releases.record(owner.name, *fresh)
    version = max(known, newest.version)
    if version != known:
        patch = {"metadata": {"annotations": {VERSION_ANNOTATION: str(version)}}}
        await ctx.cluster.patch_endpoint(owner.namespace, owner.name, patch)
    ctx.released[owner.uid] = (config, version)
    return version


async def _fresh_config(ctx: Context, owner: Owner) -> tuple[ReleaseConfig, int] | None:
    """The Endpoint's configuration and version as the API server has them now."""
    body = await ctx.cluster.get_endpoint(owner.namespace, owner.name)
    if body is None or body["metadata"].get("uid") != owner.uid:
        return None
    spec, _ = validate(owner.name, body.get("spec") or {})
    if spec is None:
        return None
    obj = await ctx.cluster.get_template(owner.namespace, spec.templateId)
    try:
        template = TemplateSpec.model_validate((obj or {}).get("spec") or {})
    except ValidationError:
        return None
    return config_of(spec, template, running_build_of(body)), version_of(body)


async def apply_workloads(
    ctx: Context,
    owner: Owner,
    spec: EndpointSpec,
    template: TemplateSpec,
    template_name: str,
    digest: str,
    annotations: Mapping[str, str] | None = None,
    *,
    steady: bool = False,
    created: bool = False,
    version: int = 1,
) -> tuple[Check | None, Obj]:
    """The worker Deployment (on the GPU type `choose_gpu_type` picks), the flashboot
    DaemonSet while flashboot is on, and a load-balancing endpoint's NetworkPolicy when the
    gateway's pod labels are set (`OWNED_OBJECTS`); returns the `GPUTypeSelected` condition, if
    any, and the Deployment as the API server has it (its status read without a second
    GET). `steady` (a resync): an optional object this process knows is absent is not
    deleted again. `created` (the create handler): none exists yet, nothing to delete (one
    left by a deleted namesake goes with its owner, by garbage collection)."""
    if created:
        ctx.absent[owner.uid] = set(OWNED_OBJECTS)
    choice = await choose_gpu_type(ctx, owner, spec, annotations)
    watching = ctx.workers is not None and ctx.workers.ready
    deployed = ctx.workers.deployment(owner.namespace, owner.name) if watching else None
    deployment = worker_deployment(
        owner,
        spec,
        template,
        template_name,
        ctx.settings,
        replicas=spec.initial_workers,
        key_revision=digest,
        gpu_type=choice.gpu_type if choice else None,
        version=version,
        strategy=rollout_strategy(deployed, version),
    )
    known, absent = None, False
    if watching:
        known, absent = (deployed if steady else None), deployed is None
    applied = await ctx.cluster.apply(deployment, known, absent=absent)
    inputs = OwnedInputs(owner, spec, template, ctx.settings)
    await apply_owned(ctx, inputs, trust_absent=steady or created)
    if choice is None:
        return None, applied
    check = Check(placement.CONDITION, True, choice.reason, choice.message(spec.gpuTypeIds))
    return check, applied


async def apply_owned(ctx: Context, inputs: OwnedInputs, *, trust_absent: bool) -> None:
    """Apply each of `OWNED_OBJECTS` the Endpoint wants, delete the others; `trust_absent`: one
    this process knows is absent (`Context.absent`) is not deleted again."""
    owner = inputs.owner
    absent = ctx.absent.setdefault(owner.uid, set())
    for row in OWNED_OBJECTS:
        if row.wanted(inputs):
            absent.discard(row)
            await ctx.cluster.apply(row.build(inputs))
        elif not (trust_absent and row in absent):
            await ctx.cluster.delete(row.kind, owner.namespace, row.name(owner.name))
            absent.add(row)


async def activity(ctx: Context, endpoint_id: str) -> Activity:
    snap = await ctx.jobs.snapshot(endpoint_id)
    return Activity(
        idle=snap.workers_idle,
        running=snap.workers_running,
        in_queue=snap.in_queue + snap.in_queue_low,
        in_progress=snap.in_progress,
    )


# -- the whole reconcile -------------------------------------------------------------------


async def _converge(
    ctx: Context,
    owner: Owner,
    body: Body,
    *,
    steady: bool = False,
    rest: bool = False,
    created: bool = False,
) -> tuple[list[Check], bool, Obj | None]:
    """Run the steps in order, stopping at the first one that cannot pass; also says
    whether the endpoint is registered (so its job counts are its own), and gives the
    worker Deployment when it was applied."""
    spec, check = validate(owner.name, body.get("spec") or {})
    checks = [check]
    if spec is None:
        return checks, False, None
    # builds asked for or cancelled (kube/builds.py): their Jobs, whatever the template
    await build_jobs.sync_endpoint(
        ctx.cluster, ctx.build_store(), ctx.settings, owner, spec, ctx.build_following(),
        ctx.canary_tests(),
    )  # fmt: skip
    template, check = await find_template(ctx, owner.namespace, spec.templateId)
    checks.append(check)
    if template is None:
        return checks, False, None
    check = await check_secrets(ctx, owner.namespace, template, spec.templateId, steady=steady)
    checks.append(check)
    if not check.ok:
        return checks, False, None
    external = scaled_externally(body["metadata"].get("annotations"))
    digest, check = await register(
        ctx, owner, spec, external_scaler=external, steady=steady, rest=steady and rest,
        meta=body["metadata"],
    )  # fmt: skip
    checks.append(check)
    if digest is None:
        return checks, False, None
    try:
        meta = body["metadata"]
        # a completed build taken (or the one taken before): the workers run its digest
        running = await build_jobs.take_completed(ctx.cluster, ctx.build_store(), owner, spec, body)
        version = await settle_release(ctx, owner, body, spec, template, running)
        image = worker_image(template.image, spec.source, running)
        workload = (
            template if image == template.image else template.model_copy(update={"image": image})
        )
        gpu, deployment = await apply_workloads(
            ctx, owner, spec, workload, spec.templateId, digest, meta.get("annotations"),
            steady=steady, created=created, version=version,
        )  # fmt: skip
    except ClusterError as err:
        if err.status not in (400, 422):
            raise  # transient: retried
        message = f"the API server refused the workers: {err}"
        checks.append(Check(WORKLOADS_APPLIED, False, "Rejected", message, fatal=True))
        return checks, True, None
    checks.append(Check(WORKLOADS_APPLIED, True, "Applied", ""))
    seen = _pool_version(meta)
    # its batch pool (kube/batch_pool.py) once it has batches (none: no pool, no API call);
    # made or updated once per change
    if ctx.batch_pools.get(owner.uid) != seen and await ctx.redis.exists(batches_key(owner.name)):
        await ensure_batch_pool(ctx.cluster, dict(body))
        ctx.batch_pools[owner.uid] = seen
    return [*checks, *([gpu] if gpu else [])], True, deployment


@contextlib.asynccontextmanager
async def _transient_errors():
    """Unreachable Redis or API server: retry later, as kopf does with TemporaryError."""
    try:
        yield
    except RedisError as err:
        raise kopf.TemporaryError(f"Redis unavailable: {err}", delay=RETRY_DELAY_S) from err
    except ClusterError as err:
        raise kopf.TemporaryError(f"Kubernetes API: {err}", delay=RETRY_DELAY_S) from err


async def reconcile(
    body: Body, ctx: Context, *, steady: bool = False, rest: bool = False, created: bool = False
) -> dict[str, Any]:
    """Bring the Endpoint's objects and registry entry in line; return its new status.
    `steady`: a resync, no change seen (see `Context.confirmed_keys`); `rest`: of an
    Endpoint at rest, or a status refresh that needs no check of the worker-key Secret;
    `created`: the Endpoint's first reconcile (no object of its own can exist yet)."""
    owner = owner_of(body)
    async with ctx.converging.setdefault(owner.name, asyncio.Lock()), _transient_errors():
        checks, registered, deployment = await _converge(
            ctx, owner, body, steady=steady, rest=rest, created=created
        )
        if deployment is None:
            name = deployment_name(owner.name)
            deployment = await ctx.cluster.read("Deployment", owner.namespace, name)
    async with _transient_errors():
        counts = await activity(ctx, owner.name) if registered else Activity()
    observed = Observed(
        generation=int(body["metadata"].get("generation") or 0),
        checks=checks,
        deployment=deployment,
        activity=counts,
        scaling=ctx.scaling.get(owner.name),
        pods=ctx.pods.get(owner.name),
        crash_loop=ctx.crash_loops.get(owner.name) if registered else None,
    )
    return endpoint_status(
        observed,
        endpoint_id=owner.name,
        job_api_url=ctx.settings.job_api_url(owner.name),
        previous=body.get("status"),
        now=now(),
    )


async def still_registered(ctx: Context, body: Body) -> bool:
    """Whether the Endpoint's registry entry is still in Redis (a flushed Redis: no), as
    the shared read of every registered id says (at most half a resync period old)."""
    async with _transient_errors():
        return await ctx.registered.has(body["metadata"]["name"])


def _pool_version(meta: Mapping[str, Any]) -> tuple[int, str | None]:
    """What an Endpoint's batch pool is made for: its generation and running build."""
    return int(meta.get("generation") or 0), (meta.get("annotations") or {}).get(BUILD_ANNOTATION)


async def batch_pool_due(ctx: Context, body: Body) -> bool:
    """Whether the Endpoint has a running batch and this process did not make (or update)
    its batch pool for what it is now: then a resync may not rest (the pool is made by a
    full one), or an idle endpoint's first batch would wait `resync_rest_s`."""
    meta = body["metadata"]
    if ctx.batch_pools.get(meta["uid"]) == _pool_version(meta):
        return False
    async with _transient_errors():
        return await ctx.running_batches.has(meta["name"])


async def refresh(
    ctx: Context, body: Body, *, steady: bool = False, rest: bool = False
) -> dict[str, Any]:
    """Reconcile and write the status through the API (outside an Endpoint's own handler),
    only when it changed; returns the status."""
    status = await reconcile(body, ctx, steady=steady, rest=rest)
    if not same_status(body.get("status"), status):
        meta = body["metadata"]
        async with _transient_errors():
            await ctx.cluster.patch_endpoint_status(meta["namespace"], meta["name"], status)
    return status


async def template_users(ctx: Context, namespace: str, template_name: str) -> list[Body]:
    """The live Endpoints of a namespace that name this Template."""
    async with _transient_errors():
        items = await ctx.cluster.list_endpoints(namespace)
    return [
        ep
        for ep in items
        if (ep.get("spec") or {}).get("templateId") == template_name
        and not ep["metadata"].get("deletionTimestamp")
    ]


async def clean_up(ctx: Context, name: str, namespace: str, uid: str = "") -> int:
    """Forget a deleted Endpoint: registry entry, worker key, queued jobs and job history.
    Kubernetes objects go by owner reference. Returns how many jobs were removed. The worker
    key's digest comes from the registry and the worker Deployment, never from its Secret.
    Under the endpoint's registering lock, and `uid` remembered as forgotten: a registration
    in flight (which read the entry before it went) or one that comes after (a resync begun
    before the delete) would otherwise put the worker key or the entry back."""
    owner = Owner(name=name, namespace=namespace, uid="")
    lock = ctx.registering.setdefault(name, asyncio.Lock())
    async with lock, _transient_errors():
        if uid:
            ctx.forgotten.add(uid)
            ctx.confirmed_keys.pop(uid, None)
            ctx.absent.pop(uid, None)
            ctx.released.pop(uid, None)
        entry = await ctx.registry.get_endpoint(name)
        if entry is not None and entry.namespace not in (None, namespace):
            return 0  # the id belongs to another namespace's Endpoint: not ours to erase
        stored = entry.workerKeyDigest if entry else None
        digests = {stored, await deployed_key_digest(ctx, owner)}
        for digest in digests - {None}:
            await ctx.registry.delete_key(digest)
        await ctx.registry.delete_endpoint(name)
        ctx.registering.pop(name, None)
        ctx.converging.pop(name, None)
        await build_jobs.delete_endpoint_jobs(ctx.cluster, ctx.settings, name, namespace)
        await BatchStore(ctx.redis).delete_endpoint_data(name)  # its pool goes as its child
        return await ctx.jobs.delete_endpoint_data(name)
