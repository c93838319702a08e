"""Where a worker (or the flashboot DaemonSet's pod) may run: node affinity for GPU types,
CUDA versions, data centers and CPU flavors, and the GPU taint's toleration."""

from __future__ import annotations

from lockgate.kube import gpus
from lockgate.kube.manifests.names import Obj
from lockgate.kube.settings import OperatorSettings
from lockgate.models import ComputeType, EndpointSpec


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
