"""Sentinel mode on real servers (tests/redis_topologies.py: a master, 2 replicas and 3
sentinels on loopback): the job API's contract tests, the runpod SDK through `lockgate dev`,
LOCKGATE_REDIS_MIN_REPLICAS_ACK, bad settings, and the Sentinel master SIGKILLed under a
2,000-job load. Also `lockgate dev --redis-url` against an external standalone Redis.

The contract subset runs with MIN_REPLICAS_ACK=1, so each submit and result there waits for
a replica. Test order matters: the contract tests flush Redis, the SDK's dev processes (module
fixtures) come after them, the fault tests last (each heals the set after its kill).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import redis as sync_redis
import runpod

from lockgate.apps.gateway import settings_from
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.store import JobStore, NewJob, Replication, connect
from lockgate.store.connection import NotReplicated, RedisSettings, RedisSettingsError
from lockgate.workerenv import worker_env, worker_id_env
from tests.conftest import REPO, eventually, redis_settings, register
from tests.devproc import DevProcess
from tests.redis_topologies import SentinelProcs, send
from tests.redis_topologies import redis_sentinels as redis_sentinels  # a fixture
from tests.test_faults import gateway_process
from tests.test_idempotency import (  # noqa: F401 (re-run here on Sentinel)
    test_a_second_run_with_the_same_key_returns_the_first_job,
    test_deleting_an_endpoints_data_removes_its_idempotency_keys,
)
from tests.test_job_api import (  # noqa: F401 (re-run here on Sentinel)
    get,
    take,
    test_a_missing_or_unknown_key_gets_401,
    test_a_progress_update_posted_to_job_done_does_not_finish_the_job,
    test_a_taken_job_completes_with_its_output,
    test_a_worker_key_cannot_call_client_routes,
    test_a_worker_that_holds_no_job_gets_back_what_its_id_held_before,
    test_cancel_in_progress_signals_the_worker_and_ignores_its_late_result,
    test_health_counts_jobs_and_workers,
    test_job_take_batch_hands_out_up_to_batch_size_jobs,
    test_low_priority_jobs_are_taken_after_normal_ones,
    test_purge_removes_queued_jobs_and_leaves_running_ones,
    test_retry_requeues_a_failed_job_with_the_same_id_and_input,
    test_runsync_returns_the_completed_job,
    test_status_ttl_shortens_a_jobs_life,
    test_stream_returns_chunks_once_and_ends_with_a_final_empty_read,
    test_unknown_endpoints_and_jobs_get_404,
)
from tests.test_lifecycle import GATEWAY_SETTINGS as LIFECYCLE_SETTINGS
from tests.test_lifecycle import (  # noqa: F401
    test_a_job_past_its_execution_timeout_is_timed_out_and_its_worker_told,
    test_a_job_the_workers_ping_does_not_list_goes_back_to_the_queue,
    test_a_silent_worker_loses_its_job_to_the_queue_then_it_fails,
    test_a_webhook_that_fails_twice_is_called_exactly_three_times_signed,
    test_results_are_kept_for_the_retention_then_gone_and_not_retryable,
)
from tests.test_limits import (  # noqa: F401
    HOUR_WINDOW,
    test_limits_count_per_key_owner_and_per_endpoint,
    test_requests_in_flight_past_the_concurrency_limit_are_refused,
)
from tests.test_progress import (  # noqa: F401
    test_the_latest_progress_is_the_output_of_a_running_job,
)
from tests.test_requests_list import (  # noqa: F401
    test_cancel_retry_and_a_lost_worker_move_jobs_between_status_filters,
    test_jobs_are_listed_newest_first_with_their_state_and_nothing_private,
)
from tests.test_runpod_sdk import (  # noqa: F401 (the SDK's tests, on a Sentinel dev)
    echo,
    streamer,
    test_a_failing_handler_shows_failed_with_its_error,
    test_cancel_a_queued_job,
    test_run_sync_returns_the_output,
    test_run_then_status_and_output,
    test_stream_yields_each_chunk_of_a_generator_worker,
)
from tests.test_scripts import (  # noqa: F401
    FLUSH_JOBS,
    FLUSHED_GATEWAY,
    scripts_flushed_under_load,
    test_scripts_flushed_again_and_again_under_load_fail_no_request,
    test_scripts_flushed_from_redis_are_loaded_again,
)

GATEWAY_SETTINGS = {**LIFECYCLE_SETTINGS, **HOUR_WINDOW}


def sentinel_settings(procs: SentinelProcs, **fields) -> RedisSettings:
    return redis_settings(
        redis_sentinels=procs.sentinel_nodes, redis_sentinel_master=procs.master_name, **fields
    )


def sentinel_env(procs: SentinelProcs, **env: str) -> dict[str, str]:
    """LOCKGATE_* variables of Sentinel mode (`env`: more, names without the prefix)."""
    settings = {"REDIS_SENTINELS": procs.sentinel_nodes, "REDIS_SENTINEL_MASTER": procs.master_name}
    return {f"LOCKGATE_{k}": v for k, v in {**settings, **env}.items()}


@pytest.fixture
def redis_target(redis_sentinels: SentinelProcs) -> RedisSettings:
    """The contract tests' Redis: the Sentinel set, each accepting write waiting for one
    replica."""
    return sentinel_settings(redis_sentinels, redis_min_replicas_ack=1)


# -- accepting writes fewer replicas confirm


@pytest.mark.parametrize(
    "gateway_settings",
    [{"redis_min_replicas_ack": 3, "redis_replicas_ack_timeout_s": 0.2}],
    indirect=True,
)
async def test_writes_fewer_replicas_confirm_are_503_never_success(http, gateway):
    """Two replicas exist; three are asked for: the submit and the result reach the master
    but are not confirmed, so neither is reported as done."""
    async with http.post(
        gateway.job_url("run"), json={"input": {}}, headers=gateway.client_headers()
    ) as r:
        assert (r.status, r.headers["Retry-After"]) == (503, "1")
        body = await r.json()
    assert body["jobMayExist"] is True
    assert (await get(http, gateway, f"status/{body['id']}"))[1]["status"] == "IN_QUEUE"
    assert (await take(http, gateway))["id"] == body["id"]
    url = gateway.job_url(f"job-done/w1/{body['id']}")
    async with http.post(url, json={"output": 1}, headers=gateway.worker_headers()) as r:
        assert r.status == 503


async def test_accepting_writes_load_their_scripts_on_a_new_master_and_still_wait(redis):
    """A master without the scripts (a promoted replica: SCRIPT LOAD is not replicated):
    lone and batched accepting writes load them, then wait for their replica."""
    store = JobStore(redis, replication=Replication(replicas=1))
    await redis.script_flush()
    assert await store.submit("echo", new_job("lone")) == ("lone", "IN_QUEUE")
    await redis.script_flush()
    ids = [f"j{i}" for i in range(20)]
    replies = await asyncio.gather(*(store.submit("echo", new_job(i)) for i in ids))
    assert replies == [(i, "IN_QUEUE") for i in ids]
    too_many = JobStore(redis, replication=Replication(replicas=3, timeout_ms=100))
    with pytest.raises(NotReplicated):
        await too_many.submit("echo", new_job("unconfirmed"))
    assert (await store.get("echo", "unconfirmed")).status == "IN_QUEUE"  # on the master


@pytest.mark.parametrize(
    "gateway_settings", [{**FLUSHED_GATEWAY, "redis_min_replicas_ack": 0}], indirect=True
)
async def test_scripts_flushed_again_and_again_without_replica_acks_fail_no_request(
    http, gateway, redis
):
    """The scripts flushed on the master again and again under load (as in
    tests/test_scripts.py, which runs here with each accepting write waiting for a
    replica), without replica acks: the batches on the shared connection."""
    assert len(await scripts_flushed_under_load(http, gateway, redis)) == FLUSH_JOBS


@pytest.mark.parametrize(
    "gateway_settings, acknowledged",
    [
        ({"redis_min_replicas_ack": 0}, True),
        ({"redis_min_replicas_ack": 1, "redis_replicas_ack_timeout_s": 0.3}, False),
    ],
    indirect=["gateway_settings"],
)
async def test_a_job_no_replica_got_is_lost_in_a_failover_so_acks_refuse_to_confirm_it(
    http, gateway, redis_sentinels: SentinelProcs, acknowledged: bool
):
    """The replicas cut off (stopped, their links dropped), a /run, the master SIGKILLed:
    the promoted replica never had the job. Without acks the client was told 200 for a job
    that is now gone; with MIN_REPLICAS_ACK=1 it was told 503 (it may exist), never 200."""
    procs = redis_sentinels
    master = procs.master()
    replicas = [n for n in procs.servers if n is not master]
    try:
        for node in replicas:
            node.process.send_signal(signal.SIGSTOP)
        assert send(master.port, "CLIENT", "KILL", "TYPE", "replica") == ":2\r\n"  # both links
        async with http.post(
            gateway.job_url("run"), json={"input": {}}, headers=gateway.client_headers()
        ) as r:
            status, body = r.status, await r.json()
        master.kill()
    finally:
        for node in replicas:
            node.process.send_signal(signal.SIGCONT)
    try:
        assert (status, body.get("jobMayExist")) == ((200, None) if acknowledged else (503, True))

        async def answered() -> int | None:
            code = (await get(http, gateway, f"status/{body['id']}"))[0]
            return code if code != 503 else None  # 503: the failover is under way

        assert await eventually(answered, "the new master to answer", timeout=30) == 404
    finally:
        await asyncio.to_thread(procs.heal)


def new_job(job_id: str) -> NewJob:
    return NewJob(id=job_id, input=b"{}", ttl_ms=60_000)


# -- settings


@pytest.mark.parametrize(
    "fields, variable",
    [
        ({"redis_sentinels": "127.0.0.1:26379"}, "LOCKGATE_REDIS_SENTINEL_MASTER"),
        ({"redis_sentinels": "127.0.0.1", "redis_sentinel_master": "m"}, "_SENTINELS: '127"),
        ({"redis_sentinels": "h:1,:2", "redis_sentinel_master": "m"}, "LOCKGATE_REDIS_SENTINELS"),
        ({"redis_sentinel_master": "m"}, "LOCKGATE_REDIS_SENTINELS"),
        ({"redis_sentinels": " , ", "redis_sentinel_master": "m"}, "_SENTINELS: ' , ': no host"),
    ],
)
def test_malformed_redis_settings_are_an_error_naming_the_variable(fields, variable):
    with pytest.raises(RedisSettingsError, match=variable):
        connect(redis_settings(**fields))


@pytest.mark.parametrize("command", [["gateway"], ["keys", "list"]])
def test_a_command_with_sentinels_but_no_master_name_exits_naming_the_variable(command):
    env = {**os.environ, "LOCKGATE_REDIS_SENTINELS": "127.0.0.1:26379"}
    ran = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *command], env=env, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "LOCKGATE_REDIS_SENTINEL_MASTER: required" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_the_gateways_redis_url_flag_wins_over_sentinel_settings(monkeypatch, redis_sentinels):
    for name, value in sentinel_env(redis_sentinels).items():
        monkeypatch.setenv(name, value)
    flags = argparse.Namespace(host=None, port=None, redis_url="redis://127.0.0.1:6390/0")
    settings = settings_from(flags)
    assert (settings.redis_url, settings.redis_sentinels) == ("redis://127.0.0.1:6390/0", "")
    assert settings.describe() == "Redis at redis://127.0.0.1:6390/0"


def test_a_redis_url_flag_wins_over_sentinel_settings(redis_sentinels, redis_server):
    """`lockgate keys --redis-url` writes to that Redis although sentinels are set."""
    env = {**os.environ, **sentinel_env(redis_sentinels)}
    created = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "keys", "--redis-url", redis_server.url,
         "create", "flag-wins", "--scope", "jobs"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert created.stdout.startswith("lg_")
    listed = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "keys", "list"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert "flag-wins" not in listed.stdout  # the Sentinel set has no such key


def test_lockgate_keys_creates_keys_on_the_sentinel_master(redis_sentinels):
    env = {**os.environ, **sentinel_env(redis_sentinels)}
    subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "keys", "create", "on-sentinel", "--scope", "jobs"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    listed = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "keys", "list"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert "on-sentinel" in listed.stdout


# -- the runpod SDK through `lockgate dev` on the Sentinel set


def _sentinel_dev(tmp_path_factory, procs: SentinelProcs, handler: str) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    env = sentinel_env(procs)
    with DevProcess(str(REPO / handler), "--workers-min", "1", data_dir=data, env=env) as dev:
        dev.wait_for(r"using Sentinel master 'lockgate' via 127\.0\.0\.1:\d+")
        assert not any("redis ready" in line for line in dev.lines)
        runpod.endpoint_url_base = f"{dev.url}/v2"
        runpod.api_key = dev.key
        yield dev


@pytest.fixture(scope="module")
def echo_dev(tmp_path_factory, redis_sentinels) -> Iterator[DevProcess]:
    yield from _sentinel_dev(tmp_path_factory, redis_sentinels, "tests/workers/runpod_echo.py")


@pytest.fixture(scope="module")
def stream_dev(tmp_path_factory, redis_sentinels) -> Iterator[DevProcess]:
    yield from _sentinel_dev(tmp_path_factory, redis_sentinels, "tests/workers/runpod_stream.py")


# -- `lockgate dev --redis-url`


async def test_dev_uses_the_redis_its_redis_url_names_and_prints_no_password(
    tmp_path: Path, http: aiohttp.ClientSession
):
    external = EmbeddedRedis(tmp_path / "external")
    external.start()
    try:
        sync_redis.Redis(port=external.port).config_set("requirepass", "s3cret")
        url = f"redis://:s3cret@127.0.0.1:{external.port}/0"
        handler = str(REPO / "examples/echo/handler.py")
        dev = DevProcess(handler, "--redis-url", url, data_dir=tmp_path / "dev")
        with await asyncio.to_thread(dev.start):
            line = dev.wait_for("using Redis at")
            assert f"redis://:***@127.0.0.1:{external.port}/0" in line
            assert not any("s3cret" in x or "redis ready" in x for x in dev.lines)
            async with http.post(
                dev.job_url("runsync"), json={"input": {"x": 1}}, headers=dev.headers()
            ) as r:
                assert (await r.json())["output"] == {"echo": {"x": 1}}
            client = sync_redis.Redis(port=external.port, password="s3cret")
            assert client.dbsize() > 0  # the registry, keys and the job are there
            client.close()
    finally:
        external.stop()


# -- faults: the Sentinel master SIGKILLed under load

JOBS = 2000
FAULT_SETTINGS = dict(
    TAKE_WAIT_S="2", SWEEP_INTERVAL_S="0.2", HEARTBEAT_TIMEOUT_S="3", UNLISTED_GRACE_S="1",
    POLL_FALLBACK_S="0.5", RATE_LIMITED="false",  # every /run answer is 200 or 503
)  # fmt: skip


class Load:
    """One gateway process and two workers on the Sentinel set; /run answers counted."""

    def __init__(self, procs: SentinelProcs, acks: int) -> None:
        self.procs = procs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = sentinel_env(procs, REDIS_MIN_REPLICAS_ACK=str(acks), **FAULT_SETTINGS)
        self.processes: list[subprocess.Popen] = []
        self.accepted: list[str] = []
        self.answers: Counter[int | str] = Counter()
        self.client_key = self.worker_key = ""

    async def start(self) -> None:
        client = connect(sentinel_settings(self.procs))
        await client.flushall()
        self.client_key, self.worker_key = await register(client, "echo")
        await client.aclose()
        env = {k.removeprefix("LOCKGATE_"): v for k, v in self.env.items()}
        self.processes.append(gateway_process("redis://127.0.0.1:1/0", self.port, **env))
        base = worker_env(self.url, "echo", self.worker_key)
        for i in range(2):
            quiet = {"LOCKGATE_PING_INTERVAL_MS": "300", "LOCKGATE_LOG_LEVEL": "ERROR"}
            worker = {**os.environ, **base, **worker_id_env(f"w{i}"), **quiet}
            command = [sys.executable, str(REPO / "examples/echo/handler.py")]
            self.processes.append(subprocess.Popen(command, env=worker))

    def stop(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.kill()
                p.wait()

    async def submit_all(self, session: aiohttp.ClientSession) -> None:
        """JOBS jobs from 16 clients; a refused request is sent again after 0.1 s."""
        todo = iter(range(JOBS))
        headers = {"authorization": self.client_key}

        async def client() -> None:
            for i in todo:
                while True:
                    try:
                        async with session.post(
                            f"{self.url}/v2/echo/run", json={"input": {"n": i}}, headers=headers
                        ) as r:
                            self.answers[r.status] += 1
                            if r.status == 200:
                                self.accepted.append((await r.json())["id"])
                                break
                    except aiohttp.ClientError:
                        self.answers["no answer"] += 1
                    await asyncio.sleep(0.1)

        await asyncio.gather(*(client() for _ in range(16)))

    async def completed(self, session: aiohttp.ClientSession) -> int:
        try:
            async with session.get(
                f"{self.url}/v2/echo/health", headers={"authorization": self.client_key}
            ) as r:
                return (await r.json())["jobs"]["completed"] if r.status == 200 else -1
        except aiohttp.ClientError:
            return -1

    async def settle(self, session: aiohttp.ClientSession) -> None:
        """Until every accepted job is counted completed, or the count stops growing for
        15 s (jobs were lost), at most 60 s. Not less: with MIN_REPLICAS_ACK the new master
        takes writes only once a replica has re-attached to it (seconds on a loaded
        machine), and a worker backs off up to 5 s between attempts (`worker.backoff`)."""
        loop = asyncio.get_running_loop()
        deadline, last, since = loop.time() + 60, -1, loop.time()
        while loop.time() < deadline:
            count = await self.completed(session)
            if count >= len(self.accepted):
                return
            if count != last:
                last, since = count, loop.time()
            elif loop.time() - since > 15:
                return
            await asyncio.sleep(0.5)

    async def unfinished(self, session: aiohttp.ClientSession) -> list[str]:
        """Accepted jobs not COMPLETED (gone, or stuck before a final state)."""
        headers = {"authorization": self.client_key}
        sem = asyncio.Semaphore(32)

        async def status(job_id: str) -> str:
            async with sem:
                while True:
                    url = f"{self.url}/v2/echo/status/{job_id}"
                    async with session.get(url, headers=headers) as r:
                        if r.status != 429:
                            return (await r.json())["status"] if r.status == 200 else str(r.status)
                        await asyncio.sleep(float(r.headers["retry-after"]))

        states = await asyncio.gather(*(status(i) for i in self.accepted))
        return [i for i, s in zip(self.accepted, states, strict=True) if s != "COMPLETED"]


@pytest.fixture
async def load(request, redis_sentinels: SentinelProcs) -> AsyncIterator[Load]:
    assert redis_sentinels.healthy()
    run = Load(redis_sentinels, acks=request.param)
    await run.start()
    try:
        yield run
    finally:
        run.stop()
        await asyncio.to_thread(redis_sentinels.heal)


async def kill_the_master_under_load(load: Load) -> list[str]:
    """Submit JOBS jobs, SIGKILL the Sentinel master once a quarter are accepted; the
    accepted jobs that never complete."""
    async with aiohttp.ClientSession() as session:
        while await load.completed(session) < 0:
            await asyncio.sleep(0.1)
        submitting = asyncio.create_task(load.submit_all(session))
        while len(load.accepted) < JOBS // 4:
            await asyncio.sleep(0.005)
        assert not submitting.done(), "the fault must land while jobs are being submitted"
        killed = load.procs.master()
        killed.kill()
        await asyncio.wait_for(submitting, 45)
        assert load.procs.master() is not killed  # the sentinels promoted a replica
        await load.settle(session)
        lost = await load.unfinished(session)
    acks = load.env["LOCKGATE_REDIS_MIN_REPLICAS_ACK"]
    print(f"\nSentinel master killed, MIN_REPLICAS_ACK={acks}: {len(load.accepted)} accepted, "
          f"{len(lost)} never completed; /run answers {dict(load.answers)}")  # fmt: skip
    return lost


@pytest.mark.parametrize("load", [1], indirect=True)
async def test_a_killed_sentinel_master_loses_no_job_acknowledged_by_a_replica(load: Load):
    lost = await kill_the_master_under_load(load)
    assert len(load.accepted) == len(set(load.accepted)) == JOBS
    assert set(load.answers) <= {200, 503}, load.answers  # never a 500
    assert lost == []


@pytest.mark.parametrize("load", [0], indirect=True)
async def test_a_killed_sentinel_master_without_replica_acks_answers_only_200_or_503(load: Load):
    """Without MIN_REPLICAS_ACK, jobs the master accepted but had not yet replicated are
    lost with it: their count is printed, not asserted (that is the setting's point)."""
    await kill_the_master_under_load(load)
    assert len(load.accepted) == len(set(load.accepted)) == JOBS
    assert set(load.answers) <= {200, 503}, load.answers
