"""The automatic fitness checks: memory, disk and, where CUDA is present, its version.

RunPod's variables tune them: `RUNPOD_MIN_MEMORY_GB` (default 4), `RUNPOD_MIN_DISK_PERCENT`
(free space of `/`, default 10), `RUNPOD_MIN_CUDA_VERSION` (default 11.8);
`RUNPOD_SKIP_AUTO_SYSTEM_CHECKS=true` skips them all, `RUNPOD_SKIP_GPU_CHECK=true` the GPU
one. RunPod's network check (a TCP connection to 8.8.8.8:53) is left out: a cluster's
workers often have no way out, and reaching the gateway is what the worker needs.

The decisions are pure functions of what was read; the probes read /proc, the cgroup and
`nvidia-smi` (no torch).
"""

from __future__ import annotations

import asyncio
import functools
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .logs import log

GB = 1024**3
DEFAULT_MIN_MEMORY_GB = 4.0
DEFAULT_MIN_DISK_PERCENT = 10.0
DEFAULT_MIN_CUDA_VERSION = "11.8"
NVIDIA_SMI_TIMEOUT_S = 5.0
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")  # cgroup v2: memory.max, memory.current


@dataclass(frozen=True)
class Limits:
    """What the automatic checks ask for, and which of them run."""

    min_memory_gb: float = DEFAULT_MIN_MEMORY_GB
    min_disk_percent: float = DEFAULT_MIN_DISK_PERCENT
    min_cuda: tuple[int, int] = (11, 8)
    skip_all: bool = False
    skip_gpu: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        """The limits RunPod's variables set; a value that is no number keeps the default
        (with a warning)."""
        cuda = env.get("RUNPOD_MIN_CUDA_VERSION") or DEFAULT_MIN_CUDA_VERSION
        min_cuda = parse_version(cuda)
        if min_cuda is None:
            log.warning(
                "RUNPOD_MIN_CUDA_VERSION %r is no version; using %s", cuda, DEFAULT_MIN_CUDA_VERSION
            )
        return cls(
            min_memory_gb=_number(env, "RUNPOD_MIN_MEMORY_GB", DEFAULT_MIN_MEMORY_GB),
            min_disk_percent=_number(env, "RUNPOD_MIN_DISK_PERCENT", DEFAULT_MIN_DISK_PERCENT),
            min_cuda=min_cuda or (11, 8),
            skip_all=_true(env, "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS"),
            skip_gpu=_true(env, "RUNPOD_SKIP_GPU_CHECK"),
        )


def _true(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        log.warning("%s %r is no number; using %s", name, raw, default)
        return default


# -- decisions (pure)


def parse_version(text: str) -> tuple[int, int] | None:
    """`(major, minor)` of the first `12.2`-like version in `text`."""
    found = re.search(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def available_memory(
    meminfo: str, cgroup_max: str | None, cgroup_current: str | None
) -> int | None:
    """Bytes this worker may still use: `MemAvailable` of /proc/meminfo (the machine's),
    or less when its cgroup's limit (`memory.max` less `memory.current`) leaves less: a
    container sees the host's meminfo. None when neither says."""
    left = []
    if found := re.search(r"^MemAvailable:\s+(\d+)\s*kB", meminfo, re.MULTILINE):
        left.append(int(found[1]) * 1024)
    limit, used = (cgroup_max or "").strip(), (cgroup_current or "").strip()
    if limit.isdigit():
        left.append(int(limit) - (int(used) if used.isdigit() else 0))
    return max(0, min(left)) if left else None


def memory_problem(available_bytes: int | None, min_gb: float) -> str | None:
    """Why the memory left is too little, if it is (unknown passes)."""
    if available_bytes is None or available_bytes / GB >= min_gb:
        return None
    return f"Insufficient memory: {available_bytes / GB:.2f}GB available, {min_gb}GB required"


def disk_problem(total_bytes: int, free_bytes: int, min_percent: float) -> str | None:
    """Why the free share of the disk is too small, if it is."""
    free_percent = 100 * free_bytes / total_bytes if total_bytes > 0 else 0.0
    if free_percent >= min_percent:
        return None
    return (
        f"Insufficient disk space: {free_bytes / GB:.2f}GB free ({free_percent:.1f}%), "
        f"{min_percent}% required"
    )


def cuda_problem(found: tuple[int, int] | None, minimum: tuple[int, int]) -> str | None:
    """Why the CUDA version is too old, if it is (an unknown version passes, as RunPod's)."""
    if found is None or found >= minimum:
        return None
    return f"CUDA version too old: {found[0]}.{found[1]} found, {minimum[0]}.{minimum[1]} required"


def nvidia_smi_cuda(output: str) -> tuple[int, int] | None:
    """The driver's CUDA version in `nvidia-smi`'s table (`CUDA Version: 12.2`)."""
    found = re.search(r"CUDA Version:\s*(\d+\.\d+)", output)
    return parse_version(found[1]) if found else None


# -- probes and the checks


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


async def nvidia_smi() -> str | None:
    """`nvidia-smi`'s output when CUDA is present (it runs and names itself), else None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        process = await asyncio.create_subprocess_exec(
            "nvidia-smi", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(process.communicate(), NVIDIA_SMI_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    text = out.decode(errors="replace")
    return text if process.returncode == 0 and "NVIDIA-SMI" in text else None


def check_memory(limits: Limits) -> None:
    """The memory this worker may still use is at least `RUNPOD_MIN_MEMORY_GB`."""
    meminfo = _read(MEMINFO) or ""
    left = available_memory(meminfo, _read(CGROUP / "memory.max"), _read(CGROUP / "memory.current"))
    if problem := memory_problem(left, limits.min_memory_gb):
        raise RuntimeError(problem)


def check_disk(limits: Limits) -> None:
    """At least `RUNPOD_MIN_DISK_PERCENT` of `/` is free."""
    usage = shutil.disk_usage("/")
    if problem := disk_problem(usage.total, usage.free, limits.min_disk_percent):
        raise RuntimeError(problem)


async def check_gpu(limits: Limits) -> None:
    """Where CUDA is present, its version is at least `RUNPOD_MIN_CUDA_VERSION`."""
    output = await nvidia_smi()
    if output is None:
        log.debug("no CUDA here: the GPU check passes")
        return
    found = nvidia_smi_cuda(output)
    if found is None:
        log.warning("could not read the CUDA version from nvidia-smi; not checked")
    if problem := cuda_problem(found, limits.min_cuda):
        raise RuntimeError(problem)


def automatic_checks(env: Mapping[str, str]) -> list[Callable[[], Any]]:
    """The automatic checks `env` leaves on, in the order they run (each reported by its
    function's name: `check_memory`, `check_disk`, `check_gpu`)."""
    limits = Limits.from_env(env)
    if limits.skip_all:
        log.debug("automatic fitness checks skipped (RUNPOD_SKIP_AUTO_SYSTEM_CHECKS)")
        return []
    chosen = [check_memory, check_disk] + ([] if limits.skip_gpu else [check_gpu])
    return [functools.partial(check, limits) for check in chosen]
