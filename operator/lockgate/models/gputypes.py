"""RunPod's GPU types: each type id's display name, memory and maker, for the catalog
(`/v2/catalog/gpus`).

A type id is RunPod's (`NVIDIA GeForce RTX 4090`), as `gpuTypeIds` and `gpu.excludedTypes`
name it; its display name, memory (GB of VRAM) and maker come from RunPod's GPU types
reference (docs.runpod.io/references/gpu-types). Its serverless pool is `models.gpupools`'
(the one pool table); which node label values name it is `kube.gpus`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from lockgate.models.gpupools import POOL_OF

NVIDIA, AMD, UNKNOWN = "NVIDIA", "AMD", "UNKNOWN"


@dataclass(frozen=True, slots=True)
class GpuTypeInfo:
    """One GPU type: RunPod's id, display name, memory (GB of VRAM) and maker."""

    id: str
    name: str
    memory: int
    manufacturer: str = NVIDIA


def _types(*rows: tuple[str, str, int]) -> dict[str, GpuTypeInfo]:
    maker = {True: AMD, False: NVIDIA}
    return {r[0]: GpuTypeInfo(*r, manufacturer=maker[r[0].startswith("AMD")]) for r in rows}


# id, display name, GB: the types of RunPod's serverless pools first.
GPU_TYPES: Mapping[str, GpuTypeInfo] = MappingProxyType(
    _types(
        ("NVIDIA RTX A4000", "RTX A4000", 16),
        ("NVIDIA RTX A4500", "RTX A4500", 20),
        ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada", 20),
        ("NVIDIA RTX 2000 Ada Generation", "RTX 2000 Ada", 16),
        ("NVIDIA RTX A5000", "RTX A5000", 24),
        ("NVIDIA L4", "L4", 24),
        ("NVIDIA GeForce RTX 3090", "RTX 3090", 24),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 24),
        ("NVIDIA GeForce RTX 5090", "RTX 5090", 32),
        ("NVIDIA A40", "A40", 48),
        ("NVIDIA RTX A6000", "RTX A6000", 48),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 48),
        ("NVIDIA L40", "L40", 48),
        ("NVIDIA L40S", "L40S", 48),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe", 80),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM", 80),
        ("NVIDIA H100 PCIe", "H100 PCIe", 80),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 80),
        ("NVIDIA H100 NVL", "H100 NVL", 94),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", 96),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 WK", 96),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 MaxQ", 96),
        ("NVIDIA H200", "H200 SXM", 141),
        ("NVIDIA B200", "B200", 180),
        # In no serverless pool (pods only on RunPod), and ids lockgate's label tables know.
        ("AMD Instinct MI300X OAM", "MI300X", 192),
        ("NVIDIA A30", "A30", 24),
        ("NVIDIA A10G", "A10G", 24),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 40),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 40),
        ("NVIDIA B300 SXM6 AC", "B300", 288),
        ("NVIDIA GeForce RTX 3070", "RTX 3070", 8),
        ("NVIDIA GeForce RTX 3080", "RTX 3080", 10),
        ("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti", 12),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti", 24),
        ("NVIDIA GeForce RTX 4070 Ti", "RTX 4070 Ti", 12),
        ("NVIDIA GeForce RTX 4080", "RTX 4080", 16),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER", 16),
        ("NVIDIA GeForce RTX 5080", "RTX 5080", 16),
        ("NVIDIA RTX 4000 SFF Ada Generation", "RTX 4000 Ada SFF", 20),
        ("NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada", 32),
        ("NVIDIA RTX A2000", "RTX A2000", 6),
        ("NVIDIA T4", "T4", 16),
        ("Tesla T4", "T4", 16),
        ("Tesla P4", "P4", 8),
        ("Tesla P100-PCIE-16GB", "P100", 16),
        ("Tesla V100-FHHL-16GB", "V100 FHHL", 16),
        ("Tesla V100-PCIE-16GB", "Tesla V100", 16),
        ("Tesla V100-SXM2-16GB", "V100 SXM2", 16),
        ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB", 32),
    )
)


def gpu_type(type_id: str) -> GpuTypeInfo | None:
    """The table's entry for a RunPod type id (surrounding spaces ignored); None if unknown."""
    return GPU_TYPES.get(type_id.strip())


def pool_of(type_id: str) -> str | None:
    """The serverless pool of a type id (`models.gpupools`); None when it is in none."""
    return POOL_OF.get(type_id.strip())


def manufacturer_of(type_id: str) -> str:
    """NVIDIA, AMD or UNKNOWN: the table's, else guessed from the id's first word."""
    if info := gpu_type(type_id):
        return info.manufacturer
    word = type_id.strip().split(" ")[0].split("-")[0].lower()
    return {"nvidia": NVIDIA, "tesla": NVIDIA, "amd": AMD}.get(word, UNKNOWN)
