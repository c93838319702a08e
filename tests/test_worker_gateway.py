"""The lockgate worker runtime as a process against the real gateway: a job stopped by
/cancel or by its executionTimeout has its async handler cancelled, or its sync handler
abandoned and the worker restarted in place; a late result is ignored; SIGTERM lets the
job in hand finish. The handler (tests/handlers/sleeper.py) leaves marks in files."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import JobStore, Registry
from tests.conftest import LiveGateway
from tests.test_job_api import get, post, submit
from tests.test_lifecycle import _is, eventually, status_of
from tests.test_worker_local import HANDLERS, exit_status, until, worker_env

FINAL = {"cancel": "CANCELLED", "timeout": "TIMED_OUT"}
TIMEOUT_MS = 1500  # the endpoint's executionTimeout when a test stops jobs by timeout


GATEWAY_SETTINGS = {"sweep_interval_s": 0.1}


class Worker:
    """`tests/handlers/sleeper.py` as worker w1 of the gateway's endpoint, logging to a file."""

    def __init__(self, gw: LiveGateway, tmp_path: Path) -> None:
        self.gw = gw
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        self.log = tmp_path / "worker.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, kind: str, concurrency: int = 1) -> None:
        env = worker_env(
            LOCKGATE_GATEWAY_URL=self.gw.url,
            LOCKGATE_ENDPOINT_ID=self.gw.endpoint,
            LOCKGATE_WORKER_ID="w1",
            LOCKGATE_WORKER_KEY=self.gw.worker_key,
            LOCKGATE_PING_INTERVAL_MS="200",
            LOCKGATE_LOG_LEVEL="DEBUG",
        )
        script = str(HANDLERS / "sleeper.py")
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, script, kind, str(concurrency), env=env, stderr=log
            )

    def mark(self, job_id: str, what: str) -> str | None:
        """The BOOT token of the process that left `<job_id>.<what>`, if it did."""
        path = self.marks / f"{job_id}.{what}"
        return (path.read_text() or None) if path.exists() else None

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")

    async def submit(self, http, **job_input) -> str:
        job = await submit(http, self.gw, {"input": {"marks": str(self.marks), **job_input}})
        return job["id"]


@pytest.fixture
async def worker(gateway: LiveGateway, tmp_path: Path) -> AsyncIterator[Worker]:
    w = Worker(gateway, tmp_path)
    yield w
    if w.process is not None and w.process.returncode is None:
        w.process.kill()
        await w.process.wait()


async def stop_by(how: str, http, gw: LiveGateway, job_id: str) -> None:
    """Cancel the job, or (its endpoint's executionTimeout being short) wait it out."""
    if how == "cancel":
        assert (await post(http, gw, f"cancel/{job_id}"))[1]["status"] == "CANCELLED"
    await eventually(lambda: _is(status_of(http, gw, job_id), FINAL[how]))


@pytest.fixture(params=["cancel", "timeout"])
async def how(request: pytest.FixtureRequest, redis: Redis, gateway: LiveGateway) -> str:
    if request.param == "timeout":
        entry = RegistryEntry(id=gateway.endpoint, executionTimeoutMs=TIMEOUT_MS)
        await Registry(redis).put_endpoint(gateway.endpoint, entry)
    return request.param


async def test_a_stopped_async_job_is_cancelled_in_its_handler_and_the_worker_goes_on(
    http, gateway, worker, how
):
    await worker.start("async")
    stuck = await worker.submit(http, sleep=60)
    await until(lambda: worker.mark(stuck, "start"))
    await stop_by(how, http, gateway, stuck)
    await until(lambda: worker.mark(stuck, "cancelled"))
    following = await worker.submit(http)
    await eventually(lambda: _is(status_of(http, gateway, following), "COMPLETED"))
    assert worker.mark(following, "start") == worker.mark(stuck, "start")  # no restart
    assert worker.mark(stuck, "end") is None
    assert await status_of(http, gateway, stuck) == FINAL[how]
    worker.process.send_signal(signal.SIGTERM)
    assert await exit_status(worker.process) == 0


async def test_a_stopped_sync_job_is_abandoned_and_the_worker_restarts_itself_in_place(
    http, gateway, worker, how
):
    await worker.start("sync")
    stuck = await worker.submit(http, sleep=60)
    await until(lambda: worker.mark(stuck, "start"))
    await stop_by(how, http, gateway, stuck)
    following = await worker.submit(http)
    await eventually(lambda: _is(status_of(http, gateway, following), "COMPLETED"))
    # A fresh interpreter ran the next job (its handler thread could not be stopped, and
    # threads do not survive exec), in the same process: nothing had to start it again.
    assert worker.mark(following, "start") != worker.mark(stuck, "start")
    assert worker.process.returncode is None
    assert worker.logged("w1 restarting")
    assert await status_of(http, gateway, stuck) == FINAL[how]
    assert worker.mark(stuck, "end") is None
    worker.process.send_signal(signal.SIGTERM)
    assert await exit_status(worker.process) == 0


async def test_a_result_the_handler_returns_after_its_cancel_is_ignored(http, gateway, worker):
    await worker.start("async")
    stubborn = await worker.submit(http, sleep=60, stubborn=True)
    await until(lambda: worker.mark(stubborn, "start"))
    await stop_by("cancel", http, gateway, stubborn)
    await until(lambda: worker.logged(f"job {stubborn} completed"))  # it sent {"late": true}
    _, body = await get(http, gateway, f"status/{stubborn}")
    assert body["status"] == "CANCELLED" and "output" not in body


async def test_sigterm_lets_the_job_in_hand_finish_and_report_then_exits_0(http, gateway, worker):
    await worker.start("sync")
    job_id = await worker.submit(http, sleep=1)
    await until(lambda: worker.mark(job_id, "start"))
    worker.process.send_signal(signal.SIGTERM)
    assert await exit_status(worker.process) == 0
    _, body = await get(http, gateway, f"status/{job_id}")
    assert (body["status"], body["output"]["echo"]["sleep"]) == ("COMPLETED", 1)


async def test_sigterm_while_a_restart_waits_for_other_jobs_ends_the_worker(http, gateway, worker):
    await worker.start("sync", concurrency=2)
    stuck = await worker.submit(http, sleep=60)
    other = await worker.submit(http, sleep=1.5)
    await until(lambda: worker.mark(stuck, "start") and worker.mark(other, "start"))
    await stop_by("cancel", http, gateway, stuck)
    await until(lambda: worker.logged("restarts itself once no other job is in hand"))
    worker.process.send_signal(signal.SIGTERM)
    assert await exit_status(worker.process) == 0
    assert not worker.logged("w1 restarting")
    assert await status_of(http, gateway, other) == "COMPLETED"


async def test_a_sync_handler_abandoned_after_a_cancel_counts_as_busy_while_it_runs(
    http, gateway, worker, redis
):
    await worker.start("sync", concurrency=2)
    stuck = await worker.submit(http, sleep=60)
    other = await worker.submit(http, sleep=5)  # the restart waits for it
    await until(lambda: worker.mark(stuck, "start") and worker.mark(other, "start"))
    await stop_by("cancel", http, gateway, stuck)
    await until(lambda: worker.logged("restarts itself once no other job is in hand"))
    store = JobStore(redis)

    async def both_counted() -> bool:  # after pings (every 200 ms) that list the jobs
        return (await store.snapshot(gateway.endpoint)).worker_jobs.get("w1") == 2

    # the abandoned handler still runs in its thread beside the other job: two jobs run
    assert await eventually(both_counted)
    await asyncio.sleep(1)  # more pings
    assert await both_counted()
    assert worker.mark(other, "end") is None  # the other job had not finished yet
