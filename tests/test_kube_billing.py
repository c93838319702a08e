"""`/v2/billing/serverless` on a cluster's management API (the operator's process, against
envtest's real kube-apiserver and a real Redis): the usage of an Endpoint resource's ready
worker, counted by the process's own history sampler at the rate of the registry entry the
operator wrote (2 GPUs of the first of its `gpuTypeIds`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest
import requests
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.store import JobStore, Registry

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]

ENDPOINT = "ep-billed"


def in_redis(url: str, call: Callable[[Redis], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        redis = Redis.from_url(url)
        try:
            return await call(redis)
        finally:
            await redis.aclose()

    return asyncio.run(run())


def test_a_ready_workers_seconds_are_billed_at_the_endpoints_gpus(
    resources: Resources, operator: RunningOperator, redis_server: EmbeddedRedis
) -> None:
    resources.template("billed-tpl")
    spec = {"templateId": "billed-tpl", "workersMin": 0, "gpuCount": 2}
    resources.endpoint(ENDPOINT, gpuTypeIds=["NVIDIA L4", "NVIDIA A40"], **spec)

    def registered() -> Any:
        return in_redis(redis_server.url, lambda r: Registry(r).get_endpoint(ENDPOINT))

    resources.wait_until(registered, "the operator's registry entry", timeout=40)
    # A worker's call to the gateway (a pod's first poll): ready for the heartbeat timeout.
    in_redis(redis_server.url, lambda r: JobStore(r).heartbeat(ENDPOINT, "w-billed"))
    headers = {"authorization": f"Bearer {operator.file_admin_key}"}
    query = {"serverlessId": ENDPOINT, "bucketSize": "hour", "lastN": 2}

    def billed() -> Any:
        url = f"{operator.manage_url}/v2/billing/serverless"
        answer = requests.get(url, params=query, headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["records"]

    # The process's sampler writes a point 11 s after each interval ends.
    records = resources.wait_until(billed, "a point with the worker ready", timeout=40)
    for r in records:
        assert r["workerSeconds"] % 10 == 0 and r["workerSeconds"] > 0
        assert r["gpuSecondsByType"] == {"NVIDIA L4": 2 * r["workerSeconds"]}
        assert r["totalAmount"] == 0  # the operator's settings set no prices
