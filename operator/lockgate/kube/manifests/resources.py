"""What one worker gets: GPUs, vCPUs, memory, `/dev/shm`, disk, and the grace period in
which it finishes its job."""

from __future__ import annotations

import math

from lockgate.kube.manifests.names import Obj
from lockgate.kube.settings import OperatorSettings
from lockgate.models import ComputeType, EndpointSpec, EndpointType, TemplateSpec

SHUTDOWN_MARGIN_S = 15  # after a job's timeout: time to report the result and exit
# Default memory of a worker, GiB: RunPod's compute-optimised CPU ratio (2 per vCPU), and on
# GPU endpoints at least as much host memory per GPU as a 16 GB card holds (models are
# loaded through host memory).
MEMORY_PER_VCPU_GIB = 2
MEMORY_PER_GPU_GIB = 16


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
