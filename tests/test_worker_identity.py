"""Worker identity: a worker's own key acts as its worker id only; dev mode gives each
worker process such a key (and never the endpoint's shared worker key)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import aiohttp
import pytest
import requests

from lockgate.store import Registry
from tests.devproc import REPO, DevProcess
from tests.test_dev_mode import wait_until
from tests.test_job_api import get, submit

IMPOSTOR = str(REPO / "tests/workers/runpod_impostor.py")


async def _own_key(redis, worker_id: str) -> dict[str, str]:
    """A key bound to `worker_id`, recorded as dev mode records each worker's key."""
    key = f"lgw_{secrets.token_hex(8)}"
    record = {"name": f"dev-worker:{worker_id}", "scopes": ["workers"]}
    await Registry(redis).put_key(key, {**record, "endpoints": ["echo"], "worker": worker_id})
    return {"authorization": key}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "job-done/w1/{job}?isStream=false"),
        ("POST", "job-stream/w1/{job}"),
        ("GET", "ping/w1?job_id="),
        ("GET", "job-take/w1"),
        ("GET", "job-stop/w1"),
        ("POST", "job-return/w1/{job}"),
    ],
)
async def test_a_workers_own_key_cannot_act_as_another_worker(http, gateway, redis, method, path):
    w1, w2 = await _own_key(redis, "w1"), await _own_key(redis, "w2")
    job = await submit(http, gateway, {"input": {"n": 1}})
    async with http.get(gateway.job_url("job-take/w1"), headers=w1) as r:
        assert r.status == 200 and (await r.json())["id"] == job["id"]

    url = gateway.job_url(path.format(job=job["id"]))
    async with http.request(method, url, headers=w2, json={"output": "forged"}) as r:
        assert r.status == 403, await r.text()
        assert "another worker" in (await r.json())["error"]

    done = gateway.job_url(f"job-done/w1/{job['id']}?isStream=false")
    async with http.post(done, headers=w1, json={"output": "real"}) as r:
        assert (await r.json()) == {"accepted": True}
    _, status = await get(http, gateway, f"status/{job['id']}")
    assert status["status"] == "COMPLETED" and status["output"] == "real"


def test_each_dev_worker_process_has_its_own_key_bound_to_its_id_and_revoked_after(tmp_path):
    """An unchanged runpod-SDK worker: its key works for its own id, not for another's
    (403), and stops working once the worker is gone (401)."""
    args = ("--workers-max", "1", "--idle-timeout", "1")
    with DevProcess(IMPOSTOR, *args, data_dir=tmp_path) as dev:
        r = requests.post(
            dev.job_url("runsync"), json={"input": {"as": "someone-else"}}, headers=dev.headers()
        )
        body = r.json()
        assert body["status"] == "COMPLETED", body
        out = body["output"]
        assert out["status"] == 403  # acting as another worker id
        ping = f"{dev.url}/v2/{dev.endpoint}/ping/{out['me']}"
        assert requests.get(ping, headers={"Authorization": out["key"]}).status_code == 200

        def revoked() -> bool:  # the idle worker is stopped, and its key with it
            return requests.get(ping, headers={"Authorization": out["key"]}).status_code == 401

        wait_until(revoked, timeout_s=30)


@pytest.fixture
async def elsewhere() -> AsyncIterator[aiohttp.ClientSession]:
    """A client calling from another address (127.0.0.2): another pod, as the gateway sees it."""
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


async def test_a_worker_id_is_bound_to_the_address_it_first_called_from(http, gateway, elsewhere):
    """Every worker holds the endpoint's shared key: another holder, calling from another
    address, cannot finish or requeue worker w1's job, while w1 and new ids work."""
    shared = gateway.worker_headers()
    job = await submit(http, gateway, {"input": {"n": 1}})
    async with http.get(gateway.job_url("job-take/w1"), headers=shared) as r:
        assert r.status == 200 and (await r.json())["id"] == job["id"]

    forged = gateway.job_url(f"job-done/w1/{job['id']}?isStream=false")
    async with elsewhere.post(forged, headers=shared, json={"output": "forged"}) as r:
        assert r.status == 403, await r.text()
        assert "bound to another address" in (await r.json())["error"]
    async with elsewhere.get(gateway.job_url("ping/w1?job_id="), headers=shared) as r:
        assert r.status == 403  # a ping not listing w1's job would requeue it
    async with elsewhere.get(gateway.job_url("ping/w2"), headers=shared) as r:
        assert r.status == 200  # a worker id first seen from there is that address's

    async with http.post(forged, headers=shared, json={"output": "real"}) as r:
        assert (await r.json()) == {"accepted": True}
    _, status = await get(http, gateway, f"status/{job['id']}")
    assert status["status"] == "COMPLETED" and status["output"] == "real"


@pytest.mark.parametrize("gateway_settings", [{"worker_address_binding": False}], indirect=True)
async def test_address_binding_can_be_turned_off(http, gateway, elsewhere):
    async with http.get(gateway.job_url("ping/w1"), headers=gateway.worker_headers()) as r:
        assert r.status == 200
    async with elsewhere.get(gateway.job_url("ping/w1"), headers=gateway.worker_headers()) as r:
        assert r.status == 200
