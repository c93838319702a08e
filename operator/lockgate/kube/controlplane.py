"""`KubernetesControlPlane`: endpoints as Endpoint custom resources, templates as Template
resources; the operator does the rest (a changed Template rolls the Endpoints using it).

An endpoint's `version` is the annotation `lockgate.dev/version` on its Endpoint, raised
here when an edit through the API changes its container configuration (its settings or
its Template's: `models.releases`), with the release recorded in Redis (`ReleaseStore`)
right after; the operator records what `kubectl` changed the same way
(`kube.reconcile.settle_release`), and the store keeps one release per version whoever
comes first. `createdAt` is the resource's `creationTimestamp`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from lockgate.kube.cluster import Cluster, ClusterError, Conflict, Gone, NotFound
from lockgate.kube.crds import API_VERSION, ENDPOINT, TEMPLATE, omit_empty_strings
from lockgate.kube.manifests.names import VERSION_LABEL
from lockgate.kube.podlogs import PodLogs
from lockgate.manage import builds as build_ops
from lockgate.manage.controlplane import (
    BuildsUnavailable,
    EndpointExists,
    EndpointNotFound,
    NoSource,
    TemplateExists,
    TemplateNotFound,
    UnusableSettings,
)
from lockgate.manage.listing import (
    ContinueExpired,
    ContinueInvalid,
    Cursor,
    EndpointPage,
    EndpointQuery,
    summary_of_resource,
    take,
)
from lockgate.manage.workersource import LogBatch, LogRead
from lockgate.models import EndpointRecord, EndpointSpec, EndpointStatus, TemplateSpec
from lockgate.models.build import Build, BuildReason
from lockgate.models.podfields import lockgate_secret_problem
from lockgate.models.releases import ReleaseConfig, config_of, release_diff
from lockgate.models.running_build import RunningBuild, decoded
from lockgate.models.source import EndpointSource, cluster_problem, source_of
from lockgate.store.builds import BuildStore
from lockgate.store.releases import ReleaseStore

# A filtered answer reads the apiserver in pages that start at `limit` Endpoints and
# double (as the apiserver's own filtered lists do), up to MAX_CHUNK, so a filter most
# endpoints match costs one read and one few match costs a few; it stops once it has read
# MAX_SCANNED Endpoints, with a short page and a cursor: no answer reads an unbounded list.
MAX_CHUNK = 500  # Endpoints per apiserver read
MAX_SCANNED = 2000  # Endpoints read for one answer
VERSION_ANNOTATION = "lockgate.dev/version"
# When a restart of the Endpoint's workers was last asked (RFC 3339, ms): the operator
# clears a crash loop that began before it (`kube.reconcile`, `scaling.crashloop`).
RESTART_ANNOTATION = "lockgate.dev/restart-requested-at"
# When a build was last asked for or cancelled: its change starts the operator's
# reconcile, which creates or deletes the build Jobs (kube/builds.py).
BUILDS_ANNOTATION = "lockgate.dev/builds-changed-at"
# The build the workers run (`models.running_build.RunningBuild` as JSON: its id, the
# source URL, `imageName@imageDigest`), written by the operator when it takes a completed
# build and by the management API's rollback; and the newest build number the operator
# took (`running_build.to_take`). Annotations, not spec: GitOps leaves them alone
# (docs/builds.md, "What the workers run").
BUILD_ANNOTATION = "lockgate.dev/build"
BUILDS_TAKEN_ANNOTATION = "lockgate.dev/builds-taken"
# On a build's canary Endpoint (`kube.canary`): the endpoint it tests a build of. The
# management lists select Endpoints without it (`LISTED`): a canary is never a user's.
CANARY_OF_LABEL = "lockgate.dev/canary-of"
# On an endpoint's batch pool Endpoint (`kube.batch_pool`): the endpoint whose Batch Jobs
# it runs; hidden as a canary is.
BATCH_OF_LABEL = "lockgate.dev/batch-of"
LISTED = f"!{CANARY_OF_LABEL},!{BATCH_OF_LABEL}"


def operators_own(obj: Mapping[str, Any] | None) -> bool:
    """Whether an Endpoint or Template is the operator's own (a build's canary, its
    Template, a batch pool: `CANARY_OF_LABEL`, `BATCH_OF_LABEL`): the management API
    neither lists, reads, changes nor deletes it."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return CANARY_OF_LABEL in labels or BATCH_OF_LABEL in labels


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def running_build_of(obj: Mapping[str, Any]) -> RunningBuild | None:
    """The build an Endpoint's workers run (its `BUILD_ANNOTATION`), None: its template's
    image."""
    return decoded(_annotations(obj).get(BUILD_ANNOTATION))


def builds_taken_of(obj: Mapping[str, Any]) -> int:
    """The newest build number the operator took for an Endpoint (0: none yet)."""
    raw = str(_annotations(obj).get(BUILDS_TAKEN_ANNOTATION, "0"))
    return int(raw) if raw.isdigit() else 0


def version_of(obj: Mapping[str, Any]) -> int:
    """An Endpoint's version (1 until its template first changes)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(VERSION_ANNOTATION, "1")
    return int(raw) if str(raw).isdigit() and int(raw) >= 1 else 1


def template_from_resource(obj: Mapping[str, Any]) -> TemplateSpec:
    """A Template resource's spec; one the API server let through but that fails
    validation is shown as stored."""
    raw = dict(obj.get("spec") or {})
    try:
        return TemplateSpec.model_validate(raw)
    except ValidationError:
        defaults = TemplateSpec.model_construct().model_dump()
        return TemplateSpec.model_construct(**{**defaults, **raw})


def merge_patch(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch of every field (lists are replaced, not merged); null removes a field,
    so an emptied string goes back to its default."""
    return {k: (None if v == "" else v) for k, v in fields.items()}


def _source_as_stored(raw: Any) -> EndpointSource | None:
    """A stored source as the model (None when it is not one: its status says why)."""
    try:
        return source_of(raw)
    except ValidationError:
        return None


def spec_from_resource(obj: Mapping[str, Any]) -> EndpointSpec:
    """An Endpoint resource's settings (shown as stored when they fail validation)."""
    raw = dict(obj.get("spec") or {})
    try:
        return EndpointSpec.model_validate(raw)
    except ValidationError:
        fields = {**EndpointSpec().model_dump(), **raw}
        fields["source"] = _source_as_stored(raw.get("source"))
        return EndpointSpec.model_construct(**fields)


def record_from_resource(obj: Mapping[str, Any], job_api_url: str) -> EndpointRecord:
    """An Endpoint resource as a record. A spec that the API server let through but that
    fails validation (e.g. `workersMin > workersMax`) is shown as stored; its status says
    what is wrong."""
    endpoint_id = obj["metadata"]["name"]
    raw = dict(obj.get("spec") or {})
    status = EndpointStatus.model_validate(obj.get("status") or {})
    try:
        settings = dict(EndpointSpec.model_validate(raw))  # nested models kept as models
    except ValidationError:
        settings = {**EndpointSpec().model_dump(), **raw}
        settings["source"] = _source_as_stored(raw.get("source"))
    created = (obj.get("metadata") or {}).get("creationTimestamp") or ""
    return EndpointRecord.model_construct(
        id=endpoint_id, jobApiUrl=job_api_url, status=status, version=version_of(obj),
        createdAt=created, **settings,
    )  # fmt: skip


def _refuse_local_source(spec: EndpointSpec) -> None:
    """A `file://` source names this machine's files, which no cluster builder sees."""
    if problem := cluster_problem(source_of(spec.source)):
        raise UnusableSettings(f"source.git.{problem}")


class KubernetesControlPlane:
    """Endpoints as Endpoint custom resources in one namespace."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        namespace: str,
        job_api_url: Callable[[str], str],
        reserved_secrets: Collection[str] = (),
        releases: ReleaseStore | None = None,
        builds: BuildStore | None = None,
        builds_enabled: bool = False,
    ) -> None:
        """`reserved_secrets`: lockgate's own Secrets (the chart's), which a template may
        not hand workers (the operator checks the labels of the others); `releases`:
        where releases are recorded (None: the operator alone records them); `builds`:
        where builds are kept (None: none are)."""
        self.cluster = cluster
        self.releases = releases
        self.builds = builds
        self.builds_enabled = builds_enabled  # the chart names a registry (builds.registry)
        self.namespace = namespace
        self.job_api_url = job_api_url
        self.reserved_secrets = frozenset(reserved_secrets)
        self.logs = PodLogs(cluster, namespace)  # the worker pods' logs

    def _record(self, obj: Mapping[str, Any]) -> EndpointRecord:
        return record_from_resource(obj, self.job_api_url(obj["metadata"]["name"]))

    async def create(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        _refuse_local_source(spec)
        if await self.get_endpoint_or_none(endpoint_id) is not None:
            raise EndpointExists(endpoint_id)
        await self._require_template(spec.templateId)
        body = {
            "apiVersion": API_VERSION,
            "kind": ENDPOINT.kind,
            "metadata": {"name": endpoint_id, "namespace": self.namespace},
            "spec": omit_empty_strings(spec.model_dump(mode="json")),
        }
        try:
            obj = await self.cluster.create_endpoint(self.namespace, body)
        except Conflict as err:
            raise EndpointExists(endpoint_id) from err
        await self._release(endpoint_id, await self._config(spec), 1)
        return self._record(obj)

    async def _config(self, spec: EndpointSpec, build: RunningBuild | None = None) -> ReleaseConfig:
        """The container configuration of `spec` with its Template as it is now, running
        `build` (the Endpoint's `BUILD_ANNOTATION`) when it applies."""
        return config_of(spec, await self._template_or_none(spec.templateId), build)

    async def _template_or_none(self, template_id: str) -> TemplateSpec | None:
        obj = await self.cluster.get_template(self.namespace, template_id) if template_id else None
        return template_from_resource(obj) if obj is not None else None

    async def _release(self, endpoint_id: str, config: ReleaseConfig, version: int) -> None:
        if self.releases is not None:
            await self.releases.record(endpoint_id, config, version)

    async def worker_versions(self, endpoint_id: str) -> dict[int, int]:
        """Worker pods per version they run (their `lockgate.dev/version` label; 0: a pod
        from before versions were labelled): every pod not finished, those being deleted
        (finishing a job) too."""
        selector = f"lockgate.dev/endpoint={endpoint_id},app.kubernetes.io/component=worker"
        pods = await self.cluster.list_objects("Pod", self.namespace, selector)
        counts: dict[int, int] = {}
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            raw = ((pod.get("metadata") or {}).get("labels") or {}).get(VERSION_LABEL, "0")
            version = int(raw) if str(raw).isdigit() else 0
            counts[version] = counts.get(version, 0) + 1
        return counts

    async def get_endpoint_or_none(self, endpoint_id: str) -> Mapping[str, Any] | None:
        return await self._endpoint(endpoint_id)

    async def _endpoint(self, endpoint_id: str) -> Mapping[str, Any] | None:
        """The user's Endpoint of that id, None when there is none: a build's canary
        (`CANARY_OF_LABEL`) is the operator's, so the management API neither lists, reads,
        changes nor deletes it (kube/canary.py)."""
        obj = await self.cluster.get_endpoint(self.namespace, endpoint_id)
        return None if obj is None or operators_own(obj) else obj

    async def _existing(self, endpoint_id: str) -> Mapping[str, Any]:
        """`_endpoint`, or `EndpointNotFound`."""
        obj = await self._endpoint(endpoint_id)
        if obj is None:
            raise EndpointNotFound(endpoint_id)
        return obj

    async def _require_template(self, template_id: str) -> None:
        """A templateId is required; the Template itself may come later (the endpoint is
        Pending until it does, as with kubectl)."""
        if not template_id:
            raise UnusableSettings("templateId: required (the id of a template)")

    async def get(self, endpoint_id: str) -> EndpointRecord:
        return self._record(await self._existing(endpoint_id))

    async def page(self, query: EndpointQuery) -> EndpointPage:
        """Pages are the apiserver's own (`limit`, `continue`): a page of 50 reads 50
        Endpoints. Filters are applied here (the apiserver has no substring or status
        selectors for custom resources), reading on while too few matched, within
        `MAX_SCANNED`; a page that ends inside an apiserver page has a cursor into it."""
        want = query.limit
        chunk, scanned = want or 0, 0  # 0: no limit, the whole list in one read
        resume, after = query.cursor.resume, query.cursor.after
        found: list[Mapping[str, Any]] = []
        while True:
            items, following = await self._list(chunk, resume)
            scanned += len(items)
            rows = [(summary_of_resource(obj), obj) for obj in items]
            taken, last = take(rows, query, after, None if want is None else want - len(found))
            found += taken
            if last:  # stopped inside this apiserver page: the next answer reads it again
                return self._page(found, query, Cursor(after=last, resume=resume))
            if not following or len(found) == want or scanned >= MAX_SCANNED:
                break
            # `after` stays: it may lie beyond this read, when the page it ended in was
            # read in a larger chunk than this answer's first
            resume, chunk = following, max(chunk, min(2 * chunk, MAX_CHUNK))
        return self._page(found, query, Cursor(resume=following) if following else None)

    async def _list(self, chunk: int, resume: str) -> tuple[list[dict[str, Any]], str]:
        try:
            return await self.cluster.list_endpoints_page(
                self.namespace, limit=chunk, resume=resume, selector=LISTED
            )
        except Gone as err:
            raise ContinueExpired(resume) from err
        except ClusterError as err:
            if resume and err.status == 400:  # the apiserver's part of the token is bad
                raise ContinueInvalid(resume) from err
            raise

    def _page(
        self, found: list[Mapping[str, Any]], query: EndpointQuery, following: Cursor | None
    ) -> EndpointPage:
        if query.limit is None:  # every endpoint: sorted here, as before pages
            found = sorted(found, key=lambda obj: obj["metadata"]["name"])
        if query.summary:
            return EndpointPage([summary_of_resource(obj) for obj in found], following)
        return EndpointPage([self._record(obj) for obj in found], following)

    async def patch(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        current = await self._existing(endpoint_id)
        _refuse_local_source(spec)
        patch: dict[str, Any] = {"spec": merge_patch(spec.model_dump(mode="json"))}
        if spec.templateId != (current.get("spec") or {}).get("templateId", ""):
            await self._require_template(spec.templateId)
        running = running_build_of(current)
        old = await self._config(spec_from_resource(current), running)
        new = await self._config(spec, running)
        version = version_of(current) + (1 if release_diff(old, new) else 0)
        if version != version_of(current):
            patch["metadata"] = {"annotations": {VERSION_ANNOTATION: str(version)}}
        try:
            obj = await self.cluster.patch_endpoint(self.namespace, endpoint_id, patch)
        except NotFound as err:
            raise EndpointNotFound(endpoint_id) from err
        if version != version_of(current):
            await self._release(endpoint_id, new, version)
        return self._record(obj)

    async def restart_workers(self, endpoint_id: str) -> None:
        """Mark the Endpoint with the time of the ask (`RESTART_ANNOTATION`): the
        operator's next reconcile (the annotation's change starts one) clears the crash
        loop that began before it."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        patch = {"metadata": {"annotations": {RESTART_ANNOTATION: now}}}
        try:
            await self.cluster.patch_endpoint(self.namespace, endpoint_id, patch)
        except NotFound as err:
            raise EndpointNotFound(endpoint_id) from err

    def build_problem(self, build: RunningBuild) -> str | None:
        """A build runs here by its image: one dev mode built has none."""
        return None if build.image else f"build {build.buildId} has no image to run here"

    async def run_build(self, endpoint_id: str, build: RunningBuild | None) -> None:
        """Make the workers run `build` (None: the template's image): the Endpoint's
        `BUILD_ANNOTATION` set, with the version raised and a release (`GIT_BUILD`) when
        that changes what runs; the operator rolls the workers to its digest. Refused
        (`UnusableSettings`) for a build with no image (one dev mode built)."""
        if build is not None and (why := self.build_problem(build)):
            raise UnusableSettings(why)
        current = await self._existing(endpoint_id)
        running = running_build_of(current)
        if running == build:
            return
        spec = spec_from_resource(current)
        old, new = await self._config(spec, running), await self._config(spec, build)
        version = version_of(current) + (1 if release_diff(old, new) else 0)
        annotations: dict[str, Any] = {BUILD_ANNOTATION: build.encoded() if build else None}
        if version != version_of(current):
            annotations[VERSION_ANNOTATION] = str(version)
        try:
            await self.cluster.patch_endpoint(
                self.namespace, endpoint_id, {"metadata": {"annotations": annotations}}
            )
        except NotFound as err:
            raise EndpointNotFound(endpoint_id) from err
        if version != version_of(current):
            await self._release(endpoint_id, new, version)

    # -- builds (docs/builds.md) ---------------------------------------------------------

    async def start_build(self, endpoint_id: str, ref: str | None, reason: BuildReason) -> Build:
        """Record the build PENDING and touch the Endpoint (`BUILDS_ANNOTATION`): the
        operator's reconcile creates its Job (kube/builds.py). Refused (501) where the
        chart names no registry to push to: a PENDING build no builder would ever take is
        worse than a clear answer."""
        record = await self.get(endpoint_id)
        if record.source is None:
            raise NoSource(f"endpoint {endpoint_id!r} has no source to build")
        if not self.builds_enabled:
            raise BuildsUnavailable(
                "in-cluster builds are off: the chart names no registry to push to "
                "(builds.registry); build the image yourself and set it on the endpoint's "
                "template (or try the source with `lockgate dev`, which builds)"
            )
        build = await build_ops.ask(self._build_store(), record, ref, reason)
        await self._touch_builds(endpoint_id)
        return build

    async def _touch_builds(self, endpoint_id: str) -> None:
        """Start a reconcile of the Endpoint, which creates or deletes build Jobs."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        patch = {"metadata": {"annotations": {BUILDS_ANNOTATION: now}}}
        with contextlib.suppress(NotFound):  # deleted meanwhile: its builds go with it
            await self.cluster.patch_endpoint(self.namespace, endpoint_id, patch)

    def _build_store(self) -> BuildStore:
        if self.builds is None:
            raise BuildsUnavailable("builds are not kept by this server")
        return self.builds

    async def cancel_build(self, endpoint_id: str, build_id: str) -> Build:
        """Mark the build CANCELLED; the operator deletes its Job (kube/builds.py)."""
        build = await build_ops.cancel(self._build_store(), endpoint_id, build_id)
        await self._touch_builds(endpoint_id)
        return build

    async def build_logs(self, endpoint_id: str, build_id: str, read: LogRead) -> LogBatch:
        return await build_ops.read_log(self._build_store(), endpoint_id, build_id, read)

    async def delete(self, endpoint_id: str) -> None:
        await self._existing(endpoint_id)  # a canary is the operator's to delete
        try:
            await self.cluster.delete_endpoint(self.namespace, endpoint_id)
        except NotFound as err:
            raise EndpointNotFound(endpoint_id) from err

    # -- templates ----------------------------------------------------------------------

    def _refuse_reserved_secrets(self, spec: TemplateSpec) -> None:
        """`UnusableSettings` naming the field when the template hands workers one of
        lockgate's own Secrets."""
        for name in spec.worker_secrets():
            if problem := lockgate_secret_problem(name, self.reserved_secrets):
                raise UnusableSettings(f"{spec.secret_uses(name)[0]}: {problem}")

    async def create_template(self, template_id: str, spec: TemplateSpec) -> TemplateSpec:
        self._refuse_reserved_secrets(spec)
        body = {
            "apiVersion": API_VERSION,
            "kind": TEMPLATE.kind,
            "metadata": {"name": template_id, "namespace": self.namespace},
            "spec": omit_empty_strings(spec.model_dump(mode="json")),
        }
        try:
            obj = await self.cluster.create_template(self.namespace, body)
        except Conflict as err:
            raise TemplateExists(template_id) from err
        return template_from_resource(obj)

    async def _user_template(self, template_id: str) -> Mapping[str, Any]:
        """The user's Template of that id, else `TemplateNotFound`: a canary's own
        Template (`kube.canary`, labelled `CANARY_OF_LABEL`) is the operator's."""
        obj = await self.cluster.get_template(self.namespace, template_id)
        if obj is None or operators_own(obj):
            raise TemplateNotFound(template_id)
        return obj

    async def get_template(self, template_id: str) -> TemplateSpec:
        return template_from_resource(await self._user_template(template_id))

    async def list_templates(self) -> dict[str, TemplateSpec]:
        items = await self.cluster.list_templates(self.namespace)
        found = {
            obj["metadata"]["name"]: template_from_resource(obj)
            for obj in items
            if not operators_own(obj)
        }
        return dict(sorted(found.items()))

    async def replace_template(self, template_id: str, spec: TemplateSpec) -> TemplateSpec:
        """Patch the Template (the operator rolls its Endpoints' workers), then raise the
        version of each Endpoint using it."""
        self._refuse_reserved_secrets(spec)
        before = template_from_resource(await self._user_template(template_id))
        body = omit_empty_strings(spec.model_dump(mode="json"))
        try:
            obj = await self.cluster.replace_template_spec(self.namespace, template_id, body)
        except NotFound as err:
            raise TemplateNotFound(template_id) from err
        after = template_from_resource(obj)
        for ep in await self.cluster.list_endpoints(self.namespace):
            if (ep.get("spec") or {}).get("templateId") != template_id:
                continue
            settings, running = spec_from_resource(ep), running_build_of(ep)
            new = config_of(settings, after, running)
            if not release_diff(config_of(settings, before, running), new):
                continue  # the name or readme: no release
            version = version_of(ep) + 1
            bump = {"metadata": {"annotations": {VERSION_ANNOTATION: str(version)}}}
            name = ep["metadata"]["name"]
            with contextlib.suppress(NotFound):  # deleted meanwhile
                await self.cluster.patch_endpoint(self.namespace, name, bump)
                await self._release(name, new, version)
        return after

    async def delete_template(self, template_id: str) -> None:
        await self._user_template(template_id)  # a canary's: not the user's to delete
        try:
            await self.cluster.delete_template(self.namespace, template_id)
        except NotFound as err:
            raise TemplateNotFound(template_id) from err
