"""Endpoint and Template settings: the spec's creation payload, also the CRDs' `spec`."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lockgate.models import podfields, secrets
from lockgate.models.gitrefs import revision_problem
from lockgate.models.jobs import (
    EXECUTION_TIMEOUT_DEFAULT_MS,
    EXECUTION_TIMEOUT_MIN_MS,
    MAX_DURATION_MS,
)
from lockgate.models.source import EndpointSource
from lockgate.models.warmup import Warmup

# 1..65535 then the protocol; an HTTP port is a TCP port that the console labels as HTTP.
PORT_PATTERN = (
    r"^([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
    r"/(http|tcp)$"
)


class ComputeType(StrEnum):
    GPU = "GPU"
    CPU = "CPU"


class ScalerType(StrEnum):
    QUEUE_DELAY = "QUEUE_DELAY"
    REQUEST_COUNT = "REQUEST_COUNT"


class EndpointType(StrEnum):
    """The spec's two endpoint types: jobs through a queue, or requests proxied to the
    worker's own HTTP server (docs/load-balancing.md)."""

    QUEUE = "QUEUE"
    LB = "LB"


class WorkerLostPolicy(StrEnum):
    """What becomes of a job whose worker was lost while running it (silent past the
    heartbeat timeout, its process or pod gone): run it again, or end it FAILED with error
    `WORKER_LOST` (docs/lost-workers.md)."""

    REQUEUE = "requeue"
    FAIL = "fail"


# The error of a job ended by its endpoint's onWorkerLost policy starts with this word.
WORKER_LOST = "WORKER_LOST"

# RunPod's load balancer lets a request run 5.5 minutes (s).
REQUEST_TIMEOUT_DEFAULT_S = 330
LB_WEBSOCKET_MAX_DEFAULT_S = 3600  # lockgate's (RunPod documents no WebSocket limit)
# lockgate's: how long a scaled-down LB worker stays resumable (s; RunPod documents none)
LB_RESUME_WINDOW_DEFAULT_S = 60

# A Hugging Face model reference: `org/name`, optionally `:revision` (a branch, tag or
# commit); the characters the Hub allows in repository names and git refs. The pattern is
# the CRD's; `model_reference_problem` adds the rules a pattern cannot say.
MODEL_REFERENCE_PATTERN = r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w./-]+)?$"
# A namespace or name as `huggingface_hub.utils.validate_repo_id` takes it: 1-96 of
# [A-Za-z0-9_.-], starting and ending with a letter, digit or '_'; no '--' nor '..'.
_HUB_NAME = re.compile(r"\b[\w.-]{1,96}\b", re.ASCII)


def model_reference_problem(reference: str) -> str | None:
    """Why `reference` (`org/name[:revision]`) is not one the Hub accepts, or None."""
    repo, _, revision = reference.partition(":")
    names = repo.split("/")
    if len(names) != 2 or not all(_HUB_NAME.fullmatch(n) for n in names):
        return (
            f"{reference!r}: use org/name[:revision], each of org and name 1-96 of letters, "
            "digits, '-', '_' and '.', starting and ending with a letter, digit or '_'"
        )
    if "--" in repo or ".." in repo or repo.endswith(".git"):
        return f"{reference!r}: a repository id has no '--' nor '..' and does not end in .git"
    return revision_problem(revision) if revision else None


def _model_reference(reference: str) -> str:
    if problem := model_reference_problem(reference):
        raise ValueError(problem)
    return reference


ModelReference = Annotated[
    str,
    Field(max_length=200, pattern=MODEL_REFERENCE_PATTERN),
    AfterValidator(_model_reference),
]


class EndpointSpec(BaseModel):
    """Settings of one endpoint, field for field the spec's creation payload.

    Defaults follow RunPod's documented ones where the spec is silent.
    """

    name: str = Field("", max_length=191, description="display name")
    type: EndpointType = Field(
        EndpointType.QUEUE,
        description="QUEUE: jobs through the job API; LB: requests proxied to the worker's server",
    )
    computeType: ComputeType = Field(ComputeType.GPU, description="GPU or CPU workers")
    gpuTypeIds: list[str] = Field(
        default_factory=list, description="GPU types, most preferred first; any of them may be used"
    )
    gpuCount: int = Field(1, ge=0, le=16, description="GPUs per worker (GPU endpoints)")
    cpuFlavorIds: list[str] = Field(
        default_factory=list, description="CPU flavors a worker may run on (CPU endpoints)"
    )
    vcpuCount: int = Field(2, ge=1, le=512, description="vCPUs per worker")
    allowedCudaVersions: list[str] = Field(
        default_factory=list, description="CUDA versions a worker's node may have, e.g. '12.4'"
    )
    dataCenterIds: list[str] = Field(
        default_factory=list, description="data centers (zones) a worker may run in"
    )
    templateId: str = Field("", description="name of the Template in the same namespace")
    networkVolumeId: str = Field(
        "",
        max_length=63,
        pattern=r"^$|^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="network volume (PersistentVolumeClaim) mounted at /runpod-volume",
    )
    modelReferences: list[ModelReference] = Field(
        default_factory=list,
        max_length=10,
        description=(
            "Hugging Face models `org/name[:revision]` downloaded once before workers start, "
            "into the Hugging Face cache layout under huggingface-cache/hub"
        ),
    )
    executionTimeoutMs: int = Field(
        EXECUTION_TIMEOUT_DEFAULT_MS,
        ge=EXECUTION_TIMEOUT_MIN_MS,
        le=MAX_DURATION_MS,
        description="milliseconds a job may run unless its policy says otherwise",
    )
    flashboot: bool = Field(False, description="pre-pull the worker image on eligible nodes")
    idleTimeout: int = Field(5, ge=0, le=3600, description="seconds an idle worker is kept")
    scalerType: ScalerType = Field(ScalerType.QUEUE_DELAY, description="what drives scaling")
    scalerValue: int = Field(
        4, ge=1, le=10_000, description="QUEUE_DELAY: seconds; REQUEST_COUNT: jobs per worker"
    )
    requestTimeoutS: int = Field(
        REQUEST_TIMEOUT_DEFAULT_S,
        ge=1,
        le=3600,
        description="LB: seconds a proxied request may run before it is answered 504",
    )
    lbHoldS: int | None = Field(
        None,
        ge=0,
        le=3600,
        description=(
            "LB: seconds a request waits for a routable worker before it is answered 503 "
            "(lockgate's; RunPod holds 120 s). Unset: the gateway's LOCKGATE_LB_HOLD_S"
        ),
    )
    lbWebSocketMaxS: int = Field(
        LB_WEBSOCKET_MAX_DEFAULT_S,
        ge=1,
        le=86_400,
        description=(
            "LB: seconds a relayed WebSocket may stay open, then closed with 1001 "
            "(lockgate's; RunPod has none)"
        ),
    )
    workersMin: int = Field(0, ge=0, le=1000, description="workers kept running (may be 0)")
    workersMax: int = Field(3, ge=0, le=1000, description="most workers at once")
    batchWorkersMax: int | None = Field(
        None,
        ge=0,
        le=1000,
        description=(
            "most workers of the endpoint's batch pool at once (Batch Jobs run there, apart "
            "from /run traffic: docs/batch-jobs.md); from zero, back to zero when no batch "
            "runs. Unset: workersMax"
        ),
    )
    replicas: int | None = Field(
        None,
        ge=0,
        le=1000,
        description=(
            "workers wanted, set by `kubectl scale`, an HPA or KEDA through the scale "
            "subresource; kept within workersMin..workersMax. Unset: lockgate's scaler decides"
        ),
    )
    onWorkerLost: WorkerLostPolicy = Field(
        WorkerLostPolicy.REQUEUE,
        description=(
            "a running job whose worker was lost (silent past the heartbeat timeout, its "
            "process or pod gone): requeue runs it again on another worker, fail ends it "
            "FAILED with error WORKER_LOST (lockgate's)"
        ),
    )
    requeueMaxRunS: int = Field(
        0,
        ge=0,
        le=MAX_DURATION_MS // 1000,
        description=(
            "with onWorkerLost requeue: a lost job that had run this many seconds or more "
            "ends FAILED with error WORKER_LOST instead of running again; 0: every lost "
            "job is requeued (lockgate's)"
        ),
    )
    warmup: Warmup | None = Field(
        None,
        description=(
            "what each new worker runs before it takes real work: job `inputs` (QUEUE) or an "
            "HTTP `request` (LB); a failing warm-up marks the worker unhealthy"
        ),
    )
    lbResumeWindowS: int = Field(
        LB_RESUME_WINDOW_DEFAULT_S,
        ge=0,
        le=3600,
        description=(
            "LB: seconds a worker removed by a scale-down stays resumable by a "
            "`strict-resume` request (lockgate's; parked: it keeps its memory, on a cluster "
            "its pod); 0: scaled-down workers are gone at once"
        ),
    )
    startupTimeout: int = Field(
        600,
        ge=0,
        le=86_400,
        description=(
            "seconds a new worker may take to become ready (its first job-take, or an LB "
            "worker's first health check answered 200) before it is replaced; 0: no deadline"
        ),
    )
    crashLoopThreshold: int = Field(
        5,
        ge=0,
        le=1000,
        description=(
            "consecutive failed worker starts after which the endpoint starts no worker "
            "(phase CrashLoop) until a new release or a restart; 0: never stop (lockgate's)"
        ),
    )
    source: EndpointSource | None = Field(
        None,
        description=(
            "build the worker from a git repository: {git: {url, ref, dockerfilePath, "
            "contextPath, credentialsSecret, trigger, buildTimeoutMin}}; the workers run "
            "the newest completed build (docs/builds.md)"
        ),
    )

    # The API server enforces this one too (Kubernetes 1.20 has no CEL, but a structural
    # schema may carry value validation): `crds.py` puts it on the CRD's `spec`. Defaults
    # apply first, so a spec without computeType is a GPU one.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"properties": {"computeType": {"enum": [ComputeType.CPU.value]}}},
                {"properties": {"gpuCount": {"minimum": 1}}},
            ]
        },
    )

    @field_validator("networkVolumeId", mode="before")
    @classmethod
    def _no_volume_as_null(cls, value: object) -> object:
        """null is no volume, as a record shows it (RunPod's shape)."""
        return "" if value is None else value

    @model_validator(mode="after")
    def _min_not_above_max(self) -> EndpointSpec:
        if self.workersMin > self.workersMax:
            raise ValueError(
                f"workersMin ({self.workersMin}) must not exceed workersMax ({self.workersMax})"
            )
        return self

    @property
    def initial_workers(self) -> int:
        """Workers a new worker Deployment starts with: `replicas` when set (within the
        bounds), else `workersMin`."""
        wanted = self.workersMin if self.replicas is None else self.replicas
        return max(self.workersMin, min(self.workersMax, wanted))

    @model_validator(mode="after")
    def _lb_scales_on_requests(self) -> EndpointSpec:
        if self.type == EndpointType.LB and self.scalerType != ScalerType.REQUEST_COUNT:
            raise ValueError(
                f"scalerType must be REQUEST_COUNT for a load-balancing endpoint (type LB), "
                f"not {self.scalerType}"
            )
        return self

    @field_validator("warmup")
    @classmethod
    def _warmup_fits_type(cls, warmup: Warmup | None, info: ValidationInfo) -> Warmup | None:
        """Job inputs for a queue endpoint, a request for an LB one (`type` comes first)."""
        kind = info.data.get("type")
        if warmup is not None and kind == EndpointType.LB and warmup.inputs is not None:
            raise ValueError("inputs are for queue endpoints, an LB endpoint's is a request")
        if warmup is not None and kind == EndpointType.QUEUE and warmup.request is not None:
            raise ValueError("a request is for LB endpoints, a queue endpoint's is inputs")
        return warmup

    @model_validator(mode="after")
    def _gpu_endpoints_have_gpus(self) -> EndpointSpec:
        if self.computeType == ComputeType.GPU and self.gpuCount < 1:
            raise ValueError("gpuCount must be at least 1 for a GPU endpoint (computeType GPU)")
        return self


class TemplateCategory(StrEnum):
    """RunPod's template categories: the hardware the image is built for."""

    NVIDIA = "NVIDIA"
    AMD = "AMD"
    CPU = "CPU"


class TemplateSpec(BaseModel):
    """Worker template: what runs in each worker container.

    The management API speaks RunPod's names for some fields (`models.templates`:
    `imageName` is `image`, `dockerEntrypoint` is `command`, `dockerStartCmd` is `args`,
    `containerRegistryAuthId` is `imagePullSecret`); the others have the same name here."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=191, description="display name")
    image: str = Field(..., min_length=1, description="container image of the worker")
    command: list[str] = Field(default_factory=list, description="start command (entrypoint)")
    args: list[str] = Field(default_factory=list, description="arguments of the start command")
    env: podfields.EnvVars = Field(default_factory=dict, description="environment variables")
    ports: list[Annotated[str, Field(pattern=PORT_PATTERN)]] = Field(
        default_factory=list, max_length=32, description="exposed ports: '8000/http' or '22/tcp'"
    )
    containerDiskInGb: int = Field(20, ge=1, le=10_000, description="GiB of ephemeral storage")
    modelUrl: str = Field(
        "", pattern=r"^(https?://\S+)?$", description="downloaded once per node, mounted read-only"
    )
    imagePullSecret: str = Field("", description="name of a docker-registry Secret")
    # -- RunPod's template fields kept and shown (docs/endpoint-reference.md, "Templates")
    volumeInGb: int = Field(0, ge=0, le=10_000, description="RunPod's pod volume (GiB); kept")
    volumeMountPath: str = Field("/workspace", max_length=4096, description="RunPod's; kept")
    readme: str = Field("", max_length=100_000, description="notes shown with the template")
    isServerless: bool = Field(False, description="RunPod's serverless flag; kept and shown")
    category: TemplateCategory = Field(
        TemplateCategory.NVIDIA, description="NVIDIA, AMD or CPU: what the image is built for"
    )
    # -- the pod around the worker (docs/endpoint-reference.md, "Worker pods")
    imagePullSecrets: list[podfields.Name] = Field(
        default_factory=list, max_length=32, description="more docker-registry Secret names"
    )
    memoryInGb: float = Field(
        0, ge=0, le=4096, description="GiB of memory (request = limit); 0: 2 per vCPU, 16 per GPU"
    )
    shmSizeInGb: float = Field(
        0, ge=0, le=4096, description="GiB of /dev/shm (in memory); 0: half of memoryInGb"
    )
    podSecurity: podfields.PodSecurity = Field(
        podfields.PodSecurity.RESTRICTED,
        description="Pod Security Standard the pod passes; baseline: the image's user, root too",
    )
    runAsUser: int = Field(
        10001, ge=1, le=2147483647, description="uid of the worker (restricted; baseline: image's)"
    )
    secretEnv: podfields.SecretEnv = Field(
        default_factory=dict, description="variables read from Secret keys: {NAME: {name, key}}"
    )
    envFromSecrets: list[podfields.WorkerSecretName] = Field(
        default_factory=list, max_length=32, description="Secrets whose every key is a variable"
    )
    tolerations: list[podfields.Toleration] = Field(
        default_factory=list, max_length=32, description="added to the GPU taint's toleration"
    )
    nodeSelector: podfields.Labels = Field(
        default_factory=dict, description="node labels a worker's node must have"
    )
    runtimeClassName: str = Field(
        "", max_length=253, pattern=r"^$|" + podfields.DNS_SUBDOMAIN, description="e.g. nvidia"
    )
    priorityClassName: str = Field(
        "", max_length=253, pattern=r"^$|" + podfields.DNS_SUBDOMAIN, description="pod priority"
    )
    podLabels: podfields.Labels = Field(
        default_factory=dict, description="extra worker pod labels (lockgate's own win)"
    )
    podAnnotations: podfields.Annotations = Field(
        default_factory=dict, description="extra worker pod annotations (lockgate's own win)"
    )

    def account_secrets(self) -> dict[str, str]:
        """The `env` variables whose value is an account secret's reference
        (`{{ RUNPOD_SECRET_<name> }}`), with the secret each names."""
        return secrets.references(self.env)

    def worker_secrets(self) -> list[str]:
        """The Secrets whose data reaches workers (`secretEnv`, `envFromSecrets`, and the
        account secrets `env` refers to), sorted."""
        accounts = {secrets.object_name(n) for n in self.account_secrets().values()}
        named = {ref.name for ref in self.secretEnv.values()} | set(self.envFromSecrets)
        return sorted(named | accounts)

    def secret_uses(self, secret: str) -> list[str]:
        """Where the Template names the Secret `secret` (`secretEnv.NAME`, `envFromSecrets`,
        `env.NAME` for an account secret's)."""
        uses = [f"secretEnv.{var}" for var, ref in self.secretEnv.items() if ref.name == secret]
        uses += [
            f"env.{var}"
            for var, name in self.account_secrets().items()
            if secrets.object_name(name) == secret
        ]
        return uses + (["envFromSecrets"] if secret in self.envFromSecrets else [])

    @model_validator(mode="after")
    def _one_source_per_variable(self) -> TemplateSpec:
        both = sorted(set(self.env) & set(self.secretEnv))
        if both:
            raise ValueError(f"variables set in both env and secretEnv: {', '.join(both)}")
        return self
