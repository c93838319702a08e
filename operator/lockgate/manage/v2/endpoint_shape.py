"""RunPod's v2 endpoint object over lockgate's models: the request bodies (closed), the
answer, and the mapping both ways. Pure: no I/O.

A v2 endpoint is an `EndpointSpec` (scaling, compute, workers) plus the container settings
of its template (image, args, disk, ports, env, registry): RunPod's "bound template". A v2
create keeps those in a Template whose id is the endpoint's own (`bound_template_id`), made
from the body over `templateId`'s settings (resolved once: later edits of that template do
not reach the endpoint, as on RunPod). `ENDPOINT_FIELDS` and `TEMPLATE_FIELDS` say, for
every field of `EndpointSpec` and `TemplateSpec`, which v2 field shows it or why none does.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lockgate.models import EndpointRecord, EndpointSpec, TemplateSpec
from lockgate.models.endpoint import (
    PORT_PATTERN,
    ComputeType,
    EndpointType,
    ScalerType,
    TemplateCategory,
)
from lockgate.models.gpupools import pool_problem, pools_of, types_of
from lockgate.models.jobs import EXECUTION_TIMEOUT_MIN_MS, MAX_DURATION_MS
from lockgate.models.source import EndpointSource, source_of

CUDA = r"^\d+\.\d+$"
CREATE_WORKERS = {"min": 0, "max": 3, "idleTimeout": 10}  # RunPod's v2 defaults
CREATE_TIMEOUT_MS = 300_000  # RunPod's v2 default
GB_PER_VCPU = 2  # a CPU worker's memory when its template sets none (TemplateSpec.memoryInGb)
ANY_CPU = "any"  # the `cpu[].id` of a CPU endpoint that names no flavor (any node's CPUs)


class Cross(ValueError):
    """A body whose fields conflict (RunPod's 400); the message names them."""


class Closed(BaseModel):
    """A v2 request body part: unknown fields are refused (RunPod's `unevaluatedProperties:
    false`)."""

    model_config = ConfigDict(extra="forbid")


class V2Type(StrEnum):
    QUEUE = "QUEUE"
    LOAD_BALANCER = "LOAD_BALANCER"


class FlashBoot(StrEnum):
    OFF = "OFF"
    FLASHBOOT = "FLASHBOOT"
    PRIORITY_FLASHBOOT = "PRIORITY_FLASHBOOT"


class GpuCreate(Closed):
    pools: list[str] = Field(..., min_length=1)
    excludedTypes: list[Annotated[str, Field(pattern=r"^\s*[^-\s]")]] = Field(default_factory=list)
    count: int = Field(1, ge=1, le=16)
    allowedCudaVersions: list[Annotated[str, Field(pattern=CUDA)]] | None = None
    minCudaVersion: Annotated[str, Field(pattern=CUDA)] | None = None


class GpuUpdate(Closed):
    pools: list[str] | None = Field(None, min_length=1)
    excludedTypes: list[Annotated[str, Field(pattern=r"^\s*[^-\s]")]] | None = None
    count: int | None = Field(None, ge=1, le=16)
    allowedCudaVersions: list[Annotated[str, Field(pattern=CUDA)]] | None = None
    minCudaVersion: Annotated[str, Field(pattern=r"^$|^\d+\.\d+$")] | None = None


class CpuChoice(Closed):
    id: str = Field(..., min_length=1, max_length=63)
    vcpuCount: int = Field(..., ge=2, le=512)


class Workers(Closed):
    min: int = Field(..., ge=0, le=1000)
    max: int = Field(..., ge=0, le=1000)
    idleTimeout: int | None = Field(None, ge=1, le=3600)


class QueueDelay(Closed):
    type: Literal["QUEUE_DELAY"]
    queueDelay: float = Field(..., ge=0.5, le=10_000)


class RequestCount(Closed):
    type: Literal["REQUEST_COUNT"]
    requestCount: int = Field(..., ge=1, le=10_000)


Scaling = Annotated[QueueDelay | RequestCount, Field(discriminator="type")]


class Container(Closed):
    """RunPod's ContainerConfig: what the bound template holds."""

    image: str | None = Field(None, min_length=1, max_length=1024)
    args: str | None = Field(None, max_length=100_000)
    disk: int | None = Field(None, ge=1, le=10_000)
    ports: list[Annotated[str, Field(pattern=PORT_PATTERN)]] | None = Field(None, max_length=32)
    env: dict[str, str] | None = None
    registry: str | None = None


class CreateEndpoint(Container):
    name: str = Field(..., min_length=1, max_length=191)
    type: V2Type
    scaling: Scaling
    templateId: str | None = Field(None, min_length=1)
    gpu: GpuCreate | None = None
    cpu: list[CpuChoice] | None = Field(None, min_length=1)
    workers: Workers | None = None
    dataCenterIds: list[str] | None = None
    networkVolumes: list[str] | None = None
    timeout: int | None = Field(None, ge=EXECUTION_TIMEOUT_MIN_MS, le=MAX_DURATION_MS)
    flashboot: FlashBoot = FlashBoot.OFF
    source: EndpointSource | None = None  # lockgate's: build from git (docs/builds.md)


class UpdateEndpoint(Container):
    name: str | None = Field(None, min_length=1, max_length=191)
    type: Any = None  # not patchable: present only to be refused with a 400 naming it
    scaling: Scaling | None = None
    templateId: str | None = Field(None, min_length=1)
    gpu: GpuUpdate | None = None
    cpu: list[CpuChoice] | None = Field(None, min_length=1)
    workers: Workers | None = None
    dataCenterIds: list[str] | None = None
    networkVolumes: list[str] | None = None
    timeout: int | None = Field(None, ge=EXECUTION_TIMEOUT_MIN_MS, le=MAX_DURATION_MS)
    flashboot: FlashBoot | None = None
    source: EndpointSource | None = None  # null: no source any more


# Where each field of the models shows in the v2 object, or why it does not ("not in v2: …");
# tests/test_v2_serverless.py fails on a model field missing here.
ENDPOINT_FIELDS: Mapping[str, str] = {
    "name": "name",
    "type": "type",
    "computeType": "gpu or cpu, whichever is present",
    "gpuTypeIds": "gpu.pools and gpu.excludedTypes",
    "gpuCount": "gpu.count",
    "cpuFlavorIds": "cpu[].id",
    "vcpuCount": "cpu[].vcpuCount",
    "allowedCudaVersions": "gpu.allowedCudaVersions (gpu.minCudaVersion: a one-version list)",
    "dataCenterIds": "dataCenterIds",
    "templateId": "the bound template's settings; templateId on create and update",
    "networkVolumeId": "networkVolumes",
    "executionTimeoutMs": "timeout (QUEUE)",
    "requestTimeoutS": "timeout (LOAD_BALANCER)",
    "flashboot": "flashboot",
    "idleTimeout": "workers.idleTimeout",
    "scalerType": "scaling.type",
    "scalerValue": "scaling.queueDelay or scaling.requestCount",
    "workersMin": "workers.min",
    "workersMax": "workers.max",
    "modelReferences": "not in v2: lockgate's cached models (v1, kubectl, the console)",
    "lbHoldS": "not in v2: lockgate's (v1, kubectl, the console)",
    "lbWebSocketMaxS": "not in v2: lockgate's (v1, kubectl, the console)",
    "replicas": "not in v2: the scale subresource's (kubectl scale, an HPA, KEDA)",
    "onWorkerLost": "not in v2: lockgate's (v1, kubectl)",
    "requeueMaxRunS": "not in v2: lockgate's (v1, kubectl)",
    "warmup": "not in v2: lockgate's warm-up (v1, kubectl; docs/warm-up.md)",
    "lbResumeWindowS": "not in v2: lockgate's (v1, kubectl, the console)",
    "batchWorkersMax": "not in v2: lockgate's batch pool (v1, kubectl; docs/batch-jobs.md)",
    "startupTimeout": "not in v2: lockgate's (v1, kubectl); RunPod has no startup deadline",
    "crashLoopThreshold": "not in v2: lockgate's (v1, kubectl); its state is the phase",
    "source": "source (lockgate's: RunPod's v2 has no source field; absent when none)",
}
TEMPLATE_FIELDS: Mapping[str, str] = {
    "name": "not in v2: the bound template takes the endpoint's name",
    "image": "image",
    "args": "args (one string, split like a shell)",
    "env": "env",
    "ports": "ports",
    "containerDiskInGb": "disk",
    "imagePullSecret": "registry",
    "memoryInGb": "cpu[].memory",
    "category": "not in v2: NVIDIA for a GPU endpoint, CPU for a CPU one",
    "isServerless": "not in v2: a bound template is a serverless one",
    "command": "not in v2: the image's entrypoint (v1's dockerEntrypoint), kept",
    "modelUrl": "not in v2: v1's, kept",
    "volumeInGb": "not in v2: a pod's volume (RunPod's pods), kept",
    "volumeMountPath": "not in v2: a pod's volume (RunPod's pods), kept",
    "readme": "not in v2: kept",
    "imagePullSecrets": "not in v2: lockgate's extra pull Secrets, kept",
    "shmSizeInGb": "not in v2: lockgate's pod setting, kept",
    "podSecurity": "not in v2: lockgate's pod setting, kept",
    "runAsUser": "not in v2: lockgate's pod setting, kept",
    "secretEnv": "not in v2: lockgate's Secret references, kept",
    "envFromSecrets": "not in v2: lockgate's Secret references, kept",
    "tolerations": "not in v2: lockgate's pod setting, kept",
    "nodeSelector": "not in v2: lockgate's pod setting, kept",
    "runtimeClassName": "not in v2: lockgate's pod setting, kept",
    "priorityClassName": "not in v2: lockgate's pod setting, kept",
    "podLabels": "not in v2: lockgate's pod setting, kept",
    "podAnnotations": "not in v2: lockgate's pod setting, kept",
}


def bound_template_id(endpoint_id: str) -> str:
    """The id of the template a v2 endpoint's container settings live in: its own."""
    return endpoint_id


def split_args(args: str) -> list[str]:
    """v2's one-string `args` as the template's argument list (split like a shell)."""
    try:
        return shlex.split(args)
    except ValueError as err:
        raise Cross(f"args: cannot split {args!r} into words: {err}") from err


def _cuda(gpu: GpuCreate | GpuUpdate, current: list[str]) -> list[str]:
    """The `allowedCudaVersions` a gpu part leaves. lockgate reads the list as "the lowest of
    these CUDA versions or newer" (a node's driver runs older CUDA too), so a floor is the
    one-version list and a set is kept as given."""
    allowed, floor = gpu.allowedCudaVersions, gpu.minCudaVersion
    if allowed and floor:
        raise Cross("gpu: allowedCudaVersions and minCudaVersion cannot both be set")
    if floor:
        return [floor]
    if allowed is not None:
        return list(allowed)
    return [] if floor == "" else current


def _gpu_fields(gpu: GpuCreate | GpuUpdate, current: EndpointSpec | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"computeType": ComputeType.GPU}
    if gpu.pools is not None:
        excluded = [t.strip() for t in gpu.excludedTypes or []]
        if problem := pool_problem(gpu.pools, excluded):
            raise Cross(problem)
        fields["gpuTypeIds"] = types_of(gpu.pools, excluded)
    elif gpu.excludedTypes is not None:
        raise Cross("gpu.excludedTypes: send it with gpu.pools (they are one selection)")
    if gpu.count is not None:
        fields["gpuCount"] = gpu.count
    fields["allowedCudaVersions"] = _cuda(gpu, current.allowedCudaVersions if current else [])
    return fields


def _cpu_fields(cpu: list[CpuChoice]) -> dict[str, Any]:
    counts = {c.vcpuCount for c in cpu}
    if len(counts) > 1:
        raise Cross("cpu: lockgate runs every worker of an endpoint with one vcpuCount")
    count = counts.pop()
    if count & (count - 1):
        raise Cross(f"cpu.vcpuCount: {count} is not a power of two")
    if len({(c.id, c.vcpuCount) for c in cpu}) < len(cpu):
        raise Cross("cpu: the same flavor and vcpuCount are listed twice")
    flavors = [c.id for c in cpu if c.id != ANY_CPU]
    return {"computeType": ComputeType.CPU, "cpuFlavorIds": flavors, "vcpuCount": count}


def _scaling_fields(scaling: QueueDelay | RequestCount) -> dict[str, Any]:
    if isinstance(scaling, QueueDelay):
        # lockgate's scaler reads whole seconds of queue delay
        return {"scalerType": ScalerType.QUEUE_DELAY, "scalerValue": math.ceil(scaling.queueDelay)}
    return {"scalerType": ScalerType.REQUEST_COUNT, "scalerValue": scaling.requestCount}


def _timeout_fields(timeout_ms: int, endpoint_type: EndpointType) -> dict[str, Any]:
    if endpoint_type == EndpointType.LB:
        return {"requestTimeoutS": min(3600, math.ceil(timeout_ms / 1000))}
    return {"executionTimeoutMs": timeout_ms}


def _volume_fields(volumes: list[str]) -> dict[str, Any]:
    if len(volumes) > 1:
        raise Cross("networkVolumes: lockgate mounts one network volume per endpoint")
    return {"networkVolumeId": volumes[0] if volumes else ""}


def _workers_fields(
    workers: Workers, scaler: ScalerType, endpoint_type: EndpointType
) -> dict[str, Any]:
    if workers.min > workers.max:
        raise Cross(f"workers.min ({workers.min}) must not exceed workers.max ({workers.max})")
    fields: dict[str, Any] = {"workersMin": workers.min, "workersMax": workers.max}
    if workers.idleTimeout is not None:
        if endpoint_type == EndpointType.QUEUE and scaler == ScalerType.REQUEST_COUNT:
            raise Cross(
                "workers.idleTimeout: not applicable to a QUEUE endpoint scaling on requestCount"
            )
        fields["idleTimeout"] = workers.idleTimeout
    return fields


def _container(body: Container, base: TemplateSpec | None, *, merge_env: bool) -> dict[str, Any]:
    """Template fields: `base`'s (if any) with the body's over them; env merged per key
    when `merge_env` (a create, or a PATCH naming a templateId), else replaced."""
    fields: dict[str, Any] = base.model_dump() if base else {}
    if body.image is not None:
        fields["image"] = body.image
    if body.args is not None:
        fields["args"] = split_args(body.args)
    if body.disk is not None:
        fields["containerDiskInGb"] = body.disk
    if body.ports is not None:
        fields["ports"] = body.ports
    if body.env is not None:
        fields["env"] = {**fields.get("env", {}), **body.env} if merge_env else dict(body.env)
    if body.registry is not None or "registry" in body.model_fields_set:
        fields["imagePullSecret"] = body.registry or ""
    return fields


def create_parts(
    body: CreateEndpoint, base: TemplateSpec | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `EndpointSpec` fields and the bound template's `TemplateSpec` fields of a create
    (`base`: the settings of its `templateId`). Raises `Cross` for a 400."""
    if (body.gpu is None) == (body.cpu is None):
        raise Cross("gpu, cpu: set exactly one of them (a GPU or a CPU endpoint)")
    endpoint_type = EndpointType.LB if body.type == V2Type.LOAD_BALANCER else EndpointType.QUEUE
    spec: dict[str, Any] = {"name": body.name, "type": endpoint_type}
    spec |= _scaling_fields(body.scaling)
    if body.gpu is not None:
        spec |= _gpu_fields(body.gpu, None)  # lockgate templates hold no CUDA versions to seed
    else:
        assert body.cpu is not None
        spec |= _cpu_fields(body.cpu)
    given = body.workers.model_dump(exclude_none=True) if body.workers else {}
    workers = {**CREATE_WORKERS, **given}
    queue_by_count = (
        endpoint_type == EndpointType.QUEUE and spec["scalerType"] == ScalerType.REQUEST_COUNT
    )
    if queue_by_count and "idleTimeout" not in given:
        workers.pop("idleTimeout")
    spec |= _workers_fields(Workers.model_validate(workers), spec["scalerType"], endpoint_type)
    spec |= _timeout_fields(body.timeout or CREATE_TIMEOUT_MS, endpoint_type)
    spec |= _volume_fields(body.networkVolumes or [])
    spec["dataCenterIds"] = body.dataCenterIds or []
    spec["flashboot"] = body.flashboot != FlashBoot.OFF
    if body.source is not None:
        spec["source"] = body.source.model_dump(mode="json")
    template = _container(body, base, merge_env=True)
    template |= {"name": body.name, "isServerless": True}
    template["category"] = TemplateCategory.CPU if body.cpu else TemplateCategory.NVIDIA
    if body.cpu is None and base is not None and base.category != TemplateCategory.CPU:
        template["category"] = base.category
    return spec, template


def _refuse_kind_change(body: UpdateEndpoint, record: EndpointRecord) -> None:
    """`Cross` when a PATCH would change what an endpoint is: its type or compute family."""
    if "type" in body.model_fields_set:
        raise Cross("type: an endpoint's type cannot change (create another endpoint)")
    if body.gpu is not None and body.cpu is not None:
        raise Cross("gpu, cpu: set at most one of them")
    if body.gpu is not None and record.computeType == ComputeType.CPU:
        raise Cross("gpu: this is a CPU endpoint (its compute family cannot change)")
    if body.cpu is not None and record.computeType == ComputeType.GPU:
        raise Cross("cpu: this is a GPU endpoint (its compute family cannot change)")


def _spec_changes(body: UpdateEndpoint, record: EndpointRecord) -> dict[str, Any]:
    changes: dict[str, Any] = {} if body.name is None else {"name": body.name}
    if body.scaling is not None:
        changes |= _scaling_fields(body.scaling)
    if body.gpu is not None:
        changes |= _gpu_fields(body.gpu, record)
    if body.cpu is not None:
        changes |= _cpu_fields(body.cpu)
    if body.workers is not None:
        scaler = changes.get("scalerType", record.scalerType)
        changes |= _workers_fields(body.workers, scaler, record.type)
    if body.timeout is not None:
        changes |= _timeout_fields(body.timeout, record.type)
    if body.networkVolumes is not None:
        changes |= _volume_fields(body.networkVolumes)
    if body.dataCenterIds is not None:
        changes["dataCenterIds"] = body.dataCenterIds
    if body.flashboot is not None:
        changes["flashboot"] = body.flashboot != FlashBoot.OFF
    if "source" in body.model_fields_set:
        changes["source"] = body.source.model_dump(mode="json") if body.source else None
    return changes


def update_parts(
    body: UpdateEndpoint, record: EndpointRecord, base: TemplateSpec | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The `EndpointSpec` changes of a PATCH, and the bound template's new fields when a
    container setting changes (else None). `base` is the template of the body's
    `templateId`, or the endpoint's current one. Raises `Cross` for a 400."""
    _refuse_kind_change(body, record)
    changes = _spec_changes(body, record)
    if not set(Container.model_fields) & body.model_fields_set and body.templateId is None:
        return changes, None
    template = _container(body, base, merge_env=body.templateId is not None)
    template |= {"name": body.name or record.name, "isServerless": True}
    return changes, template


class Shown(BaseModel):
    """A part of the v2 endpoint object as answered: what the view builds is checked against
    it (an unknown member fails), with no request bounds (an endpoint made through v1 or
    kubectl may hold values v2's bodies refuse)."""

    model_config = ConfigDict(extra="forbid")


class GpuShown(Shown):
    pools: list[str]
    excludedTypes: list[str] = Field(default_factory=list, description="absent when none")
    count: int
    allowedCudaVersions: list[str] = Field(..., description="[]: any version")
    minCudaVersion: str | None = Field(..., description="null: no floor")


class CpuShown(Shown):
    id: str
    vcpuCount: int
    memory: int = Field(..., description="GB")


class WorkersShown(Shown):
    min: int
    max: int
    idleTimeout: int | None = Field(
        None, description="seconds; absent for a QUEUE endpoint scaling on requestCount"
    )


class QueueDelayShown(Shown):
    type: Literal["QUEUE_DELAY"]
    queueDelay: int | float = Field(..., description="seconds")


class RequestCountShown(Shown):
    type: Literal["REQUEST_COUNT"]
    requestCount: int


class QueueUrls(Shown):
    run: str
    runSync: str
    status: str
    stream: str
    cancel: str
    retry: str
    purgeQueue: str
    health: str


class LoadBalancerUrls(Shown):
    base: str
    health: str


class Endpoint(Shown):
    """RunPod v2's Endpoint, as every `/v2/serverless` answer shows it."""

    id: str
    name: str
    type: V2Type
    requestUrls: QueueUrls | LoadBalancerUrls
    image: str
    args: str
    disk: int = Field(..., description="container disk, GB")
    ports: list[str]
    env: dict[str, str]
    registry: str | None = Field(..., description="registry credential id")
    gpu: GpuShown | None = Field(..., description="null for a CPU endpoint")
    cpu: list[CpuShown] = Field(default_factory=list, description="absent for a GPU endpoint")
    workers: WorkersShown
    scaling: Annotated[QueueDelayShown | RequestCountShown, Field(discriminator="type")]
    dataCenterIds: list[str]
    networkVolumes: list[str]
    timeout: int = Field(..., description="milliseconds")
    flashboot: FlashBoot
    createdAt: str = Field(..., description="RFC 3339")
    source: EndpointSource | None = Field(
        None, description="lockgate's: the git repository it is built from; absent when none"
    )


def _gpu_view(spec: EndpointSpec) -> dict[str, Any]:
    pools, excluded = pools_of(spec.gpuTypeIds)
    view: dict[str, Any] = {"pools": pools}
    if excluded:
        view["excludedTypes"] = excluded
    view |= {
        "count": spec.gpuCount,
        "allowedCudaVersions": list(spec.allowedCudaVersions),
        "minCudaVersion": None,
    }
    return view


def _cpu_view(spec: EndpointSpec, template: TemplateSpec | None) -> list[dict[str, Any]]:
    memory = template.memoryInGb if template and template.memoryInGb else 0
    memory = math.ceil(memory) or spec.vcpuCount * GB_PER_VCPU
    flavors = spec.cpuFlavorIds or [ANY_CPU]
    return [{"id": f, "vcpuCount": spec.vcpuCount, "memory": memory} for f in flavors]


def request_urls(record: EndpointRecord) -> dict[str, str]:
    """Where clients send work: lockgate's job API, or its load-balancing route."""
    base = record.jobApiUrl.rsplit("/v2/", 1)[0]
    one = f"{base}/v2/{record.id}"
    if record.type == EndpointType.LB:
        return {"base": f"{base}/lb/{record.id}", "health": f"{base}/lb/{record.id}/ping"}
    return {
        "run": f"{one}/run",
        "runSync": f"{one}/runsync",
        "status": f"{one}/status/{{job_id}}",
        "stream": f"{one}/stream/{{job_id}}",
        "cancel": f"{one}/cancel/{{job_id}}",
        "retry": f"{one}/retry/{{job_id}}",
        "purgeQueue": f"{one}/purge-queue",
        "health": f"{one}/health",
    }


def v2_endpoint(record: EndpointRecord, template: TemplateSpec | None) -> dict[str, Any]:
    """The v2 endpoint object of `record` and its template (None: it names none, e.g. a
    dev-mode handler file)."""
    lb = record.type == EndpointType.LB
    body: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "type": V2Type.LOAD_BALANCER if lb else V2Type.QUEUE,
        "requestUrls": request_urls(record),
        "image": template.image if template else "",
        "args": shlex.join(template.args) if template else "",
        "disk": template.containerDiskInGb if template else 1,
        "ports": list(template.ports) if template else [],
        "env": dict(template.env) if template else {},
        "registry": (template.imagePullSecret or None) if template else None,
    }
    if record.computeType == ComputeType.GPU:
        body["gpu"] = _gpu_view(record)
    else:
        body["gpu"] = None
        body["cpu"] = _cpu_view(record, template)
    workers: dict[str, Any] = {"min": record.workersMin, "max": record.workersMax}
    if lb or record.scalerType != ScalerType.REQUEST_COUNT:
        workers["idleTimeout"] = record.idleTimeout
    scaling: dict[str, Any] = {"type": record.scalerType.value}
    key = "queueDelay" if record.scalerType == ScalerType.QUEUE_DELAY else "requestCount"
    scaling[key] = record.scalerValue
    body |= {
        "workers": workers,
        "scaling": scaling,
        "dataCenterIds": list(record.dataCenterIds),
        "networkVolumes": [record.networkVolumeId] if record.networkVolumeId else [],
        "timeout": record.requestTimeoutS * 1000 if lb else record.executionTimeoutMs,
        "flashboot": FlashBoot.FLASHBOOT if record.flashboot else FlashBoot.OFF,
        "createdAt": record.createdAt,
    }
    if record.source is not None:  # a record read from a resource holds it as a dict
        body["source"] = source_of(record.source)
    return Endpoint.model_validate(body).model_dump(mode="json", exclude_unset=True)
