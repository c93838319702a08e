"""Progress reports (runpod's `progress_update`): the latest is a running job's `output` in
/status; the job stays IN_PROGRESS, and its result replaces the report. Raw HTTP against a
real gateway, and the official runpod SDK as worker and client under `lockgate dev`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import runpod

from tests.devproc import REPO, DevProcess
from tests.test_dev_mode import wait_until
from tests.test_job_api import done, get, submit, take


async def test_the_latest_progress_is_the_output_of_a_running_job(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    assert (await done(http, gateway, job["id"], {"status": "IN_PROGRESS", "output": "10%"}))[
        "accepted"
    ]
    await done(http, gateway, job["id"], {"status": "IN_PROGRESS", "output": {"pct": 50}})
    body = (await get(http, gateway, f"status/{job['id']}"))[1]
    assert body["status"] == "IN_PROGRESS" and body["output"] == {"pct": 50}
    await done(http, gateway, job["id"], {"output": "all"})
    body = (await get(http, gateway, f"status/{job['id']}"))[1]
    assert body["status"] == "COMPLETED" and body["output"] == "all"


async def test_a_failed_job_shows_no_progress(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    await done(http, gateway, job["id"], {"status": "IN_PROGRESS", "output": "10%"})
    await done(http, gateway, job["id"], {"error": "boom"})
    body = (await get(http, gateway, f"status/{job['id']}"))[1]
    assert body["status"] == "FAILED" and "output" not in body


async def test_progress_from_a_worker_not_holding_the_job_is_ignored(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway, "w1")
    answer = await done(http, gateway, job["id"], {"status": "IN_PROGRESS", "output": 1}, "w2")
    assert answer["accepted"] is False
    assert "output" not in (await get(http, gateway, f"status/{job['id']}"))[1]


async def test_a_progress_report_over_1_mb_is_refused_and_the_job_goes_on(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    url = gateway.job_url(f"job-done/w1/{job['id']}")
    body = {"status": "IN_PROGRESS", "output": "x" * (1024 * 1024)}
    async with http.post(url, json=body, headers=gateway.worker_headers()) as r:
        assert r.status == 413 and "progress" in (await r.json())["error"]
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "IN_PROGRESS"


@pytest.fixture(scope="module")
def progress_dev(tmp_path_factory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    handler = str(REPO / "tests/workers/runpod_progress.py")
    with DevProcess(handler, "--workers-min", "1", data_dir=data) as dev:
        yield dev


def test_runpod_progress_update_shows_in_status_until_the_result(progress_dev, tmp_path):
    runpod.endpoint_url_base, runpod.api_key = f"{progress_dev.url}/v2", progress_dev.key
    endpoint = runpod.Endpoint(progress_dev.endpoint)
    release = tmp_path / "release"
    job = endpoint.run({"release": str(release)})

    def status() -> dict:
        return job.rp_client.get(f"{progress_dev.endpoint}/status/{job.job_id}")

    seen = wait_until(
        lambda: (s := status()).get("output") == {"step": 2, "of": 2} and s, timeout_s=60
    )
    assert seen["status"] == "IN_PROGRESS"
    release.touch()
    assert job.output(timeout=30) == "done"
    assert status()["status"] == "COMPLETED"
