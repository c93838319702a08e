"""Where an endpoint's workers and their logs come from: the `WorkerSource` protocol.

A worker is a pod on a cluster (`kube.podworkers`) and a local process in dev mode
(`dev.worker_source`). A source tells what it knows of each worker's lifecycle
(`WorkerFacts`) and reads a worker's log (`LogRead` → `LogBatch`) from the store lockgate
already keeps it in: the kubelet's container log and the pod's Events on a cluster, dev
mode's buffers (`manage.logbook`). What the API makes of it is pure
(`manage.workerstates`, `manage.workerlogs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lockgate.manage.workerlogs import Cursor, LogEvent
from lockgate.models import EndpointRecord

# What the control plane knows of a worker's life (the job store says what it does).
STARTING = "starting"  # scheduled or being scheduled, pulling, starting, not ready yet
READY = "ready"  # up (its pod Ready; a local process started)
THROTTLED = "throttled"  # waiting for capacity: no node fits it
UNHEALTHY = "unhealthy"  # crash loop, image pull errors, failing probes


class WorkerNotFound(LookupError):
    """The endpoint has no such worker (or none whose log can still be read)."""


class WorkerStopper(Protocol):
    """A `WorkerSource` that can stop one worker (dev mode's; a cluster's cannot yet)."""

    async def stop(self, endpoint_id: str, worker_id: str, *, restart: bool) -> None:
        """Stop one worker as a scale-down does (no new job; the job in hand finishes, then
        it exits); `restart`: start a fresh one in its place at once. Raises
        `WorkerNotFound` for a worker that is not running (or already stopping)."""
        ...


@dataclass(frozen=True)
class WorkerFacts:
    """One worker as its control plane sees it; None where it cannot tell."""

    id: str
    lifecycle: str  # STARTING, READY, THROTTLED or UNHEALTHY
    version: int | None = None  # the endpoint version it runs
    image: str | None = None
    gpu_count: int = 0
    gpu_type: str | None = None  # RunPod's GPU type id
    datacenter: str | None = None
    started_ms: int | None = None  # epoch ms
    node: str | None = None  # the node it runs on (a pod's nodeName; dev mode: this host)


@dataclass(frozen=True)
class LogRead:
    """What to read of one worker's log: `sources`, and either the events past `cursor`
    (at most `limit`) or, without one, the last `tail`."""

    sources: tuple[str, ...]
    cursor: Cursor | None = None
    tail: int = 0
    limit: int = 500


@dataclass(frozen=True)
class LogBatch:
    """Events read (merged, oldest first); `start`: the reader's cursor past the whole log
    as read (a tail's start); `alive`: whether the worker may write more (False: gone,
    every line it wrote is in the store)."""

    events: list[LogEvent]
    start: Cursor
    alive: bool


class WorkerSource(Protocol):
    """Workers and worker logs of this control plane's endpoints."""

    async def workers(self, endpoint: EndpointRecord) -> list[WorkerFacts]:
        """The endpoint's current workers (scaled-down and exited ones left out)."""
        ...

    async def read(self, endpoint_id: str, worker_id: str, read: LogRead) -> LogBatch:
        """A worker's log; raises `WorkerNotFound`."""
        ...
