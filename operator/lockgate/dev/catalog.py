"""Dev mode's catalog: this machine, the one its workers run on.

One data center, `local`; one CPU flavor, `cpu3c` (`DEV_CPU_FLAVOR`: what a v2 CPU
endpoint names in `cpu[].id` in dev mode) with this machine's CPUs and memory; and its
NVIDIA GPUs when `nvidia-smi` answers, by the name it gives (RunPod's type ids are those
names: `NVIDIA GeForce RTX 4090`) with the CUDA version its driver runs. Dev mode reserves
nothing for its workers (they are processes sharing the machine), so everything is free.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import socket
from collections import Counter

from lockgate.manage.catalog import Machine

DEV_DATA_CENTER = "local"
DEV_CPU_FLAVOR = "cpu3c"
NVIDIA_SMI_TIMEOUT_S = 10.0  # a wedged driver must not hold a catalog answer longer


def memory_gb() -> float:
    """This machine's physical memory in GB (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError, AttributeError):
        return 0.0


async def _run(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), NVIDIA_SMI_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ""
    return out.decode(errors="replace") if proc.returncode == 0 else ""


def parse_gpus(listing: str) -> Counter[tuple[str, int]]:
    """`nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` lines as
    (name, GB) -> how many GPUs."""
    found: Counter[tuple[str, int]] = Counter()
    for line in listing.splitlines():
        name, _, mib = line.rpartition(",")
        if name.strip() and mib.strip().isdigit():
            found[(name.strip(), round(int(mib) / 1024))] += 1
    return found


def parse_cuda(banner: str) -> str:
    """The `CUDA Version: 12.4` of `nvidia-smi`'s banner ('' when absent)."""
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", banner)
    return match[1] if match else ""


class LocalCatalog:
    """This machine as the catalog's one machine (or one per GPU model it has)."""

    def __init__(self, nvidia_smi: str | None = None) -> None:
        self.nvidia_smi = nvidia_smi if nvidia_smi is not None else shutil.which("nvidia-smi")
        self._gpus: tuple[Counter[tuple[str, int]], str] | None = None

    async def _gpu_inventory(self) -> tuple[Counter[tuple[str, int]], str]:
        """The GPUs and CUDA version, asked once (GPUs do not come and go while dev runs)."""
        if self._gpus is None:
            if not self.nvidia_smi:
                self._gpus = (Counter(), "")
            else:
                query = "--query-gpu=name,memory.total"
                listing = await _run(self.nvidia_smi, query, "--format=csv,noheader,nounits")
                self._gpus = (parse_gpus(listing), parse_cuda(await _run(self.nvidia_smi)))
        return self._gpus

    async def machines(self) -> list[Machine]:
        vcpus = float(os.cpu_count() or 1)
        base = Machine(
            name=socket.gethostname() or "localhost",
            data_center=DEV_DATA_CENTER,
            cpu_flavor=DEV_CPU_FLAVOR,
            vcpus=vcpus,
            vcpus_free=vcpus,
            memory_gb=memory_gb(),
        )
        gpus, cuda = await self._gpu_inventory()
        if not gpus:
            return [base]
        # One entry per GPU model; the CPUs are counted once, with the first.
        cpu_less = dataclasses.replace(base, cpu_flavor="", vcpus=0.0, vcpus_free=0.0)
        return [
            dataclasses.replace(
                cpu_less if i else base, name=f"{base.name}/{i}" if i else base.name,
                gpu_type=name, gpu_memory=gb, gpus=n, gpus_free=n, cuda=cuda,
            )
            for i, ((name, gb), n) in enumerate(sorted(gpus.items()))
        ]  # fmt: skip
