"""`X-Runpod-Worker-Id: strict-resume <id>` against a real `lockgate dev` and the FastAPI
example worker: a worker scaled to zero is parked (its process stopped, still there) and a
pinned request resumes it and is served by it; past its resume window, or never there, it
is 404 `affinity_worker_gone`; one that cannot become routable within the hold is 400
`worker_timeout`. Both errors are `{"error", "reason"}`, for strict as for strict-resume."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import psutil
import pytest
import requests

from tests.devproc import REPO, DevProcess
from tests.lb_dev import WORKER

ECHO = str(REPO / "examples" / "echo" / "handler.py")
ADMIN = {"authorization": "Bearer k-admin"}
WORKER_ID = "X-Runpod-Worker-Id"
# An example worker that loads "forever": its /ping answers 204 (not routable)
SLOW_WORKER = f"env LOAD_SECONDS=3600 {sys.executable} {REPO / 'examples/loadbalancer/worker.py'}"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("resume")
    env = {"LOAD_SECONDS": "0"}  # the example worker is routable as soon as it listens
    with DevProcess(ECHO, "--api-key", "k-admin", data_dir=data, env=env) as proc:
        yield proc


def create(dev: DevProcess, endpoint_id: str, **settings: object) -> None:
    """An LB endpoint of one worker at most, idle workers scaled down after 1 s."""
    spec = {
        "id": endpoint_id, "type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1,
        "templateId": WORKER, "workersMax": 1, "idleTimeout": 1, "lbHoldS": 30, **settings,
    }  # fmt: skip
    answer = requests.post(f"{dev.url}/v1/endpoints", json=spec, headers=ADMIN, timeout=30)
    assert answer.status_code == 200, answer.text


def get(dev: DevProcess, endpoint_id: str, affinity: str | None = None) -> requests.Response:
    headers = dev.headers() if affinity is None else {**dev.headers(), WORKER_ID: affinity}
    return requests.get(f"{dev.url}/lb/{endpoint_id}/echo/x", headers=headers, timeout=90)


def process_of(dev: DevProcess, worker_id: str) -> psutil.Process | None:
    for p in dev.workers():
        try:
            if p.environ().get("RUNPOD_POD_ID") == worker_id:
                return p
        except psutil.Error:  # it ended meanwhile
            continue
    return None


def until(what: str, check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def parked(dev: DevProcess, worker_id: str) -> bool:
    """Its process is there and stopped (SIGSTOP), and no worker counts any more."""
    p = process_of(dev, worker_id)
    return p is not None and p.status() == psutil.STATUS_STOPPED


def workers_counted(dev: DevProcess, endpoint_id: str) -> int:
    health = requests.get(f"{dev.url}/v2/{endpoint_id}/health", headers=dev.headers(), timeout=30)
    return sum(health.json()["workers"].values())


def v2_workers(dev: DevProcess, endpoint_id: str) -> list[dict]:
    """The v2 workers list (`GET /v2/serverless/{id}/workers`)."""
    url = f"{dev.url}/v2/serverless/{endpoint_id}/workers"
    answer = requests.get(url, headers=ADMIN, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["workers"]


def test_a_worker_scaled_to_zero_is_resumed_by_a_strict_resume_request(dev: DevProcess) -> None:
    create(dev, "rsback", lbResumeWindowS=300)
    first = get(dev, "rsback")
    assert first.status_code == 200, first.text
    worker = first.headers[WORKER_ID]
    until(f"{worker} parked", lambda: parked(dev, worker))
    assert workers_counted(dev, "rsback") == 0  # scaled to zero: it counts nowhere
    assert v2_workers(dev, "rsback") == []
    pid = process_of(dev, worker).pid
    # strict does not resume: a scaled-down worker is gone for it
    strict = get(dev, "rsback", f"strict {worker}")
    assert strict.status_code == 404, strict.text
    assert strict.json()["reason"] == "affinity_worker_gone"
    assert "strict-resume" in strict.json()["error"]  # says what would resume it
    resumed = get(dev, "rsback", f"strict-resume {worker}")
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers[WORKER_ID] == worker
    assert resumed.json()["worker"] == worker  # the worker's own RUNPOD_POD_ID
    again = process_of(dev, worker)
    assert again is not None and again.pid == pid  # the same process, continued
    assert again.status() != psutil.STATUS_STOPPED
    assert [w["id"] for w in v2_workers(dev, "rsback")] == [worker]


def test_a_worker_past_its_resume_window_or_never_there_is_404(dev: DevProcess) -> None:
    create(dev, "rsgone", lbResumeWindowS=1)
    first = get(dev, "rsgone")
    assert first.status_code == 200, first.text
    worker = first.headers[WORKER_ID]
    until(f"{worker} gone", lambda: process_of(dev, worker) is None)
    for affinity in (f"strict-resume {worker}", "strict-resume rsgone-nope", "strict rsgone-nope"):
        answer = get(dev, "rsgone", affinity)
        assert answer.status_code == 404, (affinity, answer.text)
        body = answer.json()
        assert set(body) == {"error", "reason"}, body
        assert body["reason"] == "affinity_worker_gone"


def test_a_worker_that_cannot_become_routable_within_the_hold_is_400(dev: DevProcess) -> None:
    """A parked worker whose health still says 204 once resumed (it loads for an hour)."""
    create(dev, "rsslow", templateId=SLOW_WORKER, lbHoldS=1, lbResumeWindowS=300)
    held = get(dev, "rsslow")  # starts the worker, which never becomes routable
    assert held.status_code == 503, held.text
    worker = until("its worker started", lambda: _only_worker(dev, "rsslow"))
    until(f"{worker} parked", lambda: parked(dev, worker))
    answer = get(dev, "rsslow", f"strict-resume {worker}")
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert set(body) == {"error", "reason"}, body
    assert body["reason"] == "worker_timeout"
    assert "lbHoldS" in body["error"]
    p = process_of(dev, worker)  # it was resumed all the same, and loads on
    assert p is not None and p.status() != psutil.STATUS_STOPPED


def test_strict_waits_for_a_starting_worker_and_answers_the_same_400(dev: DevProcess) -> None:
    create(dev, "rsstart", templateId=SLOW_WORKER, lbHoldS=1, idleTimeout=60)
    held = get(dev, "rsstart")  # starts the worker, which never becomes routable
    assert held.status_code == 503, held.text
    worker = until("its worker started", lambda: _only_worker(dev, "rsstart"))
    for mode in ("strict", "strict-resume"):
        answer = get(dev, "rsstart", f"{mode} {worker}")
        assert answer.status_code == 400, answer.text
        body = answer.json()
        assert set(body) == {"error", "reason"} and body["reason"] == "worker_timeout", body


def _only_worker(dev: DevProcess, endpoint_id: str) -> str | None:
    for p in dev.workers():
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get("RUNPOD_ENDPOINT_ID") == endpoint_id and env.get("RUNPOD_POD_ID"):
            return env["RUNPOD_POD_ID"]
    return None
