"""Worker logs on Kubernetes: the endpoint's worker pods' logs, read through the API.

Only pods labelled as that endpoint's workers, in the namespace the management API
serves; the worker id is the pod name (what `RUNPOD_POD_ID` says and the gateway sees).
The API gives both streams as one, so every line says `stdout`. A pod that is gone (scaled
down, deleted) has no logs left to read; a cluster's log collector keeps them longer.
Following: one reader thread per pod (`follow=true`), new pods are picked up every
`PODS_EVERY_S`; the client leaving stops them all. A pod's stream that stays quiet for
`QUIET_S`, ends or breaks is opened again from its last line given: a stalled connection
delays a line, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from lockgate.kube.cluster import Cluster, ClusterError
from lockgate.kube.manifests.names import COMPONENT_LABEL, ENDPOINT_LABEL, WORKER_CONTAINER
from lockgate.manage.logbook import Follower
from lockgate.manage.loglines import (
    STDOUT,
    TAIL_MAX,
    LineMaker,
    LogLine,
    LogQuery,
    parse_time,
)
from lockgate.timestamps import stamp_ns

log = logging.getLogger("lockgate.manage")

PODS_EVERY_S = 3.0  # how often a follow looks for new worker pods
QUIET_S = 30.0  # a pod's followed log with no line for this long is opened again


def worker_selector(endpoint_id: str) -> str:
    return f"{ENDPOINT_LABEL}={endpoint_id},{COMPONENT_LABEL}=worker"


def parse_pod_log(maker: LineMaker, text: str) -> list[LogLine]:
    """Lines of `timestamps=true` output (`2026-11-23T00:50:00.123456789Z text`)."""
    lines = []
    for raw in text.splitlines():
        stamp, _, rest = raw.partition(" ")
        try:
            ms = parse_time(stamp, "ts")
        except ValueError:
            continue  # not a timestamped line (cannot happen with timestamps=true)
        lines.extend(maker.make_all(rest, STDOUT, ms))
    return lines


# Where a pod's followed log was left: the timestamp (ns) of the last line given, and how
# many lines with that very timestamp were given. Lines of one millisecond (a job's start
# and end lines, most often) are told apart; a reopened stream repeats none.
Mark = tuple[int, int]


def log_options(query: LogQuery, now_ms: int) -> dict[str, Any]:
    """`read_namespaced_pod_log` options for a query (the API has no sinceTime here)."""
    options: dict[str, Any] = {"container": WORKER_CONTAINER, "timestamps": True}
    # A job filter looks through more lines than it returns.
    options["tail_lines"] = TAIL_MAX if query.narrowed else query.tail
    if query.since is not None:
        options["since_seconds"] = max(1, (now_ms - query.since) // 1000 + 1)
    return options


class PodLogs:
    """A `LogSource` over the worker pods of one namespace."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self._follows: dict[Follower, asyncio.Task] = {}

    async def _pods(self, endpoint_id: str, worker: str | None) -> list[str]:
        pods = await self.cluster.list_objects("Pod", self.namespace, worker_selector(endpoint_id))
        names = sorted(p["metadata"]["name"] for p in pods)
        return [n for n in names if worker in (None, n)]

    async def _read(self, pod: str, query: LogQuery) -> list[LogLine]:
        options = log_options(query, time.time_ns() // 1_000_000)
        try:
            text = await self.cluster.pod_log(self.namespace, pod, **options)
        except ClusterError as err:  # not started yet, or gone meanwhile
            log.debug("no log of pod %s: %s", pod, err)
            return []
        return parse_pod_log(LineMaker(pod), text)

    async def lines(self, endpoint_id: str, query: LogQuery) -> list[LogLine]:
        pods = await self._pods(endpoint_id, query.worker)
        found = await asyncio.gather(*(self._read(pod, query) for pod in pods))
        return query.select([line for lines in found for line in lines])

    async def follow(self, endpoint_id: str, query: LogQuery) -> tuple[list[LogLine], Follower]:
        started_ms = time.time_ns() // 1_000_000
        tail = await self.lines(endpoint_id, query)
        follower = Follower(query)
        # The tail's lines are known only to the ms: lines of its last ms count as given.
        seen = {line.worker: ((line.ms + 1) * 1_000_000, 0) for line in tail}
        watch = _Watch(self, endpoint_id, query, follower, seen, started_ms)
        self._follows[follower] = asyncio.create_task(watch.run(), name="lockgate-pod-logs")
        return tail, follower

    async def unfollow(self, endpoint_id: str, follower: Follower) -> None:
        task = self._follows.pop(follower, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class _Watch:
    """One client's follow: a reader thread per worker pod, until cancelled."""

    def __init__(
        self,
        source: PodLogs,
        endpoint_id: str,
        query: LogQuery,
        follower: Follower,
        seen: dict[str, Mark],
        started_ms: int,
    ) -> None:
        self.source, self.endpoint_id, self.query = source, endpoint_id, query
        self.follower = follower
        self.seen = seen  # pod -> where its log was left
        self.started_ms = started_ms
        self.readers: dict[str, Any] = {}  # pod -> its open response (None while opening)
        self.loop = asyncio.get_running_loop()
        self.stopped = threading.Event()

    async def run(self) -> None:
        try:
            while True:
                with contextlib.suppress(ClusterError):
                    for pod in await self.source._pods(self.endpoint_id, self.query.worker):
                        if pod not in self.readers:
                            self._start(pod)
                await asyncio.sleep(PODS_EVERY_S)
        finally:
            self.stopped.set()
            for resp in list(self.readers.values()):
                if resp is not None:
                    with contextlib.suppress(Exception):
                        resp.shutdown()  # wakes the thread blocked in a read

    def _start(self, pod: str) -> None:
        self.readers[pod] = None
        mark = self.seen.get(pod, (self.started_ms * 1_000_000, 0))
        thread = threading.Thread(
            target=self._read, args=(pod, mark), name=f"lockgate-log-{pod}", daemon=True
        )
        thread.start()

    def _read(self, pod: str, mark: Mark) -> None:
        """In a thread: follow one pod's log, handing over the lines after `mark`."""
        query = LogQuery(since=mark[0] // 1_000_000 - 1000, tail=TAIL_MAX)
        options = log_options(query, time.time_ns() // 1_000_000)
        options.pop("tail_lines")
        maker = LineMaker(pod)
        try:
            resp = self.source.cluster.pod_log_stream(
                self.source.namespace, pod, QUIET_S, **options
            )
        except ClusterError:
            self.loop.call_soon_threadsafe(self.readers.pop, pod, None)  # try again later
            return
        self.readers[pod] = resp
        if self.stopped.is_set():
            resp.shutdown()
        pending = b""
        last_ns = count = 0  # the stream's last timestamp, and its lines with it so far
        with contextlib.suppress(Exception):  # shut down, quiet too long, or broken
            for chunk in resp.stream(None, decode_content=True):  # as each chunk arrives
                *complete, pending = (pending + chunk).split(b"\n")
                for raw in complete:
                    stamp, _, text = raw.decode(errors="replace").partition(" ")
                    if (ns := stamp_ns(stamp)) is None:
                        continue  # not a timestamped line (cannot happen with timestamps)
                    count, last_ns = (count + 1 if ns == last_ns else 1), ns
                    made = maker.make_all(text, STDOUT, ns // 1_000_000)  # (tracks jobs)
                    if (ns, count) > mark:
                        mark = (ns, count)
                        for line in made:
                            self.loop.call_soon_threadsafe(self.follower.offer, line)
        with contextlib.suppress(Exception):
            resp.release_conn()
        # The container ended (a restart follows, in a crash loop), or the stream was quiet
        # or broke: read it again from the last line given.
        self.seen[pod] = mark
        if not self.stopped.is_set():
            self.loop.call_soon_threadsafe(self.readers.pop, pod, None)
