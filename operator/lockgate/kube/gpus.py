"""Pure: which node labels name a GPU type, per cluster flavour, and what an Endpoint's
`gpuTypeIds` (RunPod's names, e.g. `NVIDIA GeForce RTX 4090`) and `allowedCudaVersions`
become as node selector expressions.

Presets (`operator.scheduling.gpuLabels` in the chart, `LOCKGATE_GPU_LABELS`):
- `nvidia-gfd`: NVIDIA GPU feature discovery (GPU operator): `nvidia.com/gpu.product` holds
  the product name with spaces as dashes; `nvidia.com/cuda.runtime-version.major/.minor`
  hold the newest CUDA the node's driver runs, so "this CUDA or newer" is checkable;
- `gke`: GKE node pools, `cloud.google.com/gke-accelerator` (`nvidia-l4`, `nvidia-a100-80gb`…);
- `karpenter`: Karpenter on EKS, `karpenter.k8s.aws/instance-gpu-name` (`l4`, `a100`…);
- `custom`: the label named by `gpu_type_label`, values from `gpu_type_values` only.
GKE and Karpenter label no CUDA version: there `allowedCudaVersions` constrains nothing.

An id the table does not know is used as written (as a label value), so a cluster's own
value (`gpuTypeIds: ["nvidia-l4"]` on GKE) works without a mapping.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

Obj = dict[str, Any]

GFD, GKE, KARPENTER, CUSTOM = "nvidia-gfd", "gke", "karpenter", "custom"

# RunPod gpuTypeIds -> GKE `cloud.google.com/gke-accelerator` values.
GKE_VALUES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "NVIDIA A100-SXM4-40GB": ("nvidia-tesla-a100",),
        "NVIDIA A100-PCIE-40GB": ("nvidia-tesla-a100",),
        "NVIDIA A100 80GB PCIe": ("nvidia-a100-80gb",),
        "NVIDIA A100-SXM4-80GB": ("nvidia-a100-80gb",),
        "NVIDIA H100 80GB HBM3": ("nvidia-h100-80gb", "nvidia-h100-mega-80gb"),
        "NVIDIA H100 PCIe": ("nvidia-h100-80gb",),
        "NVIDIA H200": ("nvidia-h200-141gb",),
        "NVIDIA B200": ("nvidia-b200",),
        "NVIDIA L4": ("nvidia-l4",),
        "Tesla T4": ("nvidia-tesla-t4",),
        "NVIDIA T4": ("nvidia-tesla-t4",),
        "Tesla V100-SXM2-16GB": ("nvidia-tesla-v100",),
        "Tesla V100-PCIE-16GB": ("nvidia-tesla-v100",),
        "Tesla P100-PCIE-16GB": ("nvidia-tesla-p100",),
        "Tesla P4": ("nvidia-tesla-p4",),
    }
)

# RunPod gpuTypeIds -> Karpenter (AWS) `karpenter.k8s.aws/instance-gpu-name` values.
KARPENTER_VALUES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "NVIDIA A100-SXM4-40GB": ("a100",),
        "NVIDIA A100-SXM4-80GB": ("a100",),
        "NVIDIA A100 80GB PCIe": ("a100",),
        "NVIDIA H100 80GB HBM3": ("h100",),
        "NVIDIA H200": ("h200",),
        "NVIDIA B200": ("b200",),
        "NVIDIA L4": ("l4",),
        "NVIDIA L40S": ("l40s",),
        "NVIDIA A10G": ("a10g",),
        "Tesla T4": ("t4",),
        "NVIDIA T4": ("t4",),
        "Tesla V100-SXM2-16GB": ("v100",),
        "Tesla V100-SXM2-32GB": ("v100",),
    }
)

# GFD writes the product name; where it differs from RunPod's id, say so.
GFD_VALUES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"NVIDIA T4": ("Tesla-T4",), "NVIDIA H200": ("NVIDIA-H200", "NVIDIA-H200-141GB-HBM3")}
)


def label_value(value: str) -> str:
    """A name as a node label value: `NVIDIA GeForce RTX 4090` → `NVIDIA-GeForce-RTX-4090`,
    the form NVIDIA's GPU feature discovery writes into `nvidia.com/gpu.product`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", value.strip()).strip("-_.")[:63].strip("-_.")


@dataclass(frozen=True)
class Preset:
    """What one cluster flavour labels: the GPU type key, a "has a GPU" expression, the
    CUDA version's major/minor keys (empty: none) and the id → values table."""

    type_label: str
    present: Obj
    cuda_labels: tuple[str, str] | None = None
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        GFD: Preset(
            "nvidia.com/gpu.product",
            {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
            ("nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"),
            GFD_VALUES,
        ),
        GKE: Preset(
            "cloud.google.com/gke-accelerator",
            {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"},
            None,
            GKE_VALUES,
        ),
        KARPENTER: Preset(
            "karpenter.k8s.aws/instance-gpu-name",
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "Exists"},
            None,
            KARPENTER_VALUES,
        ),
    }
)


def present_expression(spec: str) -> Obj:
    """`key` → the key Exists; `key=value` → the key In [value]."""
    key, sep, value = spec.partition("=")
    if sep:
        return {"key": key.strip(), "operator": "In", "values": [value.strip()]}
    return {"key": key.strip(), "operator": "Exists"}


@dataclass(frozen=True)
class GpuLabels:
    """The resolved GPU labelling of this cluster (a preset with the admin's overrides)."""

    type_label: str
    present: Obj
    cuda_labels: tuple[str, str] | None
    values: Mapping[str, tuple[str, ...]]

    @classmethod
    def resolve(
        cls,
        preset: str,
        *,
        type_label: str = "",
        present: str = "",
        cuda_labels: tuple[str, str] | None = None,
        values: Mapping[str, Sequence[str]] | None = None,
    ) -> GpuLabels:
        """`preset` (one of PRESETS, or `custom`) with each non-empty override applied."""
        if preset == CUSTOM:
            if not type_label:
                raise ValueError("the custom GPU label preset needs gpu_type_label")
            base = Preset(type_label, present_expression(type_label))
        elif preset in PRESETS:
            base = PRESETS[preset]
        else:
            raise ValueError(f"unknown GPU label preset {preset!r}: use one of {choices()}")
        table = {**base.values, **{k: tuple(v) for k, v in (values or {}).items()}}
        return cls(
            type_label=type_label or base.type_label,
            present=present_expression(present) if present else base.present,
            cuda_labels=cuda_labels if cuda_labels and all(cuda_labels) else base.cuda_labels,
            values=MappingProxyType(table),
        )

    def label_values(self, gpu_type_ids: Iterable[str]) -> list[str]:
        """The label values naming any of `gpu_type_ids`, in order, without repeats."""
        out: list[str] = []
        for gpu in gpu_type_ids:
            mapped = self.values.get(gpu.strip()) or (gpu,)
            out += [v for v in map(label_value, mapped) if v]
        return list(dict.fromkeys(out))

    def type_expression(self, gpu_type_ids: Iterable[str]) -> Obj | None:
        """Nodes of any of the types; None when no id is given."""
        values = self.label_values(gpu_type_ids)
        return {"key": self.type_label, "operator": "In", "values": values} if values else None

    def cuda_alternatives(self, versions: Iterable[str]) -> list[list[Obj]]:
        """ "The lowest listed CUDA version or newer" as alternatives (ORed node selector
        terms, each a list of ANDed expressions); [] when nothing is asked or the labels
        carry no CUDA version."""
        lowest = min((v for v in map(parse_cuda, versions) if v), default=None)
        if lowest is None or self.cuda_labels is None:
            return []
        (major_key, minor_key), (major, minor) = self.cuda_labels, lowest
        if minor == 0:
            return [[_gt(major_key, major - 1)]]
        same_major = {"key": major_key, "operator": "In", "values": [str(major)]}
        return [[_gt(major_key, major)], [same_major, _gt(minor_key, minor - 1)]]


def _gt(key: str, value: int) -> Obj:
    return {"key": key, "operator": "Gt", "values": [str(value)]}


def parse_cuda(version: str) -> tuple[int, int] | None:
    """`12.4` → (12, 4); `12` → (12, 0); anything else → None."""
    match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?(?:\.\d+)?\s*", version)
    return (int(match[1]), int(match[2] or 0)) if match else None


def choices() -> list[str]:
    return [*PRESETS, CUSTOM]
