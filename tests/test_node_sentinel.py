"""Redis Sentinel deployed by the chart, on a real node (tests/cluster.py): three Redis pods
(a master, two replicas, a sentinel beside each) from examples/values/redis-sentinel.yaml,
and the master's pod force-deleted under load: every accepted job completes, the gateway
follows the new master without a restart, and the deleted pod comes back as a replica.

The node has no storage provisioner: Redis keeps its data in an emptyDir
(tests/node-values.yaml), so the deleted master's pod comes back empty; it must wait for
the sentinels' failover instead of returning as an empty master its replicas would copy.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from cluster import Cluster
from node_release import (
    NODE_VALUES,
    REPO,
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    running,
    wait_until,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

SENTINEL_VALUES = REPO / "examples" / "values" / "redis-sentinel.yaml"
REDIS = "app.kubernetes.io/component=redis"
GATEWAY = "app.kubernetes.io/component=gateway"
JOBS = 200
KILL_AFTER = 50  # accepted jobs before the master's pod is deleted


@pytest.fixture(scope="module")
def release(node: Cluster) -> Release:
    """The chart with the example Sentinel values (minReplicasAck 1) over node-values. Not
    uninstalled: the module's node is stopped next, its pods killed (`helm uninstall
    --wait` and its hook would add ~35 s)."""
    rel = Release(node, values=[NODE_VALUES, SENTINEL_VALUES])
    rel.install()
    return rel


def sentinel_cli(release: Release, pod: str, *args: str) -> list[str]:
    """redis-cli against the sentinel of `pod` (authenticated by its REDISCLI_AUTH)."""
    out = release.kubectl("exec", pod, "-c", "sentinel", "--", "redis-cli", "-p", "26379", *args)
    return out.split()


def master_pod(release: Release, ask: str) -> str:
    """The pod the sentinels name master, asked of `ask`'s sentinel."""
    host, _port = sentinel_cli(release, ask, "sentinel", "get-master-addr-by-name", "lockgate")
    return host.split(".")[0]


def replication(release: Release, pod: str) -> dict[str, str]:
    """INFO replication of the server in `pod`; empty while the pod is not there."""
    cmd = ("exec", pod, "-c", "redis", "--", "redis-cli", "info", "replication")
    out = release.kubectl(*cmd, check=False)
    pairs = (line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


def gateway_containers(release: Release) -> dict[str, int]:
    """Each running gateway pod's uid and its container's restart count."""
    return {
        p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"]
        for p in release.pods(GATEWAY)
        if running(p)
    }


def test_three_redis_pods_replicate_the_first_master_and_a_job_runs(release: Release) -> None:
    pods = sorted(p["metadata"]["name"] for p in release.pods(REDIS) if running(p))
    assert pods == ["lockgate-redis-0", "lockgate-redis-1", "lockgate-redis-2"]
    for pod in pods:  # every sentinel names the same master
        assert master_pod(release, pod) == "lockgate-redis-0"
    wait_until(
        lambda: replication(release, "lockgate-redis-0").get("connected_slaves") == "2",
        "both replicas to be connected",
        timeout=60,
    )
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(REPO / "examples" / "echo"))
    wait_until(
        lambda: endpoint_status(release, "echo").get("phase") == "Ready",
        "the echo Endpoint to be Ready",
        timeout=90,
    )
    job = Jobs(release, "echo").runsync({"input": {"n": 0}})
    assert job["status"] == "COMPLETED" and job["output"] == {"echo": {"n": 0}}, job


class Load:
    """Submits JOBS echo jobs one after another; 503s (a failover) are retried, the rest
    of the answers counted. `accepted` holds the ids the gateway acknowledged."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.accepted: list[str] = []
        self.refused: dict[int, int] = {}
        self.wrong: list[str] = []  # the first answers that were neither 200 nor 503
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while len(self.accepted) < JOBS and time.monotonic() < deadline:
            try:
                r = self.jobs.http.post(
                    f"{self.jobs.url}/run", json={"input": {"n": len(self.accepted)}}, timeout=10
                )
            except requests.RequestException:  # no gateway ready (it is unready meanwhile)
                self.refused[0] = self.refused.get(0, 0) + 1
                time.sleep(0.1)
                continue
            if r.status_code == 200:
                self.accepted.append(r.json()["id"])
            else:
                self.refused[r.status_code] = self.refused.get(r.status_code, 0) + 1
                if r.status_code != 503 and len(self.wrong) < 5:
                    self.wrong.append(f"{time.strftime('%H:%M:%S')} {r.status_code} {r.text}")
                time.sleep(0.1)


def final_states(jobs: Jobs, ids: list[str], timeout: float) -> dict[str, str]:
    """Each job's status once final, polled until all are or `timeout` passes; a gateway
    that does not answer (unready while Redis fails over) is asked again."""
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(states) < len(ids) and time.monotonic() < deadline:
        for job_id in [j for j in ids if j not in states]:
            try:
                r = jobs.http.get(f"{jobs.url}/status/{job_id}", timeout=10)
            except requests.RequestException:
                time.sleep(0.5)
                break
            status = r.json().get("status") if r.status_code == 200 else None
            if status in final:
                states[job_id] = status
        else:
            time.sleep(0.5)
    return states


def redis_logs(release: Release) -> str:
    """Every Redis pod's server and sentinel log, for a failure's message."""
    pods = [p["metadata"]["name"] for p in release.pods(REDIS)]
    return "\n".join(
        release.kubectl("logs", pod, "--all-containers", "--prefix", check=False) for pod in pods
    )


def test_deleting_the_master_pod_under_load_loses_no_accepted_job(release: Release) -> None:
    try:
        _delete_the_master_under_load(release)
    except AssertionError:
        logs = redis_logs(release)
        print("\n".join(line for line in logs.splitlines() if "find-master:" in line))
        print(logs[-20000:])
        raise


def _delete_the_master_under_load(release: Release) -> None:
    old = master_pod(release, "lockgate-redis-1")
    gateways = gateway_containers(release)
    load = Load(Jobs(release, "echo"))
    load.thread.start()
    wait_until(lambda: len(load.accepted) >= KILL_AFTER, "the first jobs", timeout=60)
    killed = time.monotonic()
    release.kubectl("delete", "pod", old, "--grace-period=0", "--force", "--wait=false")
    load.thread.join(timeout=150)
    submitted = time.monotonic() - killed
    assert len(load.accepted) == JOBS, (len(load.accepted), load.refused)
    assert set(load.refused) <= {0, 503}, (load.refused, load.wrong)  # never a wrong answer
    states = final_states(Jobs(release, "echo"), load.accepted, timeout=150)
    assert [j for j in load.accepted if states.get(j) != "COMPLETED"] == [], states
    done = time.monotonic() - killed
    new = master_pod(release, "lockgate-redis-1")
    assert new != old
    assert gateway_containers(release) == gateways  # followed without a restart
    # The deleted pod is back, as a replica of the new master (not a second, empty master).
    wait_until(
        lambda: replication(release, old).get("role") == "slave", f"{old} to rejoin", timeout=90
    )
    assert replication(release, old)["master_host"].startswith(f"{new}.")
    print(
        f"\nfailover {old} -> {new}: {len(load.accepted)} accepted, refused {load.refused};"
        f" last accepted {submitted:.1f} s and all completed"
        f" {done:.1f} s after the deletion"
    )
    came_back = release.kubectl("logs", old, "-c", "redis", check=False)
    print("\n".join(line for line in came_back.splitlines() if "find-master:" in line))
