"""The shared, auto-pipelined connection (`store/pipe.py`) on a real redis-server of its
own (each test may stop, pause or demote it): concurrent callers get their own replies in
order on one connection, and every way a connection fails ends the commands in flight
with the error the callers handle (UNAVAILABLE), after which the next command reconnects.
A subscription (`listen`) hands over each message, and ends with its connection's error."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError, NoScriptError, ResponseError, TimeoutError

from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.store import UNAVAILABLE, connect, pipe
from lockgate.store.pipe import listen, pipe_of, read
from tests.conftest import eventually


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis", appendonly=False)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


@pytest.fixture
async def client(server: EmbeddedRedis) -> AsyncIterator[Redis]:
    client = connect(f"{server.url}?socket_timeout=1")
    yield client
    await client.aclose()


async def clients_connected(client: Redis) -> int:
    return int((await client.info("clients"))["connected_clients"])


async def test_concurrent_callers_get_their_own_replies_in_order_on_one_connection(
    client: Redis,
) -> None:
    await client.set("text", "a string")
    before = await clients_connected(client)  # the client's own pooled connection

    async def caller(i: int) -> list:
        return await pipe_of(client).send(
            [("SET", f"k{i}", i), ("GET", f"k{i}"), ("HGET", "text", "f"), ("INCR", "n")]
        )

    replies = await asyncio.gather(*(caller(i) for i in range(300)))
    for i, (ok, got, wrong_type, n) in enumerate(replies):
        assert (ok, got) == (b"OK", str(i).encode())  # raw replies: no redis-py callbacks
        assert isinstance(wrong_type, ResponseError) and "WRONGTYPE" in str(wrong_type)
        assert isinstance(n, int)
    assert sorted(n for *_, n in replies) == list(range(1, 301))  # each INCR once
    assert await clients_connected(client) == before + 1


async def test_error_replies_come_back_as_redis_pys_exceptions(client: Redis) -> None:
    (missing,) = await pipe_of(client).send([("EVALSHA", "0" * 40, 0)])
    assert isinstance(missing, NoScriptError)  # what Scripts loads the script on
    await client.set("text", "a string")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await read(client, "HGET", "text", "f")


async def test_a_restarted_redis_fails_the_commands_in_flight_then_the_next_reconnects(
    server: EmbeddedRedis, client: Redis
) -> None:
    pipe = pipe_of(client)
    assert await pipe.send([("PING",)]) == [b"PONG"]
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)  # the commands below get no reply...
    in_flight = asyncio.ensure_future(pipe.send([("SET", "k", "v"), ("PING",)]))
    await asyncio.sleep(0.1)
    server.process.kill()  # ...and the connection closes under them
    server.process.wait()
    with pytest.raises(ConnectionError):
        await in_flight
    with pytest.raises(UNAVAILABLE):
        await pipe.send([("PING",)])  # refused while down
    server.start()
    assert await pipe.send([("PING",)]) == [b"PONG"]
    assert await read(client, "GET", "nothing") is None


async def test_a_silent_redis_fails_the_commands_after_the_socket_timeout(
    server: EmbeddedRedis, client: Redis
) -> None:
    pipe = pipe_of(client)
    assert await pipe.send([("PING",)]) == [b"PONG"]
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pipe.send([("PING",)]), 10)  # socket_timeout=1 in the URL
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert await pipe.send([("PING",)]) == [b"PONG"]


async def test_a_demoted_master_fails_writes_as_unavailable_and_the_link_reopens(
    tmp_path: Path, server: EmbeddedRedis, client: Redis
) -> None:
    other = EmbeddedRedis(tmp_path / "other", appendonly=False)
    other.start()
    try:
        await client.replicaof("127.0.0.1", other.port)  # what a failover does to a master
        with pytest.raises(ConnectionError, match="replica"):
            await pipe_of(client).send([("SET", "k", "v")])
        await client.replicaof("NO", "ONE")
        assert await pipe_of(client).send([("SET", "k", "v")]) == [b"OK"]
    finally:
        other.stop()


async def test_closing_the_client_closes_the_shared_connection(server: EmbeddedRedis) -> None:
    client = connect(server.url)
    assert await pipe_of(client).send([("PING",)]) == [b"PONG"]
    watcher = connect(server.url)
    try:
        assert await clients_connected(watcher) == 2
        await asyncio.wait_for(client.aclose(), 5)  # the pool closes it; no wait for a reply

        async def closed() -> bool:  # Redis counts a closed connection out a moment later
            return await clients_connected(watcher) == 1

        await eventually(closed, "the shared connection closed", timeout=5, interval=0.05)
    finally:
        await watcher.aclose()


async def test_a_subscription_hands_over_each_message_and_ends_with_the_connections_error(
    server: EmbeddedRedis, client: Redis
) -> None:
    got: list[bytes] = []
    subscribed = asyncio.Event()
    task = asyncio.ensure_future(listen(client, "events", got.append, subscribed.set))
    await asyncio.wait_for(subscribed.wait(), 5)
    sent = [f"m{i}".encode() for i in range(200)]
    for message in sent:
        await client.publish("events", message)
    await client.publish("elsewhere", b"not for us")

    async def all_in() -> bool:
        return len(got) == len(sent)

    await eventually(all_in, "the messages", timeout=5, interval=0.05)
    assert got == sent
    assert server.process is not None
    server.process.kill()
    assert isinstance(await asyncio.wait_for(task, 5), ConnectionError)


async def test_a_silent_subscription_is_found_by_its_keepalive(
    server: EmbeddedRedis, client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipe, "KEEPALIVE_S", 0.2)
    subscribed = asyncio.Event()
    task = asyncio.ensure_future(listen(client, "events", lambda _: None, subscribed.set))
    await asyncio.wait_for(subscribed.wait(), 5)
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:  # the PING gets no answer within the socket timeout (1 s in the URL)
        assert isinstance(await asyncio.wait_for(task, 10), TimeoutError)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


async def test_a_caller_cancelled_while_waiting_leaves_the_others_replies_in_step(
    server: EmbeddedRedis, client: Redis
) -> None:
    pipe = pipe_of(client)
    assert await pipe.send([("PING",)]) == [b"PONG"]
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)  # the replies wait until it goes on
    try:
        first, second, third = (
            asyncio.ensure_future(pipe.send([("ECHO", word)])) for word in ("a", "b", "c")
        )
        await asyncio.sleep(0.1)
        second.cancel()
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert await first == [b"a"] and await third == [b"c"]
    assert second.cancelled()
    assert await pipe.send([("ECHO", "d")]) == [b"d"]
