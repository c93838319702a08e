"""Crash loops in dev mode (issue 47 item 4), end to end through a real `lockgate dev`: a
runpod-SDK handler that exits at import (tests/workers/runpod_trouble.py) as a template's
command. After `crashLoopThreshold` failed starts the endpoint is in phase CrashLoop and
starts no process; its queued jobs stay IN_QUEUE and the answer to a new job says why;
a restart clears the state; a fixed command (the template's env changed: a new release)
brings the jobs to COMPLETED."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests

from tests.conftest import wait_until
from tests.devproc import REPO, DevProcess

PORT = 33147  # this helper's range
TROUBLE = REPO / "tests/workers/runpod_trouble.py"
LINE = "cannot load the model"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    with DevProcess(str(REPO / "tests/handlers/sync_echo.py"), data_dir=data, port=PORT) as dp:
        yield dp


def call(dev: DevProcess, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, dev.url + path, headers=dev.headers(), timeout=30, **kwargs)


def record(dev: DevProcess, endpoint_id: str) -> dict:
    return call(dev, "GET", f"/v1/endpoints/{endpoint_id}").json()


def conditions(dev: DevProcess, endpoint_id: str) -> dict[str, dict]:
    return {c["type"]: c for c in record(dev, endpoint_id)["status"]["conditions"]}


def starts(dev: DevProcess, endpoint_id: str) -> int:
    """Worker processes dev mode started for the endpoint (its log says each)."""
    return len([x for x in dev.lines if re.search(rf"worker {endpoint_id}-\w+ started", x)])


def trouble_processes(dev: DevProcess) -> list:
    return [p for p in dev.workers() if str(TROUBLE) in " ".join(p.cmdline())]


def test_a_handler_that_exits_at_import_stops_being_started_and_a_fix_runs_the_jobs(
    dev: DevProcess,
) -> None:
    template = call(
        dev, "POST", "/v1/templates",
        json={"name": "trouble", "imageName": "local/trouble:1",
              "dockerStartCmd": ["python", str(TROUBLE)],
              "env": {"TROUBLE_EXIT_AT_IMPORT": "3", "TROUBLE_EXIT_LINE": LINE}},
    )  # fmt: skip
    assert template.status_code == 200, template.text
    created = call(
        dev, "POST", "/v1/endpoints",
        json={"name": "crashy", "templateId": template.json()["id"], "workersMax": 1,
              "crashLoopThreshold": 2},
    )  # fmt: skip
    assert created.status_code == 200, created.text
    ep = created.json()["id"]
    first = call(dev, "POST", f"/v2/{ep}/run", json={"input": {"n": 1}}).json()
    assert first["status"] == "IN_QUEUE" and "message" not in first

    def looping() -> dict | None:
        status = record(dev, ep)["status"]
        return status if status["phase"] == "CrashLoop" else None

    status = wait_until(looping, "phase CrashLoop", timeout=90)
    loop = next(c for c in status["conditions"] if c["type"] == "CrashLoop")
    assert (loop["status"], loop["reason"]) == ("True", "WorkersCrashAtStart")
    assert f"exit code 3: {LINE}" in loop["message"] and "2 failed starts" in loop["message"]
    assert status["workers"]["desired"] == 0
    wait_until(lambda: not trouble_processes(dev), "no worker process left", timeout=30)

    # The answer to a new job says why it waits; /health (RunPod's shape) says it beside.
    second = call(dev, "POST", f"/v2/{ep}/run", json={"input": {"n": 2}}).json()
    assert second["status"] == "IN_QUEUE"
    assert second["message"].startswith(f"IN_QUEUE: workers crash at start (exit code 3: {LINE})")
    assert f"GET /v2/serverless/{ep}/workers" in second["message"]
    sync = call(dev, "POST", f"/v2/{ep}/runsync?wait=1000", json={"input": {"n": 3}}).json()
    assert sync["status"] == "IN_QUEUE" and sync["message"] == second["message"]
    health = call(dev, "GET", f"/v2/{ep}/health").json()
    assert health["jobs"]["inQueue"] == 3
    assert (health["crashLoop"]["exitCode"], health["crashLoop"]["lastLine"]) == (3, LINE)
    assert health["crashLoop"]["failedStarts"] == 2
    for job in (first, second, sync):
        assert call(dev, "GET", f"/v2/{ep}/status/{job['id']}").json()["status"] == "IN_QUEUE"
    assert starts(dev, ep) == 2  # none since the loop began
    assert record(dev, ep)["status"]["phase"] == "CrashLoop"

    # An explicit restart clears it: the workers start again (and crash again).
    restart = call(dev, "POST", f"/v2/serverless/{ep}/workers/restart")
    assert restart.status_code == 202, restart.text
    assert restart.json()["id"] == ep
    assert record(dev, ep)["status"]["phase"] == "Ready"
    assert conditions(dev, ep)["CrashLoop"]["status"] == "False"
    fresh = call(dev, "POST", f"/v2/{ep}/run", json={"input": {"n": 4}}).json()
    assert "message" not in fresh
    assert "crashLoop" not in call(dev, "GET", f"/v2/{ep}/health").json()
    wait_until(lambda: starts(dev, ep) > 2, "a worker started after the restart", timeout=30)

    # A fixed command (a new release) brings every queued job to COMPLETED.
    fixed = call(dev, "PATCH", f"/v1/templates/{template.json()['id']}", json={"env": {}})
    assert fixed.status_code == 200, fixed.text
    for job in (first, second, sync, fresh):

        def done(job_id: str = job["id"]) -> dict | None:
            answer = call(dev, "GET", f"/v2/{ep}/status/{job_id}").json()
            return answer if answer["status"] == "COMPLETED" else None

        wait_until(done, f"job {job['id']} COMPLETED", timeout=90)
    assert record(dev, ep)["status"]["phase"] == "Ready"


def test_restart_of_an_unknown_endpoint_is_a_404_problem(dev: DevProcess) -> None:
    answer = call(dev, "POST", "/v2/serverless/no-such-endpoint/workers/restart")
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "no-such-endpoint" in answer.json()["detail"]
