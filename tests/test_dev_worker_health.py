"""Workers that must go, in a real `lockgate dev` (issue 47, items 1 and 2): a runpod SDK
worker that sleeps forever at import (tests/workers/runpod_trouble.py as a template's
command) on an endpoint with a small `startupTimeout` is marked with its last log line and
replaced by a new process, again and again; a worker marked unhealthy (the store's record,
as the worker API writes it for a failed fitness check) has its process stopped and a new
one started, which runs the next job. The endpoint's `WorkersHealthy` says why."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from redis.asyncio import Redis

from lockgate.models.unhealthy import UnhealthyWorker
from lockgate.store import JobStore
from tests.conftest import wait_until
from tests.devproc import REPO, DevProcess

PORT = 31471  # this helper's range
TROUBLE = REPO / "tests/workers/runpod_trouble.py"
LAST_LINE = "loading weights (forever)"  # what runpod_trouble.py prints before it sleeps


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    with DevProcess(str(REPO / "tests/handlers/sync_echo.py"), data_dir=data, port=PORT) as dp:
        yield dp


def api(dev: DevProcess, method: str, path: str, body: Any = None) -> Any:
    answer = requests.request(
        method, f"{dev.url}{path}", json=body, headers=dev.headers(), timeout=90
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def in_store(dev: DevProcess, call: Any) -> Any:
    async def run() -> Any:
        redis = Redis.from_url(dev.redis_url)
        try:
            return await call(JobStore(redis))
        finally:
            await redis.aclose()

    return asyncio.run(run())


def workers_healthy(dev: DevProcess, endpoint_id: str) -> dict:
    status = api(dev, "GET", f"/v1/endpoints/{endpoint_id}")["status"]
    return next((c for c in status["conditions"] if c["type"] == "WorkersHealthy"), {})


def polling(dev: DevProcess, endpoint_id: str) -> list[str]:
    found = api(dev, "GET", f"/v1/endpoints/{endpoint_id}?includeWorkers=true")
    return [w["id"] for w in found.get("workers") or []]


def test_a_worker_asleep_at_import_is_replaced_at_its_startup_deadline(dev: DevProcess) -> None:
    template = api(dev, "POST", "/v1/templates", {
        "name": "asleep", "imageName": "local/trouble:1",
        "dockerStartCmd": ["python", str(TROUBLE)], "env": {"TROUBLE_SLEEP_AT_IMPORT": "1"},
    })  # fmt: skip
    ep = api(dev, "POST", "/v1/endpoints", {
        "name": "asleep", "templateId": template["id"], "workersMin": 1, "startupTimeout": 5,
    })["id"]  # fmt: skip
    quoted = f"did not become ready within 5 s; last log line: {LAST_LINE}"

    def replaced() -> dict[str, UnhealthyWorker] | None:
        """Two workers marked, one of them quoting its line (the first may not have printed
        it yet within 5 s: importing the runpod SDK takes a while on a busy machine)."""
        found = in_store(dev, lambda store: store.unhealthy_workers(ep))
        said = any(r.reason == quoted for r in found.values())
        return found if len(found) >= 2 and said else None

    records = wait_until(replaced, "two workers replaced at their deadline", timeout=90)
    for why in records.values():
        assert why.kind == "startup"
        assert why.reason in (quoted, "did not become ready within 5 s; it wrote no log line")
    for worker in records:  # each one's process was stopped
        dev.wait_for(rf"worker {worker} exited", timeout_s=30)
    cond = workers_healthy(dev, ep)
    assert (cond["status"], cond["reason"]) == ("False", "StartupTimeout"), cond
    assert "startup failed: did not become ready within 5 s" in cond["message"]
    api(dev, "PATCH", f"/v1/endpoints/{ep}", {"workersMin": 0, "workersMax": 0})


def test_a_marked_workers_process_is_replaced_by_a_new_one(dev: DevProcess) -> None:
    ep = api(dev, "POST", "/v1/endpoints", {
        "name": "marked", "templateId": str(REPO / "tests/handlers/sync_echo.py"),
        "workersMin": 1,
    })["id"]  # fmt: skip
    [first] = wait_until(lambda: polling(dev, ep), "a worker polling", timeout=60)

    async def mark(store: JobStore) -> None:  # as the worker API marks a failed fitness check
        why = UnhealthyWorker(
            worker=first, kind="fitness", check="check_gpu", reason="RuntimeError: no GPU",
            at=store.clock(),
        )  # fmt: skip
        await store.mark_unhealthy(ep, why)

    in_store(dev, mark)
    dev.wait_for(rf"worker {first} exited", timeout_s=30)
    [second] = wait_until(
        lambda: [w for w in polling(dev, ep) if w != first], "a new worker polling", timeout=60
    )
    job = requests.post(
        f"{dev.url}/v2/{ep}/runsync", json={"input": {"n": 1}}, headers=dev.headers(), timeout=90
    ).json()
    assert job["status"] == "COMPLETED" and job["output"] == {"echo": {"n": 1}}, job
    details = api(dev, "GET", f"/v2/{ep}/status/{job['id']}?details=1")
    assert [a["workerId"] for a in details["attemptHistory"]] == [second]
    cond = workers_healthy(dev, ep)
    assert (cond["status"], cond["reason"]) == ("False", "FitnessCheckFailed"), cond
    assert cond["message"].startswith(
        f"Worker {first} was replaced: fitness check check_gpu failed: RuntimeError: no GPU."
    )
