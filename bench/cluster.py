"""`make bench-cluster`: lockgate on a real node (tests/cluster.py), timed as a user meets it.

Starts the node, `helm install`s the chart with the locally built images, applies
examples/echo/ and measures: Endpoint applied → first worker pod Running → first job
COMPLETED; from zero, submit → COMPLETED (the pod starts for the job); a warm /runsync
through the gateway Service; a burst to workersMax pods; last job → zero pods; and a
load-balancing endpoint (the examples/loadbalancer image, healthy at once): first request
at zero pods → 200, and the gateway's hold time for it (`lockgate_lb_hold_seconds`).
Figures are medians over a few rounds; nothing is asserted. Needs root and the harness of the
real-node tests (make envtest cluster-images tools).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.report import Row, machine, table
from cluster import Cluster, missing_parts
from images import archives
from node_release import (
    REPO,
    USER_NAMESPACE,
    Jobs,
    Release,
    apply_lb_endpoint,
    endpoint_status,
    helm_binary,
    running,
    wait_until,
    worker_pods,
    workers_stopped,
)

ECHO = REPO / "examples" / "echo"
IDLE_TIMEOUT_S = 5  # examples/echo/endpoint.yaml
WORKERS_MAX = 3
LB = "lbbench"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def no_pods(release: Release) -> bool:
    return not worker_pods(release, "echo", live=False)


def cold_start(release: Release) -> tuple[float, float]:
    """Apply the echo example: (applied → first pod Running, applied → first job COMPLETED)."""
    t0 = time.monotonic()
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(ECHO))
    wait_until(lambda: endpoint_status(release, "echo").get("phase") == "Ready", "Ready", 60)
    jobs = Jobs(release, "echo")
    job_id = jobs.run({"input": {"cold": True}})
    running_at = wait_until(
        lambda: any(running(p) for p in worker_pods(release, "echo")) and time.monotonic(),
        "a running echo pod",
        120,
        every=0.05,
    )
    jobs.final(job_id)
    done_at = time.monotonic()
    return running_at - t0, done_at - t0


def from_zero(release: Release, jobs: Jobs) -> tuple[float, float, float]:
    """(submit → COMPLETED from zero pods, last job → no worker running, → no pod object)."""
    wait_until(lambda: no_pods(release), "zero echo pods", 120)
    t0 = time.monotonic()
    out = jobs.runsync({"input": {"zero": True}})
    took = time.monotonic() - t0
    assert out["status"] == "COMPLETED", out
    t1 = time.monotonic()
    wait_until(lambda: workers_stopped(release, "echo"), "no running worker", 120, every=0.1)
    stopped = time.monotonic() - t1
    wait_until(lambda: no_pods(release), "zero echo pods", 120, every=0.1)
    return took, stopped, time.monotonic() - t1


def warm(jobs: Jobs, n: int) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.monotonic()
        jobs.runsync({"input": {"warm": i}})
        times.append(time.monotonic() - t0)
    return times


def burst(release: Release, jobs: Jobs) -> float:
    """12 jobs of 3 s at zero pods: seconds until workersMax pods run."""
    wait_until(lambda: no_pods(release), "zero echo pods", 120)
    t0 = time.monotonic()
    ids = [jobs.run({"input": {"sleep": 3, "i": i}}) for i in range(12)]
    reached = wait_until(
        lambda: (
            sum(running(p) for p in worker_pods(release, "echo")) >= WORKERS_MAX
            and time.monotonic()
        ),
        "workersMax pods",
        180,
        every=0.1,
    )
    for job_id in ids:
        jobs.final(job_id)
    return reached - t0


def hold_seconds_sum(release: Release) -> float:
    """`lockgate_lb_hold_seconds_sum` of the LB endpoint at the (one) gateway replica."""
    text = requests.get(f"{release.gateway_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "lockgate_lb_hold_seconds_sum" and sample.labels["endpoint"] == LB:
                return sample.value
    return 0.0


def lb_from_zero(release: Release, http: requests.Session) -> tuple[float, float]:
    """(first request at zero pods → 200, how long the gateway held it)."""
    wait_until(lambda: not worker_pods(release, LB, live=False), f"zero {LB} pods", 120)
    held_before = hold_seconds_sum(release)
    t0 = time.monotonic()
    answer = http.get(f"{release.gateway_url}/lb/{LB}/echo/zero", timeout=150)
    took = time.monotonic() - t0
    assert answer.status_code == 200, answer.text
    return took, hold_seconds_sum(release) - held_before


def lb_rows(release: Release, rounds: int) -> list[Row]:
    apply_lb_endpoint(release, LB, load_seconds=0)  # healthy at once
    http = requests.Session()
    http.headers["authorization"] = release.client_key()
    took, held = zip(*(lb_from_zero(release, http) for _ in range(rounds)), strict=True)
    med = statistics.median(took)
    p90 = statistics.quantiles(held, n=10, method="inclusive")[8] if rounds > 1 else held[0]
    holds = f"p50 {ms(statistics.median(held))}, p90 {ms(p90)}, max {ms(max(held))}"
    return [
        Row("LB: first request at zero -> 200 (median)", ms(med), "", "<= 1.5 s", med <= 1.5),
        Row("LB: hold time of that request (lockgate_lb_hold_seconds)", holds),
        Row("LB first request at zero, every round", ", ".join(ms(s) for s in took),
            detail=True),
    ]  # fmt: skip


def measure(release: Release, rounds: int) -> list[Row]:
    applied_running, applied_done = [], []
    for _ in range(rounds):
        a, b = cold_start(release)
        applied_running.append(a)
        applied_done.append(b)
        release.node.kubectl("-n", USER_NAMESPACE, "delete", "-f", str(ECHO))
        wait_until(lambda: no_pods(release), "zero echo pods", 120)
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(ECHO))
    wait_until(lambda: endpoint_status(release, "echo").get("phase") == "Ready", "Ready", 60)
    jobs = Jobs(release, "echo")
    zero, stopped, to_zero = zip(*(from_zero(release, jobs) for _ in range(rounds)), strict=True)
    jobs.runsync({"input": {"prime": True}})
    warm_times = warm(jobs, 30)
    burst_s = burst(release, jobs)
    med = statistics.median
    zero_med = med(zero)
    return [
        Row("Endpoint applied -> first pod Running (median)", ms(med(applied_running))),
        Row("Endpoint applied -> first job COMPLETED (median)", ms(med(applied_done))),
        Row("from zero: submit -> COMPLETED (median)", ms(zero_med), "", "<= 1.0 s",
            zero_med <= 1.0),
        Row("warm /runsync through the Service (median)", ms(med(warm_times)), "", "<= 40 ms",
            med(warm_times) <= 0.040),
        Row(f"burst: 0 -> {WORKERS_MAX} running pods", ms(burst_s)),
        Row("last job -> no worker running (median)", ms(med(stopped)), "",
            f"<= idleTimeout + 5 s = {IDLE_TIMEOUT_S + 5} s", med(stopped) <= IDLE_TIMEOUT_S + 5),
        Row("last job -> no worker pod object (median)", ms(med(to_zero))),
        Row("from zero, every round", ", ".join(ms(s) for s in zero), detail=True),
        Row("last job -> no worker running, every round", ", ".join(ms(s) for s in stopped),
            detail=True),
        *lb_rows(release, rounds),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (default 5)")
    args = parser.parse_args()
    missing = missing_parts() + ([] if archives() else ["the images (make cluster-images)"])
    if helm_binary() is None:
        missing.append("helm (make tools)")
    if missing:
        sys.exit("bench-cluster: cannot run a node here: missing " + ", ".join(missing))
    print(machine())
    with Cluster() as node:
        print(f"bench-cluster: node Ready in {node.timings['node Ready']:.1f} s")
        release = Release(node)
        t0 = time.monotonic()
        release.install()
        print(f"bench-cluster: helm install --wait took {time.monotonic() - t0:.1f} s")
        rows = measure(release, args.rounds)
    print(table(rows))


if __name__ == "__main__":
    main()
