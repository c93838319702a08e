"""Dev mode's worker processes with the official runpod SDK worker (issue 13, items 1-3, 5):
stopping a worker stops all it started, a stopping worker gets no job, a worker whose
handler still runs after a cancel counts as busy, `refresh_worker` replaces the worker.

The gateway, store, local control plane and scaler are dev mode's own, in this process
(`lockgate.apps.dev.build_app`); the workers are real processes. Ctrl-C of `lockgate dev`
itself is the last test.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import psutil
import pytest
import requests
from aiohttp import web
from redis.asyncio import Redis

from lockgate.apps.dev import build_app
from lockgate.dev.controlplane import LocalControlPlane
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.scaling.local_pool import LocalProcessPool
from lockgate.store import Registry
from tests.conftest import REPO, eventually, make_settings, wait_until
from tests.devproc import DevProcess

RUNPOD_ECHO = "tests/workers/runpod_echo.py"  # sync handler; `sleep` seconds, then echo
LOCKGATE_ECHO = "tests/handlers/sync_echo.py"  # lockgate's runtime; echoes at once
PROBE = "tests/workers/runpod_probe.py"  # answers with an environment variable it was given
GRACE_S = 3.0  # dev mode's stop grace here (30 s by default)


@dataclass
class Dev:
    """Dev mode's app on loopback, with an admin key and a jobs key."""

    http: aiohttp.ClientSession
    url: str
    plane: LocalControlPlane
    admin: str
    client: str

    async def call(
        self, method: str, path: str, body: Any = None, *, timeout_s: float = 60
    ) -> tuple[int, Any]:
        """`/v1/...` with the admin key, `/v2/...` with the jobs key."""
        key = f"Bearer {self.admin}" if path.startswith("/v1") else self.client
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self.http.request(
            method, self.url + path, json=body, headers={"authorization": key}, timeout=timeout
        ) as resp:
            is_json = resp.content_type == "application/json"
            return resp.status, await resp.json() if is_json else None

    async def create(self, endpoint_id: str, template: str, **spec: Any) -> None:
        body = {"name": endpoint_id, "templateId": template, **spec}
        status, got = await self.call("POST", "/v1/endpoints", {"id": endpoint_id, **body})
        assert status in (200, 201), got

    async def run(self, endpoint_id: str, job_input: dict) -> str:
        status, got = await self.call("POST", f"/v2/{endpoint_id}/run", {"input": job_input})
        assert status == 200, got
        return got["id"]

    async def status(self, endpoint_id: str, job_id: str) -> dict:
        return (await self.call("GET", f"/v2/{endpoint_id}/status/{job_id}"))[1]

    async def until_status(self, endpoint_id: str, job_id: str, *states: str) -> dict:
        async def reached() -> dict | None:
            got = await self.status(endpoint_id, job_id)
            return got if got["status"] in states else None

        return await eventually(reached, f"job {job_id} {'/'.join(states)}", timeout=90)

    async def health(self, endpoint_id: str) -> dict:
        return (await self.call("GET", f"/v2/{endpoint_id}/health"))[1]

    def pool(self, endpoint_id: str) -> LocalProcessPool:
        workers = self.plane._endpoints[endpoint_id].workers
        assert workers is not None
        return workers.pool


@pytest.fixture
async def dev(redis: Redis, redis_server: EmbeddedRedis) -> AsyncIterator[Dev]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # Long-polls held as long as in `lockgate dev` (20 s), sweeps as often as in tests.
    settings = make_settings(
        redis_server.url, port, take_wait_s=20, stop_wait_s=20, sweep_interval_s=0.2
    )
    app, plane = build_app(settings, gateway_url=url, base_dir=REPO, stop_grace_s=GRACE_S)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    registry = Registry(redis)
    admin, client = f"lga_{secrets.token_hex(8)}", f"lg_{secrets.token_hex(8)}"
    await registry.put_key(admin, {"name": "admin", "scopes": ["admin"]})
    await registry.put_key(client, {"name": "client", "scopes": ["jobs"]})
    try:
        async with aiohttp.ClientSession() as http:
            yield Dev(http, url, plane, admin, client)
    finally:
        await plane.close()
        await runner.cleanup()


def process_tree(pid: int) -> list[psutil.Process]:
    """A worker process and every process it started (the runpod SDK's heartbeat)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


async def busy_worker(dev: Dev, endpoint_id: str, job_input: dict) -> tuple[str, str, list]:
    """Run a job on the endpoint's one worker: (job id, worker id, its process tree) once
    the job is IN_PROGRESS."""
    job_id = await dev.run(endpoint_id, job_input)
    await dev.until_status(endpoint_id, job_id, "IN_PROGRESS")
    [worker_id] = dev.pool(endpoint_id).active
    tree = process_tree(dev.pool(endpoint_id).workers[worker_id].process.pid)
    assert len(tree) >= 2, "the runpod SDK worker starts a heartbeat process"
    return job_id, worker_id, tree


def all_gone(tree: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(tree, timeout=10)
    return not alive


# -- item 1: a worker's processes all stop; its id no longer vouches for jobs --------------


async def test_deleting_an_endpoint_returns_though_its_runpod_handler_outlives_the_grace(
    dev: Dev,
) -> None:
    await dev.create("dw-delete", RUNPOD_ECHO, workersMin=1)
    _, _, tree = await busy_worker(dev, "dw-delete", {"sleep": 600})

    status, _ = await dev.call("DELETE", "/v1/endpoints/dw-delete", timeout_s=60)

    assert status == 204
    assert all_gone(tree), "the worker and its heartbeat process were killed"


async def test_after_a_new_template_id_the_busy_worker_finishes_its_job_then_exits(
    dev: Dev, redis: Redis
) -> None:
    """RunPod's rolling rule (issue 46 item 4): the replaced worker's job is not cut (its
    grace is the job's execution timeout), nor run again; the worker then exits."""
    await dev.create("dw-patch", RUNPOD_ECHO, workersMin=1)
    job_id, old, tree = await busy_worker(dev, "dw-patch", {"sleep": 4})

    status, _ = await dev.call("PATCH", "/v1/endpoints/dw-patch", {"templateId": LOCKGATE_ECHO})
    assert status == 200

    done = await dev.until_status("dw-patch", job_id, "COMPLETED")
    assert done["output"] == {"echo": {"sleep": 4}}
    assert (await dev.health("dw-patch"))["jobs"]["retried"] == 0  # finished where it began
    assert all_gone(tree)

    async def released() -> bool:  # once its pool is closed; not registered again
        return await redis.zscore("lg:{dw-patch}:w", old) is None

    await eventually(released, "the old worker released")


# -- item 2: no job for a worker being stopped; a clean exit gives its job back -------------


async def test_a_worker_stopped_for_idleness_is_handed_no_job(dev: Dev) -> None:
    await dev.create("dw-idle", PROBE, workersMax=1, idleTimeout=3)
    whoami = {"var": "RUNPOD_POD_ID"}  # the probe answers with the worker's id
    first = await dev.run("dw-idle", whoami)
    ran_first = (await dev.until_status("dw-idle", first, "COMPLETED"))["output"]["env"]
    pool = dev.pool("dw-idle")

    async def stopping() -> list[str]:
        return [w.id for w in pool.workers.values() if w.stopping]

    assert await eventually(stopping, "the idle worker to be stopped", interval=0.05) == [ran_first]
    job_id = await dev.run("dw-idle", whoami)  # its job-take long-poll was still open

    done = await dev.until_status("dw-idle", job_id, "COMPLETED")
    assert done["output"]["env"] != ran_first, "a fresh worker ran it, not the stopping one"
    assert (await dev.health("dw-idle"))["jobs"]["retried"] == 0


async def test_a_job_taken_by_a_worker_that_exits_cleanly_goes_back_without_an_attempt(
    dev: Dev, redis: Redis
) -> None:
    await dev.create("dw-clean", "python tests/workers/take_and_leave.py", workersMin=1)
    job_id = await dev.run("dw-clean", {"x": 1})
    await dev.until_status("dw-clean", job_id, "IN_PROGRESS")

    # the old worker gets SIGTERM and exits 0 without running the job
    await dev.call("PATCH", "/v1/endpoints/dw-clean", {"templateId": LOCKGATE_ECHO})

    done = await dev.until_status("dw-clean", job_id, "COMPLETED")
    assert done["output"] == {"echo": {"x": 1}}
    assert (await dev.health("dw-clean"))["jobs"]["retried"] == 0
    assert await redis.hget(f"lg:{{dw-clean}}:j:{job_id}", "at") == b"1"  # one attempt used


# -- item 3: a cancelled job whose sync handler still runs keeps its worker busy -----------


async def test_after_a_cancel_the_scaler_adds_a_worker_while_the_handler_still_runs(
    dev: Dev,
) -> None:
    await dev.create("dw-cancel", RUNPOD_ECHO, workersMax=2, idleTimeout=60)
    first, busy, tree = await busy_worker(dev, "dw-cancel", {"sleep": 600})
    status, got = await dev.call("POST", f"/v2/dw-cancel/cancel/{first}")
    assert (status, got["status"]) == (200, "CANCELLED")

    async def counted_busy() -> bool:
        return (await dev.health("dw-cancel"))["workers"]["running"] == 1

    await eventually(counted_busy, "the worker to count as running")
    job_id = await dev.run("dw-cancel", {"n": 2})

    done = await dev.until_status("dw-cancel", job_id, "COMPLETED")
    assert done["output"] == {"echo": {"n": 2}}
    assert all(p.is_running() for p in tree[:1]), "the first handler still runs"
    assert busy in dev.pool("dw-cancel").active


# -- item 5: refresh_worker (`stopPod`) replaces the worker after its job -------------------


async def test_a_runpod_worker_asking_for_refresh_is_replaced_and_gets_no_other_job(
    dev: Dev, redis: Redis
) -> None:
    await dev.create("dw-refresh", "tests/workers/runpod_refresh.py", workersMin=1)
    first = await dev.run("dw-refresh", {})
    ran = (await dev.until_status("dw-refresh", first, "COMPLETED"))["output"]["worker"]

    async def marked() -> bool:  # job-done stores the result, then marks the worker
        return await redis.zscore("lg:{dw-refresh}:refresh", ran) is not None

    await eventually(marked, "the worker marked for refresh")
    pool = dev.pool("dw-refresh")

    async def replaced() -> bool:
        return ran not in pool.active and len(pool.active) == 1

    await eventually(replaced, "a fresh worker in place of the one that asked")
    second = await dev.run("dw-refresh", {})
    other = (await dev.until_status("dw-refresh", second, "COMPLETED"))["output"]["worker"]
    assert other != ran


# -- item 6: RunPod's variables a worker may read ----------------------------------------


async def test_dev_mode_sets_runpods_host_variables_for_its_workers(dev: Dev) -> None:
    await dev.create("dw-env", PROBE, computeType="GPU", gpuCount=2, vcpuCount=4)

    async def given(var: str) -> str | None:
        job_id = await dev.run("dw-env", {"var": var})
        return (await dev.until_status("dw-env", job_id, "COMPLETED"))["output"]["env"]

    worker_id = await given("RUNPOD_POD_ID")
    assert await given("RUNPOD_POD_HOSTNAME") == worker_id
    assert await given("RUNPOD_CPU_COUNT") == str(min(4, os.cpu_count() or 1))
    gpus = await given("RUNPOD_GPU_COUNT")  # at most the GPUs this machine has
    assert gpus is not None and 0 <= int(gpus) <= 2
    assert await given("RUNPOD_ENDPOINT_ID") == "dw-env"


# -- item 1: Ctrl-C of `lockgate dev` ends it, with its workers' every process ---------------


def test_ctrl_c_ends_lockgate_dev_though_a_runpod_handler_outlives_the_grace(tmp_path) -> None:
    with DevProcess(
        str(REPO / RUNPOD_ECHO), "--workers-min", "1", data_dir=tmp_path / "dev"
    ) as proc:
        headers = proc.headers()
        job = requests.post(
            proc.job_url("run"), json={"input": {"sleep": 600}}, headers=headers, timeout=10
        ).json()

        def in_progress() -> bool:
            got = requests.get(proc.job_url(f"status/{job['id']}"), headers=headers, timeout=10)
            return got.json()["status"] == "IN_PROGRESS"

        wait_until(in_progress, "the job to start", timeout=60)
        [worker] = proc.workers()
        tree = [worker, *worker.children(recursive=True)]

        assert proc.stop(timeout_s=120) == 0  # the grace is 30 s; then the worker is killed
        assert all_gone(tree)
