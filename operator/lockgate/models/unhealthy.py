"""Why a worker was taken out of service for good: the record every surface shows.

A worker is marked unhealthy when it reports a failing fitness check (the runpod SDK's
`status=unhealthy` ping), when it did not become ready within its endpoint's
`startupTimeout`, or when its warm-up failed. The gateway then gives it no job (its id is
released for good, its held jobs requeued) and its control plane replaces it (the pod
deleted, the local process restarted). The record stays in `lg:{ep}:un` for an hour, for
`/health`, the v2 workers list, the Endpoint's conditions and events, and the console.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# How much of a reason is kept (RunPod's SDK sends at most 256 characters).
REASON_CHARS = 512
# The longest fitness check name kept (the SDK sends the check function's `__name__`).
CHECK_CHARS = 128

UnhealthyKind = Literal["fitness", "startup", "warmup"]


class UnhealthyWorker(BaseModel):
    """One worker marked unhealthy, and why."""

    model_config = ConfigDict(extra="ignore")

    worker: str
    kind: UnhealthyKind
    reason: str = Field(max_length=REASON_CHARS)
    check: str | None = None  # a fitness check's name (`check_gpu`)
    at: int  # epoch ms

    def text(self) -> str:
        """The reason in one line, as shown beside the worker."""
        where = {"fitness": "fitness check", "startup": "startup", "warmup": "warm-up"}[self.kind]
        named = f" {self.check}" if self.check else ""
        return f"{where}{named} failed: {self.reason}"
