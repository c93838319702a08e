"""`python -m bench.scaler_sim` (also printed by `make bench`): the scaling decision on a
bursty trace, against a fixed pool of `workersMax` workers.

A deterministic discrete-time simulation (0.1 s steps): jobs with known durations arrive
in bursts; the scaler reads the same `EndpointMetrics` the gateway publishes once per
second, decides with `lockgate.scaling.decide` (through the same `ScalerMemory` the
loops keep), and a simulated pool starts workers after a cold start and stops idle ones
only. A worker is paid for from the moment it is asked for until it stops.

Target: p95 queue delay within 2x the fixed pool's plus the cold start, using under half
its worker-seconds.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from lockgate.models.endpoint import ScalerType
from lockgate.scaling.decision import EndpointMetrics, Limits, decide
from lockgate.scaling.memory import ScalerMemory

STEP = 10  # simulation steps per second (0.1 s resolution)
TICK = 1 * STEP  # the scaler decides once per second, like the operator's loop


@dataclass(frozen=True, slots=True)
class Job:
    arrival: float  # s
    duration: float  # s


def bursty_trace(seed: int = 6, minutes: int = 30) -> list[Job]:
    """Bursts of 20-60 jobs over 5-15 s, 1-5 minutes apart, plus a sparse trickle; each
    job runs 1-8 s. Seeded: the same trace every run."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    t = 20.0
    end = minutes * 60
    while t < end - 60:
        size, spread = rng.randint(20, 60), rng.uniform(5, 15)
        jobs += [Job(round(t + rng.uniform(0, spread), 1), rng.uniform(1, 8)) for _ in range(size)]
        t += rng.uniform(60, 300)
    t = rng.uniform(0, 60)
    while t < end:
        jobs.append(Job(round(t, 1), rng.uniform(1, 8)))
        t += rng.expovariate(1 / 90)
    return sorted(jobs, key=lambda j: j.arrival)


@dataclass
class SimWorker:
    id: str
    ready_at: int  # step
    busy_until: int | None = None


@dataclass
class Result:
    name: str
    delays: list[float]
    worker_seconds: float
    peak: int
    sizes: list[int] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.delays)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Simulation:
    """One run: the trace through a pool that is either fixed or scaled by `decide`."""

    def __init__(self, trace: list[Job], limits: Limits, cold_start_s: float, fixed: bool):
        self.trace = deque(trace)
        self.limits = limits
        self.cold = int(cold_start_s * STEP)
        self.fixed = fixed
        self.queue: deque[tuple[int, int]] = deque()  # (arrival step, duration steps)
        self.workers: dict[str, SimWorker] = {}
        self.memory = ScalerMemory()
        self.delays: list[float] = []
        self.worker_steps = 0
        self.sizes: list[int] = []
        self.n = 0

    def add_worker(self, now: int, ready_in: int) -> None:
        self.n += 1
        worker = SimWorker(f"w{self.n}", now + ready_in)
        self.workers[worker.id] = worker

    def metrics(self, now: int) -> EndpointMetrics:
        """What `/metrics` would say: live (started) workers and the jobs they hold."""
        live = [w for w in self.workers.values() if w.ready_at <= now]
        jobs = {w.id: int(w.busy_until is not None) for w in live}
        oldest = (now - self.queue[0][0]) / STEP if self.queue else 0.0
        running = sum(jobs.values())
        return EndpointMetrics(
            queued=len(self.queue), oldest_queued_age_s=oldest, in_progress=running,
            workers_idle=len(live) - running, workers_running=running, worker_jobs=jobs,
        )  # fmt: skip

    def scale(self, now: int) -> None:
        metrics = self.metrics(now)
        members = list(self.workers)
        t = now / STEP
        view = self.memory.observe(len(members), members, metrics.worker_jobs, t)
        decision = decide(
            metrics, self.limits, view, now=t, last_scale_up=self.memory.last_scale_up
        )
        for _ in range(decision.desired - len(members)):
            self.add_worker(now, self.cold)
        surplus = len(members) - decision.desired
        if surplus > 0:
            idle = self.memory.idle_first(members, metrics.worker_jobs)
            for worker_id in idle[:surplus]:
                if self.workers[worker_id].busy_until is None:  # stop idle workers only
                    del self.workers[worker_id]
        self.memory.record(decision, len(members), t)

    def step(self, now: int) -> None:
        while self.trace and round(self.trace[0].arrival * STEP) <= now:
            job = self.trace.popleft()
            self.queue.append((now, max(1, round(job.duration * STEP))))
        for w in self.workers.values():
            if w.busy_until is not None and w.busy_until <= now:
                w.busy_until = None
            if w.busy_until is None and w.ready_at <= now and self.queue:
                arrived, duration = self.queue.popleft()
                self.delays.append((now - arrived) / STEP)
                w.busy_until = now + duration
        if not self.fixed and now % TICK == 0:
            self.scale(now)
        self.worker_steps += len(self.workers)
        self.sizes.append(len(self.workers))

    def run(self, name: str) -> Result:
        if self.fixed:
            for _ in range(self.limits.workers_max):
                self.add_worker(0, 0)
        now = 0
        while self.trace or self.queue or any(w.busy_until for w in self.workers.values()):
            self.step(now)
            now += 1
        return Result(name, self.delays, self.worker_steps / STEP, max(self.sizes))


@dataclass(frozen=True)
class Scenario:
    workers_max: int = 10
    idle_timeout_s: float = 5.0
    cold_start_s: float = 10.0
    queue_delay_s: int = 4
    jobs_per_worker: int = 1


def run_all(sc: Scenario = Scenario(), trace: list[Job] | None = None) -> list[Result]:
    """The fixed pool, then the scaler with each scaler type, on one trace."""
    trace = trace if trace is not None else bursty_trace()

    def limits(kind: ScalerType, value: int) -> Limits:
        return Limits(0, sc.workers_max, sc.idle_timeout_s, kind, value)

    fixed = limits(ScalerType.QUEUE_DELAY, sc.queue_delay_s)
    return [
        Simulation(trace, fixed, sc.cold_start_s, True).run(f"fixed {sc.workers_max} workers"),
        Simulation(trace, limits(ScalerType.QUEUE_DELAY, sc.queue_delay_s), sc.cold_start_s, False)
        .run(f"QUEUE_DELAY {sc.queue_delay_s}s"),
        Simulation(
            trace, limits(ScalerType.REQUEST_COUNT, sc.jobs_per_worker), sc.cold_start_s, False
        ).run(f"REQUEST_COUNT {sc.jobs_per_worker}/worker"),
    ]  # fmt: skip


def meets_target(result: Result, fixed: Result, cold_start_s: float) -> bool:
    """p95 delay within 2x the fixed pool's plus the cold start; under half its worker-s."""
    delay_ok = result.percentile(95) <= 2 * fixed.percentile(95) + cold_start_s
    return delay_ok and result.worker_seconds < fixed.worker_seconds / 2


def report(sc: Scenario = Scenario()) -> str:
    trace = bursty_trace()
    results = run_all(sc, trace)
    fixed = results[0]
    head = (
        f"scaler simulation: {len(trace)} jobs, bursty, over {trace[-1].arrival / 60:.0f} min; "
        f"workersMax {sc.workers_max}, idleTimeout {sc.idle_timeout_s:g}s, "
        f"cold start {sc.cold_start_s:g}s"
    )
    cols = ("pool", "p50 delay", "p95 delay", "worker-s", "vs fixed", "peak", "target")
    rows = [cols]
    for r in results:
        verdict = (
            "" if r is fixed else ("PASS" if meets_target(r, fixed, sc.cold_start_s) else "MISS")
        )
        share = f"{r.worker_seconds / fixed.worker_seconds:.0%}"
        rows.append((
            r.name, f"{r.percentile(50):.1f} s", f"{r.percentile(95):.1f} s",
            f"{r.worker_seconds:.0f}", share, str(r.peak), verdict,
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    bound = 2 * fixed.percentile(95) + sc.cold_start_s
    target = f"target: p95 <= {bound:.1f} s (2x fixed + cold start), worker-s < 50% of fixed"
    return "\n".join([head, *(ln.rstrip() for ln in lines), target])


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
