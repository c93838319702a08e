"""One dev-mode endpoint's workers: a `LocalProcessPool` and the `LocalAutoscaler` sizing it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace

from lockgate.dev.launch import Launch
from lockgate.dev.lb_pool import LbProcessPool
from lockgate.dev.worker_health import LocalHealth
from lockgate.models import EndpointSpec
from lockgate.models.crashloop import CrashLoop
from lockgate.scaling.autoscaler import LocalAutoscaler, release_exited
from lockgate.scaling.backoff import CrashBackoff
from lockgate.scaling.crashloop import (
    CrashCount,
    Start,
    counted,
    crash_loop,
    held,
    restarted,
    unhealthy_starts,
)
from lockgate.scaling.decision import Limits
from lockgate.scaling.local_pool import (
    LineSink,
    LocalProcessPool,
    LocalWorker,
    WorkerKeyIssuer,
)
from lockgate.store import JobStore
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.lb_workers import HEALTHY, LbWorkers

log = logging.getLogger("lockgate.dev")

QUICK_EXIT_S = 10.0  # a worker that exits (unasked) sooner than this after starting crashed
CRASH_WINDOW_S = 60.0  # crashes this recent count; two of them make a crash loop
CRASH_LOOP = 2
REPORT_S = 1.0  # how often worker states go to Redis (they live WORKER_STATES_TTL_MS)


@dataclass(frozen=True)
class Crash:
    """A worker process that exited unasked soon after it started."""

    code: int
    ended: float  # monotonic
    last_line: str


@dataclass(frozen=True)
class WorkerStates:
    """What dev mode reports beside the gateway's idle/running, and why."""

    initializing: int = 0
    unhealthy: int = 0
    reason: str = ""  # CamelCase, for the endpoint's WorkersHealthy condition
    message: str = ""


def crashes_of(exited: Iterable[LocalWorker]) -> list[Crash]:
    """The quick unasked exits among reaped workers."""
    return [
        Crash(w.process.returncode or 0, w.ended, w.last_line)
        for w in exited
        if w.ended is not None and w.ended - w.started < QUICK_EXIT_S
    ]


def worker_states(
    starting: int, crashes: list[Crash], now: float, wanted: int, backoff_s: float = 0.0
) -> WorkerStates:
    """Dev mode's worker states: processes started but not yet polling are initializing;
    when workers keep exiting at once (a crash loop), as many as crashed recently (at most
    the `wanted` workers, at least one) are unhealthy, and the message quotes the last crash.

    `backoff_s`: while the crash back-off holds (`crash_backoff_s`), the delay it set after
    the newest crash. Crashes then come that far apart, so the window stretches by twice it:
    a crash loop slowed down by the back-off stays one (with a fixed 60 s window it read as
    healthy between crashes once the delay passed 30 s)."""
    window = CRASH_WINDOW_S + 2 * backoff_s
    recent = [c for c in crashes if now - c.ended < window]
    if len(recent) < CRASH_LOOP:
        return WorkerStates(initializing=starting)
    unhealthy = max(1, min(len(recent), wanted))
    # The newest crash whose output was read (a pipe may still be draining the very last).
    last = next((c for c in reversed(recent) if c.last_line), recent[-1])
    said = f": last output {last.last_line!r}" if last.last_line else " without any output"
    message = (
        f"Workers exit at once (exit code {last.code}){said}. Fix the handler or image; "
        "the worker logs show the whole output."
    )
    return WorkerStates(max(0, starting - unhealthy), unhealthy, "CrashLoop", message)


def loop_states(states: WorkerStates, loop: CrashLoop) -> WorkerStates:
    """The worker states while the endpoint starts no worker: `WorkersHealthy` says why."""
    message = (
        f"No worker starts: {loop.text()}, {loop.failedStarts} failed starts in a row. "
        "Fix the handler or image (a new release), or restart the workers."
    )
    return WorkerStates(states.initializing, max(1, states.unhealthy), "CrashLoop", message)


def crash_backoff_s(crashes: list[Crash], until: float, now: float) -> float:
    """The delay the back-off set after the newest crash, while it holds: no worker may start
    before `until`, or the one started then is younger than QUICK_EXIT_S; else 0."""
    if not crashes or now >= until + QUICK_EXIT_S:
        return 0.0
    return max(0.0, until - crashes[-1].ended)


def process_starts(
    polled: Iterable[str], exited: Iterable[LocalWorker], now_ms: int, now: float
) -> list[Start]:
    """Dev mode's worker starts: each process seen polling started well (at `now_ms`);
    each that exited unasked before it was seen polling failed, at its exit (`now` is
    the monotonic clock `LocalWorker.ended` is on)."""
    seen = set(polled)
    starts = [Start(worker, now_ms, True) for worker in seen]
    for w in exited:
        if w.id not in seen and w.ended is not None:
            at = now_ms - int((now - w.ended) * 1000)
            starts.append(Start(w.id, at, False, w.process.returncode, w.last_line))
    return starts


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
    states: WorkerStates = field(default_factory=WorkerStates)
    reporter: asyncio.Task | None = None
    version: int = 1  # the endpoint's version these workers run (its release)
    health: LocalHealth | None = None  # marked workers replaced, the startup deadline
    # The crash-loop rule (`scaling.crashloop`): failed starts in a row, the loop they made
    # (None: workers start; the scaler's limits are `held` meanwhile), the workers seen
    # polling, and what to call when the loop begins or ends (dev mode rewrites the
    # registry entry the gateway reads).
    threshold: int = 5
    crashes: CrashCount = field(default_factory=CrashCount)
    loop: CrashLoop | None = None
    polled: set[str] = field(default_factory=set)
    on_loop: Callable[[], Awaitable[None]] | None = None

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
        lb: LbWorkers | None = None,
        drain_s: float = 0.0,
        version: int = 1,
        resume_window_s: float = 0.0,
        env_at_start: Callable[[dict[str, str]], dict[str, str]] | None = None,
        startup_timeout_s: int = 0,
        threshold: int = 5,
        on_loop: Callable[[], Awaitable[None]] | None = None,
    ) -> LocalWorkers:
        """Start scaling at once (workersMin workers start on the first tick); each line
        a worker writes goes to `sink` too. With `lb`, the workers are a load-balancing
        endpoint's HTTP servers (`LbProcessPool`, drained up to `drain_s` before a stop,
        a scale-down's victims parked for `resume_window_s`). A worker marked unhealthy is
        replaced, and so is one not ready within `startup_timeout_s` (0: no deadline;
        `LocalHealth`)."""
        pool: LocalProcessPool
        if lb is not None:
            pool = LbProcessPool(
                endpoint_id, launch.command, env, cwd=launch.cwd, keys=keys, sink=sink,
                lb=lb, store=store, drain_s=drain_s, env_at_start=env_at_start,
                resume_window_s=resume_window_s,
            )  # fmt: skip
        else:
            pool = LocalProcessPool(
                endpoint_id, launch.command, env, cwd=launch.cwd, keys=keys, store=store,
                sink=sink, env_at_start=env_at_start,
            )  # fmt: skip
        scaler = LocalAutoscaler(store, pool, endpoint_id, limits)
        task = asyncio.create_task(scaler.run(), name=f"lockgate-scaler-{endpoint_id}")
        workers = cls(
            endpoint_id, store, pool, scaler, task, version=version, threshold=threshold,
            on_loop=on_loop,
        )  # fmt: skip
        workers.health = LocalHealth(store, pool, endpoint_id, startup_timeout_s)
        scaler.hold = workers.held
        workers.reporter = asyncio.create_task(
            workers.report(), name=f"lockgate-states-{endpoint_id}"
        )
        return workers

    async def observe(self) -> WorkerStates:
        """Compute the worker states now and report them to Redis (for /health); replace
        the marked workers and those past their startup deadline."""
        snap = await self.store.snapshot(self.endpoint_id)
        taking = snap.worker_jobs.keys() | snap.workers_warming  # warming: the gateway counts
        if self.health is not None:  # a warming worker has started: its warm-up is timed apart
            await self.health.tend(taking)
        starting = len([w for w in self.pool.active if w not in taking])
        if isinstance(self.pool, LbProcessPool):
            starting = 0  # the gateways' health polls count LB workers that start
        crashes = crashes_of(self.pool.crashes)
        now = time.monotonic()
        wanted = max(self.scaler.limits.workers_min, len(self.pool.active))
        backoff_s = crash_backoff_s(crashes, self.pool.backoff.until, now)
        self.states = worker_states(starting, crashes, now, wanted, backoff_s)
        if not self.states.reason and self.health is not None and (said := self.health.shown()):
            self.states = replace(self.states, reason=said[0], message=said[1])
        await self._count_starts(await self._live(set(taking)), now)
        if self.loop is not None:
            self.states = loop_states(self.states, self.loop)
        await self.store.report_worker_states(
            self.endpoint_id, initializing=self.states.initializing, throttled=0,
            unhealthy=self.states.unhealthy,
        )  # fmt: skip
        return self.states

    async def _live(self, polling: set[str]) -> set[str]:
        """The workers that started well: those polling for jobs; a load-balancing
        endpoint's, those whose health check a gateway found healthy."""
        if not isinstance(self.pool, LbProcessPool):
            return polling
        polled = await self.pool.lb.health(self.endpoint_id)
        return {w for w, h in polled.items() if h.state == HEALTHY}

    async def _count_starts(self, live: set[str], now: float) -> None:
        """Count the starts since the last look (`scaling.crashloop`); at the threshold,
        start no more workers (the healthy ones stay) and say so (`on_loop`)."""
        mine = set(self.pool.workers) | {w.id for w in self.pool.crashes}
        self.polled = (self.polled | live) & mine
        now_ms = self.store.clock()
        marked = await self.store.unhealthy_workers(self.endpoint_id)
        starts = process_starts(self.polled, self.pool.crashes, now_ms, now)
        starts += unhealthy_starts({w: why for w, why in marked.items() if w in mine})
        self.crashes = counted(self.crashes, starts)
        if self.loop is None:
            self.loop = crash_loop(
                self.crashes, self.threshold, now_ms=now_ms, version=self.version
            )
            if self.loop is not None:
                log.warning(
                    "endpoint %s: %s after %d failed starts in a row: no worker starts until "
                    "a new release or a restart", self.endpoint_id, self.loop.text(),
                    self.loop.failedStarts,
                )  # fmt: skip
                await self._loop_changed()

    def held(self, limits: Limits) -> Limits:
        """The limits the scaler obeys at each tick: the endpoint's, or during a crash loop
        none to start (the workers seen polling may stay)."""
        if self.loop is None:
            return limits
        return held(limits, len([w for w in self.pool.active if w in self.polled]))

    async def _loop_changed(self) -> None:
        if self.on_loop is not None:
            try:
                await self.on_loop()
            except Exception as err:  # Redis away: the next change writes it
                log.warning("endpoint %s: crash loop not registered: %s", self.endpoint_id, err)

    async def restart(self) -> None:
        """Clear the crash loop: workers start again at once, failed starts counted
        afresh (those seen before stay counted no more)."""
        self.crashes = restarted(self.crashes)
        self.pool.crashes.clear()
        self.pool.backoff = CrashBackoff()
        was, self.loop = self.loop, None
        if was is not None:
            log.info("endpoint %s: crash loop cleared: workers start again", self.endpoint_id)
            await self._loop_changed()

    async def report(self) -> None:
        while True:
            try:
                await self.observe()
            except Exception as err:  # Redis away for a moment: report next time
                log.warning("endpoint %s: worker states not reported: %s", self.endpoint_id, err)
            raise_if_cancelled()
            await asyncio.sleep(REPORT_S)

    @property
    def count(self) -> int:
        """Workers started and not asked to stop."""
        return len(self.pool.active)

    @property
    def parked(self) -> set[str]:
        """Workers a scale-down parked (an LB endpoint's: resumable, not workers now)."""
        return set(self.pool.parked) if isinstance(self.pool, LbProcessPool) else set()

    @property
    def alive(self) -> int:
        """Worker processes not yet exited (those asked to stop, finishing, too)."""
        return len([w for w in self.pool.workers.values() if w.process.returncode is None])

    async def rescale(self, limits: Limits) -> None:
        """New limits (workersMin/Max, idleTimeout) for the same workers: a new scaler over
        the same pool. Idle times restart from now, so no worker stops early."""
        await self.halt()
        self.scaler = LocalAutoscaler(self.store, self.pool, self.endpoint_id, limits)
        self.scaler.hold = self.held
        self.task = asyncio.create_task(self.scaler.run(), name=self.task.get_name())

    def resume_window(self, seconds: float) -> None:
        """An LB endpoint's new `lbResumeWindowS`: workers scaled down from now on are
        parked that long (those parked already keep theirs)."""
        if isinstance(self.pool, LbProcessPool):
            self.pool.resume_window_s = seconds

    async def withdraw(self) -> None:
        """Before a replacement the old workers take nothing new from now on, and what
        they have in hand goes on: an LB endpoint's get no new request; a queue endpoint's
        get no new job (`stop_taking`, as the Kubernetes scaler does before it removes
        pods: their open job-takes answer empty at once), so jobs queued meanwhile wait
        for the new workers instead of going to one about to get SIGTERM."""
        if isinstance(self.pool, LbProcessPool):
            await self.pool.withdraw_all()
        else:
            await self.store.stop_taking(self.endpoint_id, list(self.pool.workers))

    async def halt(self) -> None:
        """Stop scaling; the workers keep running."""
        self.task.cancel()
        await asyncio.wait({self.task})

    def kill(self) -> None:
        """Kill every worker now (their jobs in hand go back to the queue at `stop`)."""
        self.pool.kill_all()

    async def stop(self, grace_s: float) -> None:
        """Stop scaling, then the workers: SIGTERM lets each finish its job in hand; those
        still running after `grace_s` seconds are killed with their process group. The
        store then forgets them (a job a killed worker held goes back to the queue)."""
        await self.halt()
        if self.reporter is not None:
            self.reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reporter
        await release_exited(self.store, self.endpoint_id, await self.pool.close(grace_s))
