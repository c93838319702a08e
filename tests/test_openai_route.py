"""The OpenAI route against a real gateway and Redis, raw HTTP on both sides: the test is
the worker (take, stream, done), so it decides exactly what the worker sends."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from lockgate.gateway.chunks import CHUNK_LIMIT
from lockgate.gateway.openai_wire import StreamFramer, handler_message, route_of, worker_error
from lockgate.store import JobStore
from lockgate.store.keys import prefix
from tests.conftest import LiveGateway, eventually
from tests.redis_monitor import monitored
from tests.test_job_api import done, get, take
from tests.test_stream import push

CHAT = "openai/v1/chat/completions"
ANSWER = {"id": "c1", "object": "chat.completion", "choices": [{"index": 0}]}


def oai_url(gw: LiveGateway, path: str = CHAT) -> str:
    return gw.job_url(path)


def bearer(gw: LiveGateway) -> dict[str, str]:
    return {"authorization": f"Bearer {gw.client_key}"}


async def call(http, gw: LiveGateway, body=None, path: str = CHAT, method: str = "POST"):
    """One OpenAI request: (status, headers, JSON body)."""
    kw = {"json": body} if body is not None else {}
    async with http.request(method, oai_url(gw, path), headers=bearer(gw), **kw) as r:
        return r.status, r.headers, await r.json()


async def worker_job(http, gw: LiveGateway) -> dict:
    """The next job, as a worker takes it (waiting for the client's submit)."""

    async def taken():
        return await take(http, gw)

    return await eventually(taken)


async def test_a_chat_request_is_a_job_whose_output_is_the_answer(http, gateway):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    client = asyncio.create_task(call(http, gateway, body))
    job = await worker_job(http, gateway)
    assert job["input"] == {"openai_route": "/v1/chat/completions", "openai_input": body}
    await done(http, gateway, job["id"], {"output": [ANSWER]})  # an aggregated stream
    status, headers, answer = await client
    assert (status, answer) == (200, ANSWER)
    assert headers["X-Lockgate-Job-Id"] == headers["X-Request-Id"] == job["id"]
    status, record = await get(http, gateway, f"status/{job['id']}")
    assert record["status"] == "COMPLETED"
    status, health = await get(http, gateway, "health")
    assert health["jobs"]["completed"] == 1


async def test_a_get_route_carries_the_route_alone_and_a_plain_output_is_the_answer(http, gateway):
    client = asyncio.create_task(call(http, gateway, path="openai/v1/models", method="GET"))
    job = await worker_job(http, gateway)
    assert job["input"] == {"openai_route": "/v1/models"}
    models = {"object": "list", "data": []}
    await done(http, gateway, job["id"], {"output": models})
    assert (await client)[::2] == (200, models)
    # A query string stays on the route (RunPod's vLLM worker proxies the route as it is).
    path = "openai/v1/files?purpose=batch&limit=2"
    client = asyncio.create_task(call(http, gateway, path=path, method="GET"))
    job = await worker_job(http, gateway)
    assert job["input"] == {"openai_route": "/v1/files?purpose=batch&limit=2"}
    models = {"object": "list", "data": []}
    await done(http, gateway, job["id"], {"output": models})
    assert (await client)[::2] == (200, models)


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "kind"),
    [
        (CHAT, b"{}", {}, 401, "authentication_error"),
        ("openai/v2/chat/completions", b"{}", None, 404, "not_found_error"),
        ("openai/chat/completions", b"{}", None, 404, "not_found_error"),
        (CHAT, b"{not json", None, 400, "invalid_request_error"),
        (CHAT, b"[1, 2]", None, 400, "invalid_request_error"),
        (CHAT, b"", None, 400, "invalid_request_error"),
    ],
)
async def test_refusals_are_openai_shaped(http, gateway, path, body, headers, status, kind):
    headers = bearer(gateway) if headers is None else headers
    async with http.post(oai_url(gateway, path), data=body, headers=headers) as r:
        assert r.status == status
        error = (await r.json())["error"]
    assert error["type"] == kind
    assert isinstance(error["message"], str) and error["message"]


async def test_an_unknown_endpoint_is_404_in_openai_shape(http, gateway):
    url = gateway.url + "/v2/nope/" + CHAT
    async with http.post(url, json={}, headers=bearer(gateway)) as r:
        assert r.status == 404
        assert "nope" in (await r.json())["error"]["message"]


@pytest.mark.parametrize(
    ("output", "status"),
    [
        (
            {"error": {"message": "no such model", "type": "invalid_request_error", "code": 404}},
            404,
        ),
        ({"object": "error", "message": "bad n", "type": "BadRequestError", "code": 400}, 400),
        ({"error": {"message": "vLLM is down", "type": "worker_error", "code": None}}, 500),
    ],
)
async def test_a_worker_answer_that_is_an_openai_error_sets_the_status(
    http, gateway, output, status
):
    client = asyncio.create_task(call(http, gateway, {"model": "m"}))
    job = await worker_job(http, gateway)
    await done(http, gateway, job["id"], {"output": [output]})
    got_status, headers, body = await client
    assert got_status == status
    expected = output["message"] if "message" in output else output["error"]["message"]
    assert body["error"]["message"] == expected
    assert (headers.get("x-should-retry") == "false") == (status >= 500)


async def test_a_failed_job_is_a_500_the_sdk_is_told_not_to_retry(http, gateway):
    client = asyncio.create_task(call(http, gateway, {"model": "m"}))
    job = await worker_job(http, gateway)
    await done(http, gateway, job["id"], {"error": "ValueError: the prompt is empty"})
    status, headers, body = await client
    assert status == 500 and headers["x-should-retry"] == "false"
    assert body["error"]["message"] == "ValueError: the prompt is empty"
    assert body["error"]["type"] == "handler_error"


async def open_stream(http, gw: LiveGateway, body: dict | None = None):
    body = {"model": "m", "stream": True, **(body or {})}
    return await http.post(oai_url(gw), json=body, headers=bearer(gw))


async def events(response: aiohttp.ClientResponse) -> list[str]:
    """The rest of an event stream, as its blank-line separated events."""
    text = (await response.read()).decode()
    return [e for e in text.split("\n\n") if e]


async def test_raw_sse_text_is_passed_through_as_it_comes_with_one_done(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    assert job["input"]["openai_input"]["stream"] is True
    await push(http, gateway, job["id"], {"output": 'data: {"n": 1}\n\ndata: {"n"'})
    response = await response_task
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    first = await response.content.readuntil(b"\n\n")
    assert first == b'data: {"n": 1}\n\n'  # live: before the job has ended
    await push(http, gateway, job["id"], {"output": ": 2}\n\ndata: [DONE]\n\n"})
    await done(http, gateway, job["id"], {"output": ["ignored: it was streamed"]})
    assert await response.read() == b'data: {"n": 2}\n\ndata: [DONE]\n\n'


async def test_the_workers_own_done_ends_the_stream_before_the_job_ends(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    await push(http, gateway, job["id"], {"output": 'data: {"n": 1}\n\ndata: [DONE]'})
    response = await response_task
    body = await asyncio.wait_for(response.read(), 10)  # the job is still IN_PROGRESS
    assert body == b'data: {"n": 1}\n\ndata: [DONE]\n\n'  # its last event ended
    await done(http, gateway, job["id"], {"output": []})


async def test_objects_and_lists_are_one_event_each_then_done(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    await push(http, gateway, job["id"], {"output": {"n": 1}})
    await push(http, gateway, job["id"], {"output": [{"n": 2}, {"n": 3}]})
    await done(http, gateway, job["id"], {"output": []})
    response = await response_task
    assert await events(response) == [
        'data: {"n":1}', 'data: {"n":2}', 'data: {"n":3}', "data: [DONE]"
    ]  # fmt: skip


async def test_a_chunk_split_by_the_gateway_is_one_event_again(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    big = {"choices": [{"delta": {"content": "é" * CHUNK_LIMIT}}]}
    await push(http, gateway, job["id"], {"output": big})
    await done(http, gateway, job["id"], {"output": []})
    got = await events(await response_task)
    assert len(got) == 2 and orjson.loads(got[0].removeprefix("data: ")) == big


@pytest.mark.parametrize("gateway_settings", [{"openai_keepalive_s": 0.2}], indirect=True)
async def test_a_queued_stream_gets_keep_alive_comments(http, gateway):
    response = await open_stream(http, gateway)  # headers come with the first keep-alive
    assert await response.content.readuntil(b"\n\n") == b": keep-alive\n\n"
    job = await worker_job(http, gateway)
    await push(http, gateway, job["id"], {"output": {"n": 1}})
    await done(http, gateway, job["id"], {"output": []})
    got = [e for e in await events(response) if not e.startswith(":")]
    assert got == ['data: {"n":1}', "data: [DONE]"]


async def test_a_stream_whose_first_chunk_is_an_error_gets_its_http_status(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    error = {"error": {"message": "model m not found", "type": "NotFoundError", "code": 404}}
    await push(http, gateway, job["id"], {"output": error})
    response = await response_task
    assert response.status == 404
    assert await response.json() == error


async def test_a_stream_that_fails_midway_ends_with_an_error_event(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    await push(http, gateway, job["id"], {"output": {"n": 1}})
    response = await response_task
    await done(http, gateway, job["id"], {"error": "RuntimeError: CUDA out of memory"})
    got = await events(response)
    assert got[0] == 'data: {"n":1}' and got[-1] == "data: [DONE]"
    error = orjson.loads(got[1].removeprefix("data: "))["error"]
    assert error["message"] == "RuntimeError: CUDA out of memory"


async def test_a_stream_request_to_a_handler_that_returns_gets_its_output(http, gateway):
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    await done(http, gateway, job["id"], {"output": [{"n": 1}, {"n": 2}]})
    assert await events(await response_task) == ['data: {"n":1}', 'data: {"n":2}', "data: [DONE]"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_hangs_up_cancels_its_job(http, gateway, stream):
    async with aiohttp.ClientSession() as client:
        body = {"model": "m", "stream": stream}
        request = asyncio.create_task(
            client.post(oai_url(gateway), json=body, headers=bearer(gateway))
        )
        job = await worker_job(http, gateway)
        if stream:
            await push(http, gateway, job["id"], {"output": {"n": 1}})
            await (await request).content.readuntil(b"\n\n")
        else:
            await asyncio.sleep(0.2)
            request.cancel()
    # the session is closed: its connection with it

    async def cancelled():
        return (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "CANCELLED"

    await eventually(cancelled, timeout=10)


@pytest.mark.parametrize("gateway_settings", [{"openai_wait_s": 0.5}], indirect=True)
async def test_past_the_longest_wait_the_answer_is_504_and_the_job_cancelled(http, gateway):
    status, headers, body = await call(http, gateway, {"model": "m"})
    assert status == 504 and body["error"]["code"] == "wait_exceeded"
    status, record = await get(http, gateway, f"status/{headers['X-Lockgate-Job-Id']}")
    assert record["status"] == "CANCELLED"


@pytest.mark.parametrize(
    "gateway_settings", [{"rate_limits": {"openai": {"concurrency": 1}}}], indirect=True
)
async def test_over_the_routes_concurrency_a_request_gets_429_with_retry_after(http, gateway):
    first = asyncio.create_task(call(http, gateway, {"model": "m"}))
    job = await worker_job(http, gateway)
    async with http.post(oai_url(gateway), json={}, headers=bearer(gateway)) as r:
        assert r.status == 429 and "Retry-After" in r.headers
        assert (await r.json())["error"]["type"] == "rate_limit_error"
    await done(http, gateway, job["id"], {"output": ANSWER})
    assert (await first)[0] == 200


@pytest.mark.parametrize(
    ("path", "route"),
    [("v1/models", "/v1/models"), ("v1/a/b", "/v1/a/b"), ("v1/", None), ("v1", None),
     ("v2/x", None), ("v1//x", None), ("", None), ("v1/a\nb", None)],
)  # fmt: skip
def test_route_of(path, route):
    assert route_of(path) == route


def test_raw_text_that_stops_mid_event_is_ended_before_done():
    framer = StreamFramer()
    assert framer.frame('data: {"n": 1}') == b'data: {"n": 1}'
    assert framer.finish() == b"\n\ndata: [DONE]\n\n"
    framer = StreamFramer()
    framer.frame("data: [DO")
    framer.frame("NE]\n")
    assert framer.finish() == b"\n"  # [DONE] was sent, cut across two chunks


def test_handler_message_reads_the_runpod_sdks_error_report():
    report = orjson.dumps({"error_type": "<class 'ValueError'>", "error_message": "bad"})
    assert handler_message(report.decode()) == "bad"
    assert handler_message("ValueError: bad") == "ValueError: bad"
    assert worker_error({"error": "a string"}) is None


async def test_a_job_failed_with_an_openai_error_object_answers_with_its_status(http, gateway):
    """lockgate's runtime fails the job of a generator that yields `{"error": {...}}`; its
    error text is then that object's JSON."""
    error = {"message": "only n=1 is supported", "type": "invalid_request_error", "code": 400}
    client = asyncio.create_task(call(http, gateway, {"model": "m", "n": 2}))
    job = await worker_job(http, gateway)
    await done(http, gateway, job["id"], {"error": orjson.dumps(error).decode()})
    status, headers, body = await client
    assert (status, body) == (400, {"error": error})
    assert "x-should-retry" not in headers


# No periodic read of the stored stream (every `poll_fallback_s`) falls into the test.
@pytest.mark.parametrize("gateway_settings", [{"poll_fallback_s": 60.0}], indirect=True)
async def test_a_live_stream_gets_its_chunks_from_the_events_without_reading_them(
    http, gateway, redis
):
    """Small chunks ride on their wake-up events: the reader reads the stored stream once
    it ends (and when a chunk is too large to carry), not once per chunk. Counted: the
    calls of the stream read script on the endpoint's keys (MONITOR)."""
    read_stream = JobStore(redis).scripts.by_name["read_stream"].sha
    key = prefix(gateway.endpoint)
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    async with monitored(redis) as small:
        await push(http, gateway, job["id"], {"output": {"n": 0}})
        response = await response_task
        assert await response.content.readuntil(b"\n\n") == b'data: {"n":0}\n\n'
        for n in range(1, 20):
            await push(http, gateway, job["id"], {"output": {"n": n}})
            chunk = await response.content.readuntil(b"\n\n")
            assert chunk == f'data: {{"n":{n}}}\n\n'.encode()
    large = {"text": "x" * 100_000}  # too large to carry: read, in its place
    async with monitored(redis) as rest_read:
        await push(http, gateway, job["id"], {"output": large})
        await push(http, gateway, job["id"], {"output": {"n": 21}})
        await done(http, gateway, job["id"], {"output": []})
        rest = await events(response)
    assert [orjson.loads(e.removeprefix("data: ")) for e in rest[:2]] == [large, {"n": 21}]
    assert rest[2:] == ["data: [DONE]"]
    assert small.count("EVALSHA", read_stream, key=key) == 0  # not one per chunk
    assert rest_read.count("EVALSHA", read_stream, key=key) >= 1  # the large chunk's read


def test_live_chunks_come_in_order_once_from_events_and_reads():
    from lockgate.gateway.openai_wire import LiveChunks

    live = LiveChunks(read_every_s=2.0, now=0.0)
    assert live.carried_chunks([(0, [b"a", b"b"]), (2, [b"c"])]) == [b"a", b"b", b"c"]
    assert not live.read_due(1.0, ended=False)
    assert live.carried_chunks([(2, [b"c"]), (3, None), (4, [b"e"])]) == []  # a repeat, a gap
    assert live.read_due(1.0, ended=False)
    # The read returns what is stored since the last read: a, b, c were handed out already.
    assert live.stored_chunks([b"a", b"b", b"c", b"d", b"e"], 0, 1.0) == [b"d", b"e"]
    assert live.carried_chunks([(4, [b"e"]), (5, [b"f"])]) == [b"f"]
    assert live.read_due(3.5, ended=False) and live.read_due(1.5, ended=True)
    assert live.stored_chunks([b"f", b"g"], 5, 3.5) == [b"g"]


async def test_a_streams_first_chunk_5xx_error_is_not_retried_by_the_sdk(http, gateway):
    """As for a plain request: a worker's 5xx answer carries `x-should-retry: false`."""
    response_task = asyncio.create_task(open_stream(http, gateway))
    job = await worker_job(http, gateway)
    error = {"error": {"message": "vLLM is down", "type": "worker_error", "code": None}}
    await push(http, gateway, job["id"], {"output": error})
    response = await response_task
    assert (response.status, response.headers.get("x-should-retry")) == (500, "false")
    assert await response.json() == error
