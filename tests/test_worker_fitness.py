"""lockgate's runtime's fitness checks (worker/fitness.py, worker/system_checks.py): a failing
custom check marks the worker unhealthy at the gateway and exits it with code 1; a passing
async check runs before the first job; the automatic checks' decisions and switches; local
test runs run none. The handler is tests/handlers/fitness.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lockgate.store import JobStore
from lockgate.worker import fitness, system_checks
from lockgate.worker.system_checks import (
    GB,
    Limits,
    automatic_checks,
    available_memory,
    cuda_problem,
    disk_problem,
    memory_problem,
    nvidia_smi_cuda,
)
from tests.conftest import LiveGateway
from tests.test_job_api import get, submit
from tests.test_lifecycle import _is, eventually, status_of
from tests.test_worker_local import HANDLERS, exit_status, worker_env

FITNESS = HANDLERS / "fitness.py"


class Worker:
    """tests/handlers/fitness.py as worker w1 of the live gateway's endpoint."""

    def __init__(self, gw: LiveGateway, tmp_path: Path) -> None:
        self.gw, self.log = gw, tmp_path / "worker.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, **env: str) -> asyncio.subprocess.Process:
        settings = {
            "LOCKGATE_GATEWAY_URL": self.gw.url, "LOCKGATE_ENDPOINT_ID": self.gw.endpoint,
            "LOCKGATE_WORKER_ID": "w1", "LOCKGATE_WORKER_KEY": self.gw.worker_key,
            "LOCKGATE_PING_INTERVAL_MS": "200", "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
        }  # fmt: skip
        full = worker_env(**(settings | env))
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, str(FITNESS), env=full, stderr=log
            )
        return self.process

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
async def worker(gateway: LiveGateway, tmp_path: Path) -> AsyncIterator[Worker]:
    w = Worker(gateway, tmp_path)
    yield w
    if w.process is not None and w.process.returncode is None:
        w.process.kill()
        await w.process.wait()


async def test_a_failing_check_marks_the_worker_unhealthy_and_exits_1(http, gateway, redis, worker):
    job_id = (await submit(http, gateway, {"input": {}}))["id"]
    process = await worker.start(FITNESS_FAIL="weights missing")
    assert await exit_status(process, timeout_s=20) == 1
    logged = worker.logged()
    assert "Fitness check failed: check_weights | RuntimeError: weights missing" in logged
    assert "Worker is unhealthy, exiting." in logged
    why = (await JobStore(redis).unhealthy_workers(gateway.endpoint))["w1"]
    assert (why.kind, why.check, why.reason) == (
        "fitness",
        "check_weights",
        "RuntimeError: weights missing",
    )
    assert await status_of(http, gateway, job_id) == "IN_QUEUE"  # it took nothing
    health = (await get(http, gateway, "health"))[1]
    assert [w["id"] for w in health["unhealthyWorkers"]] == ["w1"]


async def test_a_passing_async_check_runs_and_the_worker_takes_jobs(
    http, gateway, redis, worker, tmp_path
):
    mark = tmp_path / "checked"
    await worker.start(FITNESS_MARK=str(mark))
    job_id = (await submit(http, gateway, {"input": {"x": 1}}))["id"]
    await eventually(lambda: _is(status_of(http, gateway, job_id), "COMPLETED"), timeout_s=20)
    assert mark.read_text() == "ran"
    assert await JobStore(redis).unhealthy_workers(gateway.endpoint) == {}


async def test_the_report_is_skipped_without_a_key_and_the_exit_still_comes(gateway, redis, worker):
    process = await worker.start(FITNESS_FAIL="broken", LOCKGATE_WORKER_KEY="")
    assert await exit_status(process, timeout_s=20) == 1
    assert await JobStore(redis).unhealthy_workers(gateway.endpoint) == {}


async def test_an_automatic_check_turned_on_fails_the_worker_by_runpods_variable(
    gateway, redis, worker
):
    process = await worker.start(
        RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="false", RUNPOD_MIN_MEMORY_GB="1000000"
    )
    assert await exit_status(process, timeout_s=20) == 1
    why = (await JobStore(redis).unhealthy_workers(gateway.endpoint))["w1"]
    assert why.check == "check_memory"
    assert why.reason.startswith("RuntimeError: Insufficient memory:")
    assert why.reason.endswith("GB available, 1000000.0GB required")


def test_a_local_test_run_runs_no_check(tmp_path: Path) -> None:
    command = [sys.executable, str(FITNESS), "--test_input", '{"input": {"x": 1}}']
    env = worker_env(FITNESS_FAIL="would fail", RUNPOD_MIN_MEMORY_GB="100000")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Fitness check" not in result.stderr


# -- the automatic checks' decisions (pure)

MEMINFO = "MemTotal:       16000000 kB\nMemAvailable:    8388608 kB\n"  # 8 GiB available


@pytest.mark.parametrize(
    ("meminfo", "cgroup_max", "cgroup_current", "left"),
    [
        (MEMINFO, None, None, 8 * GB),
        (MEMINFO, "max\n", "100\n", 8 * GB),  # no cgroup limit
        (MEMINFO, f"{3 * GB}\n", f"{GB}\n", 2 * GB),  # the container's limit leaves less
        (MEMINFO, f"{64 * GB}\n", "0\n", 8 * GB),  # the machine has less than the limit
        ("", f"{GB}\n", f"{2 * GB}\n", 0),  # over its limit: none left
        ("", None, None, None),  # nothing says: unknown
    ],
)  # fmt: skip
def test_available_memory(meminfo, cgroup_max, cgroup_current, left) -> None:
    assert available_memory(meminfo, cgroup_max, cgroup_current) == left


@pytest.mark.parametrize(
    ("available", "minimum", "problem"),
    [
        (8 * GB, 4.0, None),
        (4 * GB, 4.0, None),
        (3 * GB, 4.0, "Insufficient memory: 3.00GB available, 4.0GB required"),
        (3 * GB, 2.5, None),
        (None, 4.0, None),
    ],
)
def test_memory_problem(available, minimum, problem) -> None:
    assert memory_problem(available, minimum) == problem


@pytest.mark.parametrize(
    ("total", "free", "minimum", "problem"),
    [
        (100 * GB, 50 * GB, 10.0, None),
        (100 * GB, 10 * GB, 10.0, None),
        (100 * GB, 5 * GB, 10.0, "Insufficient disk space: 5.00GB free (5.0%), 10.0% required"),
        (100 * GB, 5 * GB, 1.0, None),
        (0, 0, 10.0, "Insufficient disk space: 0.00GB free (0.0%), 10.0% required"),
    ],
)
def test_disk_problem(total, free, minimum, problem) -> None:
    assert disk_problem(total, free, minimum) == problem


@pytest.mark.parametrize(
    ("found", "minimum", "problem"),
    [
        ((12, 2), (11, 8), None),
        ((11, 8), (11, 8), None),
        ((11, 7), (11, 8), "CUDA version too old: 11.7 found, 11.8 required"),
        (None, (11, 8), None),  # unknown: not checked, as RunPod's
    ],
)
def test_cuda_problem(found, minimum, problem) -> None:
    assert cuda_problem(found, minimum) == problem


def test_the_cuda_version_is_read_from_nvidia_smis_table() -> None:
    head = "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |"
    assert nvidia_smi_cuda(head) == (12, 2)
    assert nvidia_smi_cuda("No devices were found") is None


@pytest.mark.parametrize(
    ("env", "limits"),
    [
        ({}, Limits()),
        (
            {"RUNPOD_MIN_MEMORY_GB": "1.5", "RUNPOD_MIN_DISK_PERCENT": "20",
             "RUNPOD_MIN_CUDA_VERSION": "12.1"},
            Limits(min_memory_gb=1.5, min_disk_percent=20.0, min_cuda=(12, 1)),
        ),
        ({"RUNPOD_MIN_MEMORY_GB": "lots", "RUNPOD_MIN_CUDA_VERSION": "new"}, Limits()),
        ({"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "True"}, Limits(skip_all=True)),
        ({"RUNPOD_SKIP_GPU_CHECK": "true"}, Limits(skip_gpu=True)),
        ({"RUNPOD_SKIP_GPU_CHECK": "1"}, Limits()),  # only `true` skips, as RunPod's
    ],
)  # fmt: skip
def test_runpods_variables_set_the_limits(env, limits) -> None:
    assert Limits.from_env(env) == limits


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, ["check_memory", "check_disk", "check_gpu"]),
        ({"RUNPOD_SKIP_GPU_CHECK": "true"}, ["check_memory", "check_disk"]),
        ({"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true"}, []),
    ],
)
def test_which_automatic_checks_run(env, names) -> None:
    assert [fitness.check_name(c) for c in automatic_checks(env)] == names


async def test_checks_run_in_order_until_the_first_failure() -> None:
    ran = []

    def first() -> None:
        ran.append("first")

    async def second() -> None:
        ran.append("second")
        raise ValueError("bad value")

    def third() -> None:
        ran.append("third")

    assert await fitness.first_failure([first, second, third]) == (
        "second",
        "ValueError: bad value",
    )
    assert ran == ["first", "second"]
    assert await fitness.first_failure([first]) is None


async def test_an_automatic_check_fails_when_its_limit_is_not_met() -> None:
    [memory, disk] = automatic_checks(
        {
            "RUNPOD_MIN_MEMORY_GB": "1e9",
            "RUNPOD_MIN_DISK_PERCENT": "0",
            "RUNPOD_SKIP_GPU_CHECK": "true",
        }
    )
    name, reason = await fitness.first_failure([disk, memory])
    assert name == "check_memory" and reason.startswith("RuntimeError: Insufficient memory")


def test_the_report_sends_the_sdks_query() -> None:
    params = fitness.report_params("check_gpu", "x" * 300)
    assert params == {"status": "unhealthy", "check": "check_gpu", "reason": "x" * 256}
    assert system_checks.DEFAULT_MIN_DISK_PERCENT == 10.0
