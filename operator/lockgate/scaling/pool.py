"""`WorkerPool`: what the scaler drives. One decision function, many backends
(`LocalProcessPool` for dev mode, `kube.deployment_pool.DeploymentPool` for Kubernetes)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PoolState:
    """A pool at one instant: the size asked for, and the workers that exist now."""

    size: int  # workers asked for and not stopping (Deployment replicas, live processes)
    members: tuple[str, ...] = ()  # their worker ids (pod names, process worker ids)


class WorkerPool(Protocol):
    """Starts and stops the workers of one endpoint; never interrupts a job in hand."""

    async def state(self) -> PoolState:
        """The current size and members."""
        ...

    async def mark_busy(self, busy: Collection[str]) -> None:
        """Tell the backend which members hold jobs (so it removes idle ones first)."""
        ...

    async def resize(self, desired: int, *, idle_first: Sequence[str]) -> None:
        """Grow or shrink to `desired`; when shrinking, stop members of `idle_first` in
        that order. A stopped worker finishes its job in hand before it exits."""
        ...
