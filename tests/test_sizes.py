"""Size limits: request bodies (413 before the body is read whole) and worker results."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.test_job_api import get, submit, take

CAP = 3 * 1024 * 1024


GATEWAY_SETTINGS = {"max_result_bytes": CAP}


async def test_a_result_over_the_cap_fails_the_job_with_a_clear_error(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    url = gateway.job_url(f"job-done/w1/{job['id']}")
    big = {"output": "x" * (CAP + 1)}
    async with http.post(url, json=big, headers=gateway.worker_headers()) as r:
        assert r.status == 200 and (await r.json())["accepted"] is True
    status, body = await get(http, gateway, f"status/{job['id']}")
    assert status == 200 and body["status"] == "FAILED"
    assert f"{CAP} byte limit" in body["error"] and "output" not in body


async def test_a_result_under_the_cap_completes(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    url = gateway.job_url(f"job-done/w1/{job['id']}")
    async with http.post(url, json={"output": "x" * 1000}, headers=gateway.worker_headers()) as r:
        assert r.status == 200
    assert (await get(http, gateway, f"status/{job['id']}"))[1]["status"] == "COMPLETED"


@pytest.mark.parametrize(("route", "mb"), [("run", 10), ("runsync", 20)])
async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(
    gateway, route, mb
):
    """The answer comes while the client has sent only its headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.settings.port)
    head = (
        f"POST /v2/echo/{route} HTTP/1.1\r\nHost: x\r\nauthorization: {gateway.client_key}\r\n"
        f"content-type: application/json\r\ncontent-length: {mb * 1024 * 1024 + 1}\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    assert b" 413 " in status_line


async def test_a_body_is_not_read_for_an_unknown_key(gateway):
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.settings.port)
    head = (
        "POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nauthorization: wrong\r\n"
        "content-type: application/json\r\ncontent-length: 1000000\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    assert b" 401 " in status_line


# -- stream chunks: outputs over 1 MB are split (unit tests in test_stream_chunks.py)


async def test_a_streamed_output_over_1_mb_is_read_back_in_chunks(http, gateway):
    job = await submit(http, gateway, {"input": {}})
    await take(http, gateway)
    url = gateway.job_url(f"job-stream/w1/{job['id']}")
    text = "y" * (2 * 1024 * 1024 + 10)
    async with http.post(url, json={"output": text}, headers=gateway.worker_headers()) as r:
        assert r.status == 200
    async with http.post(url, json={"output": {"t": text}}, headers=gateway.worker_headers()) as r:
        assert r.status == 200  # not a string: cut into pieces of its JSON text
    status, body = await get(http, gateway, f"stream/{job['id']}")
    assert status == 200 and len(body["stream"]) == 6
    assert "".join(c["output"] for c in body["stream"][:3]) == text
    assert orjson.loads("".join(c["output"] for c in body["stream"][3:])) == {"t": text}
