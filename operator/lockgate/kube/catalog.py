"""The catalog's machines on a cluster: its nodes, read through the labels lockgate already
places workers by (`kube.gpus`, `OperatorSettings`), with what their pods hold now.

- GPU type: the node's value of the preset's type label (`gpuLabels`, `gpuTypeLabel`), read
  back into RunPod's type id through the same table that turns ids into label values
  (the preset's plus `gpuTypeValues`); a value two ids share (`a100` on Karpenter) is
  told apart by the node's GPU memory label where there is one, else the first id is
  taken; a value no id maps to is the type id as written (as `gpuTypeIds` takes it);
- GPUs: the node's allocatable `gpuResource` (`nvidia.com/gpu`), free = that minus what
  bound, unfinished pods request; a cordoned or NotReady node has none free;
- CUDA: the preset's CUDA major/minor labels (none on GKE and Karpenter);
- data center: `datacenterLabel` (the zone); region: `topology.kubernetes.io/region`;
  country: `lockgate.dev/country`, else the middle of a RunPod-style zone (`EU-RO-1`);
- CPU flavor: `cpuFlavorLabel`; vCPUs and memory: allocatable, free as for GPUs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.utils import parse_quantity

from lockgate.kube.cluster import Cluster
from lockgate.kube.gpus import GpuLabels
from lockgate.kube.settings import OperatorSettings
from lockgate.manage.catalog import Machine
from lockgate.models.gputypes import GPU_TYPES

Obj = dict[str, Any]
REGION_LABEL = "topology.kubernetes.io/region"
COUNTRY_LABEL = "lockgate.dev/country"  # ISO 3166-1 alpha-2, for `countryCodes`
# Where a node says how much memory one GPU has (MiB): GPU feature discovery, Karpenter.
GPU_MEMORY_LABELS = ("nvidia.com/gpu.memory", "karpenter.k8s.aws/instance-gpu-memory")
_RUNPOD_ZONE = re.compile(r"[A-Z]{2}-([A-Z]{2})-\d+")


def _quantity(value: object) -> float:
    try:
        if value is None:
            return 0.0
        return float(parse_quantity(str(value)))  # type: ignore[no-untyped-call]
    except ValueError:
        return 0.0


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What a pod holds of its node: per resource, the containers' requests summed (a limit
    alone counts as the request, as Kubernetes defaults it) or the largest init
    container's, whichever is more, plus the pod's overhead."""
    spec = pod.get("spec") or {}

    def need(container: Mapping[str, Any]) -> dict[str, float]:
        res = container.get("resources") or {}
        return {k: _quantity(v) for k, v in {**(res.get("limits") or {}),
                                              **(res.get("requests") or {})}.items()}  # fmt: skip

    total: dict[str, float] = defaultdict(float)
    for container in spec.get("containers") or []:
        for k, v in need(container).items():
            total[k] += v
    for container in spec.get("initContainers") or []:
        for k, v in need(container).items():
            total[k] = max(total[k], v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] += _quantity(v)
    return dict(total)


def label_types(labelling: GpuLabels) -> dict[str, list[str]]:
    """GPU label value -> the type ids it names, the admin's map (`gpuTypeValues`) first:
    `GpuLabels.label_values` read backwards."""
    out: dict[str, list[str]] = defaultdict(list)
    for type_id in dict.fromkeys([*labelling.values, *GPU_TYPES]):
        for value in labelling.label_values([type_id]):
            out[value].append(type_id)
    return dict(out)


def gpu_type_of(
    labels: Mapping[str, str], labelling: GpuLabels, table: Mapping[str, list[str]]
) -> str:
    """RunPod's type id for a node's GPU label ('' when the node has none); `table` is
    `label_types(labelling)`."""
    value = labels.get(labelling.type_label, "")
    candidates = table.get(value, [])
    if len(candidates) > 1 and (mib := _gpu_mib(labels)):
        sized = [t for t in candidates if t in GPU_TYPES]
        by_size = sorted(sized, key=lambda t: abs(GPU_TYPES[t].memory - mib / 1024))
        candidates = by_size or candidates
    return candidates[0] if candidates else value


def _gpu_mib(labels: Mapping[str, str]) -> int:
    return int(next((labels[k] for k in GPU_MEMORY_LABELS if labels.get(k, "").isdigit()), "0"))


def _usable(node: Mapping[str, Any]) -> bool:
    """A node new pods may land on: not cordoned, and Ready (when it says)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True


def machine_of(
    node: Mapping[str, Any],
    held: Mapping[str, float],
    settings: OperatorSettings,
    table: dict[str, list[str]] | None = None,
) -> Machine:
    """One node as a catalog machine; `held` is what its pods request (`pod_requests`),
    `table` the labelling's `label_types` (computed when not given)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    labelling = settings.gpu_labelling()
    table = label_types(labelling) if table is None else table
    usable = _usable(node)
    gpus = int(_quantity(allocatable.get(settings.gpu_resource)))
    vcpus = _quantity(allocatable.get("cpu"))
    zone = labels.get(settings.datacenter_label, "")
    runpod_zone = _RUNPOD_ZONE.fullmatch(zone)
    cuda = ""
    if labelling.cuda_labels:
        major, minor = (labels.get(k, "") for k in labelling.cuda_labels)
        cuda = f"{major}.{minor or 0}" if major.isdigit() else ""
    return Machine(
        name=(node.get("metadata") or {}).get("name", ""),
        data_center=zone,
        region=labels.get(REGION_LABEL, ""),
        country=labels.get(COUNTRY_LABEL, "") or (runpod_zone[1] if runpod_zone else ""),
        gpu_type=gpu_type_of(labels, labelling, table) if gpus else "",
        gpu_memory=round(_gpu_mib(labels) / 1024),
        gpus=gpus,
        gpus_free=max(0, gpus - int(held.get(settings.gpu_resource, 0))) if usable else 0,
        cuda=cuda,
        cpu_flavor=labels.get(settings.cpu_flavor_label, ""),
        vcpus=vcpus,
        vcpus_free=max(0.0, vcpus - held.get("cpu", 0.0)) if usable else 0.0,
        memory_gb=_quantity(allocatable.get("memory")) / 1024**3,
    )


def machines_from(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    settings: OperatorSettings,
) -> list[Machine]:
    """The nodes as machines, each with what the bound, unfinished `pods` hold of it."""
    held: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            for k, v in pod_requests(pod).items():
                held[node][k] += v
    table = label_types(settings.gpu_labelling())
    return [
        machine_of(n, held.get((n.get("metadata") or {}).get("name", ""), {}), settings, table)
        for n in nodes
    ]


class KubernetesCatalog:
    """The cluster's nodes as the catalog's machines (`manage.catalog.Catalog`): each call
    lists the nodes and the bound pods (a ClusterRole's `list` on both)."""

    def __init__(self, cluster: Cluster, settings: OperatorSettings) -> None:
        self.cluster = cluster
        self.settings = settings

    async def machines(self) -> list[Machine]:
        nodes = await self.cluster.list_nodes()
        pods = await self.cluster.list_bound_pods()
        return machines_from(nodes, pods, self.settings)
