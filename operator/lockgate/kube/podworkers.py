"""Workers on Kubernetes: an endpoint's worker pods as v2 workers, and their logs (a
`WorkerSource`).

A worker is a pod labelled as the endpoint's worker, in the namespace the management API
serves; its id is the pod name. Its lifecycle comes from the pod as the scheduler and
kubelet wrote it (`kube.podstates`: unschedulable → throttled; crash loop, image pull or
config errors, or restarted and not ready → unhealthy), its GPU type and data center from
its node's labels (`kube.gpus`, `datacenterLabel`), its version from the pod's
`lockgate.dev/version` label (the release its pod template was made for). A node's GPU
type is read as the catalog reads it (`kube.catalog.gpu_type_of`): a catalog id.

Its `container` log is the kubelet's log of the worker container, read through the API
with timestamps (each line's time, to the nanosecond, is where the line is: a position
stays the same across a restart of `lockgate manage`). Its `system` log is the pod's
Events (Scheduled, Pulling, Started, Unhealthy probes, BackOff…) and the container's
terminations (OOMKilled, exit codes) from its status. A pod that is gone has no log left.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lockgate.kube.catalog import gpu_type_of, label_types
from lockgate.kube.cluster import Cluster, ClusterError
from lockgate.kube.gpus import GpuLabels
from lockgate.kube.lb_pods import parked_until
from lockgate.kube.manifests.names import VERSION_LABEL, WORKER_CONTAINER
from lockgate.kube.podlogs import worker_selector
from lockgate.kube.podstates import pod_problem
from lockgate.manage.workerlogs import (
    CONTAINER,
    SYSTEM,
    LogEvent,
    after,
    last,
    newest,
    numbered,
)
from lockgate.manage.workersource import (
    READY,
    STARTING,
    UNHEALTHY,
    LogBatch,
    LogRead,
    WorkerFacts,
    WorkerNotFound,
)
from lockgate.models import EndpointRecord
from lockgate.store import JobStore
from lockgate.timestamps import epoch_ms, stamp_ns

log = logging.getLogger("lockgate.manage")

Obj = Mapping[str, Any]
# A read from a cursor starts this long before it (the kubelet cuts by whole seconds, its
# clock may differ from ours a little): every line of the cursor's millisecond is read.
MARGIN_S = 2
LOG_BYTES = 4 * 1024 * 1024  # read at most this much of a container's log at a time
TAIL_MARGIN = 64  # a tail reads this many lines more: its first millisecond may be cut
NODE_TTL_S = 60.0  # the nodes' labels are read again after this long


def _worker_container(pod: Obj, part: str) -> Obj:
    """The worker container's entry of `spec.containers` or `status.containerStatuses`."""
    where = pod.get("spec") if part == "containers" else pod.get("status")
    entries: list[Obj] = (where or {}).get(part) or []
    return next((e for e in entries if e.get("name") == WORKER_CONTAINER), {})


def gpu_count(pod: Obj) -> int:
    """GPUs the worker container asks for (any `<vendor>/gpu` resource)."""
    limits = (_worker_container(pod, "containers").get("resources") or {}).get("limits") or {}
    return sum(int(v) for k, v in limits.items() if k.endswith("/gpu") and str(v).isdigit())


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def lifecycle(pod: Obj, endpoint: Obj) -> str:
    """The pod's lifecycle as a worker's (`manage.workersource`)."""
    if problem := pod_problem(pod, endpoint):
        return problem.state  # "throttled" or "unhealthy"
    if _ready(pod):
        return READY
    if _worker_container(pod, "containerStatuses").get("restartCount", 0) > 0:
        return UNHEALTHY  # it failed (a liveness probe, an exit) and is not ready again
    return STARTING


def version(pod: Obj) -> int | None:
    """The endpoint version (release) the pod runs: its `lockgate.dev/version` label."""
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(VERSION_LABEL, "")
    return int(raw) if str(raw).isdigit() else None


def pod_facts(
    pod: Obj, endpoint: Obj, node_labels: Mapping[str, str], gpus: GpuLabels, zone_label: str
) -> WorkerFacts:
    """A worker pod as a v2 worker (its node's labels: {} when unknown)."""
    gpu_type = gpu_type_of(node_labels, gpus, label_types(gpus)) or None
    status = pod.get("status") or {}
    started = status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    return WorkerFacts(
        id=pod["metadata"]["name"],
        lifecycle=lifecycle(pod, endpoint),
        version=version(pod),
        image=_worker_container(pod, "containers").get("image"),
        gpu_count=gpu_count(pod),
        gpu_type=gpu_type,
        datacenter=node_labels.get(zone_label) or None,
        started_ms=epoch_ms(started),
        node=(pod.get("spec") or {}).get("nodeName") or None,
    )


def current(pods: Sequence[Obj]) -> list[Obj]:
    """The pods that are workers now: not ended (a Succeeded or Failed pod runs nothing)."""
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def log_lines(text: str) -> list[tuple[int, str]]:
    """`timestamps=true` log text as (epoch ms, line); a last line without its line break
    (a read cut by its byte limit) is left for the next read."""
    lines = text.split("\n")
    out = []
    for raw in lines[:-1]:
        stamp, _, rest = raw.partition(" ")
        if (ns := stamp_ns(stamp)) is not None:  # else not a timestamped line (cannot be)
            out.append((ns // 1_000_000, rest.rstrip("\r")))
    return out


def _event_ms(event: Obj) -> int | None:
    return epoch_ms(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def system_lines(events: Sequence[Obj], pod: Obj) -> list[tuple[int, str]]:
    """The pod's lifecycle as (epoch ms, line), oldest first: its Events (at their latest
    time, to the second: the kubelet stamps its own to the second, the scheduler its
    `Scheduled` to the microsecond, and Event names grow with their creation time, so they
    break ties within a second in order) and the worker container's terminations
    (OOMKilled, an exit code), which have no Event."""
    found: list[tuple[int, str, str]] = []
    for event in events:
        ms = _event_ms(event)
        if ms is None:
            continue
        ms -= ms % 1000
        count = event.get("count") or 1
        text = f"{event.get('reason', '')}: {event.get('message', '')}".strip()
        found.append((ms, event["metadata"].get("name", ""), text + (f" (x{count})" * (count > 1))))
    entry = _worker_container(pod, "containerStatuses")
    for state in (entry.get("lastState") or {}, entry.get("state") or {}):
        ended = state.get("terminated") or {}
        if (ms := epoch_ms(ended.get("finishedAt"))) is not None:
            what = f"{ended.get('reason') or 'Terminated'} (exit code {ended.get('exitCode')})"
            found.append((ms, "~", f"container {WORKER_CONTAINER} terminated: {what}"))
    return [(ms, text) for ms, _, text in sorted(set(found))]


def log_options(read: LogRead, now_ms: int) -> dict[str, Any]:
    """`read_namespaced_pod_log` options for a read: the last lines of a tail (and some
    more: its first millisecond's lines may be cut), else from a little before the
    cursor's container position (or the log's start), up to `LOG_BYTES`."""
    options: dict[str, Any] = {"container": WORKER_CONTAINER, "timestamps": True}
    if read.cursor is None:
        options["tail_lines"] = read.tail + TAIL_MARGIN
        return options
    options["limit_bytes"] = LOG_BYTES
    start = read.cursor.after.get(CONTAINER)
    if start is not None:
        options["since_seconds"] = max(1, math.ceil((now_ms - start.ms) / 1000) + MARGIN_S)
    return options


class KubernetesWorkers:
    """A `WorkerSource` over the worker pods of one namespace."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        gpus: GpuLabels,
        zone_label: str,
        store: JobStore | None = None,
    ) -> None:
        self.cluster = cluster
        self.store = store  # where a stop or restart of one worker is asked (None: refused)
        self.namespace = namespace
        self.gpus = gpus
        self.zone_label = zone_label
        self._nodes: dict[str, dict[str, str]] = {}  # name -> labels, read at `_nodes_at`
        self._nodes_at = -math.inf

    async def _pods(self, endpoint_id: str) -> list[Obj]:
        pods = await self.cluster.list_objects("Pod", self.namespace, worker_selector(endpoint_id))
        return sorted(current(pods), key=lambda p: p["metadata"]["name"])

    async def _node_labels(self, name: str | None) -> dict[str, str]:
        """A node's labels ({} when unknown, or when this account may not list nodes: the
        chart's ClusterRole for the catalog lets it)."""
        if not name:
            return {}
        if time.monotonic() - self._nodes_at >= NODE_TTL_S or name not in self._nodes:
            try:
                nodes = await self.cluster.list_nodes()
            except ClusterError as err:
                log.debug("nodes not read: %s", err)
                nodes = []
            self._nodes = {
                n["metadata"]["name"]: dict(n["metadata"].get("labels") or {}) for n in nodes
            }
            self._nodes_at = time.monotonic()
        return self._nodes.get(name, {})

    async def stop(self, endpoint_id: str, worker_id: str, *, restart: bool) -> None:
        """Ask the operator to stop one worker pod of the endpoint, or to replace it
        (`restart`). It gets no new job at once; the operator's scaler deletes the pod at
        its next tick (`DeploymentPool.act_on_asks`): this account
        needs no right on pods beyond reading them. WorkerNotFound unless it is a live,
        unparked worker pod of this endpoint (one being deleted is stopping already)."""
        if self.store is None:
            raise WorkerNotFound(worker_id)
        if not any(
            p["metadata"]["name"] == worker_id
            and not p["metadata"].get("deletionTimestamp")
            and parked_until(p) is None
            for p in await self._pods(endpoint_id)
        ):
            raise WorkerNotFound(worker_id)
        if restart:
            await self.store.refresh_worker(endpoint_id, worker_id)
        else:
            await self.store.ask_stop(endpoint_id, worker_id)

    async def workers(self, endpoint: EndpointRecord) -> list[WorkerFacts]:
        settings = endpoint.model_dump(mode="json")  # what `pod_problem` names
        out = []
        for pod in await self._pods(endpoint.id):
            if parked_until(pod) is not None:  # scaled down (only resumable): no worker
                continue
            labels = await self._node_labels((pod.get("spec") or {}).get("nodeName"))
            out.append(pod_facts(pod, settings, labels, self.gpus, self.zone_label))
        return out

    async def _container(self, pod: str, read: LogRead) -> list[LogEvent]:
        options = log_options(read, time.time_ns() // 1_000_000)
        try:
            text = await self.cluster.pod_log(self.namespace, pod, **options)
        except ClusterError as err:  # not started yet (400), or gone meanwhile
            log.debug("no log of pod %s: %s", pod, err)
            return []
        lines = log_lines(text)
        # A tail that got fewer lines than it asked for starts at the log's start.
        whole = len(lines) < options.get("tail_lines", math.inf)
        return numbered(CONTAINER, lines, whole=whole)

    async def _system(self, pod: Obj) -> list[LogEvent]:
        name = pod["metadata"]["name"]
        selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
        try:
            events = await self.cluster.list_events(self.namespace, selector)
        except ClusterError as err:  # a refusal (no `list events`) or a hiccup: the
            # terminations still show, the Events come at a later read (their own cursor)
            log.debug("no events of pod %s: %s", name, err)
            events = []
        return numbered(SYSTEM, system_lines(events, pod), whole=True)

    async def read(self, endpoint_id: str, worker_id: str, read: LogRead) -> LogBatch:
        pods = await self.cluster.list_objects("Pod", self.namespace, worker_selector(endpoint_id))
        pod = next((p for p in pods if p["metadata"]["name"] == worker_id), None)
        if pod is None:
            raise WorkerNotFound(worker_id)
        events: list[LogEvent] = []
        if CONTAINER in read.sources:
            events += await self._container(worker_id, read)
        if SYSTEM in read.sources:
            events += await self._system(pod)
        if read.cursor is not None:
            return LogBatch(after(events, read.cursor, read.limit), read.cursor, True)
        return LogBatch(last(events, read.tail), newest(events), True)
