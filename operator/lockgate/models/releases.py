"""Releases: which settings make a new endpoint version, and what a release records (pure).

A release is a new *container configuration*: what the worker container runs and sees.
Its settings are classified here once, per model, and a test fails when a field of
`EndpointSpec` or `TemplateSpec` is in neither set:

- `ENDPOINT_RELEASE_FIELDS`: the endpoint's own settings that change the container (its
  template, its type, its resources as the worker sees them, its volume, its models);
- `TEMPLATE_RELEASE_FIELDS`: the template's fields that change the container (image,
  command, args, env, ports, disk, registry credentials, the pod around it…);
- `*_OTHER_FIELDS`: settings that act through the scaler or the gateway, or placement and
  timeouts (RunPod applies those as workers are replaced, with no release), or display.

`config_of(spec, template)` is the configuration, `release_diff(old, new)` what changed,
field by field, in RunPod's legacy names (v1's: `templateId`, `gpuCount`; a template's
fields scoped `template.imageName`, `template.env`). A non-empty diff is a new version:
the one decision every writer (dev mode, the management API, the operator) makes.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models.endpoint import EndpointSpec, TemplateSpec
from lockgate.models.running_build import RunningBuild, applies
from lockgate.models.templates import runpod_name

ENDPOINT_RELEASE_FIELDS = frozenset(
    {"type", "computeType", "gpuCount", "vcpuCount", "templateId", "networkVolumeId",
     "modelReferences", "source"}
)  # fmt: skip
ENDPOINT_OTHER_FIELDS = frozenset(
    {
        "name", "gpuTypeIds", "cpuFlavorIds", "allowedCudaVersions", "dataCenterIds",
        "executionTimeoutMs", "flashboot", "idleTimeout", "scalerType", "scalerValue",
        "requestTimeoutS", "lbHoldS", "lbWebSocketMaxS", "workersMin", "workersMax",
        "replicas", "onWorkerLost", "requeueMaxRunS", "warmup", "lbResumeWindowS",
        "startupTimeout", "crashLoopThreshold", "batchWorkersMax",
    }
)  # fmt: skip
TEMPLATE_RELEASE_FIELDS = frozenset(
    {
        "image", "command", "args", "env", "ports", "containerDiskInGb", "modelUrl",
        "imagePullSecret", "imagePullSecrets", "memoryInGb", "shmSizeInGb", "podSecurity",
        "runAsUser", "secretEnv", "envFromSecrets", "tolerations", "nodeSelector",
        "runtimeClassName", "priorityClassName", "podLabels", "podAnnotations",
    }
)  # fmt: skip
TEMPLATE_OTHER_FIELDS = frozenset(
    {"name", "readme", "isServerless", "category", "volumeInGb", "volumeMountPath"}
)
TEMPLATE_SCOPE = "template."
BUILD_FIELD = "build"  # the running build in a diff (lockgate's: RunPod's has none)
RELEASES_KEPT = 100  # per endpoint, newest first; older ones are dropped
RELEASE_ID_LENGTH = 8  # RunPod's look: "5r9x2m7q"
_ID_ALPHABET = string.ascii_lowercase + string.digits


class ReleaseSource(StrEnum):
    """RunPod's release sources: GIT_BUILD when a release runs another build (a completed
    build taken, or a rollback to one), else MANUAL (`release_source`)."""

    GIT_BUILD = "GIT_BUILD"
    MANUAL = "MANUAL"


class DiffEntry(BaseModel):
    """One changed setting: `old` is null when it was added, `new` when it was removed."""

    field: str
    old: Any = None
    new: Any = None


class ReleaseConfig(BaseModel):
    """The container configuration a release produced: the endpoint's release fields,
    when its `templateId` names a template that template's release fields (JSON values),
    and the build its workers run (None: the template's image or command)."""

    model_config = ConfigDict(extra="forbid")

    endpoint: dict[str, Any] = Field(default_factory=dict)
    template: dict[str, Any] | None = None
    build: RunningBuild | None = None


class Release(BaseModel):
    """A release as kept (`workerCount` is counted when it is shown, not kept)."""

    id: str
    version: int = Field(ge=1)
    source: ReleaseSource = ReleaseSource.MANUAL
    buildId: str | None = None
    createdByUserId: str | None = None
    createdAt: str
    diff: list[DiffEntry] = Field(default_factory=list)
    config: ReleaseConfig
    rollbackOf: str | None = None  # lockgate's: the release a rollback restored

    def view(self, worker_count: int) -> dict[str, Any]:
        """RunPod's `Release` object (the kept configuration is not part of it)."""
        out = self.model_dump(mode="json", exclude={"config", "rollbackOf"})
        return {**out, "workerCount": worker_count}


def config_of(
    spec: EndpointSpec, template: TemplateSpec | None, build: RunningBuild | None = None
) -> ReleaseConfig:
    """The container configuration of an endpoint with its (resolved) template and the
    build taken last (kept only while it applies: the endpoint still has a source of the
    URL it was built from, `running_build.applies`)."""
    ep = spec.model_dump(mode="json", include=set(ENDPOINT_RELEASE_FIELDS))
    tpl = (
        template.model_dump(mode="json", include=set(TEMPLATE_RELEASE_FIELDS))
        if template is not None
        else None
    )
    running = build if applies(spec.source, build) else None
    return ReleaseConfig(endpoint=ep, template=tpl, build=running)


def _named(config: ReleaseConfig | None) -> dict[str, Any]:
    """A configuration flat, in RunPod's legacy names."""
    if config is None:
        return {}
    out = dict(config.endpoint)
    for name, value in (config.template or {}).items():
        out[TEMPLATE_SCOPE + runpod_name(name)] = value
    if config.build is not None:
        out[BUILD_FIELD] = config.build.view()
    return out


EMPTY: tuple[Any, ...] = (None, "", [], {})


def release_diff(old: ReleaseConfig | None, new: ReleaseConfig) -> list[DiffEntry]:
    """What changed from `old` to `new`, sorted by field name; empty when nothing that
    affects the container changed. Without `old` (the first release) every field set is
    added (an empty one is left out: it sets nothing)."""
    before, after = _named(old), _named(new)
    fields = sorted(set(before) | set(after))
    return [
        DiffEntry(field=f, old=before.get(f), new=after.get(f))
        for f in fields
        if before.get(f) != after.get(f) and not (old is None and after.get(f) in EMPTY)
    ]


def new_release(
    version: int,
    old: ReleaseConfig | None,
    new: ReleaseConfig,
    *,
    user: str | None = None,
    rollback_of: str | None = None,
    at: datetime | None = None,
) -> Release:
    """The release that brings `new` as `version`, with its diff against `old`."""
    when = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    source, build_id = release_source(old, new)
    return Release(
        id="".join(secrets.choice(_ID_ALPHABET) for _ in range(RELEASE_ID_LENGTH)),
        version=version, source=source, buildId=build_id, createdByUserId=user,
        createdAt=when, diff=release_diff(old, new), config=new, rollbackOf=rollback_of,
    )  # fmt: skip


def release_source(
    old: ReleaseConfig | None, new: ReleaseConfig
) -> tuple[ReleaseSource, str | None]:
    """A release's `source` and `buildId`: `GIT_BUILD` with the build's id when it runs
    another build than `old` did (a completed build taken, or a rollback to a build's
    release); else `MANUAL`, with no build id (an edit while a build runs included)."""
    before = old.build if old is not None else None
    if new.build is not None and (before is None or before.buildId != new.build.buildId):
        return ReleaseSource.GIT_BUILD, new.build.buildId
    return ReleaseSource.MANUAL, None


def next_version(newest: Release | None, config: ReleaseConfig, known: int) -> int | None:
    """The version a release of `config` gets, given the newest release kept and the
    version the endpoint carries (`known`); None when `config` is the newest release's
    (nothing to record). Kept releases may be gone (a flushed Redis): the endpoint's own
    version then goes on."""
    if newest is None:
        return max(1, known)
    if newest.config == config:
        return None
    return max(known, newest.version + 1)


def restored_spec(current: EndpointSpec, config: ReleaseConfig) -> EndpointSpec:
    """`current` with a release's endpoint settings put back (the others stay)."""
    return EndpointSpec.model_validate({**current.model_dump(mode="json"), **config.endpoint})


def restored_template(current: TemplateSpec, config: ReleaseConfig) -> TemplateSpec:
    """`current` with a release's template fields put back (name, readme… stay)."""
    return TemplateSpec.model_validate(
        {**current.model_dump(mode="json"), **(config.template or {})}
    )


class Rollout(BaseModel):
    """RunPod's `RolloutSummary`: how far the workers are on the latest version."""

    inProgress: bool
    workersOnLatest: int
    workersTotal: int
    percentOnLatest: int


def rollout_of(worker_versions: Mapping[int, int], latest: int) -> Rollout:
    """The summary from the workers running each version (a version 0: not known, as
    a worker started before versions were labelled): in progress while any runs an
    older version; the percentage rounded down, 0 without workers."""
    total = sum(worker_versions.values())
    on_latest = worker_versions.get(latest, 0)
    percent = on_latest * 100 // total if total else 0
    return Rollout(
        inProgress=on_latest < total, workersOnLatest=on_latest, workersTotal=total,
        percentOnLatest=percent,
    )  # fmt: skip
