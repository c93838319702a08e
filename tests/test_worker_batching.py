"""Dynamic batching (`start`'s `batch`) in a real worker process against the real gateway:
batches formed by size and by wait (the sizes the handler saw, read from its outputs), an
error for one item, a wrong-length return, a timeout for one job only, the batch metrics;
a streaming handler and bad options refused at start. The handler is
tests/handlers/batcher.py."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from lockgate import workerenv
from lockgate.dev.redis_server import free_port
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import Registry
from lockgate.worker import batching
from lockgate.worker.batching import BatchOptions, BatchOptionsError
from lockgate.worker.handlers import Outcome
from tests.conftest import LiveGateway
from tests.test_job_api import get, post, submit
from tests.test_lifecycle import eventually, status_of
from tests.test_worker_local import HANDLERS, REPO, exit_status, run_local, until, worker_env

SCRIPT = HANDLERS / "batcher.py"
NEVER_MS = 30_000  # a wait that never comes first: batches form by size alone
GATEWAY_SETTINGS = {"sweep_interval_s": 0.1}


class BatchWorker:
    """tests/handlers/batcher.py as worker w1 of the gateway's endpoint."""

    def __init__(self, gw: LiveGateway, tmp_path: Path) -> None:
        self.gw = gw
        self.log = tmp_path / "worker.log"
        self.process: asyncio.subprocess.Process | None = None
        self.metrics_port = free_port()

    async def start(self, kind: str, max_size: int, wait_ms: int) -> None:
        env = worker_env(
            LOCKGATE_GATEWAY_URL=self.gw.url,
            LOCKGATE_ENDPOINT_ID=self.gw.endpoint,
            LOCKGATE_WORKER_ID="w1",
            LOCKGATE_WORKER_KEY=self.gw.worker_key,
            LOCKGATE_PING_INTERVAL_MS="200",
            LOCKGATE_LOG_LEVEL="DEBUG",
            LOCKGATE_WORKER_METRICS_PORT=str(self.metrics_port),
        )
        args = (str(SCRIPT), kind, str(max_size), str(wait_ms))
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, *args, env=env, stderr=log
            )

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")


@pytest.fixture
async def worker(gateway: LiveGateway, tmp_path: Path) -> AsyncIterator[BatchWorker]:
    w = BatchWorker(gateway, tmp_path)
    yield w
    if w.process is not None and w.process.returncode is None:
        w.process.kill()
        await w.process.wait()


async def submit_all(http, gw: LiveGateway, inputs: list[dict], **body) -> list[str]:
    return [(await submit(http, gw, {"input": given, **body}))["id"] for given in inputs]


async def finished(http, gw: LiveGateway, job_id: str) -> dict:
    """The job's /status once it is no longer queued or running."""
    await eventually(lambda: _ended(http, gw, job_id), timeout_s=20)
    return (await get(http, gw, f"status/{job_id}"))[1]


async def _ended(http, gw: LiveGateway, job_id: str) -> bool:
    return await status_of(http, gw, job_id) not in ("IN_QUEUE", "IN_PROGRESS")


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_queued_jobs_are_handed_over_in_batches_of_max_size(http, gateway, worker, kind):
    ids = await submit_all(http, gateway, [{"i": i} for i in range(8)])
    await worker.start(kind, max_size=4, wait_ms=NEVER_MS)
    results = [await finished(http, gateway, job_id) for job_id in ids]
    assert [r["status"] for r in results] == ["COMPLETED"] * 8
    assert [r["output"] for r in results] == [{"batch": 4, "i": i} for i in range(8)]


async def test_one_call_at_a_time_the_next_batch_waiting_for_it(http, gateway, worker):
    # 4 jobs in hand (2 x max_size): the second batch is full while the first call sleeps
    ids = await submit_all(http, gateway, [{"i": i, "sleep": 0.3, "watch": True} for i in range(4)])
    await worker.start("async", max_size=2, wait_ms=NEVER_MS)
    results = [await finished(http, gateway, job_id) for job_id in ids]
    assert [r["output"] for r in results] == [{"batch": 2, "i": i, "others": 0} for i in range(4)]


async def test_a_lone_job_is_handed_over_after_wait_ms_as_a_batch_of_one(http, gateway, worker):
    await worker.start("async", max_size=4, wait_ms=50)
    [job_id] = await submit_all(http, gateway, [{"i": 0}])
    result = await finished(http, gateway, job_id)
    assert (result["status"], result["output"]) == ("COMPLETED", {"batch": 1, "i": 0})
    metrics = await scrape(http, worker.metrics_port)
    assert "lockgate_worker_batch_size_count 1.0" in metrics
    assert "lockgate_worker_batch_size_sum 1.0" in metrics
    assert 'lockgate_worker_batch_size_bucket{le="1.0"} 1.0' in metrics
    assert "lockgate_worker_batch_wait_seconds_count 1.0" in metrics


async def test_a_worker_holding_more_jobs_than_one_take_gives_takes_them(http, gateway, worker):
    # max_size 64: 128 jobs in hand, more than the gateway hands out per job-take-batch (100)
    ids = await submit_all(http, gateway, [{"i": i} for i in range(3)])
    await worker.start("async", max_size=64, wait_ms=50)
    results = [await finished(http, gateway, job_id) for job_id in ids]
    assert [r["output"] for r in results] == [{"batch": 3, "i": i} for i in range(3)]
    assert not worker.logged("job-take failed")


async def scrape(http, port: int) -> str:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as answer:
        assert answer.status == 200
        return await answer.text()


async def test_an_error_for_one_item_fails_that_job_alone(http, gateway, worker):
    inputs = [{"i": 0}, {"i": 1, "fail": "no embedding"}, {"i": 2, "bang": "bad input"}]
    ids = await submit_all(http, gateway, inputs)
    await worker.start("sync", max_size=3, wait_ms=NEVER_MS)
    ok, failed, raised = [await finished(http, gateway, job_id) for job_id in ids]
    assert (ok["status"], ok["output"]) == ("COMPLETED", {"batch": 3, "i": 0})
    assert (failed["status"], failed["error"]) == ("FAILED", "no embedding")
    assert (raised["status"], raised["error"]) == ("FAILED", "ValueError: bad input")


async def test_a_wrong_length_return_fails_every_job_of_the_call(http, gateway, worker):
    ids = await submit_all(http, gateway, [{"i": 0}, {"i": 1, "short": True}])
    await worker.start("async", max_size=2, wait_ms=NEVER_MS)
    for job_id in ids:
        result = await finished(http, gateway, job_id)
        assert result["status"] == "FAILED"
        assert result["error"] == "batch handler returned 1 outputs for 2 jobs"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_job_past_its_execution_timeout_times_out_alone_in_its_batch(
    http, gateway, worker, redis: Redis, kind
):
    entry = RegistryEntry(id=gateway.endpoint, executionTimeoutMs=1500)
    await Registry(redis).put_endpoint(gateway.endpoint, entry)
    [slow] = await submit_all(http, gateway, [{"i": 0, "sleep": 3}])
    [patient] = await submit_all(http, gateway, [{"i": 1}], policy={"executionTimeout": 60_000})
    await worker.start(kind, max_size=2, wait_ms=NEVER_MS)
    result = await finished(http, gateway, patient)
    assert (result["status"], result["output"]) == ("COMPLETED", {"batch": 2, "i": 1})
    assert await status_of(http, gateway, slow) == "TIMED_OUT"
    await until(lambda: worker.logged(f"job {slow} stopping: it leaves its batch"))
    assert worker.process.returncode is None  # not restarted, not ended: a sync one too
    assert not worker.logged("restarting")


async def test_a_cancelled_job_leaves_its_batch_and_the_others_complete(http, gateway, worker):
    slow, other = await submit_all(http, gateway, [{"i": 0, "sleep": 3}, {"i": 1}])
    await worker.start("async", max_size=2, wait_ms=NEVER_MS)
    await until(lambda: worker.logged("batch of 2 job(s)"))
    assert (await post(http, gateway, f"cancel/{slow}"))[1]["status"] == "CANCELLED"
    await until(lambda: worker.logged(f"job {slow} stopping: it leaves its batch"))
    result = await finished(http, gateway, other)
    assert (result["status"], result["output"]) == ("COMPLETED", {"batch": 2, "i": 1})
    assert await status_of(http, gateway, slow) == "CANCELLED"


async def test_a_runpod_sdk_worker_batches_with_lockgate_worker_batched(http, gateway, tmp_path):
    inputs = [{"i": 0}, {"i": 1, "fail": "no embedding"}, {"i": 2}, {"i": 3}]
    ids = await submit_all(http, gateway, inputs)
    env = worker_env(**workerenv.worker_env(gateway.url, gateway.endpoint, gateway.worker_key))
    env |= {"RUNPOD_POD_ID": "sdk1", "RUNPOD_PING_INTERVAL": "200"}
    script = str(REPO / "tests" / "workers" / "runpod_batched.py")
    with (tmp_path / "worker.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, script, "4", str(NEVER_MS), env=env, stdout=log, stderr=log
        )
    try:
        ok, failed, *rest = [await finished(http, gateway, job_id) for job_id in ids]
    finally:
        process.kill()
        await process.wait()
    assert (ok["status"], ok["output"]) == ("COMPLETED", {"batch": 4, "i": 0})
    assert (failed["status"], failed["error"]) == ("FAILED", "no embedding")
    assert [r["output"] for r in rest] == [{"batch": 4, "i": 2}, {"batch": 4, "i": 3}]


def test_a_local_test_input_runs_as_a_batch_of_one() -> None:
    result = run_local(SCRIPT, "sync", "4", "10", "--test_input", '{"input": {"i": 7}}')
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "id": "local_test",
        "status": "COMPLETED",
        "output": {"batch": 1, "i": 7},
    }


async def test_a_sync_call_whose_jobs_all_stopped_is_abandoned_and_the_worker_restarts(
    http, gateway, worker, redis: Redis
):
    entry = RegistryEntry(id=gateway.endpoint, executionTimeoutMs=1500)
    await Registry(redis).put_endpoint(gateway.endpoint, entry)
    [stuck] = await submit_all(http, gateway, [{"i": 0, "sleep": 60}])
    await worker.start("sync", max_size=1, wait_ms=0)
    assert (await finished(http, gateway, stuck))["status"] == "TIMED_OUT"
    [following] = await submit_all(http, gateway, [{"i": 1}])
    result = await finished(http, gateway, following)
    assert (result["status"], result["output"]) == ("COMPLETED", {"batch": 1, "i": 1})
    assert worker.logged("restarting")
    assert worker.process.returncode is None  # the same process, its command run again


# -- refused at start: one line on stderr, exit status 2


def test_a_streaming_handler_is_refused_with_batch() -> None:
    result = run_local(SCRIPT, "generator", "8", "10")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "lockgate.worker: cannot start: a generator handler streams and cannot take a batch: "
        "drop `batch`, or return a list instead of yielding"
    ]


@pytest.mark.parametrize(
    ("max_size", "wait_ms", "said"),
    [
        ("0", "10", "batch max_size must be an integer from 1 to 1024, got 0"),
        ("2000", "10", "batch max_size must be an integer from 1 to 1024, got 2000"),
        ('"8"', "10", "batch max_size must be an integer from 1 to 1024, got '8'"),
        ("8", "-1", "batch wait_ms must be a number of milliseconds from 0 to 60000, got -1"),
        ("8", "true", "batch wait_ms must be a number of milliseconds from 0 to 60000, got True"),
    ],
)
def test_bad_batch_options_are_refused_at_start(max_size: str, wait_ms: str, said: str) -> None:
    result = run_local(SCRIPT, "async", max_size, wait_ms)
    assert result.returncode == 2
    assert result.stderr.strip() == f"lockgate.worker: cannot start: {said}"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (32, "batch must be a dict"),
        ({"max_size": 8, "wait": 5}, "batch has unknown keys ['wait']"),
        ({"wait_ms": 5}, "batch max_size must be an integer"),
        ({"max_size": 8, "wait_ms": float("nan")}, "batch wait_ms must be a number"),
    ],
)
def test_batch_options_say_what_is_wrong(value: object, said: str) -> None:
    with pytest.raises(BatchOptionsError, match=f"^{said}".replace("[", r"\[")):
        BatchOptions.from_value(value)


def test_batch_options_default_wait_ms_is_10() -> None:
    assert BatchOptions.from_value({"max_size": 8}) == BatchOptions(max_size=8, wait_ms=10.0)


def test_outcomes_of_a_batch_return_value() -> None:
    assert batching.outcomes([{"v": 1}, {"error": "e"}, KeyError("k"), 7], 4) == [
        Outcome({"output": {"v": 1}}),
        Outcome({"error": "e"}),
        Outcome({"error": "KeyError: 'k'"}),
        Outcome({"output": 7}),
    ]
    assert (
        batching.outcomes({"v": 1}, 2)
        == [Outcome({"error": "batch handler must return a list of outputs, got dict"})] * 2
    )


async def test_worker_exits_0_on_sigterm_with_batch(gateway, worker) -> None:
    await worker.start("async", max_size=4, wait_ms=10)
    await until(lambda: worker.logged("batches of up to 4 within 10 ms"))
    worker.process.terminate()
    assert await exit_status(worker.process) == 0
