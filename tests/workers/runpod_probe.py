"""A plain runpod-SDK worker that reports what its pod gave it: uid, an environment
variable (`input.var`), the /dev/shm mount and the memory limit of its cgroup."""

import os
from pathlib import Path

import runpod

CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def shm() -> dict:
    """/dev/shm's file system type (from /proc/mounts) and size in bytes."""
    kind = next(
        (line.split()[2] for line in Path("/proc/mounts").read_text().splitlines()
         if line.split()[1] == "/dev/shm"),
        "",
    )  # fmt: skip
    stat = os.statvfs("/dev/shm")
    return {"type": kind, "bytes": stat.f_blocks * stat.f_frsize}


def memory_limit() -> str:
    for path in CGROUP_LIMITS:
        if Path(path).exists():
            return Path(path).read_text().strip()
    return ""


def handler(job):
    var = job["input"].get("var", "")
    return {
        "uid": os.getuid(),
        "env": os.environ.get(var),
        "shm": shm(),
        "memoryLimit": memory_limit(),
    }


runpod.serverless.start({"handler": handler})
