"""Operator settings from `LOCKGATE_*` environment variables; `lockgate operator` flags win."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from lockgate.kube.gpus import GFD, GpuLabels
from lockgate.store.connection import RedisSettings


class OperatorSettings(RedisSettings):
    """What the operator and the management API need (Redis's in `RedisSettings`)."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", extra="ignore")

    gateway_url: str = Field(
        "http://lockgate-gateway:8080", description="the gateway as workers reach it (in-cluster)"
    )
    base_url: str = Field(
        "http://127.0.0.1:8080", description="public job API base, shown as {base_url}/v2/{id}/"
    )
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated; empty: every namespace"
    )
    endpoint_namespace: str = Field(
        "", description="where the management API creates Endpoints; default: first watched"
    )
    reserved_secrets: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated: lockgate's own Secrets (settings, keys), which no "
        "Template may hand workers; the chart lists its own",
    )
    manage_host: str = "0.0.0.0"
    manage_port: int = Field(8081, description="management API port; 0 disables it")
    liveness_port: int = Field(8082, description="serves /healthz for probes; 0 disables it")
    keys_file: str = Field(
        "", description="JSON list of {name, sha256, scopes, endpoints?}: admin keys beside Redis"
    )
    keys_file_reload_s: float = Field(5.0, description="how often the key file is looked at")
    peering: bool = Field(False, description="kopf peering, for several operator replicas")
    peering_name: str = Field(
        "default", description="kopf's (Cluster)KopfPeering object; the chart names it per release"
    )
    resync_s: float = Field(10.0, gt=0, description="how often each Endpoint is re-reconciled")
    resync_rest_s: float = Field(
        300.0, gt=0,
        description="how often an Endpoint at rest (Ready, no worker, no job) is re-reconciled",
    )  # fmt: skip
    heartbeat_timeout_s: float = Field(30.0, description="a silent worker is not counted after")
    worker_key_settle_s: float = Field(
        60.0, ge=0, description="an Endpoint this young never has its worker key replaced"
    )

    # The scaler: one loop for every Endpoint, reading the gateway's /metrics.
    metrics_url: str = Field("", description="gateway /metrics URL; default: gateway_url/metrics")
    metrics_token: str = Field("", description="bearer token, when the gateway requires one")
    metrics_timeout_s: float = Field(2.0, gt=0, description="a scrape slower than this fails")
    metrics_grace_s: float = Field(
        10.0, ge=0,
        description="scrapes failing for less than this hold every count without a word; "
        "past it, every endpoint's MetricsAvailable turns False",
    )  # fmt: skip
    scale_interval_s: float = Field(1.0, ge=0, description="seconds between decisions; 0: off")
    scale_rest_interval_s: float = Field(
        30.0, gt=0,
        description="seconds between ticks while every endpoint is at rest (at zero, nothing "
        "queued); a queued job, a new worker, a registry change or the event subscription "
        "(re)connecting wakes the loop at once",
    )  # fmt: skip

    # The Kubernetes API client (operator and management API): calls in flight at once (its
    # threads and kept-alive connections), and its client-side rate limit, as client-go's
    # QPS/burst: enough for a thousand endpoints' scale-ups in seconds, paced so a burst of
    # them never floods the API server (docs/scaling.md, "A thousand endpoints").
    kube_concurrency: int = Field(32, ge=1, le=256, description="Kubernetes API calls at once")
    kube_qps: float = Field(
        200.0, ge=0, description="Kubernetes API calls per second on average; 0: no limit"
    )
    kube_burst: int = Field(400, ge=1, description="Kubernetes API calls at once after a lull")

    # Leader election: of several operator replicas, only the Lease holder runs the scaler.
    lease_name: str = Field("lockgate-scaler", description="the scaler's coordination.k8s.io Lease")
    lease_namespace: str = Field(
        "", description="the operator's own namespace; default: manage_namespace()"
    )
    lease_duration_s: int = Field(15, ge=1, description="a Lease not renewed this long expires")
    lease_renew_s: float = Field(5.0, gt=0, description="how often the Lease is read and renewed")

    # Scheduling: node label keys that the Endpoint's lists are matched against.
    gpu_resource: str = "nvidia.com/gpu"
    # GPU placement (kube.gpus, kube.placement): which labels name GPU types, and how long
    # a type may leave pods Unschedulable before the next of `gpuTypeIds` is tried.
    gpu_labels: str = Field(
        GFD, description="GPU label preset: nvidia-gfd, gke, karpenter or custom"
    )
    gpu_type_label: str = Field("", description="node label naming the GPU type; '': preset's")
    gpu_present_label: str = Field(
        "", description="'key' or 'key=value' marking GPU nodes (flashboot); '': preset's"
    )
    gpu_type_values: dict[str, list[str]] = Field(
        default_factory=dict, description="JSON: gpuTypeId -> label values, over the preset's"
    )
    cuda_major_label: str = Field("", description="node label: CUDA major; '': preset's")
    cuda_minor_label: str = Field("", description="node label: CUDA minor; '': preset's")
    gpu_fallback_s: float = Field(
        600.0, gt=0, description="pods Unschedulable this long on a GPU type: try the next"
    )
    gpu_retry_first_s: float = Field(
        1800.0, gt=0, description="on a fallback GPU type this long: try the first again"
    )
    datacenter_label: str = "topology.kubernetes.io/zone"
    cpu_flavor_label: str = "lockgate.dev/cpu-flavor"
    cpu_request_ratio: float = Field(
        1.0, gt=0, le=1, description="CPU workers request vcpuCount times this (limit: vcpuCount)"
    )
    # 600 s: cluster-autoscaler's --max-graceful-termination-sec default; an autoscaler
    # scale-down gives a pod no more than that, whatever its grace period says.
    # The chart's gateway pod labels (with networkPolicy.enabled): each load-balancing
    # endpoint gets a NetworkPolicy admitting only them to its workers. Empty: none.
    lb_gateway_labels: dict[str, str] = Field(
        default_factory=dict, description="JSON: gateway pod labels; LB workers admit only them"
    )
    termination_grace_cap_s: int = Field(
        600, ge=30, description="longest a stopping worker may take to finish its job"
    )

    # Network volumes (`/v1/networkvolumes`): one PersistentVolumeClaim each. Several
    # workers, on several nodes, share a volume only with ReadWriteMany.
    volume_storage_class: str = Field(
        "", max_length=253, description="StorageClass of network volumes; empty: the default"
    )
    volume_access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"] = Field(
        "ReadWriteMany", description="access mode of network volumes"
    )

    # Model cache and flashboot helpers.
    model_cache_path: str = Field(
        "/var/lib/lockgate/models",
        description="node folder holding downloaded models (modelUrl; modelReferences under "
        "huggingface-cache/)",
    )
    # Cached models (an Endpoint's modelReferences): `lockgate fetch-models` in an init
    # container of lockgate's own image (the chart sets the one it runs), into the node's
    # cache under model_cache_path or the endpoint's network volume.
    models_image: str = Field(
        "registry.example.com/lockgate/control-plane:latest",
        min_length=1,
        description="image with `lockgate fetch-models` (the control-plane image)",
    )
    models_env: dict[str, str] = Field(
        default_factory=dict,
        description="JSON: env of the model download (e.g. HF_ENDPOINT for a mirror)",
    )
    # Pinned as the chart pins them (operator.helperImages).
    model_fetch_image: str = (
        "curlimages/curl:8.8.0"
        "@sha256:73e4d532ea62d7505c5865b517d3704966ffe916609bedc22af6833dc9969bcd"
    )
    flashboot_helper_image: str = Field(
        "busybox:1.36-musl@sha256:3c6ae8008e2c2eedd141725c30b20d9c36b026eb796688f88205845ef17aa213",
        description="static busybox: runs `true` inside any worker image",
    )
    pause_image: str = (
        "registry.k8s.io/pause:3.9"
        "@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097"
    )
    helper_image_pull_secrets: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated Secret names for the helper images"
    )

    # In-cluster builds of endpoints with a git `source` (docs/builds.md): off while
    # builds_registry is empty.
    builds_registry: str = Field(
        "", description="registry/prefix the build Jobs push to ('': no in-cluster builds)"
    )
    builds_namespace: str = Field(
        "", description="namespace of the build Jobs ('': the endpoints' namespace)"
    )
    builds_push_secret: str = Field(
        "", description="dockerconfigjson Secret (builds namespace) the builder pushes with"
    )
    builds_insecure_registry: bool = Field(
        False, description="the registry speaks plain HTTP (or an unverified certificate)"
    )
    builder_image: str = Field(
        "registry.example.com/lockgate/builder:latest",
        min_length=1,
        description="image with buildah and git (images/builder.Dockerfile)",
    )
    builds_ttl_s: int = Field(3600, ge=0, description="a finished build Job is deleted after")
    builds_resources: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="JSON: resources of the build container"
    )

    @field_validator("namespaces", "helper_image_pull_secrets", "reserved_secrets", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [n.strip() for n in value.split(",") if n.strip()]
        return value

    @model_validator(mode="after")
    def _renew_within_the_lease(self) -> OperatorSettings:
        if self.lease_renew_s >= self.lease_duration_s:
            raise ValueError("lease_renew_s must be shorter than lease_duration_s")
        return self

    @model_validator(mode="after")
    def _known_gpu_labels(self) -> OperatorSettings:
        self.gpu_labelling()  # an unknown preset, or `custom` without a label, fails at start
        return self

    def gpu_labelling(self) -> GpuLabels:
        """The GPU labelling of this cluster: the preset with the overrides set here."""
        return GpuLabels.resolve(
            self.gpu_labels,
            type_label=self.gpu_type_label,
            present=self.gpu_present_label,
            cuda_labels=(self.cuda_major_label, self.cuda_minor_label),
            values=self.gpu_type_values,
        )

    def scaler_lease_namespace(self) -> str:
        """Where the scaler's Lease lives: `lease_namespace`, else `manage_namespace()`."""
        return self.lease_namespace or self.manage_namespace()

    def manage_namespace(self) -> str:
        """The namespace the management API writes Endpoints into."""
        return self.endpoint_namespace or (self.namespaces[0] if self.namespaces else "default")

    def scrape_url(self) -> str:
        """Where the scaler reads metrics: `metrics_url`, else the gateway Service's."""
        return self.metrics_url or f"{self.gateway_url.rstrip('/')}/metrics"

    def job_api_url(self, endpoint_id: str) -> str:
        return f"{self.base_url.rstrip('/')}/v2/{endpoint_id}/"
