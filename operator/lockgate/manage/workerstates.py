"""Pure: a worker's v2 `status` and `isStale`, and the summary of an endpoint's workers.

The status reconciles the worker's lifecycle (its control plane: `WorkerFacts.lifecycle`)
with the live job view (the job store's workers that poll, and the jobs each holds):
- UNHEALTHY, first: marked unhealthy (a failed fitness check, startup deadline or warm-up:
  `JobStore.unhealthy_workers`); it gets no job again and is being replaced;
- THROTTLED: waiting for capacity (its pod unschedulable);
- UNHEALTHY: failing (crash loop, image pull errors, failing probes), unless the job store
  sees it polling right now;
- RUNNING / IDLE: the job store sees it polling, holding jobs or none;
- without the job view (Redis away), a ready worker is IDLE; else INITIALIZING.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lockgate.manage.workersource import READY, THROTTLED, UNHEALTHY

STATUSES = ("RUNNING", "IDLE", "INITIALIZING", "THROTTLED", "UNHEALTHY")


def worker_status(
    lifecycle: str,
    worker_jobs: Mapping[str, int] | None,
    worker_id: str,
    *,
    marked: bool = False,
) -> str:
    """RunPod's worker status; `worker_jobs`: live workers → jobs held (None: unknown);
    `marked`: the job store marked it unhealthy."""
    if marked:
        return "UNHEALTHY"
    if lifecycle == THROTTLED:
        return "THROTTLED"
    if worker_jobs is not None and worker_id in worker_jobs:
        return "RUNNING" if worker_jobs[worker_id] > 0 else "IDLE"
    if lifecycle == UNHEALTHY:
        return "UNHEALTHY"
    if worker_jobs is None and lifecycle == READY:
        return "IDLE"
    return "INITIALIZING"


def is_stale(
    version: int | None, image: str | None, endpoint_version: int, endpoint_image: str | None
) -> bool:
    """Whether a worker runs an older configuration: its version differs from the
    endpoint's; a worker of unknown version is stale when its image differs (RunPod's
    fallback)."""
    if version is not None:
        return version != endpoint_version
    return image is not None and endpoint_image is not None and image != endpoint_image


def summary(statuses: Iterable[str]) -> dict[str, int]:
    """Counts by status (lower-case names) and `total`: they add up to the list."""
    counts = dict.fromkeys((s.lower() for s in STATUSES), 0)
    for status in statuses:
        counts[status.lower()] += 1
    return {**counts, "total": sum(counts.values())}
