"""The scaling decision: tables per rule, then sequences on a fake clock."""

from __future__ import annotations

import pytest

from lockgate.dev.workers import limits_of
from lockgate.models.crashloop import CrashLoop
from lockgate.models.endpoint import EndpointSpec, ScalerType
from lockgate.models.waiting import queue_position, why_waiting
from lockgate.scaling.autoscaler import change_to_say
from lockgate.scaling.decision import (
    STABILISATION_S,
    UP_STEP_MIN,
    EndpointMetrics,
    Limits,
    Workers,
    decide,
)
from lockgate.scaling.memory import ScalerMemory

QD, RC = ScalerType.QUEUE_DELAY, ScalerType.REQUEST_COUNT


def limits(lo=0, hi=10, idle=5.0, kind=QD, value=4) -> Limits:
    return Limits(lo, hi, idle, kind, value)


def m(q=0, age=0.0, low=0, low_age=0.0, running=0) -> EndpointMetrics:
    return EndpointMetrics(
        queued=q, oldest_queued_age_s=age, queued_low=low, oldest_queued_low_age_s=low_age,
        in_progress=running,
    )  # fmt: skip


def w(count: int, *idle: float) -> Workers:
    return Workers(count, tuple(idle))


CASES = [
    # --- QUEUE_DELAY (scalerValue 4 s)
    ("qd: a short wait adds nobody", m(q=3, age=2), limits(), w(2), 2),
    ("qd: wait at the threshold adds nobody", m(q=3, age=4), limits(), w(2), 2),
    ("qd: wait past the threshold adds one per waiting job", m(q=3, age=5), limits(), w(2), 5),
    ("qd: starting workers count as free", m(q=3, age=9), limits(), w(5, 0, 0, 0), 5),
    ("qd: partly covered by starting ones", m(q=3, age=9), limits(), w(4, 0), 6),
    ("qd: a job at zero starts one worker at once", m(q=5, age=0.1), limits(), w(0), 1),
    ("qd: at zero past the threshold, step limited", m(q=50, age=5), limits(hi=60), w(0), 4),
    ("qd: growth at most doubles", m(q=50, age=5), limits(hi=60), w(8), 16),
    ("qd: capped at workersMax", m(q=50, age=5), limits(hi=3), w(2), 3),
    ("qd: at workersMax holds", m(q=50, age=5), limits(hi=3), w(3), 3),
    # --- REQUEST_COUNT (scalerValue jobs per worker)
    ("rc: ceil of queued+running per worker", m(q=5, running=2), limits(kind=RC, value=3), w(1), 3),
    ("rc: one job from zero", m(q=1), limits(kind=RC, value=3), w(0), 1),
    ("rc: enough workers holds", m(q=1, running=2), limits(kind=RC, value=3), w(1), 1),
    ("rc: capped at workersMax", m(q=40), limits(kind=RC, value=1, hi=5), w(4), 5),
    (
        "rc: running only, no queue, never grows",
        m(running=8),
        limits(kind=RC, value=1),
        w(2),
        2,
    ),
    # --- bounds
    ("below workersMin rises to it", m(), limits(lo=2), w(0), 2),
    ("above workersMax falls to it", m(), limits(hi=2), w(5), 2),
    ("workersMax 0 keeps zero", m(q=9, age=60), limits(hi=0), w(0), 0),
    # --- idle timeout and scale to zero
    ("idle past the timeout is removed", m(), limits(), w(2, 6, 7), 0),
    ("idle under the timeout stays", m(), limits(), w(2, 4, 1), 2),
    ("only the idle-long ones go", m(), limits(), w(3, 9, 2), 2),
    ("busy workers stay", m(running=2), limits(), w(3, 9), 2),
    ("never below workersMin", m(), limits(lo=1), w(3, 9, 9, 9), 1),
    ("nothing removed while jobs wait", m(q=1, age=1), limits(), w(3, 9, 9), 3),
    ("idle timeout 0 removes idle at once", m(), limits(idle=0), w(2, 0, 0), 0),
    ("rc: idle beyond the ceiling go", m(running=1), limits(kind=RC, value=1), w(3, 8, 8), 1),
    # --- lowPriority
    ("lowPriority waiting at zero starts nothing", m(low=20, low_age=300), limits(), w(0), 0),
    (
        "lowPriority waiting never adds (rc)",
        m(low=20, low_age=300, running=2),
        limits(kind=RC, value=1),
        w(2),
        2,
    ),
    ("lowPriority does not hide normal work", m(q=2, age=5, low=20), limits(), w(1), 3),
]


@pytest.mark.parametrize(
    ("metrics", "lim", "workers", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decision_table(metrics, lim, workers, expected) -> None:
    decision = decide(metrics, lim, workers, now=1000.0)
    assert decision.desired == expected, decision.reason
    assert decision.reason


def test_missing_metrics_hold_the_count_and_never_scale_to_zero() -> None:
    held = decide(None, limits(), w(3, 60, 60, 60), now=1000.0)
    assert held.desired == 3 and "unavailable" in held.reason
    assert decide(None, limits(hi=2), w(3), now=1000.0).desired == 2  # bounds still apply


@pytest.mark.parametrize(
    ("replicas", "metrics", "current", "expected"),
    [
        (2, m(q=50, age=60), 5, 2),  # the queue asks for more: the set count wins
        (2, None, 0, 2),  # no metrics needed
        (0, m(q=3, age=9), 2, 1),  # below workersMin: kept at 1
        (9, m(), 1, 4),  # above workersMax: kept at 4
        (3, m(), 3, 3),
    ],
)
def test_a_count_set_from_outside_is_kept_within_the_bounds(
    replicas: int, metrics: EndpointMetrics | None, current: int, expected: int
) -> None:
    lim = Limits(1, 4, 5.0, replicas=replicas)
    decision = decide(metrics, lim, w(current, *[999.0] * current), now=100.0)
    assert decision.desired == expected
    assert "spec.replicas" in decision.reason


def test_replicas_reach_the_limits_from_the_settings_and_in_dev_mode() -> None:
    assert Limits.from_settings({"replicas": 2, "workersMax": 5}).replicas == 2
    assert Limits.from_settings({"workersMax": 5}).replicas is None
    assert limits_of(EndpointSpec(replicas=2, workersMax=5)).replicas == 2


def test_nothing_is_removed_within_the_stabilisation_window_after_a_scale_up() -> None:
    recent = decide(m(), limits(idle=0), w(4, 9, 9, 9, 9), now=100.0, last_scale_up=95.0)
    assert recent.desired == 4 and "scaled up" in recent.reason
    later = 95.0 + STABILISATION_S
    assert decide(m(), limits(idle=0), w(4, 9, 9, 9, 9), now=later, last_scale_up=95).desired == 0


def test_a_short_idle_timeout_shortens_the_stabilisation_window() -> None:
    idle = w(1, 5)  # the worker started for one job, idle 5 s since it finished
    held = decide(m(), limits(idle=5), idle, now=104.0, last_scale_up=100.0)
    assert held.desired == 1
    assert decide(m(), limits(idle=5), idle, now=105.0, last_scale_up=100.0).desired == 0


def test_the_up_step_is_at_least_the_minimum_and_at_most_doubling() -> None:
    assert decide(m(q=99, age=9), limits(hi=100), w(1), now=0).desired == 1 + UP_STEP_MIN
    assert decide(m(q=99, age=9), limits(hi=100), w(20), now=0).desired == 40


def test_limits_come_from_an_endpoints_camel_case_settings() -> None:
    entry = {"id": "x", "workersMin": 1, "workersMax": 7, "idleTimeout": 30,
             "scalerType": "REQUEST_COUNT", "scalerValue": 2, "namespace": "ns"}  # fmt: skip
    assert Limits.from_settings(entry) == Limits(1, 7, 30.0, RC, 2)
    assert Limits.from_settings({}) == Limits(0, 3, 5.0, QD, 4)


# -- sequences on a fake clock, through the memory the loops keep --------------------------


class Sim:
    """A pool whose size follows each decision at once, driven one tick per second."""

    def __init__(self, lim: Limits, members: list[str] | None = None) -> None:
        self.lim = lim
        self.memory = ScalerMemory()
        self.members = list(members or [])
        self.now = 0.0
        self.sizes: list[int] = []
        self.n = 0

    def tick(self, metrics: EndpointMetrics, jobs: dict[str, int] | None = None) -> int:
        jobs = jobs or {}
        workers = self.memory.observe(len(self.members), self.members, jobs, self.now)
        decision = decide(
            metrics, self.lim, workers, now=self.now, last_scale_up=self.memory.last_scale_up
        )
        size = len(self.members)
        if decision.desired > size:
            for _ in range(decision.desired - size):
                self.n += 1
                self.members.append(f"w{self.n}")
        else:
            for gone in self.memory.idle_first(self.members, jobs)[: size - decision.desired]:
                self.members.remove(gone)
        self.memory.record(decision, size, self.now)
        self.sizes.append(len(self.members))
        self.now += 1.0
        return len(self.members)


def test_a_load_alternating_every_second_does_not_flap() -> None:
    """A one-second job every other second: the worker is kept, not stopped and restarted."""
    sim = Sim(limits(kind=RC, value=1, idle=3))
    for second in range(60):
        if second % 2:
            sim.tick(m())
        elif sim.members:
            sim.tick(m(running=1), {sim.members[0]: 1})
        else:
            sim.tick(m(q=1))
    assert set(sim.sizes) == {1}, sim.sizes


def test_idle_timeout_zero_still_waits_out_the_stabilisation_window() -> None:
    sim = Sim(limits(kind=RC, value=1, idle=0))
    sim.tick(m(q=3))
    assert sim.sizes[-1] == 3
    for _ in range(int(STABILISATION_S) - 1):
        sim.tick(m())
    assert sim.sizes[-1] == 3
    sim.tick(m())
    sim.tick(m())
    assert sim.sizes[-1] == 0


def test_a_busy_worker_is_never_chosen_and_the_longest_idle_goes_first() -> None:
    sim = Sim(limits(idle=5), members=["a", "b", "c"])
    sim.tick(m(running=1), {"b": 1})  # first sight: everyone counted busy until now
    for _ in range(3):
        sim.tick(m(running=2), {"b": 1, "c": 1})
    for _ in range(3):
        sim.tick(m(running=1), {"b": 1})
    assert sim.members == ["b", "c"]  # a idled since t=0 (6 s); c only since t=4
    for _ in range(5):
        sim.tick(m(running=1), {"b": 1})
    assert sim.members == ["b"]


def test_a_burst_scales_zero_to_max_and_back_to_zero_after_the_idle_timeout() -> None:
    sim = Sim(limits(hi=8, idle=5))
    sim.tick(m(q=20, age=0))
    assert sim.sizes[-1] == 1
    for age in range(1, 7):
        sim.tick(m(q=20, age=age), {"w1": 1})
    assert sim.sizes[-1] == 8
    jobs = {f"w{i}": 1 for i in range(1, 9)}
    for _ in range(20):
        sim.tick(m(running=8), jobs)
    assert sim.sizes[-1] == 8
    for _ in range(4):
        sim.tick(m())
    assert sim.sizes[-1] == 8
    sim.tick(m())
    sim.tick(m())
    assert sim.sizes[-1] == 0


def test_workers_asked_for_that_never_appear_become_removable_after_the_idle_timeout() -> None:
    memory = ScalerMemory()
    for now in (0.0, 3.0):
        view = memory.observe(3, [], {}, now)
    assert view == Workers(3, (3.0, 3.0, 3.0))
    assert decide(m(), limits(idle=5), view, now=3.0).desired == 3
    view = memory.observe(3, [], {}, 6.0)
    assert decide(m(), limits(idle=5), view, now=6.0).desired == 0
    assert memory.observe(1, ["w1"], {}, 7.0) == Workers(1, (0.0,))


def test_a_resize_asked_again_every_tick_is_said_once_until_it_changes() -> None:
    """Dev mode's crash loop: the scaler wants 1 worker every tick and the pool stays at 0;
    its log says so once (not four times a second), and again only when something moves."""
    said = None
    spoken = []
    for size, desired in [(0, 1), (0, 1), (0, 1), (1, 1), (1, 0), (1, 0), (0, 1), (0, 2)]:
        say, said = change_to_say(size, desired, said)
        spoken.append(say)
    assert spoken == [True, False, False, False, True, False, True, True]


@pytest.mark.parametrize(
    ("counts", "said"),
    [
        ({"queued": 0, "idle": 0, "running": 0, "starting": 0, "workers_max": 0}, None),
        ({"queued": 1, "idle": 0, "running": 0, "starting": 0, "workers_max": 0},
         "max workers is 0: no worker will start"),
        ({"queued": 2, "idle": 1, "running": 0, "starting": 0, "workers_max": 3}, None),
        ({"queued": 3, "idle": 0, "running": 2, "starting": 0, "workers_max": 2},
         "2 workers busy, max reached (2); 3 jobs in the queue"),
        ({"queued": 1, "idle": 0, "running": 0, "starting": 1, "workers_max": 2},
         "1 worker starting (a cold start); 1 job in the queue"),
        ({"queued": 4, "idle": 0, "running": 1, "starting": 0, "workers_max": 3},
         "1 worker busy, another is being started; 4 jobs in the queue"),
        ({"queued": 1, "idle": 0, "running": 0, "starting": 0, "workers_max": 1},
         "no worker yet: one is being started (a cold start); 1 job in the queue"),
    ],
)  # fmt: skip
def test_why_jobs_wait_is_the_first_cause_that_holds(counts: dict, said: str | None) -> None:
    assert why_waiting(**counts) == said


def test_a_crash_loop_is_why_jobs_wait_before_any_count() -> None:
    loop = CrashLoop(failedStarts=5, exitCode=1, lastLine="no model", since=0)
    said = why_waiting(queued=1, idle=1, running=0, starting=0, workers_max=0, crash_loop=loop)
    assert said == (
        "workers crash at start (exit code 1: no model); no worker starts until a new release "
        "or a restart"
    )


@pytest.mark.parametrize(
    ("counts", "said"),
    [
        (dict(queued=5, idle=0, running=2, starting=0, workers_max=2, position=3),
         "2 workers busy, max reached (2); position 3 of 5 in the queue"),
        (dict(queued=1, idle=0, running=0, starting=1, workers_max=2, position=1),
         "1 worker starting (a cold start); position 1 of 1 in the queue"),
        # the queue's count read a moment apart from the rank: never "position 4 of 3"
        (dict(queued=3, idle=0, running=1, starting=0, workers_max=1, position=4),
         "1 worker busy, max reached (1); position 4 of 4 in the queue"),
        (dict(queued=2, idle=0, running=0, starting=0, workers_max=0, position=2),
         "max workers is 0: no worker will start"),
        (dict(queued=2, idle=1, running=0, starting=0, workers_max=2, position=1), None),
    ],
)  # fmt: skip
def test_one_jobs_wait_names_its_place_in_the_queue(counts: dict, said: str | None) -> None:
    assert why_waiting(**counts) == said


@pytest.mark.parametrize(
    ("normal_rank", "low_rank", "normal_queued", "place"),
    [
        (0, None, 4, 1),  # first of the normal queue: taken next
        (2, None, 4, 3),
        (None, 0, 4, 5),  # a lowPriority job waits behind every normal one
        (None, 1, 0, 2),
        (None, None, 4, None),  # in neither queue: taken, cancelled or gone
    ],
)
def test_a_queued_jobs_place_puts_low_priority_jobs_after_every_normal_one(
    normal_rank, low_rank, normal_queued, place
) -> None:
    got = queue_position(normal_rank=normal_rank, low_rank=low_rank, normal_queued=normal_queued)
    assert got == place
