"""RunPod's GPU types and serverless GPU pools: the vocabulary of `gpuTypeIds`, `gpu.pools`
and `gpu.excludedTypes`, and of the catalog (`/v2/catalog/gpus`).

A type id is RunPod's (`NVIDIA GeForce RTX 4090`); its display name, memory and maker come
from RunPod's GPU types reference (docs.runpod.io/references/gpu-types), and its serverless
pool from RunPod's pool list (docs.runpod.io/serverless/endpoints/endpoint-configurations;
runpod-flash's `POOLS_TO_TYPES` and `GpuGroup`). A type in no serverless pool has pool None,
as RunPod's catalog shows it. Which node label values name a type is `kube.gpus`' table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

NVIDIA, AMD, UNKNOWN = "NVIDIA", "AMD", "UNKNOWN"


@dataclass(frozen=True, slots=True)
class GpuTypeInfo:
    """One GPU type: RunPod's id, display name, memory (GB of VRAM), maker and pool."""

    id: str
    name: str
    memory: int
    manufacturer: str = NVIDIA
    pool: str | None = None


def _types(*rows: tuple[str, str, int, str | None]) -> dict[str, GpuTypeInfo]:
    return {
        row[0]: GpuTypeInfo(row[0], row[1], row[2], AMD if row[0].startswith("AMD") else NVIDIA,
                            row[3])
        for row in rows
    }  # fmt: skip


# id, display name, GB, serverless pool (None: in no pool)
GPU_TYPES: Mapping[str, GpuTypeInfo] = MappingProxyType(
    _types(
        ("NVIDIA RTX A4000", "RTX A4000", 16, "AMPERE_16"),
        ("NVIDIA RTX A4500", "RTX A4500", 20, "AMPERE_16"),
        ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada", 20, "AMPERE_16"),
        ("NVIDIA RTX 2000 Ada Generation", "RTX 2000 Ada", 16, "AMPERE_16"),
        ("NVIDIA RTX A5000", "RTX A5000", 24, "AMPERE_24"),
        ("NVIDIA L4", "L4", 24, "AMPERE_24"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090", 24, "AMPERE_24"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 24, "ADA_24"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090", 32, "ADA_32_PRO"),
        ("NVIDIA A40", "A40", 48, "AMPERE_48"),
        ("NVIDIA RTX A6000", "RTX A6000", 48, "AMPERE_48"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 48, "ADA_48_PRO"),
        ("NVIDIA L40", "L40", 48, "ADA_48_PRO"),
        ("NVIDIA L40S", "L40S", 48, "ADA_48_PRO"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, "AMPERE_80"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, "AMPERE_80"),
        ("NVIDIA H100 PCIe", "H100 PCIe", 80, "ADA_80_PRO"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 80, "ADA_80_PRO"),
        ("NVIDIA H100 NVL", "H100 NVL", 94, "ADA_80_PRO"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", 96, "BLACKWELL_96"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "RTX PRO 6000 WK",
            96,
            "BLACKWELL_96",
        ),
        ("NVIDIA H200", "H200 SXM", 141, "HOPPER_141"),
        ("NVIDIA B200", "B200", 180, "BLACKWELL_180"),
        # In no serverless pool (pods only on RunPod), and the ids lockgate's label tables know.
        ("AMD Instinct MI300X OAM", "MI300X", 192, None),
        ("NVIDIA A30", "A30", 24, None),
        ("NVIDIA A10G", "A10G", 24, None),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 40, None),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 40, None),
        ("NVIDIA B300 SXM6 AC", "B300", 288, None),
        ("NVIDIA GeForce RTX 3070", "RTX 3070", 8, None),
        ("NVIDIA GeForce RTX 3080", "RTX 3080", 10, None),
        ("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti", 12, None),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti", 24, None),
        ("NVIDIA GeForce RTX 4070 Ti", "RTX 4070 Ti", 12, None),
        ("NVIDIA GeForce RTX 4080", "RTX 4080", 16, None),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER", 16, None),
        ("NVIDIA GeForce RTX 5080", "RTX 5080", 16, None),
        ("NVIDIA RTX 4000 SFF Ada Generation", "RTX 4000 Ada SFF", 20, None),
        ("NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada", 32, None),
        ("NVIDIA RTX A2000", "RTX A2000", 6, None),
        ("NVIDIA T4", "T4", 16, None),
        ("Tesla T4", "T4", 16, None),
        ("Tesla P4", "P4", 8, None),
        ("Tesla P100-PCIE-16GB", "P100", 16, None),
        ("Tesla V100-FHHL-16GB", "V100 FHHL", 16, None),
        ("Tesla V100-PCIE-16GB", "Tesla V100", 16, None),
        ("Tesla V100-SXM2-16GB", "V100 SXM2", 16, None),
        ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB", 32, None),
    )
)

# Serverless pool id -> its type ids, in the table's order.
POOLS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        pool: tuple(t.id for t in GPU_TYPES.values() if t.pool == pool)
        for pool in dict.fromkeys(t.pool for t in GPU_TYPES.values() if t.pool)
    }
)


def gpu_type(type_id: str) -> GpuTypeInfo | None:
    """The table's entry for a RunPod type id (surrounding spaces ignored); None if unknown."""
    return GPU_TYPES.get(type_id.strip())


def pool_of(type_id: str) -> str | None:
    """The serverless pool of a type id; None when it is in none (or unknown)."""
    info = gpu_type(type_id)
    return info.pool if info else None


def manufacturer_of(type_id: str) -> str:
    """NVIDIA, AMD or UNKNOWN: the table's, else guessed from the id's first word."""
    if info := gpu_type(type_id):
        return info.manufacturer
    word = type_id.strip().split(" ")[0].split("-")[0].lower()
    return {"nvidia": NVIDIA, "tesla": NVIDIA, "amd": AMD}.get(word, UNKNOWN)


def pool_types(pools: Iterable[str], excluded: Iterable[str] = ()) -> list[str]:
    """The type ids of the given pools minus `excluded`, in pool then table order, without
    repeats; unknown pools give nothing (`catalog.pool_problem` says so)."""
    out = [t for pool in pools for t in POOLS.get(pool.strip(), ())]
    drop = {e.strip() for e in excluded}
    return [t for t in dict.fromkeys(out) if t not in drop]
