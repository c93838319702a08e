"""RunPod's serverless GPU pools: which GPU types (RunPod's type ids, as `gpuTypeIds` names
them) each pool id (`ADA_24`…, as v2's `gpu.pools` and the catalog's `pool` name them)
holds, and its memory.

The table is RunPod's (its SDKs' pool enums and docs/references/gpu-types, late 2026). A v2
endpoint's `gpu.pools` minus `gpu.excludedTypes` is stored as the type ids it leaves
(`types_of`); reading it back groups them again (`pools_of`), so what v1 and kubectl see is
the list of types a worker may get, as ever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Pool:
    """One serverless pool: its GPU type ids and the memory (GB) each has."""

    types: tuple[str, ...]
    memory_gb: int


POOLS: Mapping[str, Pool] = MappingProxyType(
    {
        "AMPERE_16": Pool(
            (
                "NVIDIA RTX A4000",
                "NVIDIA RTX A4500",
                "NVIDIA RTX 4000 Ada Generation",
                "NVIDIA RTX 2000 Ada Generation",
            ),
            16,
        ),
        "AMPERE_24": Pool(("NVIDIA RTX A5000", "NVIDIA L4", "NVIDIA GeForce RTX 3090"), 24),
        "ADA_24": Pool(("NVIDIA GeForce RTX 4090",), 24),
        "ADA_32_PRO": Pool(("NVIDIA GeForce RTX 5090",), 32),
        "AMPERE_48": Pool(("NVIDIA A40", "NVIDIA RTX A6000"), 48),
        "ADA_48_PRO": Pool(("NVIDIA RTX 6000 Ada Generation", "NVIDIA L40", "NVIDIA L40S"), 48),
        "AMPERE_80": Pool(("NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"), 80),
        "ADA_80_PRO": Pool(("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL"), 80),
        "HOPPER_141": Pool(("NVIDIA H200",), 141),
        "BLACKWELL_96": Pool(
            (
                "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            ),
            96,
        ),
        "BLACKWELL_180": Pool(("NVIDIA B200",), 180),
    }
)
POOL_OF: Mapping[str, str] = MappingProxyType(
    {gpu_type: pool_id for pool_id, pool in POOLS.items() for gpu_type in pool.types}
)


def pool_problem(pools: Sequence[str], excluded: Iterable[str]) -> str | None:
    """Why `pools` minus `excluded` is no selection (an unknown pool id, an exclusion that
    is no type of those pools, nothing left), or None."""
    unknown = [p for p in pools if p not in POOLS]
    if unknown:
        return (
            f"gpu.pools: unknown pool id(s) {', '.join(unknown)} "
            f"(pools: {', '.join(POOLS)}; GET /v2/catalog/gpus lists them)"
        )
    offered = {t for p in pools for t in POOLS[p].types}
    stray = [t for t in excluded if t not in offered]
    if stray:
        return f"gpu.excludedTypes: {', '.join(stray)} is no GPU type of the pools {list(pools)}"
    if not offered - set(excluded):
        return "gpu.excludedTypes: the exclusions leave no GPU type in the pools"
    return None


def types_of(pools: Sequence[str], excluded: Iterable[str] = ()) -> list[str]:
    """The GPU type ids that `pools` minus `excluded` leave, pool by pool (a pool id the
    table does not know is kept as written)."""
    left = set(excluded)
    out: list[str] = []
    for pool_id in pools:
        for gpu_type in POOLS[pool_id].types if pool_id in POOLS else (pool_id,):
            if gpu_type not in left and gpu_type not in out:
                out.append(gpu_type)
    return out


def pools_of(gpu_types: Sequence[str]) -> tuple[list[str], list[str]]:
    """`gpu_types` as pools and exclusions: each pool any of them is in, the pool's other
    types excluded. A type in no pool (a cluster's own label value) is its own "pool"."""
    pools: list[str] = []
    for gpu_type in gpu_types:
        pool_id = POOL_OF.get(gpu_type, gpu_type)
        if pool_id not in pools:
            pools.append(pool_id)
    wanted = set(gpu_types)
    excluded = [t for p in pools if p in POOLS for t in POOLS[p].types if t not in wanted]
    return pools, excluded
