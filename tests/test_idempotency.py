"""Retried submits (issue 13 item 9): the `Idempotency-Key` header of /run and /runsync,
and what the 503 says when Redis is unreachable. A real gateway and a real Redis; Redis
"fails" behind a real TCP proxy that can drop the reply to a submit and then refuse
connections, as a network partition does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from lockgate.apikeys import create, key_record
from lockgate.dev.redis_server import free_port
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import JobStore, Registry, keys
from tests.conftest import LiveGateway, make_settings, register, start_gateway
from tests.test_job_api import done, get, take

KEY = {"Idempotency-Key": "order-4711"}


async def submit(
    http, gw: LiveGateway, path: str, body: dict, headers: dict, key: str | None = None
):
    headers = {"authorization": key or gw.client_key, **headers}
    async with http.post(gw.job_url(path), json=body, headers=headers) as r:
        return r.status, await r.json(), r.headers


async def queued(http, gw: LiveGateway) -> int:
    return (await get(http, gw, "health"))[1]["jobs"]["inQueue"]


async def test_a_second_run_with_the_same_key_returns_the_first_job(http, gateway):
    status, first, headers = await submit(http, gateway, "run", {"input": {"n": 1}}, KEY)
    assert status == 200 and "Idempotent-Replayed" not in headers
    status, again, headers = await submit(http, gateway, "run", {"input": {"n": 1}}, KEY)
    assert status == 200 and again == first and headers["Idempotent-Replayed"] == "true"
    assert await queued(http, gateway) == 1
    job = await take(http, gateway)
    assert job["id"] == first["id"]
    status, again, _ = await submit(http, gateway, "run", {"input": {"n": 1}}, KEY)
    assert again == {"id": first["id"], "status": "IN_PROGRESS"}  # its state now
    assert await take(http, gateway) is None  # nothing more was queued


async def test_without_a_key_every_submit_is_a_new_job(http, gateway):
    ids = {(await submit(http, gateway, "run", {"input": {}}, {}))[1]["id"] for _ in range(2)}
    assert len(ids) == 2


async def test_keys_are_per_key_holder_per_endpoint_and_per_route(http, gateway, redis):
    _, first, _ = await submit(http, gateway, "run", {"input": {}}, KEY)
    other_holder = await create(Registry(redis), key_record("other-client", ["jobs"], None))
    _, theirs, _ = await submit(http, gateway, "run", {"input": {}}, KEY, key=other_holder)
    await Registry(redis).put_endpoint("second", RegistryEntry(id="second"))
    url = f"{gateway.url}/v2/second/run"
    async with http.post(
        url, json={"input": {}}, headers={"authorization": gateway.client_key, **KEY}
    ) as r:
        elsewhere = await r.json()
    _, sync, _ = await submit(http, gateway, "runsync?wait=1000", {"input": {}}, KEY)
    assert len({first["id"], theirs["id"], elsewhere["id"], sync["id"]}) == 4


async def test_a_runsync_retried_with_its_key_gets_the_first_jobs_result(http, gateway):
    waiting = asyncio.create_task(submit(http, gateway, "runsync?wait=30000", {"input": {}}, KEY))
    job = None
    while job is None:
        job = await take(http, gateway)
    await done(http, gateway, job["id"], {"output": {"answer": 42}})
    status, first, _ = await waiting
    assert status == 200 and first["output"] == {"answer": 42}
    status, again, headers = await submit(http, gateway, "runsync?wait=30000", {"input": {}}, KEY)
    assert status == 200 and headers["Idempotent-Replayed"] == "true"
    assert (again["id"], again["status"], again["output"]) == (
        job["id"],
        "COMPLETED",
        {"answer": 42},
    )


async def test_once_the_first_job_is_gone_the_key_makes_a_new_job(http, gateway):
    _, first, _ = await submit(http, gateway, "run", {"input": {}}, KEY)
    await http.post(gateway.job_url("purge-queue"), headers=gateway.client_headers())
    _, second, headers = await submit(http, gateway, "run", {"input": {}}, KEY)
    assert second["id"] != first["id"] and "Idempotent-Replayed" not in headers


async def test_deleting_an_endpoints_data_removes_its_idempotency_keys(http, gateway, redis):
    await submit(http, gateway, "run", {"input": {}}, KEY)
    pattern = keys.prefix(gateway.endpoint) + "ik:*"
    assert [k async for k in redis.scan_iter(match=pattern)]
    await JobStore(redis).delete_endpoint_data(gateway.endpoint)
    assert not [k async for k in redis.scan_iter(match=pattern)]


@pytest.mark.parametrize("key", ["", "x" * 256, "with space", "naïve"])
async def test_a_malformed_key_is_refused_with_400(http, gateway, key):
    status, body, _ = await submit(http, gateway, "run", {"input": {}}, {"Idempotency-Key": key})
    assert status == 400 and "Idempotency-Key" in body["error"]


# -- Redis unreachable: does the job exist? --------------------------------------------------


class Partition:
    """A TCP proxy to Redis. `down()` closes every connection and refuses new ones;
    `drop_reply_to(marker)`: the next command carrying `marker` reaches Redis, its reply is
    dropped and the proxy goes down (the write landed, the client never hears of it)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.is_down = False
        self.marker: bytes | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def close(self) -> None:
        self.down()
        assert self.server is not None
        self.server.close()

    def down(self) -> None:
        self.is_down = True
        for writer in list(self.writers):
            writer.close()
        self.writers.clear()

    def up(self) -> None:
        self.is_down = False

    def drop_reply_to(self, marker: bytes) -> None:
        self.marker = marker

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_down:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.writers |= {writer, up_writer}
        dropping = asyncio.Event()
        await asyncio.gather(
            self._pump(reader, up_writer, dropping, outbound=True),
            self._pump(up_reader, writer, dropping, outbound=False),
            return_exceptions=True,
        )

    async def _pump(self, reader, writer, dropping: asyncio.Event, *, outbound: bool) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if outbound and self.marker is not None and self.marker in data:
                    self.marker = None
                    dropping.set()  # the reply to this goes nowhere
                elif not outbound and dropping.is_set():
                    self.down()
                    return
                writer.write(data)
                await writer.drain()
        writer.close()


@pytest.fixture
async def partition(redis_server) -> AsyncIterator[Partition]:
    proxy = Partition(int(redis_server.url.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def partitioned(redis, partition: Partition) -> AsyncIterator[LiveGateway]:
    """A gateway whose Redis is behind the proxy (short caches, so Redis is asked)."""
    client_key, worker_key = await register(redis, "echo")
    port = free_port()
    settings = make_settings(partition.url, port, auth_cache_s=0.0, registry_cache_s=0.0)
    runner = await start_gateway(settings)
    yield LiveGateway(
        f"http://127.0.0.1:{port}", "echo", client_key, worker_key, settings, runner.app
    )
    partition.up()
    await runner.cleanup()


async def test_a_submit_refused_before_any_write_says_no_job_was_created(
    http, partitioned, partition
):
    partition.down()
    status, body, headers = await submit(http, partitioned, "run", {"input": {}}, KEY)
    assert status == 503 and body["jobMayExist"] is False
    assert "no job was created" in body["error"] and headers["Retry-After"]


@pytest.mark.parametrize("route", ["run", "runsync?wait=5000"])
async def test_a_submit_whose_reply_was_lost_names_the_job_and_a_retry_with_the_key_finds_it(
    http, partitioned, partition, redis, route
):
    marker = "lost-reply-4711"
    partition.drop_reply_to(marker.encode())
    body = {"input": {"marker": marker}}
    status, answer, _ = await submit(http, partitioned, route, body, KEY)
    assert status == 503, answer
    assert answer["jobMayExist"] is True and answer["id"] in answer["error"]
    assert "Idempotency-Key" in answer["error"]
    partition.up()
    assert (await get(http, partitioned, f"status/{answer['id']}"))[0] == 200  # it did land
    status, again, headers = await submit(http, partitioned, route, body, KEY)
    assert status == 200 and again["id"] == answer["id"]
    assert headers["Idempotent-Replayed"] == "true"
    assert (await get(http, partitioned, "health"))[1]["jobs"]["inQueue"] == 1  # once, not twice
