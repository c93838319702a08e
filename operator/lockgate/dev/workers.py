"""One dev-mode endpoint's workers: a `LocalProcessPool` and the `LocalAutoscaler` sizing it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from lockgate.dev.launch import Launch
from lockgate.models import EndpointSpec
from lockgate.scaling.autoscaler import LocalAutoscaler, release_exited
from lockgate.scaling.decision import Limits
from lockgate.scaling.local_pool import LineSink, LocalProcessPool, WorkerKeyIssuer
from lockgate.store import JobStore


def limits_of(spec: EndpointSpec) -> Limits:
    """The scaler's limits from an endpoint's settings (`idleTimeout` is in seconds)."""
    return Limits(
        spec.workersMin,
        spec.workersMax,
        float(spec.idleTimeout),
        scaler_type=spec.scalerType,
        scaler_value=spec.scalerValue,
        replicas=spec.replicas,
    )


@dataclass
class LocalWorkers:
    """Worker processes of one endpoint, scaled from its queue until `stop`."""

    endpoint_id: str
    store: JobStore
    pool: LocalProcessPool
    scaler: LocalAutoscaler
    task: asyncio.Task

    @classmethod
    def start(
        cls,
        store: JobStore,
        endpoint_id: str,
        launch: Launch,
        env: dict[str, str],
        limits: Limits,
        keys: WorkerKeyIssuer | None = None,
        sink: LineSink | None = None,
    ) -> LocalWorkers:
        """Start scaling at once (workersMin workers start on the first tick); each line
        a worker writes goes to `sink` too."""
        pool = LocalProcessPool(
            endpoint_id, launch.command, env, cwd=launch.cwd, keys=keys, store=store, sink=sink
        )
        scaler = LocalAutoscaler(store, pool, endpoint_id, limits)
        task = asyncio.create_task(scaler.run(), name=f"lockgate-scaler-{endpoint_id}")
        return cls(endpoint_id, store, pool, scaler, task)

    @property
    def count(self) -> int:
        """Workers started and not asked to stop."""
        return len(self.pool.active)

    async def rescale(self, limits: Limits) -> None:
        """New limits (workersMin/Max, idleTimeout) for the same workers: a new scaler over
        the same pool. Idle times restart from now, so no worker stops early."""
        await self.halt()
        self.scaler = LocalAutoscaler(self.store, self.pool, self.endpoint_id, limits)
        self.task = asyncio.create_task(self.scaler.run(), name=self.task.get_name())

    async def halt(self) -> None:
        """Stop scaling; the workers keep running."""
        self.task.cancel()
        await asyncio.wait({self.task})

    async def stop(self, grace_s: float) -> None:
        """Stop scaling, then the workers: SIGTERM lets each finish its job in hand; those
        still running after `grace_s` seconds are killed with their process group. The
        store then forgets them (a job a killed worker held goes back to the queue)."""
        await self.halt()
        await release_exited(self.store, self.endpoint_id, await self.pool.close(grace_s))
