"""Lost workers without double runs (issue 47, item 5): an endpoint's `onWorkerLost` policy
(`requeue`, the default, or `fail`) and `requeueMaxRunS`, applied by every store path that
takes a job from a lost worker — silent past the heartbeat timeout (sweep.lua), its process
or pod gone (release_worker.lua: `release_worker`, `mark_unhealthy`), a restarted container
with the same id (take.lua's release) — and by none that is no loss (a clean exit when told
to stop, a take whose reply never arrived). A real Redis with a fake clock; the real gateway
on loopback (its sweep, a webhook, a /runsync waiter); and the runpod SDK's worker in a real
`lockgate dev`, SIGKILLed mid-job, counting its runs in a file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest
import requests
from redis.asyncio import Redis

from lockgate.kube.manifests.names import Owner
from lockgate.kube.registry_record import registry_entry
from lockgate.models import EndpointSpec
from lockgate.models.registry_entry import RegistryEntry
from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobStore, Liveness, NewJob, Registry, keys
from tests.conftest import eventually, wait_until
from tests.devproc import DevProcess
from tests.test_job_api import get, submit, take
from tests.test_lifecycle import Receiver

EP = "lost"
T0 = 1_800_000_000_000  # the fake clock's start (ms)
HB_MS = 1_000  # heartbeat timeout of the store under test


class Clock:
    """A settable clock for `JobStore(clock=...)`."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(redis: Redis, clock: Clock) -> JobStore:
    return JobStore(redis, clock=clock, liveness=Liveness(heartbeat_timeout_ms=HB_MS))


async def endpoint(redis: Redis, **settings: object) -> None:
    """Register EP with `settings`, as the operator and dev mode do (`put_endpoint`)."""
    await Registry(redis).put_endpoint(EP, RegistryEntry(id=EP, **settings))


async def running(store: JobStore, worker: str = "w1") -> str:
    """A job submitted now and taken by `worker`."""
    job = NewJob(id=keys.new_job_id(), input=b"{}", ttl_ms=86_400_000)
    job_id, _ = await store.submit(EP, job)
    [taken], _ = await store.take(EP, worker, 1, 3_600_000)
    assert taken.id == job_id
    return job_id


# -- the ways a worker is lost, each `ran` ms after it took the job ----------------------


async def silent(store: JobStore, clock: Clock, worker: str, job_id: str, ran: int) -> None:
    """It pinged listing the job until HB_MS before `ran`, then went silent: the sweep."""
    clock.now = T0 + ran - HB_MS
    await store.reconcile_worker(EP, worker, [job_id])
    clock.now = T0 + ran
    sweep = await store.sweep(EP, lock_ms=1)
    assert sweep.lost_workers == 1


async def process_gone(store: JobStore, clock: Clock, worker: str, job_id: str, ran: int) -> None:
    """Its process exited or its pod was deleted (dev pool, operator's scaler)."""
    clock.now = T0 + ran
    await store.release_worker(EP, worker)


async def marked_unhealthy(
    store: JobStore, clock: Clock, worker: str, job_id: str, ran: int
) -> None:
    """Its fitness check failed mid-job (h47's `mark_unhealthy`)."""
    clock.now = T0 + ran
    why = UnhealthyWorker(worker=worker, kind="fitness", reason="no GPU", at=clock.now)
    await store.mark_unhealthy(EP, why)


async def container_restarted(
    store: JobStore, clock: Clock, worker: str, job_id: str, ran: int
) -> None:
    """Its container restarted in its pod: the new process, same id, asks for a job holding
    none (`job_in_progress=0`)."""
    clock.now = T0 + ran
    await store.take(EP, worker, 1, 3_600_000, holds_none=True)


LoseWay = Callable[[JobStore, Clock, str, str, int], Awaitable[None]]
LOST: dict[str, LoseWay] = {
    "silent": silent,
    "process_gone": process_gone,
    "marked_unhealthy": marked_unhealthy,
    "container_restarted": container_restarted,
}


async def assert_failed_lost(store: JobStore, job_id: str, ran: int, policy: str) -> None:
    """FAILED with WORKER_LOST, its one attempt ended WORKER_LOST when lost, not retried;
    no other worker gets it."""
    record = await store.get(EP, job_id)
    assert record.status == "FAILED"
    assert record.error == (
        f"WORKER_LOST: the worker running this job was lost after {ran // 1000} s ({policy})"
    )
    history = (await store.job_extras(EP, job_id)).history
    assert [(a.worker, a.taken, a.ended, a.how) for a in history] == [
        ("w1", T0, T0 + ran, "WORKER_LOST")
    ]
    snap = await store.snapshot(EP)
    assert (snap.failed, snap.retried, snap.in_queue, snap.in_progress) == (1, 0, 0, 0)
    assert (await store.take(EP, "w2", 1, 3_600_000))[0] == []


async def assert_requeued(store: JobStore, job_id: str, ran: int, way: str = "") -> None:
    """Back in the queue, retried once; the next worker runs it, the history says so (a
    restarted container's new process took it back at once, itself the next worker)."""
    if way == "container_restarted":
        next_worker = "w1"
    else:
        next_worker = "w2"
        assert (await store.get(EP, job_id)).status == "IN_QUEUE"
        [again], _ = await store.take(EP, next_worker, 1, 3_600_000)
        assert again.id == job_id
    assert (await store.snapshot(EP)).retried == 1
    assert (await store.get(EP, job_id)).status == "IN_PROGRESS"
    history = (await store.job_extras(EP, job_id)).history
    assert [(a.worker, a.ended, a.how) for a in history] == [
        ("w1", T0 + ran, "WORKER_LOST"),
        (next_worker, None, None),
    ]


@pytest.mark.parametrize("way", sorted(LOST))
async def test_fail_ends_a_lost_workers_job_failed_worker_lost(redis, store, clock, way):
    await endpoint(redis, onWorkerLost="fail")
    job_id = await running(store)
    await LOST[way](store, clock, "w1", job_id, 5_000)
    await assert_failed_lost(store, job_id, 5_000, "onWorkerLost: fail")


@pytest.mark.parametrize("way", sorted(LOST))
async def test_requeue_the_default_runs_a_lost_workers_job_again(redis, store, clock, way):
    await endpoint(redis)
    job_id = await running(store)
    await LOST[way](store, clock, "w1", job_id, 5_000)
    await assert_requeued(store, job_id, 5_000, way)


@pytest.mark.parametrize("way", ["silent", "process_gone"])
@pytest.mark.parametrize("ran", [59_999, 60_000, 61_500])
async def test_requeue_max_run_s_requeues_only_shorter_runs(redis, store, clock, way, ran):
    await endpoint(redis, requeueMaxRunS=60)
    job_id = await running(store)
    await LOST[way](store, clock, "w1", job_id, ran)
    if ran < 60_000:
        await assert_requeued(store, job_id, ran)
    else:
        policy = "onWorkerLost: requeue, requeueMaxRunS 60: only shorter runs are requeued"
        await assert_failed_lost(store, job_id, ran, policy)


async def test_requeue_max_run_s_counts_the_latest_run_only(redis, store, clock):
    """A job lost once early and requeued counts its time from its new take."""
    await endpoint(redis, requeueMaxRunS=60)
    job_id = await running(store)
    clock.now = T0 + 50_000
    await store.release_worker(EP, "w1")
    [again], _ = await store.take(EP, "w2", 1, 3_600_000)
    assert again.id == job_id
    clock.now = T0 + 100_000  # 100 s since submitted, 50 s on w2
    await store.release_worker(EP, "w2")
    assert (await store.get(EP, job_id)).status == "IN_QUEUE"


async def test_the_attempts_limit_still_fails_a_requeued_job(redis, store, clock):
    """With requeue, running out of attempts fails the job as before (its own error, with
    the same WORKER_LOST start)."""
    await endpoint(redis, requeueMaxRunS=600)
    job_id = await running(store)
    for n in range(2, 4):
        await store.release_worker(EP, f"w{n - 1}")
        await store.take(EP, f"w{n}", 1, 3_600_000)
    await store.release_worker(EP, "w3")
    record = await store.get(EP, job_id)
    assert (record.status, record.error) == (
        "FAILED",
        "WORKER_LOST: the worker running this job was lost (3 attempts made)",
    )


# -- what is not a loss: the job never ran ------------------------------------------------


async def test_a_clean_exit_gives_the_job_back_whatever_the_policy(redis, store, clock):
    await endpoint(redis, onWorkerLost="fail")
    job_id = await running(store)
    clock.now = T0 + 5_000
    assert await store.release_worker(EP, "w1", clean=True) == (1, 0)
    assert (await store.get(EP, job_id)).status == "IN_QUEUE"
    history = (await store.job_extras(EP, job_id)).history
    assert [(a.worker, a.how) for a in history] == [("w1", "GIVEN_BACK")]
    assert (await store.job_extras(EP, job_id)).attempts == 0


async def test_a_take_whose_reply_never_arrived_is_requeued_whatever_the_policy(
    redis, store, clock
):
    await endpoint(redis, onWorkerLost="fail")
    job_id = await running(store)
    clock.now = T0 + store.liveness.unlisted_grace_ms + 1
    assert await store.reconcile_worker(EP, "w1", []) == 1  # its ping does not list it
    assert (await store.get(EP, job_id)).status == "IN_QUEUE"
    [again], _ = await store.take(EP, "w2", 1, 3_600_000)
    assert again.id == job_id


# -- where the policy lives: written with the registry entry, gone with the endpoint -------


async def test_the_policy_is_written_with_the_entry_and_removed_with_the_endpoint(redis, store):
    key = keys.lost_policy(EP)
    await endpoint(redis)
    assert await redis.exists(key) == 0  # the default costs no key
    await endpoint(redis, onWorkerLost="fail")
    assert await redis.hgetall(key) == {b"p": b"fail", b"n": b"0"}
    await endpoint(redis, requeueMaxRunS=90)
    assert await redis.hgetall(key) == {b"p": b"requeue", b"n": b"90000"}
    await endpoint(redis)
    assert await redis.exists(key) == 0
    await endpoint(redis, onWorkerLost="fail")
    await store.delete_endpoint_data(EP)
    assert await redis.exists(key) == 0


async def test_the_operators_entry_carries_the_policy_to_the_store(redis, store, clock):
    """The operator writes the Endpoint's spec as its registry entry (kube/reconcile.py)."""
    owner = Owner(EP, "ml", "uid-1")
    spec = EndpointSpec(onWorkerLost="fail")
    entry = registry_entry(owner, spec, key_digest="d" * 64, job_api_url="http://x")
    await Registry(redis).put_endpoint(EP, entry)
    job_id = await running(store)
    await process_gone(store, clock, "w1", job_id, 5_000)
    await assert_failed_lost(store, job_id, 5_000, "onWorkerLost: fail")


async def test_an_endpoint_back_to_requeue_requeues_again(redis, store, clock):
    await endpoint(redis, onWorkerLost="fail")
    await endpoint(redis, onWorkerLost="requeue")
    job_id = await running(store)
    await process_gone(store, clock, "w1", job_id, 5_000)
    await assert_requeued(store, job_id, 5_000)


# -- the gateway: its sweep fails the job, the webhook and a /runsync waiter see it --------

GATEWAY_SETTINGS = dict(
    sweep_interval_s=0.1,
    heartbeat_timeout_s=1.0,
    webhook_retry_interval_s=1.0,
    webhook_allow_private=True,
)


async def test_a_silent_workers_job_fails_with_its_webhook_and_runsync_answer(http, gateway, redis):
    await Registry(redis).put_endpoint("echo", RegistryEntry(id="echo", onWorkerLost="fail"))
    receiver = Receiver()
    url = await receiver.start()
    hooked = await submit(http, gateway, {"input": {"n": 1}, "webhook": url})
    assert (await take(http, gateway, "w1"))["id"] == hooked["id"]

    async def runsync() -> dict:
        async with http.post(
            gateway.job_url("runsync?wait=30000"), json={"input": {"n": 2}},
            headers=gateway.client_headers(),
        ) as r:  # fmt: skip
            return await r.json()

    waiter = asyncio.create_task(runsync())
    synced = await eventually(lambda: take(http, gateway, "w2"), "the /runsync job taken")

    answer = await asyncio.wait_for(waiter, 30)  # w2 went silent: the sweep failed its job
    assert (answer["id"], answer["status"]) == (synced["id"], "FAILED")
    assert answer["error"].startswith("WORKER_LOST: ")

    async def called() -> bool:
        return bool(receiver.calls)

    await eventually(called, "the webhook call")
    body = json.loads(receiver.calls[0][2])
    assert (body["id"], body["status"]) == (hooked["id"], "FAILED")
    assert body["error"].startswith("WORKER_LOST: ") and "onWorkerLost: fail" in body["error"]
    _, details = await get(http, gateway, f"status/{hooked['id']}?details=1")
    assert [(a["workerId"], a["ended"]) for a in details["attemptHistory"]] == [
        ("w1", "WORKER_LOST")
    ]
    await receiver.runner.cleanup()


# -- the runpod SDK's worker in `lockgate dev`, SIGKILLed mid-job --------------------------

TROUBLE = "tests/workers/runpod_trouble.py"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def kill_worker(dev: DevProcess, worker_id: str) -> None:
    """SIGKILL the worker process with that id (its RUNPOD_POD_ID)."""
    for proc in dev.workers():
        try:
            if proc.environ().get("RUNPOD_POD_ID") == worker_id:
                proc.kill()
                return
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    raise AssertionError(f"no worker process {worker_id}")


def test_a_sigkilled_runpod_worker_s_job_fails_or_runs_again_as_its_endpoint_says(tmp_path):
    """Two endpoints of the same runpod-SDK handler, `fail` and `requeue`, each running a
    job that appends its id to a file and sleeps 30 s; each worker is SIGKILLed while the
    handler runs. `fail`: FAILED WORKER_LOST, run once, though a new worker runs the next
    job. `requeue`: run again by a new worker."""
    args = (TROUBLE, "--workers-max", "0", "--api-key", "k-admin")
    with DevProcess(*args, data_dir=tmp_path / "dev") as dev:
        auth = dev.headers()
        manage = f"{dev.url}/v1/endpoints"
        for bad in ({"onWorkerLost": "retry"}, {"requeueMaxRunS": -1}):
            body = {"id": "bad", "templateId": TROUBLE, **bad}
            r = requests.post(manage, json=body, headers=auth)
            assert r.status_code == 400 and next(iter(bad)) in r.text, r.text
        jobs, runs = {}, {}
        for policy in ("fail", "requeue"):
            body = {"id": f"lost-{policy}", "templateId": TROUBLE, "workersMax": 1}
            assert requests.post(manage, json=body, headers=auth).status_code == 200
            # set by an edit, as a person changes an endpoint's settings
            edit = {"onWorkerLost": policy}
            r = requests.patch(f"{manage}/lost-{policy}", json=edit, headers=auth)
            assert r.status_code == 200 and r.json()["onWorkerLost"] == policy, r.text
            runs[policy] = tmp_path / f"runs-{policy}"
            job = {"input": {"append": str(runs[policy]), "sleep": 30}}
            url = f"{dev.url}/v2/lost-{policy}/run"
            jobs[policy] = requests.post(url, json=job, headers=auth).json()["id"]

        def details(policy: str) -> dict:
            url = f"{dev.url}/v2/lost-{policy}/status/{jobs[policy]}?details=1"
            return requests.get(url, headers=auth).json()

        for policy in ("fail", "requeue"):
            wait_until(lambda p=policy: lines(runs[p]), "the handler runs", timeout=60)
            [first] = details(policy)["attemptHistory"]
            kill_worker(dev, first["workerId"])

        failed = wait_until(lambda: (d := details("fail"))["status"] == "FAILED" and d)
        assert failed["error"].startswith("WORKER_LOST: the worker running this job was lost")
        assert "(onWorkerLost: fail)" in failed["error"]
        assert [a["ended"] for a in failed["attemptHistory"]] == ["WORKER_LOST"]
        # a new worker comes for the next job, and still never runs the failed one again
        later = tmp_path / "runs-later"
        url = f"{dev.url}/v2/lost-fail/runsync"
        done = requests.post(url, json={"input": {"append": str(later)}}, headers=auth).json()
        assert done["status"] == "COMPLETED" and done["output"]["worker"] != first["workerId"]
        assert lines(runs["fail"]) == [jobs["fail"]]

        wait_until(lambda: len(lines(runs["requeue"])) == 2, "the second run", timeout=60)
        assert lines(runs["requeue"]) == [jobs["requeue"]] * 2
        again = details("requeue")
        history = [a.get("ended") for a in again["attemptHistory"]]
        assert (again["status"], history) == ("IN_PROGRESS", ["WORKER_LOST", None])
        second = again["attemptHistory"][1]["workerId"]
        assert second != again["attemptHistory"][0]["workerId"]
        health = requests.get(f"{dev.url}/v2/lost-requeue/health", headers=auth).json()
        assert (health["jobs"]["failed"], health["jobs"]["retried"]) == (0, 1)
        # no 30 s wait for the job in hand at Ctrl-C: cancelled, its worker killed
        requests.post(f"{dev.url}/v2/lost-requeue/cancel/{jobs['requeue']}", headers=auth)
        kill_worker(dev, second)
