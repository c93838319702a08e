"""The registry entry (`models.registry_entry.RegistryEntry`): one model for its writers (the
operator's `kube.registry_record.registry_entry`, dev mode's `LocalEndpoint.entry`) and its readers
(the gateway's `EndpointCache`, the scaler, dev mode's resume), through a real Redis."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis

from lockgate.dev.controlplane import ORIGIN_API, LocalEndpoint
from lockgate.dev.workers import limits_of
from lockgate.gateway.endpoints import (
    EndpointCache,
    lb_hold_s,
    lb_websocket_max_s,
    request_timeout_s,
)
from lockgate.kube.manifests.names import Owner
from lockgate.kube.registry_record import registry_entry
from lockgate.models import EndpointSpec, EndpointType, ScalerType
from lockgate.models.registry_entry import RegistryEntry
from lockgate.scaling.decision import Limits
from lockgate.store import Registry, key_digest, keys
from tests.conftest import LiveGateway

OWNER = Owner("ep-typed", "ml", "uid-1")
URL = "https://jobs.example/v2/ep-typed/"
# Every setting a reader reads one by one away from its default, and a few it carries.
SPEC = EndpointSpec(
    type=EndpointType.LB,
    scalerType=ScalerType.REQUEST_COUNT,
    scalerValue=3,
    executionTimeoutMs=42_000,
    requestTimeoutS=90,
    lbHoldS=7,
    lbWebSocketMaxS=600,
    workersMin=1,
    workersMax=5,
    replicas=2,
    idleTimeout=30,
    gpuTypeIds=["NVIDIA L4"],
    modelReferences=["acme/tiny"],
)


def operator_entry(spec: EndpointSpec = SPEC) -> RegistryEntry:
    return registry_entry(OWNER, spec, key_digest="d" * 64, job_api_url=URL)


def dev_entry(spec: EndpointSpec = SPEC) -> RegistryEntry:
    ep = LocalEndpoint(OWNER.name, spec, ORIGIN_API, "/srv/handlers", "lgw_key", None)
    ep.edits = {"workersMax": 5}
    return ep.entry(URL)


WRITERS = {"operator": operator_entry, "dev": dev_entry}


def test_the_entry_declares_the_specs_settings_with_the_specs_types_and_defaults() -> None:
    shared = set(RegistryEntry.model_fields) & set(EndpointSpec.model_fields)
    assert shared >= {"type", "executionTimeoutMs", "requestTimeoutS", "lbHoldS"}
    for name in shared:
        ours, spec = RegistryEntry.model_fields[name], EndpointSpec.model_fields[name]
        assert (ours.annotation, ours.default) == (spec.annotation, spec.default), name


@pytest.mark.parametrize("writer", sorted(WRITERS))
async def test_an_entry_round_trips_through_redis_unchanged(redis: Redis, writer: str) -> None:
    entry = WRITERS[writer]()
    registry = Registry(redis)
    await registry.put_endpoint(entry.id, entry)

    raw = orjson.loads(await redis.hget(keys.ENDPOINTS, entry.id))
    assert raw == entry.stored()
    back = await registry.get_endpoint(entry.id)
    assert back == entry  # the operator rewrites an entry only when it changed
    assert (await registry.list_endpoints())[entry.id] == entry
    assert back.spec() == SPEC


async def test_the_stored_json_is_the_object_older_gateways_read(redis: Redis) -> None:
    """The keys and values the untyped writers stored before the model, so a gateway or
    scaler of the previous release reads an entry this one wrote (and the reverse)."""
    registry, settings = Registry(redis), SPEC.model_dump(mode="json")
    await registry.put_endpoint(OWNER.name, operator_entry())
    raw = orjson.loads(await redis.hget(keys.ENDPOINTS, OWNER.name))
    assert raw == {
        "id": OWNER.name, **settings, "namespace": "ml", "uid": "uid-1",
        "workerKeyDigest": "d" * 64, "jobApiUrl": URL,
    }  # fmt: skip

    await registry.put_endpoint(OWNER.name, dev_entry())
    raw = orjson.loads(await redis.hget(keys.ENDPOINTS, OWNER.name))
    assert raw == {
        "id": OWNER.name, **settings, "workerKeyDigest": key_digest("lgw_key"),
        "jobApiUrl": URL, "origin": ORIGIN_API, "workDir": "/srv/handlers", "version": 1,
        "createdAt": raw["createdAt"], "edits": {"workersMax": 5},
    }  # fmt: skip


@pytest.mark.parametrize("writer", sorted(WRITERS))
async def test_every_reader_sees_the_settings_the_writer_wrote(redis: Redis, writer: str) -> None:
    registry = Registry(redis)
    await registry.put_endpoint(OWNER.name, WRITERS[writer]())

    gateway = await EndpointCache(registry, cache_s=0).get(OWNER.name)
    assert gateway.type == SPEC.type and gateway.executionTimeoutMs == SPEC.executionTimeoutMs
    assert request_timeout_s(gateway) == SPEC.requestTimeoutS
    assert lb_hold_s(gateway) == SPEC.lbHoldS
    assert lb_websocket_max_s(gateway) == SPEC.lbWebSocketMaxS
    scaler = (await registry.list_endpoints())[OWNER.name]
    assert Limits.from_settings(scaler.settings()) == limits_of(SPEC)  # kube's == dev's
    assert (scaler.workersMin, scaler.replicas) == (SPEC.workersMin, SPEC.replicas)


async def test_an_entry_older_than_its_settings_reads_the_specs_defaults(redis: Redis) -> None:
    await redis.hset(keys.ENDPOINTS, "old", orjson.dumps({"id": "old", "workerKeyDigest": "x"}))
    entry = await Registry(redis).get_endpoint("old")
    assert entry is not None and entry.spec() == EndpointSpec()
    defaults = EndpointSpec()
    assert (entry.type, entry.executionTimeoutMs, entry.lbHoldS) == (
        defaults.type, defaults.executionTimeoutMs, defaults.lbHoldS,
    )  # fmt: skip
    assert request_timeout_s(entry) == defaults.requestTimeoutS
    assert lb_websocket_max_s(entry) == defaults.lbWebSocketMaxS


async def test_the_gateway_serves_the_endpoints_the_operator_registered_by_their_type(
    redis: Redis, gateway: LiveGateway, http: aiohttp.ClientSession
) -> None:
    registry = Registry(redis)
    await registry.put_endpoint(OWNER.name, operator_entry())
    queue = Owner("ep-queue", "ml", "uid-2")
    entry = registry_entry(queue, EndpointSpec(), key_digest="e" * 64, job_api_url=URL)
    await registry.put_endpoint(queue.name, entry)

    headers = gateway.client_headers()
    async with http.post(f"{gateway.url}/v2/{OWNER.name}/run", json={}, headers=headers) as lb:
        assert lb.status == 400
        assert "load-balancing endpoint (type LB)" in (await lb.json())["error"]
    body = {"input": {}}
    async with http.post(f"{gateway.url}/v2/{queue.name}/run", json=body, headers=headers) as q:
        assert q.status == 200, await q.text()
        assert (await q.json())["status"] == "IN_QUEUE"
