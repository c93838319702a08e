"""Per-endpoint queue quotas, with a real gateway and Redis: one key cannot fill the store.
Past the queued-jobs or queued-bytes quota /run answers 429 naming the quota; other
endpoints are not affected; room comes back as jobs leave the queue (taken, cancelled,
purged)."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from redis.asyncio import Redis

from tests.conftest import LiveGateway, register
from tests.test_chart import CHART, RELEASE, find_helm

BLOB = "x" * 1_000_000  # an input of about 1 MB


async def call(http, method: str, url: str, headers: dict, **kwargs) -> tuple[int, dict, dict]:
    async with http.request(method, url, headers=headers, **kwargs) as r:
        return r.status, (await r.json() if r.status != 204 else {}), dict(r.headers)


async def submit(http, gateway: LiveGateway, endpoint: str = "echo", **input) -> tuple[int, dict]:
    url = f"{gateway.url}/v2/{endpoint}/run"
    status, body, headers = await call(http, "POST", url, gateway.client_headers(),
                                       json={"input": input})  # fmt: skip
    if status == 429:
        assert headers.get("Retry-After"), headers
    return status, body


@pytest.mark.parametrize("gateway_settings", [{"max_queued_jobs": 3}], indirect=True)
async def test_past_the_queued_jobs_quota_run_gets_429_until_a_job_leaves_the_queue(
    http, gateway: LiveGateway, redis: Redis
) -> None:
    await register(redis, "other")
    assert [(await submit(http, gateway, n=n))[0] for n in range(3)] == [200, 200, 200]
    status, body = await submit(http, gateway, n=3)
    assert status == 429, body
    assert body["error"].startswith("queue full: ") and "3 jobs" in body["error"], body
    assert "LOCKGATE_MAX_QUEUED_JOBS" in body["error"], body
    assert (await submit(http, gateway, "other", n=0))[0] == 200, "other endpoints unaffected"
    status, job, _ = await call(http, "GET", gateway.job_url("job-take/w1"),
                                gateway.worker_headers())  # fmt: skip
    assert status == 200, job
    assert (await submit(http, gateway, n=4))[0] == 200, "a taken job makes room"


@pytest.mark.parametrize("gateway_settings", [{"max_queued_bytes": 2_500_000}], indirect=True)
async def test_past_the_queued_bytes_quota_run_gets_429_until_bytes_leave_the_queue(
    http, gateway: LiveGateway
) -> None:
    client = gateway.client_headers()
    first, _ = await submit(http, gateway, blob=BLOB)
    second, job = await submit(http, gateway, blob=BLOB)
    assert (first, second) == (200, 200)
    status, body = await submit(http, gateway, blob=BLOB)
    assert status == 429 and "LOCKGATE_MAX_QUEUED_BYTES" in body["error"], body
    assert (await submit(http, gateway, small=1))[0] == 200, "a small job still fits"

    await call(http, "POST", gateway.job_url(f"cancel/{job['id']}"), client)
    assert (await submit(http, gateway, blob=BLOB))[0] == 200, "a cancelled job makes room"
    assert (await submit(http, gateway, blob=BLOB))[0] == 429

    status, taken, _ = await call(http, "GET", gateway.job_url("job-take/w1"),
                                  gateway.worker_headers())  # fmt: skip
    assert status == 200 and taken["input"] == {"blob": BLOB}, "the oldest, 1 MB, was taken"
    assert (await submit(http, gateway, blob=BLOB))[0] == 200, "a taken job makes room"

    await call(http, "POST", gateway.job_url("purge-queue"), client)
    assert [(await submit(http, gateway, blob=BLOB))[0] for _ in range(3)] == [200, 200, 429]


def test_the_chart_gives_the_gateway_its_quotas_and_its_memory_limit() -> None:
    helm = find_helm()
    if helm is None:
        pytest.skip("helm missing: `make tools` installs it")
    done = subprocess.run(
        [helm, "template", *RELEASE, str(CHART), "--show-only",
         "templates/gateway/deployment.yaml", "--set", "gateway.quota.maxQueuedJobs=50"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    container = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["LOCKGATE_MAX_QUEUED_JOBS"]["value"] == "50"
    assert env["LOCKGATE_MAX_QUEUED_BYTES"]["value"] == str(256 * 1024 * 1024)
    memory = env["LOCKGATE_MEMORY_LIMIT_BYTES"]["valueFrom"]["resourceFieldRef"]
    assert memory == {"containerName": container["name"], "resource": "limits.memory"}
