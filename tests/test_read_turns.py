"""Client reads take turns (`LOCKGATE_READ_CONCURRENCY`): past that many at once, a read
waits without using the gateway's CPU, so clients that poll `/status` in a loop cannot
starve the workers' requests; submits, worker calls and `/status?wait=` long-polls never
wait for a turn (`wait=0` is no long-poll: it waits its turn)."""

from __future__ import annotations

import asyncio

import aiohttp

from lockgate.gateway.state import GATEWAY
from tests.conftest import LiveGateway

GATEWAY_SETTINGS = {"read_concurrency": 1}


async def test_a_read_past_the_limit_waits_its_turn_and_workers_and_long_polls_do_not(
    gateway: LiveGateway, http: aiohttp.ClientSession
) -> None:
    async def call(method: str, path: str, headers: dict, **kw) -> tuple[int, dict | None]:
        async with http.request(method, gateway.job_url(path), headers=headers, **kw) as resp:
            return resp.status, (await resp.json() if resp.status != 204 else None)

    client = gateway.client_headers()
    status, job = await call("POST", "run", client, json={"input": {"n": 1}})
    assert status == 200 and job is not None
    reads = gateway.app[GATEWAY].reads
    async with reads:  # the one turn is taken
        waiting = asyncio.ensure_future(call("GET", f"status/{job['id']}?wait=0", client))
        health = asyncio.ensure_future(call("GET", "health", client))
        await asyncio.sleep(0.5)
        assert not waiting.done() and not health.done()
        # Meanwhile a second submit, a worker's take and a long-poll are served.
        status, other = await call("POST", "run", client, json={"input": {"n": 2}})
        assert status == 200 and other is not None
        status, taken = await call("GET", "job-take/w1", gateway.worker_headers())
        assert status == 200 and taken is not None and taken["id"] == job["id"]
        status, polled = await call("GET", f"status/{other['id']}?wait=100", client)
        assert status == 200 and polled is not None and polled["status"] == "IN_QUEUE"
    status, body = await asyncio.wait_for(waiting, 5)
    assert status == 200 and body is not None and body["status"] == "IN_PROGRESS"
    status, body = await asyncio.wait_for(health, 5)
    assert status == 200 and body is not None and body["jobs"]["inProgress"] == 1
