"""Pure builders: an Endpoint and its Template become Kubernetes objects (plain dicts).

Nothing here talks to a server; `kube.reconcile` applies what these functions return, and
`tests/test_kube_manifests.py` checks that every setting leaves a visible mark.

Objects per endpoint `<id>`, all owned by the Endpoint so that deleting it cascades:
- Deployment `<id>-workers`: the workers; its replica count belongs to the scaler;
- Secret `<id>-worker-key`: the worker key (its digest is registered in Redis);
- DaemonSet `<id>-flashboot` (flashboot only): pre-pulls the worker image (and the model)
  on every node a worker may land on, so a cold start skips the pull;
- NetworkPolicy `<id>-lb-workers` (load-balancing endpoints, when the gateway's pod labels
  are known): only gateway pods reach the workers' HTTP and health ports.

A load-balancing endpoint's (`type: LB`) workers serve HTTP themselves: their container
gets the HTTP port, `PORT`/`PORT_HEALTH`/`HEALTH_CHECK_PATH` and a readiness probe on the
health path, and each pod carries where it listens (`LB_ANNOTATION`), which `kube.lb_pods`
writes to Redis with the pod's IP for the gateways.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lockgate.hfcache import CACHE_DIR, cache_env, fetch_command
from lockgate.kube import gpus
from lockgate.kube.crds import API_VERSION, ENDPOINT
from lockgate.kube.placement import GPU_TYPE_ANNOTATION
from lockgate.kube.settings import OperatorSettings
from lockgate.models import (
    ComputeType,
    EndpointSpec,
    EndpointType,
    TemplateSpec,
    podfields,
    secrets,
)
from lockgate.models.crashloop import CrashLoop
from lockgate.models.podfields import PodSecurity
from lockgate.models.registry_entry import RegistryEntry
from lockgate.models.volumes import VOLUME_MOUNT_PATH, VOLUME_PATH_ENV
from lockgate.workerenv import WORKER_DEFAULTS, resource_env, worker_env, worker_id_env

Obj = dict[str, Any]

ANNOTATION_PREFIX = "lockgate.dev/"
HASH_ANNOTATION = "lockgate.dev/applied-hash"
TEMPLATE_ANNOTATION = "lockgate.dev/template"
KEY_ANNOTATION = "lockgate.dev/worker-key"
# The worker key's full SHA-256 on the worker Deployment: the operator reads no Secret's data, so
# this (and the Redis registry) is where it finds the key's digest again.
KEY_DIGEST_ANNOTATION = "lockgate.dev/worker-key-digest"

# The pod annotations a Template set (comma-separated keys): removed from the Template, they
# are removed from the pods too, while annotations other tools added stay.
POD_ANNOTATIONS_ANNOTATION = "lockgate.dev/template-annotations"
SERVING_CONDITION = "lockgate.dev/Serving"  # a worker pod's readiness gate (the scaler's)
# A worker pod's label: the endpoint version (release) it runs. A new version changes the
# pod template, which is what rolls the workers (`AT_ONCE`).
VERSION_LABEL = "lockgate.dev/version"
# RunPod's rolling rule, for a new version: every old worker is told to stop at once (the
# idle ones exit, a busy one finishes its job or its requests within its termination grace
# period) while the new ones start; no extra worker beyond the replica count is made.
AT_ONCE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}}
# Any other change of the pod template (a GPU type fallback, a new worker key, a timeout):
# Kubernetes' default, the old workers serve until new ones are Ready.
GENTLY = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}


def pod_version(deployment: Mapping[str, Any] | None) -> str | None:
    """The version a worker Deployment's pod template carries (None: none, or no
    Deployment)."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("labels") or {}).get(VERSION_LABEL)


def rollout_strategy(deployed: Mapping[str, Any] | None, version: int) -> Obj:
    """`AT_ONCE` when the Deployment as it is runs another version than `version` (a
    release rolls out), else `GENTLY`."""
    label = pod_version(deployed)
    return AT_ONCE if deployed is not None and label != str(version) else GENTLY


SECRET_KEY = "RUNPOD_AI_API_KEY"  # the Secret's data key holding the worker key
WORKER_CONTAINER = "worker"
MODEL_DIR = "/lockgate/model"  # where workers see the model cache (read-only)
SHUTDOWN_MARGIN_S = 15  # after a job's timeout: time to report the result and exit
KEY_VARIABLES = ("RUNPOD_AI_API_KEY", "LOCKGATE_WORKER_KEY")
SHM_DIR = "/dev/shm"
NETWORK_VOLUME = "runpod-volume"  # the pod volume of an endpoint's networkVolumeId
# Default memory of a worker, GiB: RunPod's compute-optimised CPU ratio (2 per vCPU), and on
# GPU endpoints at least as much host memory per GPU as a 16 GB card holds (models are
# loaded through host memory).
MEMORY_PER_VCPU_GIB = 2
MEMORY_PER_GPU_GIB = 16
HELPER_UID = 10001  # the flashboot helpers' non-root user (any image runs `busybox true` so)
# `lockgate.dev/scaler: external` on an Endpoint hands its worker count to another scaler
# (KEDA, an HPA): the operator's scaler then leaves the Deployment's replicas alone.
SCALER_ANNOTATION = "lockgate.dev/scaler"
EXTERNAL_SCALER = "external"
# Load-balancing workers (RunPod's contract): the HTTP port when the Template names none,
# the health path, and where a pod says it listens: JSON {port, healthPort, path}.
LB_DEFAULT_PORT = 80
LB_HEALTH_PATH = "/ping"
LB_ANNOTATION = "lockgate.dev/lb-worker"
LB_PROBE_PERIOD_S = 2  # the kubelet's readiness probe; routing follows the gateway's polls


@dataclass(frozen=True, slots=True)
class Owner:
    """The Endpoint resource the objects belong to; its name is the endpoint id."""

    name: str
    namespace: str
    uid: str
    created: str = ""  # metadata.creationTimestamp (RFC 3339), when known

    def reference(self) -> Obj:
        return {
            "apiVersion": API_VERSION,
            "kind": ENDPOINT.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


# -- names and labels -----------------------------------------------------------------------


def deployment_name(endpoint_id: str) -> str:
    return f"{endpoint_id}-workers"


def secret_name(endpoint_id: str) -> str:
    return f"{endpoint_id}{podfields.WORKER_KEY_SUFFIX}"


def daemonset_name(endpoint_id: str) -> str:
    return f"{endpoint_id}-flashboot"


def network_policy_name(endpoint_id: str) -> str:
    return f"{endpoint_id}-lb-workers"


# The labels that find an Endpoint's workloads (`selector`, `labels`), for watches,
# selectors and the uninstaller (`kube.watched`, `kube.podlogs`, `kube.uninstall`).
ENDPOINT_LABEL = "lockgate.dev/endpoint"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "lockgate-operator"


def selector(endpoint_id: str, component: str) -> dict[str, str]:
    """The immutable selector of a workload: endpoint and component only."""
    return {ENDPOINT_LABEL: endpoint_id, COMPONENT_LABEL: component}


def labels(endpoint_id: str, component: str) -> dict[str, str]:
    """The standard `app.kubernetes.io/*` labels plus `lockgate.dev/endpoint`."""
    return {
        "app.kubernetes.io/name": "lockgate",
        "app.kubernetes.io/instance": endpoint_id,
        COMPONENT_LABEL: component,
        "app.kubernetes.io/part-of": "lockgate",
        MANAGED_BY_LABEL: MANAGED_BY,
        **selector(endpoint_id, component),
    }


def _metadata(owner: Owner, name: str, component: str, annotations: dict | None = None) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner.name, component),
        "ownerReferences": [owner.reference()],
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


def content_hash(obj: Obj) -> str:
    """A short digest of an object as built: equal hashes mean nothing to apply."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: Obj) -> Obj:
    """A copy of `obj` carrying its content hash as an annotation."""
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = content_hash(obj)
    return out


def hash_of(obj: Obj) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION)


def _theirs(mapping: dict[str, str] | None) -> dict[str, str]:
    """Labels or annotations that another writer added (not ours to remove)."""
    return {k: v for k, v in (mapping or {}).items() if not k.startswith(ANNOTATION_PREFIX)}


def updated(existing: Obj, desired: Obj) -> Obj:
    """`desired`, ready to replace `existing`: it keeps what others own there.

    The replica count stays (the scaler owns it after creation), as do labels and
    annotations other tools added (e.g. `kubectl rollout restart` on the pod template);
    the write is conditional on the resourceVersion that was read."""
    out = copy.deepcopy(desired)
    meta, old_meta = out["metadata"], existing.get("metadata") or {}
    meta["resourceVersion"] = old_meta.get("resourceVersion")
    meta["labels"] = {**_theirs(old_meta.get("labels")), **meta.get("labels", {})}
    meta["annotations"] = {**_theirs(old_meta.get("annotations")), **meta.get("annotations", {})}
    old_spec = existing.get("spec") or {}
    if "replicas" in out.get("spec", {}) and "replicas" in old_spec:
        out["spec"]["replicas"] = old_spec["replicas"]
    if "template" in out.get("spec", {}):
        old = (old_spec.get("template") or {}).get("metadata") or {}
        tpl = out["spec"]["template"].setdefault("metadata", {})
        theirs = _theirs(old.get("annotations"))
        for key in (old.get("annotations") or {}).get(POD_ANNOTATIONS_ANNOTATION, "").split(","):
            theirs.pop(key, None)
        tpl["annotations"] = {**theirs, **tpl.get("annotations", {})}
    return out


# -- the worker key ------------------------------------------------------------------------


def worker_key_secret(owner: Owner, worker_key: str) -> Obj:
    """The Secret workers read their key from."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(owner, secret_name(owner.name), "worker-key"),
        "stringData": {SECRET_KEY: worker_key},
    }


def key_digest_of(deployment: Obj) -> str | None:
    """The worker key's digest a worker Deployment carries, if any."""
    return ((deployment.get("metadata") or {}).get("annotations") or {}).get(KEY_DIGEST_ANNOTATION)


def secret_key(secret: Obj) -> str | None:
    """The worker key held by a Secret as the API returns it; None when it holds none."""
    value = (secret.get("data") or {}).get(SECRET_KEY)
    return base64.b64decode(value).decode() if value else None


# -- environment ---------------------------------------------------------------------------


def template_variable(name: str, value: str) -> Obj:
    """A Template's `env` variable: its value, or, when the value is an account secret's
    reference (`{{ RUNPOD_SECRET_<name> }}`), a `secretKeyRef` to that secret's Secret: the
    value itself is read by the kubelet as the container starts, never written here."""
    secret = secrets.referenced_name(value)
    if secret is None:
        return {"name": name, "value": value}
    ref = {"name": secrets.object_name(secret), "key": secrets.VALUE_KEY}
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def container_env(
    endpoint_id: str, spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> list[Obj]:
    """The worker contract first (so the Template may refer to it as `$(VAR)`), then the
    Template's variables (`env`, then `secretEnv` as `secretKeyRef`s), then
    `WORKER_DEFAULTS` the Template did not set. The contract wins: a Template cannot
    redefine its names (nor can `envFromSecrets`: Kubernetes lets `env` win over `envFrom`)."""
    env: list[Obj] = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        for name in worker_id_env("")
    ]
    for name, value in worker_env(settings.gateway_url, endpoint_id, "").items():
        if name in KEY_VARIABLES:
            ref = {"name": secret_name(endpoint_id), "key": SECRET_KEY}
            env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
        else:
            env.append({"name": name, "value": value})
    extra = {
        **resource_env(spec),
        **_model_env(template),
        **_volume_env(spec),
        **_models_env(spec),
    }
    env += [{"name": k, "value": v} for k, v in extra.items()]
    reserved = {e["name"] for e in env}
    env += [template_variable(k, v) for k, v in template.env.items() if k not in reserved]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": ref.model_dump()}}
        for k, ref in template.secretEnv.items()
        if k not in reserved
    ]
    given = reserved | set(template.env) | set(template.secretEnv)
    defaults = {**WORKER_DEFAULTS, **(lb_env(template) if spec.type == EndpointType.LB else {})}
    env += [{"name": k, "value": v} for k, v in defaults.items() if k not in given]
    return env


# -- scheduling ----------------------------------------------------------------------------


def node_label_value(value: str) -> str:
    """A setting as a node label value: `NVIDIA GeForce RTX 4090` → `NVIDIA-GeForce-RTX-4090`,
    the form NVIDIA's GPU feature discovery writes into `nvidia.com/gpu.product`."""
    return gpus.label_value(value)


def _values(items: list[str]) -> list[str]:
    return list(dict.fromkeys(v for v in map(node_label_value, items) if v))


def _preferences(key: str, items: list[str]) -> list[Obj]:
    """Soft node affinity in the listed order: the first item weighs most (100 … 1)."""
    values = _values(items)
    step = 99 // max(1, len(values) - 1)
    return [
        {
            "weight": max(1, 100 - i * step),
            "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [v]}]},
        }
        for i, v in enumerate(values)
    ]


def worker_gpu_types(spec: EndpointSpec, gpu_type: str | None = None) -> list[str]:
    """The GPU types a worker is required to use: one at a time (`kube.placement` picks it;
    the first listed without a choice), since autoscalers ignore preferences."""
    if gpu_type and gpu_type in spec.gpuTypeIds:
        return [gpu_type]
    return spec.gpuTypeIds[:1]


def _requirements(
    spec: EndpointSpec, settings: OperatorSettings, gpu_types: list[str], *, gpu_node: bool
) -> list[list[Obj]]:
    """Hard node constraints as alternatives (ORed node selector terms of ANDed expressions):
    the GPU types given (else, with `gpu_node`, any node the preset marks as a GPU node),
    "this CUDA or newer", data centers, CPU flavors."""
    common: list[Obj] = []
    alternatives: list[list[Obj]] = []
    if spec.computeType == ComputeType.GPU:
        labelling = settings.gpu_labelling()
        if expression := labelling.type_expression(gpu_types):
            common.append(expression)
        elif gpu_node and spec.gpuCount > 0:
            common.append(dict(labelling.present))
        alternatives = labelling.cuda_alternatives(spec.allowedCudaVersions)
    elif values := _values(spec.cpuFlavorIds):
        common.append({"key": settings.cpu_flavor_label, "operator": "In", "values": values})
    if values := _values(spec.dataCenterIds):
        common.append({"key": settings.datacenter_label, "operator": "In", "values": values})
    if not alternatives:
        return [common] if common else []
    return [[*common, *alt] for alt in alternatives]


def affinity(
    spec: EndpointSpec,
    settings: OperatorSettings,
    gpu_types: list[str] | None = None,
    *,
    gpu_node: bool = False,
) -> Obj | None:
    """Node affinity: required GPU types (`gpu_types`, default: the worker's one type),
    CUDA versions, data centers and CPU flavors (preferred in order); None when nothing
    constrains placement."""
    types = worker_gpu_types(spec) if gpu_types is None else gpu_types
    node: Obj = {}
    terms = _requirements(spec, settings, types, gpu_node=gpu_node)
    if terms:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
        }
    if spec.computeType == ComputeType.CPU:
        preferred = _preferences(settings.cpu_flavor_label, spec.cpuFlavorIds)
        if len(preferred) > 1:  # one choice is already required: preferring it adds nothing
            node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node} if node else None


def tolerations(spec: EndpointSpec, settings: OperatorSettings) -> list[Obj]:
    """GPU nodes are usually tainted with the GPU resource name; tolerate that."""
    if spec.computeType != ComputeType.GPU or spec.gpuCount == 0:
        return []
    return [{"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]


def memory_gib(spec: EndpointSpec, template: TemplateSpec) -> float:
    """A worker's memory: `memoryInGb`, else 2 GiB per vCPU, and 16 per GPU if more."""
    if template.memoryInGb:
        return template.memoryInGb
    gpus = spec.gpuCount if spec.computeType == ComputeType.GPU else 0
    return max(MEMORY_PER_VCPU_GIB * spec.vcpuCount, MEMORY_PER_GPU_GIB * gpus)


def shm_gib(spec: EndpointSpec, template: TemplateSpec) -> float:
    """The size of `/dev/shm`: `shmSizeInGb`, else half the memory (it counts against it)."""
    return template.shmSizeInGb or memory_gib(spec, template) / 2


def mebibytes(gib: float) -> str:
    """GiB as a Kubernetes quantity in whole MiB (`0.5` → `512Mi`)."""
    return f"{max(1, round(gib * 1024))}Mi"


def resources(spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings) -> Obj:
    """GPUs, vCPUs, memory and the container disk (as ephemeral storage) of one worker.

    Memory is requested and limited alike (`memory_gib`): a worker is never the first to be
    evicted for using what it asked for, and an overrun is an OOM kill of this worker only.

    CPU workers get `vcpuCount` as limit, as a CPU flavor would, and request
    `vcpuCount times cpu_request_ratio` (1 by default; less packs more workers on a node);
    GPU workers request `vcpuCount` and have no CPU limit, so a burst of pre-processing is
    not throttled."""
    disk = f"{template.containerDiskInGb}Gi"
    cpu = str(spec.vcpuCount)
    if spec.computeType == ComputeType.CPU and settings.cpu_request_ratio < 1:
        cpu = f"{max(1, round(spec.vcpuCount * settings.cpu_request_ratio * 1000))}m"
    memory = mebibytes(memory_gib(spec, template))
    requests = {"cpu": cpu, "memory": memory, "ephemeral-storage": disk}
    limits = {"memory": memory, "ephemeral-storage": disk}
    if spec.computeType == ComputeType.CPU:
        limits["cpu"] = str(spec.vcpuCount)
    elif spec.gpuCount > 0:
        limits[settings.gpu_resource] = str(spec.gpuCount)
    return {"requests": requests, "limits": limits}


def termination_grace_s(spec: EndpointSpec, settings: OperatorSettings) -> int:
    """Long enough for an in-flight job to reach its execution timeout (a load-balancing
    worker's requests their `requestTimeoutS`), capped."""
    if spec.type == EndpointType.LB:
        wanted = spec.requestTimeoutS + SHUTDOWN_MARGIN_S
    else:
        wanted = math.ceil(spec.executionTimeoutMs / 1000) + SHUTDOWN_MARGIN_S
    return min(wanted, settings.termination_grace_cap_s)


def container_ports(ports: list[str]) -> list[Obj]:
    """`8000/http` → a TCP port named `http-8000`; `22/tcp` → `tcp-22`."""
    out = []
    for port in ports:
        number, kind = port.split("/")
        out.append({"name": f"{kind}-{number}", "containerPort": int(number), "protocol": "TCP"})
    return out


@dataclass(frozen=True, slots=True)
class LbPorts:
    """Where a load-balancing worker serves: `PORT`, `PORT_HEALTH`, `HEALTH_CHECK_PATH`."""

    port: int
    health_port: int
    path: str

    def annotation(self) -> str:
        """The pod annotation `kube.lb_pods` reads back (JSON, keys sorted)."""
        body = {"port": self.port, "healthPort": self.health_port, "path": self.path}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _port_value(value: str | None) -> int | None:
    """A port number from a Template variable; None when it is no valid port."""
    if value is None or not value.strip().isdigit():
        return None
    number = int(value)
    return number if 0 < number < 65536 else None


def lb_ports(template: TemplateSpec) -> LbPorts:
    """The HTTP port (the Template's first `N/http` port, else its `PORT` variable, else
    80), the health port (`PORT_HEALTH`, else the same) and the health path
    (`HEALTH_CHECK_PATH`, else `/ping`): a Template's env overrides each, as on RunPod."""
    http = [int(p.split("/")[0]) for p in template.ports if p.endswith("/http")]
    port = _port_value(template.env.get("PORT")) or (http[0] if http else LB_DEFAULT_PORT)
    health = _port_value(template.env.get("PORT_HEALTH")) or port
    path = template.env.get("HEALTH_CHECK_PATH") or LB_HEALTH_PATH
    return LbPorts(port, health, path if path.startswith("/") else f"/{path}")


def lb_env(template: TemplateSpec) -> dict[str, str]:
    """`PORT`, `PORT_HEALTH`, `HEALTH_CHECK_PATH` of a load-balancing worker."""
    lb = lb_ports(template)
    return {"PORT": str(lb.port), "PORT_HEALTH": str(lb.health_port), "HEALTH_CHECK_PATH": lb.path}


def lb_container_ports(template: TemplateSpec) -> list[Obj]:
    """The Template's ports, plus the HTTP and health ports when it does not list them."""
    ports = container_ports(template.ports)
    listed = {p["containerPort"] for p in ports}
    lb = lb_ports(template)
    for number in dict.fromkeys((lb.port, lb.health_port)):
        if number not in listed:
            ports.append({"name": f"http-{number}", "containerPort": number, "protocol": "TCP"})
    return ports


def lb_readiness_probe(template: TemplateSpec) -> Obj:
    """The kubelet's readiness probe on the health path. It counts 204 (initializing) as
    ready as well as 200, so routing never follows it: the gateways poll the same path and
    route only on 200; the probe makes `kubectl get pods` and rollouts honest."""
    lb = lb_ports(template)
    return {
        "httpGet": {"path": lb.path, "port": lb.health_port, "scheme": "HTTP"},
        "periodSeconds": LB_PROBE_PERIOD_S,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


# -- security ------------------------------------------------------------------------------

SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}
LOCKED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_security_context(template: TemplateSpec) -> Obj:
    """Pod-level: `restricted` runs as a fixed non-root uid (the kubelet refuses to start a
    container as root); `baseline` keeps the image's own user and only sets seccomp."""
    if template.podSecurity == PodSecurity.BASELINE:
        return dict(SECCOMP)
    uid = template.runAsUser
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid, **SECCOMP}


def container_security_context(template: TemplateSpec) -> Obj:
    """Container-level: no privilege escalation and no capabilities under `restricted`;
    `baseline` keeps the runtime's default capabilities (root images may need them)."""
    if template.podSecurity == PodSecurity.BASELINE:
        return {"privileged": False, **SECCOMP}
    return {"runAsNonRoot": True, **LOCKED, **SECCOMP}


def helper_security_context() -> Obj:
    """The flashboot helpers: `restricted`, as a non-root uid that any image can run as."""
    return {"runAsNonRoot": True, "runAsUser": HELPER_UID, "runAsGroup": HELPER_UID, **LOCKED}


# -- model cache ---------------------------------------------------------------------------

# Runs in an init container: the first pod on a node downloads, the others wait on the lock
# and find the file. URL and file name come in as variables, never spliced into the script.
FETCH_SCRIPT = """set -eu
cd /cache
exec 9>.lock
flock 9
if [ ! -f .complete ]; then
  curl -fsSL --retry 5 -o .partial "$MODEL_URL"
  mv .partial "$MODEL_FILE"
  touch .complete
fi
"""


def _model_file(url: str) -> str:
    name = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "model"


def _model_env(template: TemplateSpec) -> dict[str, str]:
    if not template.modelUrl:
        return {}
    return {
        "LOCKGATE_MODEL_URL": template.modelUrl,
        "LOCKGATE_MODEL_DIR": MODEL_DIR,
        "LOCKGATE_MODEL_PATH": f"{MODEL_DIR}/{_model_file(template.modelUrl)}",
    }


def _volume_env(spec: EndpointSpec) -> dict[str, str]:
    return {VOLUME_PATH_ENV: VOLUME_MOUNT_PATH} if spec.networkVolumeId else {}


def _models_env(spec: EndpointSpec) -> dict[str, str]:
    return cache_env(Path(VOLUME_MOUNT_PATH)) if spec.modelReferences else {}


def network_volume_mount() -> Obj:
    """Where a container sees the endpoint's network volume: /runpod-volume, whole."""
    return {"name": NETWORK_VOLUME, "mountPath": VOLUME_MOUNT_PATH}


def network_volume(spec: EndpointSpec) -> Obj:
    """The endpoint's network volume: the PersistentVolumeClaim named by its id."""
    claim = {"claimName": spec.networkVolumeId}
    return {"name": NETWORK_VOLUME, "persistentVolumeClaim": claim}


def model_cache_volume(template: TemplateSpec, settings: OperatorSettings) -> Obj:
    """A node folder per model URL, shared by every pod on the node that needs it."""
    key = hashlib.sha256(template.modelUrl.encode()).hexdigest()[:16]
    path = f"{settings.model_cache_path.rstrip('/')}/{key}"
    return {"name": "model-cache", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def model_fetch_container(template: TemplateSpec, settings: OperatorSettings) -> Obj:
    return {
        "name": "fetch-model",
        "image": settings.model_fetch_image,
        "command": ["sh", "-c", FETCH_SCRIPT],
        "env": [
            {"name": "MODEL_URL", "value": template.modelUrl},
            {"name": "MODEL_FILE", "value": _model_file(template.modelUrl)},
        ],
        "volumeMounts": [{"name": "model-cache", "mountPath": "/cache"}],
        # The kubelet creates the node folder as root; the download must be able to write,
        # and root needs no capability to write what root owns. The hostPath volume is what
        # makes a modelUrl pod `privileged` under Pod Security (docs/security.md).
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, **LOCKED, **SECCOMP},
    }


# -- cached models (modelReferences) --------------------------------------------------------

MODELS_CONTAINER = "fetch-models"
MODELS_CACHE = "models-cache"  # the node's Hugging Face cache (no network volume)
MODELS_CACHE_PATH = f"{VOLUME_MOUNT_PATH}/{CACHE_DIR}"  # where pods see it


def models_on_node(spec: EndpointSpec) -> bool:
    """Whether the endpoint's models go into the node's cache (else its network volume)."""
    return bool(spec.modelReferences) and not spec.networkVolumeId


def models_cache_volume(settings: OperatorSettings) -> Obj:
    """The node folder of the Hugging Face cache, shared by every endpoint on the node."""
    path = f"{settings.model_cache_path.rstrip('/')}/{CACHE_DIR}"
    return {"name": MODELS_CACHE, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def models_mount(spec: EndpointSpec, *, read_only: bool) -> list[Obj]:
    """Where a container sees the cache: the node's at /runpod-volume/huggingface-cache, or
    the network volume (mounted whole at /runpod-volume by the worker's own mount)."""
    if not models_on_node(spec):
        return []
    return [{"name": MODELS_CACHE, "mountPath": MODELS_CACHE_PATH, "readOnly": read_only}]


def _token_env(template: TemplateSpec) -> list[Obj]:
    """A gated model's token: the Template's `HF_TOKEN`, as a value or a Secret's key
    (one in `envFromSecrets` reaches the init container through `envFrom`)."""
    if "HF_TOKEN" in template.secretEnv:
        ref = template.secretEnv["HF_TOKEN"].model_dump()
        return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    if "HF_TOKEN" in template.env:
        return [template_variable("HF_TOKEN", template.env["HF_TOKEN"])]
    return []


def models_fetch_container(
    spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> Obj:
    """The init container that downloads the endpoint's `modelReferences` (lockgate's own
    image, `lockgate fetch-models`) before the worker starts: the pod waits initializing;
    a failure names the reference and the hub's answer in its termination message."""
    fetch_env = {**settings.models_env, **cache_env(Path(VOLUME_MOUNT_PATH), offline=False)}
    container: Obj = {
        "name": MODELS_CONTAINER,
        "image": settings.models_image,
        "command": ["lockgate", *fetch_command(spec.modelReferences, VOLUME_MOUNT_PATH)],
        "env": [{"name": k, "value": v} for k, v in fetch_env.items()] + _token_env(template),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if template.envFromSecrets:
        container["envFrom"] = [{"secretRef": {"name": n}} for n in template.envFromSecrets]
    if models_on_node(spec):
        container["volumeMounts"] = models_mount(spec, read_only=False)
        # The kubelet creates the node folder as root: as for a modelUrl, the download runs
        # as root without capabilities (hostPath makes the pod `privileged` for Pod Security).
        container["securityContext"] = {"runAsUser": 0, "runAsNonRoot": False, **LOCKED, **SECCOMP}
    else:  # the network volume, as the worker's own user (fsGroup owns the claim)
        container["volumeMounts"] = [network_volume_mount()]
        container["securityContext"] = container_security_context(template)
    return container


def model_fetches(
    spec: EndpointSpec,
    template: TemplateSpec,
    settings: OperatorSettings,
    *,
    node_only: bool = False,
) -> tuple[list[Obj], list[Obj]]:
    """The init containers and volumes that fetch a Template's `modelUrl` and an Endpoint's
    `modelReferences`; `node_only`: only what fills the node's caches (flashboot)."""
    init: list[Obj] = []
    volumes: list[Obj] = []
    if template.modelUrl:
        init.append(model_fetch_container(template, settings))
        volumes.append(model_cache_volume(template, settings))
    if models_on_node(spec) or (spec.modelReferences and not node_only):
        init.append(models_fetch_container(spec, template, settings))
    if models_on_node(spec):
        volumes.append(models_cache_volume(settings))
    return init, volumes


# -- workloads -----------------------------------------------------------------------------


def pull_secrets(template: TemplateSpec, settings: OperatorSettings, *, helpers: bool) -> Obj:
    """`imagePullSecrets`: the Template's (`imagePullSecret` then `imagePullSecrets`), and
    the helper images' from the settings when the pod runs a helper image."""
    names = [template.imagePullSecret, *template.imagePullSecrets]
    if helpers:
        names += settings.helper_image_pull_secrets
    unique = [n for n in dict.fromkeys(names) if n]
    return {"imagePullSecrets": [{"name": n} for n in unique]} if unique else {}


def _placement(
    spec: EndpointSpec,
    template: TemplateSpec,
    settings: OperatorSettings,
    gpu_types: list[str],
    *,
    gpu_node: bool = False,
) -> Obj:
    """Pod spec fields shared by workers and the flashboot DaemonSet: where they may run."""
    pod: Obj = {}
    node_affinity = affinity(spec, settings, gpu_types, gpu_node=gpu_node)
    if node_affinity:
        pod["affinity"] = node_affinity
    tol = tolerations(spec, settings)
    tol += [t.manifest() for t in template.tolerations if t.manifest() not in tol]
    if tol:
        pod["tolerations"] = tol
    if template.nodeSelector:
        pod["nodeSelector"] = dict(template.nodeSelector)
    return pod


def worker_container(
    endpoint_id: str, spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> Obj:
    # A crash's last log lines in its status (`lastState.terminated.message`): the
    # `WorkersHealthy` and `CrashLoop` conditions quote them (no termination-message file
    # of the image's own is overridden: it still wins when written).
    container: Obj = {
        "name": WORKER_CONTAINER,
        "image": template.image,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if template.command:
        container["command"] = list(template.command)
    if template.args:
        container["args"] = list(template.args)
    container["env"] = container_env(endpoint_id, spec, template, settings)
    if spec.type == EndpointType.LB:
        container["ports"] = lb_container_ports(template)
        container["readinessProbe"] = lb_readiness_probe(template)
    elif template.ports:
        container["ports"] = container_ports(template.ports)
    container["resources"] = resources(spec, template, settings)
    if template.envFromSecrets:
        container["envFrom"] = [{"secretRef": {"name": n}} for n in template.envFromSecrets]
    mounts = [{"name": "shm", "mountPath": SHM_DIR}]
    if template.modelUrl:
        mounts.append({"name": "model-cache", "mountPath": MODEL_DIR, "readOnly": True})
    if spec.networkVolumeId:
        mounts.append(network_volume_mount())
    mounts += models_mount(spec, read_only=True)
    container["volumeMounts"] = mounts
    container["securityContext"] = container_security_context(template)
    if spec.flashboot:
        container["imagePullPolicy"] = "IfNotPresent"  # use the pre-pulled image, even :latest
    return container


def worker_pod_template(
    owner: Owner,
    spec: EndpointSpec,
    template: TemplateSpec,
    template_name: str,
    settings: OperatorSettings,
    *,
    key_revision: str = "",
    gpu_type: str | None = None,
    version: int = 1,
) -> Obj:
    gpu_types = worker_gpu_types(spec, gpu_type) if spec.computeType == ComputeType.GPU else []
    init, fetch_volumes = model_fetches(spec, template, settings)
    pod: Obj = {
        "containers": [worker_container(owner.name, spec, template, settings)],
        **_placement(spec, template, settings, gpu_types),
        **pull_secrets(template, settings, helpers=bool(init)),  # init: helper images
        "securityContext": pod_security_context(template),
        "terminationGracePeriodSeconds": termination_grace_s(spec, settings),
        "automountServiceAccountToken": False,  # workers talk to the gateway, not to the API
        "enableServiceLinks": False,
    }
    if template.runtimeClassName:
        pod["runtimeClassName"] = template.runtimeClassName
    if template.priorityClassName:
        pod["priorityClassName"] = template.priorityClassName
    if settings.scale_interval_s:
        # Ready only while the scaler keeps the pod in service: it takes a pod out (False)
        # before shrinking, and a ReplicaSet removes pods that are not Ready first, so the
        # pod removed is an idle one on every Kubernetes (pod-deletion-cost needs >= 1.22).
        pod["readinessGates"] = [{"conditionType": SERVING_CONDITION}]
    if init:
        pod["initContainers"] = init
    # /dev/shm in memory, sized (a container runtime's default is 64 MiB, too small for
    # PyTorch data loaders and NCCL); it counts against the memory limit.
    pod["volumes"] = [shm_volume(spec, template), *fetch_volumes]
    if spec.networkVolumeId:
        pod["volumes"].append(network_volume(spec))
    # A new worker key (its Secret was deleted) must reach running workers: roll them.
    ours = {TEMPLATE_ANNOTATION: template_name, KEY_ANNOTATION: key_revision[:12]}
    if gpu_types:  # which type the pod requires: kube.placement reads it back
        ours[GPU_TYPE_ANNOTATION] = gpu_types[0]
    if template.podAnnotations:
        ours[POD_ANNOTATIONS_ANNOTATION] = ",".join(sorted(template.podAnnotations))
    if spec.type == EndpointType.LB:  # where it listens, for kube.lb_pods
        ours[LB_ANNOTATION] = lb_ports(template).annotation()
    return {
        "metadata": {
            "labels": {
                **template.podLabels,
                **labels(owner.name, "worker"),
                VERSION_LABEL: str(version),
            },
            "annotations": {**template.podAnnotations, **ours},
        },
        "spec": pod,
    }


def shm_volume(spec: EndpointSpec, template: TemplateSpec) -> Obj:
    """A memory-backed emptyDir for /dev/shm, limited to `shm_gib`."""
    size = mebibytes(shm_gib(spec, template))
    return {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def scaling_annotations(spec: EndpointSpec) -> dict[str, str]:
    """Endpoint settings that act through the scaler, shown on the Deployment (they do not
    touch the pod template, so changing them restarts no worker)."""
    return {
        "lockgate.dev/display-name": spec.name,
        "lockgate.dev/endpoint-type": str(spec.type),
        "lockgate.dev/request-timeout-s": str(spec.requestTimeoutS),
        "lockgate.dev/workers-min": str(spec.workersMin),
        "lockgate.dev/workers-max": str(spec.workersMax),
        "lockgate.dev/scaler-type": str(spec.scalerType),
        "lockgate.dev/scaler-value": str(spec.scalerValue),
        "lockgate.dev/idle-timeout-s": str(spec.idleTimeout),
        "lockgate.dev/execution-timeout-ms": str(spec.executionTimeoutMs),
        "lockgate.dev/flashboot": str(spec.flashboot).lower(),
        **({"lockgate.dev/lb-hold-s": str(spec.lbHoldS)} if spec.lbHoldS is not None else {}),
        "lockgate.dev/lb-websocket-max-s": str(spec.lbWebSocketMaxS),
        "lockgate.dev/on-worker-lost": str(spec.onWorkerLost),
        "lockgate.dev/requeue-max-run-s": str(spec.requeueMaxRunS),
        "lockgate.dev/startup-timeout-s": str(spec.startupTimeout),
        "lockgate.dev/crash-loop-threshold": str(spec.crashLoopThreshold),
        "lockgate.dev/lb-resume-window-s": str(spec.lbResumeWindowS),
        **({"lockgate.dev/warmup": warmup_summary(spec)} if spec.warmup is not None else {}),
    }


def warmup_summary(spec: EndpointSpec) -> str:
    """The endpoint's warm-up in a few words, for its Deployment's annotations (the
    inputs themselves stay in the Endpoint: they may be large)."""
    assert spec.warmup is not None
    if spec.warmup.request is not None:
        return f"request {spec.warmup.request.method} {spec.warmup.request.path}"
    count = len(spec.warmup.inputs or [])
    return f"{count} input{'s' if count != 1 else ''}"


def worker_deployment(
    owner: Owner,
    spec: EndpointSpec,
    template: TemplateSpec,
    template_name: str,
    settings: OperatorSettings,
    *,
    replicas: int,
    key_revision: str = "",
    gpu_type: str | None = None,
    version: int = 1,
    strategy: Obj | None = None,
) -> Obj:
    """The workers. `replicas` is used at creation only: later the scaler owns it;
    `key_revision` is the worker key's digest: kept whole on the Deployment, and short on
    the pod template, so a new key rolls the workers; `gpu_type` is the one of `gpuTypeIds`
    they require (default: the first); `version` the endpoint's, on each pod; `strategy`
    how they roll (`rollout_strategy`; default `GENTLY`)."""
    annotations = {TEMPLATE_ANNOTATION: template_name, **scaling_annotations(spec)}
    if key_revision:
        annotations[KEY_DIGEST_ANNOTATION] = key_revision
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(owner, deployment_name(owner.name), "worker", annotations),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "strategy": strategy or GENTLY,
            "selector": {"matchLabels": selector(owner.name, "worker")},
            "template": worker_pod_template(
                owner,
                spec,
                template,
                template_name,
                settings,
                key_revision=key_revision,
                gpu_type=gpu_type,
                version=version,
            ),
        },
    }


def flashboot_daemonset(
    owner: Owner, spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> Obj:
    """Pre-pulls the worker image (and fetches the model) on each node a worker may use:
    nodes of any listed GPU type, whichever the fallback requires now (or, without
    `gpuTypeIds`, any node the GPU label preset marks as a GPU node), never on every node.

    A static busybox is copied into a shared folder, then run as `true` inside the worker
    image: that pulls the image whatever it contains (even distroless); a pause container
    keeps the pod, and so the image, on the node at almost no cost.
    """
    helper = {"name": "lockgate-bin", "mountPath": "/lockgate-bin"}
    init = [
        {
            "name": "copy-helper",
            "image": settings.flashboot_helper_image,
            # busybox calls its applets itself: the image needs no `cp` link (a scratch
            # image holding only /bin/busybox works as well as Docker Hub's).
            "command": ["/bin/busybox", "cp", "/bin/busybox", "/lockgate-bin/busybox"],
            "volumeMounts": [helper],
            "securityContext": helper_security_context(),
        },
        {
            "name": "pull-worker-image",
            "image": template.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/lockgate-bin/busybox", "true"],
            "volumeMounts": [helper],
            "securityContext": helper_security_context(),
        },
    ]
    # the node's model cache filled ahead of the first worker
    fetches, fetch_volumes = model_fetches(spec, template, settings, node_only=True)
    init += fetches
    volumes: list[Obj] = [{"name": "lockgate-bin", "emptyDir": {}}, *fetch_volumes]
    pause = {
        "name": "pause",
        "image": settings.pause_image,
        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": helper_security_context(),
    }
    pod = {
        "initContainers": init,
        "containers": [pause],
        "volumes": volumes,
        **_placement(spec, template, settings, list(spec.gpuTypeIds), gpu_node=True),
        **pull_secrets(template, settings, helpers=True),
        # restricted, but for the model fetches (root, hostPath): a modelUrl, modelReferences
        "securityContext": {"runAsNonRoot": True, **SECCOMP},
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _metadata(owner, daemonset_name(owner.name), "flashboot"),
        "spec": {
            "selector": {"matchLabels": selector(owner.name, "flashboot")},
            "template": {"metadata": {"labels": labels(owner.name, "flashboot")}, "spec": pod},
        },
    }


def lb_network_policy(owner: Owner, template: TemplateSpec, settings: OperatorSettings) -> Obj:
    """A load-balancing endpoint's worker pods admit the gateway's pods (`lb_gateway_labels`,
    in any namespace) to their HTTP and health ports, and no one else: the gateway proxies
    to them and polls their health; the kubelet's probes come from the node, which a
    NetworkPolicy always admits. Ingress only."""
    lb = lb_ports(template)
    ports = [{"port": p, "protocol": "TCP"} for p in dict.fromkeys((lb.port, lb.health_port))]
    gateways = {"namespaceSelector": {}, "podSelector": {"matchLabels": settings.lb_gateway_labels}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(owner, network_policy_name(owner.name), "worker"),
        "spec": {
            "podSelector": {"matchLabels": selector(owner.name, "worker")},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [gateways], "ports": ports}],
        },
    }


# -- the registry entry --------------------------------------------------------------------


def scaled_externally(annotations: Mapping[str, str] | None) -> bool:
    """Whether an Endpoint's annotations hand its worker count to another scaler."""
    value = (annotations or {}).get(SCALER_ANNOTATION) or ""
    return value.strip().lower() == EXTERNAL_SCALER


def registry_entry(
    owner: Owner,
    spec: EndpointSpec,
    *,
    key_digest: str,
    job_api_url: str,
    external_scaler: bool = False,
    crash_loop: CrashLoop | None = None,
) -> RegistryEntry:
    """What the gateway (and the scaler) read about the endpoint from Redis; `crash_loop`:
    the one the scaler declared, while it holds (`scaling.crashloop.still_holds`)."""
    return RegistryEntry(
        id=owner.name,
        namespace=owner.namespace,
        uid=owner.uid,
        workerKeyDigest=key_digest,
        jobApiUrl=job_api_url,
        scaler=EXTERNAL_SCALER if external_scaler else None,
        crashLoop=crash_loop,
        **spec.model_dump(mode="json"),
    )
