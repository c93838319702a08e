"""What every handler shares, stored once on the application under a typed key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from lockgate.gateway.activity import Activity
from lockgate.gateway.auth import Authenticator
from lockgate.gateway.endpoints import EndpointCache
from lockgate.gateway.lb_workers import LbRouter
from lockgate.gateway.limits import Limiter
from lockgate.gateway.metrics import GatewayMetrics
from lockgate.gateway.notify import Notifier
from lockgate.gateway.resources import BodyBudget, HeaderTimeout
from lockgate.gateway.worker_binding import WorkerBinding
from lockgate.settings import Settings
from lockgate.store import JobStore, NewJob, Registry
from lockgate.store.batches import BatchStore


@dataclass
class Gateway:
    """The gateway's collaborators; one per application, no globals."""

    settings: Settings
    store: JobStore
    registry: Registry
    endpoints: EndpointCache
    auth: Authenticator
    limiter: Limiter
    notifier: Notifier
    binding: WorkerBinding
    budget: BodyBudget
    header_timeout: HeaderTimeout
    reads: asyncio.Semaphore  # client reads served at once (`read_concurrency`)
    lb: LbRouter  # load-balancing endpoints' workers, health and held requests
    batches: BatchStore  # Batch Jobs (gateway/batch_api.py, gateway/batch_runner.py)
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    activity: Activity = field(default_factory=Activity)
    draining: bool = False
    # Dev mode: make the endpoint's batch pool, if it has none yet (`dev/batch_pool.py`);
    # the batch runner asks before it runs a batch. None on a cluster: the operator makes
    # it (`kube/batch_pool.py`).
    pool_needed: Callable[[str], Awaitable[None]] | None = None

    async def submit(self, endpoint_id: str, job: NewJob) -> tuple[str, str]:
        """`store.submit`, the job handed over to a job-take of this process that waits
        (`Notifier.hand_over`): its take rides in the submit's batch. Not with replica
        acks: such a submit is sent alone (it waits for the acks) and could come after."""
        self.activity.mark(endpoint_id)
        if not self.store.replication.replicas:
            self.notifier.hand_over(endpoint_id, job.id)
        return await self.store.submit(endpoint_id, job)

    def drain(self) -> None:
        """Answer pending and new long-polls at once (before workers are stopped)."""
        self.draining = True
        self.notifier.wake_everyone()


GATEWAY = web.AppKey("gateway", Gateway)


def gateway_of(request: web.Request) -> Gateway:
    return request.app[GATEWAY]
