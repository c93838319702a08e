"""Usage per API key (issue 50 item 10): each job keeps the id of the key that submitted it,
and the finish script adds its execution time (and GPU-time at the endpoint's rate) to that
key's hourly usage, read back by `GET /v2/billing/serverless?groupBy=apiKey`. Against a real
`lockgate dev` over HTTP, and the store on a real Redis for jobs without a key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from console_browser import create_key
from devproc import DevProcess
from lockgate.store import JobStore, NewJob
from lockgate.store.records import JobRecord
from lockgate.store.usage import NO_KEY, UsageLedger, UsageRate
from priced_dev import priced_dev

GPU_EP = "usage-keys"
SLEEP_S = 0.4


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` with a priced GPU endpoint of two L4s per worker, one worker kept up."""
    spec = {"workersMin": 1, "workersMax": 1, "gpuTypeIds": ["NVIDIA L4"], "gpuCount": 2}
    with priced_dev(
        tmp_path_factory.mktemp("usage-keys"), {"NVIDIA L4": 3.6}, {GPU_EP: spec}
    ) as proc:
        yield proc


def runsync(dev: DevProcess, key: str, n: int) -> None:
    for _ in range(n):
        r = requests.post(
            f"{dev.url}/v2/{GPU_EP}/runsync", json={"input": {"sleep": SLEEP_S}},
            headers={"authorization": f"Bearer {key}"}, timeout=90,
        )  # fmt: skip
        assert r.status_code == 200 and r.json()["status"] == "COMPLETED", r.text


def by_key(dev: DevProcess, **params: str) -> dict:
    r = requests.get(
        f"{dev.url}/v2/billing/serverless", headers=dev.headers(), timeout=10,
        params={"bucketSize": "hour", "lastN": "2", "groupBy": "apiKey", **params},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    return r.json()


def test_each_keys_jobs_count_for_that_key_with_gpu_seconds_at_the_endpoints_rate(dev):
    alice = create_key(dev, "alice", ["jobs"])
    bob = create_key(dev, "bob", ["jobs"])
    runsync(dev, alice, 2)
    runsync(dev, bob, 1)
    ids = {k["name"]: k["id"] for k in requests.get(
        f"{dev.url}/v1/keys", headers=dev.headers(), timeout=10).json()}  # fmt: skip

    body = by_key(dev, serverlessId=GPU_EP)
    seconds: dict[str | None, float] = {}
    for r in body["records"]:
        seconds[r["apiKeyId"]] = seconds.get(r["apiKeyId"], 0) + r["executionSeconds"]
        assert r["gpuSeconds"] == pytest.approx(2 * r["executionSeconds"])  # two L4s a worker
        assert r["gpuSecondsByType"] == {"NVIDIA L4": r["gpuSeconds"]}
        assert r["totalAmount"] == pytest.approx(r["gpuSeconds"] / 3600 * 3.6, abs=1e-6)
        assert "serverlessId" not in r
    assert set(seconds) == {ids["alice"], ids["bob"]}
    assert 2 * SLEEP_S <= seconds[ids["alice"]] < 2 * SLEEP_S + 5
    assert SLEEP_S <= seconds[ids["bob"]] < SLEEP_S + 5
    meta = body["metadata"]
    assert meta["query"]["groupBy"] == "apiKey" and meta["uniqueApiKeyCount"] == 2
    assert meta["totals"]["executionSeconds"] == pytest.approx(sum(seconds.values()))


def test_the_runpod_shape_is_unchanged_without_group_by_and_a_bad_group_by_is_422(dev):
    r = requests.get(
        f"{dev.url}/v2/billing/serverless", headers=dev.headers(), timeout=10,
        params={"bucketSize": "hour", "lastN": "1"},
    )  # fmt: skip
    assert r.status_code == 200
    assert all("apiKeyId" not in rec and "serverlessId" in rec for rec in r.json()["records"])
    bad = requests.get(
        f"{dev.url}/v2/billing/serverless", headers=dev.headers(), timeout=10,
        params={"groupBy": "team"},
    )  # fmt: skip
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert "groupBy" in bad.text


async def test_a_job_without_a_key_counts_in_the_no_key_bucket(redis):
    """Auth off (dev mode's keyless runs, benchmarks): the job has no key id; its time counts
    for NO_KEY, at the endpoint's rate (vCPUs here)."""
    clock = [1_800_000_000_000]
    store = JobStore(redis, clock=lambda: clock[0])
    await store.submit("ep", NewJob(id="j1", input=b"{}", ttl_ms=60_000))
    await store.submit("ep", NewJob(id="j2", input=b"{}", ttl_ms=60_000, api_key="abc123"))
    await store.take("ep", "w1", 2, 60_000)
    clock[0] += 1500
    rate = UsageRate(vcpus=4)
    await store.finish("ep", "w1", "j1", output=b"1", error=None, rate=rate)
    await store.finish("ep", "w1", "j2", output=None, error="boom", rate=rate)
    record = await store.get("ep", "j2")
    assert isinstance(record, JobRecord) and record.status == "FAILED"
    ledger = UsageLedger(redis, clock=lambda: clock[0] / 1000)
    start = clock[0] // 1000 - 7200
    found = await ledger.key_hours(["ep"], start, start + 10_800)
    assert set(found) == {NO_KEY, "abc123"}
    [no_key] = found[NO_KEY].values()
    assert (no_key.execution_ms, no_key.vcpu_ms, no_key.gpu_ms) == (1500, 6000, {})
    [keyed] = found["abc123"].values()
    assert keyed.execution_ms == 1500
