"""`GET /v1/endpoints/{id}/logs` in dev mode: real local worker processes (lockgate's
runtime and the runpod SDK) print, the management API serves their lines."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.dev.controlplane import LocalControlPlane
from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.manage import logbook
from lockgate.manage.loglines import (
    CROSS_STREAM_MS,
    STDERR,
    STDOUT,
    JobTracker,
    LineMaker,
    LogLine,
    LogQuery,
    job_named,
    level_of,
    unglued,
)
from lockgate.store import Registry
from lockgate.timestamps import stamp_ns
from tests.conftest import eventually
from tests.test_manage_api import dev_app

PRINTING = "tests/handlers/printing.py"
RUNPOD = "python tests/workers/runpod_echo.py"
LEVELS = "python tests/workers/runpod_levels.py"


@dataclass
class Dev:
    http: aiohttp.ClientSession
    url: str
    key: str
    plane: LocalControlPlane

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    async def create(self, endpoint_id: str, template: str, **fields: Any) -> None:
        # one worker: a second one (a slow start under load) would double the lines
        one = {"workersMin": 1, "workersMax": 1}
        body = {"id": endpoint_id, "templateId": template, **one, **fields}
        async with self.http.post(
            f"{self.url}/v1/endpoints", json=body, headers=self.headers
        ) as resp:
            assert resp.status == 200, await resp.text()

    async def run(self, endpoint_id: str, job_input: dict) -> dict:
        async with self.http.post(
            f"{self.url}/v2/{endpoint_id}/runsync?wait=60000",
            json={"input": job_input},
            headers=self.headers,
        ) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def logs(self, endpoint_id: str, key: str | None = None, **params: Any):
        headers = {"authorization": f"Bearer {key or self.key}"}
        async with self.http.get(
            f"{self.url}/v1/endpoints/{endpoint_id}/logs", params=params, headers=headers
        ) as resp:
            return resp.status, await resp.json()

    async def lines(self, endpoint_id: str, **params: Any) -> list[dict]:
        status, body = await self.logs(endpoint_id, **params)
        assert status == 200, body
        return body["lines"]


@pytest.fixture
async def dev(
    redis: Redis, redis_server: EmbeddedRedis, http: aiohttp.ClientSession
) -> AsyncIterator[Dev]:
    async with dev_app(redis_server) as (url, plane):
        key = f"lga_{secrets.token_hex(8)}"
        await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin", "jobs"]})
        yield Dev(http, url, key, plane)


async def lines_saying(dev: Dev, endpoint_id: str, text: str, **params: Any) -> list[dict]:
    async def found() -> list[dict] | None:
        lines = await dev.lines(endpoint_id, **params)
        return [x for x in lines if text in x["line"]] or None

    return await eventually(found, f"a log line with {text!r}")


# -- dev mode, lockgate's runtime ------------------------------------------------------------


async def test_a_handlers_prints_come_back_with_worker_time_stream_and_job(dev: Dev) -> None:
    await dev.create("lg-print", PRINTING)
    started = time.time()
    job = await dev.run("lg-print", {"say": "tulip"})
    assert job["status"] == "COMPLETED", job

    [out] = await lines_saying(dev, "lg-print", "stdout says tulip")
    [err] = await lines_saying(dev, "lg-print", "stderr says tulip")
    assert out["stream"] == "stdout" and err["stream"] == "stderr"
    assert out["job"] == err["job"] == job["id"]
    assert out["worker"].startswith("lg-print-") and out["worker"] == err["worker"]
    assert out["ts"].endswith("Z") and len(out["ts"]) == len("2026-11-23T00:50:00.123Z")
    assert (started - 1) * 1000 < _epoch(out["ts"]) < (time.time() + 1) * 1000
    # the runtime's own lines name the job too; the loading line names none
    job_lines = await dev.lines("lg-print", job=job["id"])
    assert any(f"job {job['id']} completed" in x["line"] for x in job_lines)
    assert all(x["job"] == job["id"] for x in job_lines)
    [loading] = await lines_saying(dev, "lg-print", "printing handler loading")
    assert loading["job"] is None


async def test_a_failing_jobs_traceback_is_found_by_its_job_id(dev: Dev) -> None:
    await dev.create("lg-fail", PRINTING)
    job = await dev.run("lg-fail", {"say": "boom", "fail": True})
    assert job["status"] == "FAILED", job
    await lines_saying(dev, "lg-fail", "failed", job=job["id"])
    texts = [x["line"] for x in await dev.lines("lg-fail", job=job["id"])]
    assert any("Traceback" in t for t in texts), texts
    assert any("RuntimeError: failing on purpose: boom" in t for t in texts), texts


async def test_tail_since_worker_and_job_filter_lines(dev: Dev) -> None:
    await dev.create("lg-filter", PRINTING, workersMin=1, workersMax=1)
    first = await dev.run("lg-filter", {"say": "one"})
    await lines_saying(dev, "lg-filter", f"job {first['id']} completed")
    everything = await dev.lines("lg-filter")
    middle = everything[-1]["ts"]
    await asyncio.sleep(0.01)  # the next lines are written strictly later (ms resolution)
    second = await dev.run("lg-filter", {"say": "two"})
    await lines_saying(dev, "lg-filter", f"job {second['id']} completed")

    assert len(await dev.lines("lg-filter", tail=2)) == 2
    assert (await dev.lines("lg-filter", tail=1)) == (await dev.lines("lg-filter"))[-1:]
    after = await dev.lines("lg-filter", since=middle)
    assert after and not any("says one" in x["line"] for x in after)
    assert any("says two" in x["line"] for x in after)
    since_ms = str(_epoch(middle))
    assert await dev.lines("lg-filter", since=since_ms) == after
    by_job = await dev.lines("lg-filter", job=first["id"])
    assert by_job and all(x["job"] == first["id"] for x in by_job)
    assert not any(x["job"] == second["id"] for x in by_job)
    worker = everything[0]["worker"]
    assert all(x["worker"] == worker for x in await dev.lines("lg-filter", worker=worker))
    assert await dev.lines("lg-filter", worker="lg-filter-nobody") == []


async def test_follow_streams_a_line_printed_after_the_request(dev: Dev) -> None:
    await dev.create("lg-follow", PRINTING)
    await dev.run("lg-follow", {"say": "before"})
    url = f"{dev.url}/v1/endpoints/lg-follow/logs?follow=true&tail=5"
    async with dev.http.get(url, headers=dev.headers) as resp:
        assert resp.status == 200
        assert resp.content_type == "text/event-stream"
        job = asyncio.create_task(dev.run("lg-follow", {"say": "after"}))
        seen = await asyncio.wait_for(_event_with(resp, "stdout says after"), 60)
        assert seen["job"] == (await job)["id"]
        assert seen["stream"] == STDOUT and seen["worker"].startswith("lg-follow-")
        book = dev.plane.logs.book("lg-follow")
        assert book.followers, "following while the client reads"

    async def let_go() -> bool:
        return not book.followers

    await eventually(let_go, "the follower removed once the client left")


async def test_runpod_sdk_lines_carry_the_job_id(dev: Dev) -> None:
    await dev.create("lg-runpod", RUNPOD)
    job = await dev.run("lg-runpod", {"word": "x"})
    assert job["status"] == "COMPLETED", job
    lines = await lines_saying(dev, "lg-runpod", '"requestId"', job=job["id"])
    assert all(x["job"] == job["id"] for x in lines)


async def test_a_worker_that_exits_at_once_can_still_be_read(dev: Dev) -> None:
    crash = "python -c \"print('cannot load the model', flush=True); raise SystemExit(3)\""
    await dev.create("lg-crash", crash)
    lines = await lines_saying(dev, "lg-crash", "cannot load the model")
    gone = lines[0]["worker"]
    pool = dev.plane._endpoints["lg-crash"].workers.pool

    async def exited() -> bool:
        return gone not in pool.workers  # reaped

    await eventually(exited, f"worker {gone} to exit")
    assert [x["line"] for x in await dev.lines("lg-crash", worker=gone)] == [
        "cannot load the model"
    ]


async def test_bad_parameters_unknown_endpoints_and_wrong_keys_are_refused(dev: Dev) -> None:
    await dev.create("lg-refuse", PRINTING, workersMin=0)
    for params, name in [
        ({"tail": "-1"}, "tail"),
        ({"tail": "5001"}, "tail"),
        ({"tail": "many"}, "tail"),
        ({"since": "yesterday"}, "since"),
        ({"follow": "maybe"}, "follow"),
        ({"until": "soon"}, "until"),
        ({"level": "LOUD"}, "level"),
    ]:
        status, body = await dev.logs("lg-refuse", **params)
        assert status == 400 and body["error"].startswith(f"{name}:"), (params, body)
    status, body = await dev.logs("lg-nobody")
    assert status == 404 and "lg-nobody" in body["error"]
    assert (await dev.logs("lg-refuse", key="lg_wrong"))[0] == 401


async def test_search_level_and_until_over_http(dev: Dev) -> None:
    """`q`, `level` and `until` (issue 50, item 10), and the runpod SDK's JSON lines read
    as `level` and `message`."""
    await dev.create("lg-levels", LEVELS)
    alpha = await dev.run("lg-levels", {"say": "alpha"})
    [error] = await lines_saying(dev, "lg-levels", "error says alpha")
    assert (error["level"], error["message"], error["job"]) == (
        "ERROR",
        "error says alpha",
        alpha["id"],
    )
    assert error["line"].startswith("{")  # the line as written stays
    [printed] = await lines_saying(dev, "lg-levels", "print says alpha")
    assert (printed["level"], printed["message"]) == (None, "print says alpha")
    until = printed["ts"]
    await asyncio.sleep(0.01)  # the next lines are written strictly later (ms resolution)
    beta = await dev.run("lg-levels", {"say": "beta"})
    await lines_saying(dev, "lg-levels", "print says beta")

    found = await dev.lines("lg-levels", q="SAYS BETA")  # any case
    assert {x["message"] for x in found} >= {"info says beta", "error says beta"}
    assert all("says beta" in x["line"] for x in found)
    warned = await dev.lines("lg-levels", level="warning", q="says")  # WARNING reads as WARN
    assert sorted(x["message"] for x in warned) == [
        "error says alpha", "error says beta", "warn says alpha", "warn says beta",
    ]  # fmt: skip
    before = await dev.lines("lg-levels", until=until)
    assert any("print says alpha" in x["line"] for x in before)
    assert not any(x["job"] == beta["id"] for x in before)


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        ('{"requestId": "j-1", "message": "boom", "level": "ERROR"}', "ERROR", "boom"),
        ('{"requestId": null, "message": "hi", "level": "WARN"}', "WARN", "hi"),
        ('{"requestId": "j", "message": "tip", "level": "TIP"}', "INFO", "tip"),
        ("INFO   | job-123 | Started.", "INFO", "Started."),
        ("DEBUG  | rp_debugger | x", "DEBUG", "x"),
        ("WARN   | no job here", "WARN", "no job here"),
        ("2026-12-06 20:36:17,874 WARNING  lockgate.worker | slow", "WARN", None),
        ("RuntimeError: failing on purpose", None, None),
        ('{"level": 3, "message": "m"}', None, None),
        ("{not json", None, None),
        ("a line that goes on and on, long past any logging prefix, then says ERROR", None, None),
    ],
)
def test_a_lines_level_and_message(line: str, level: str | None, message: str | None) -> None:
    assert level_of(line) == (level, line if message is None else message)


def test_a_query_keeps_lines_by_text_level_and_time() -> None:
    lines = [
        LogLine(1, "w", STDOUT, '{"requestId": "j", "message": "Loaded", "level": "INFO"}'),
        LogLine(2, "w", STDERR, "Traceback (most recent call last):"),  # no level: ERROR
        LogLine(3, "w", STDOUT, "plain print"),  # no level: INFO
        LogLine(4, "w", STDOUT, "WARN   | j | disk is slow"),
    ]
    texts = lambda q: [x.line for x in q.select(lines)]  # noqa: E731
    assert texts(LogQuery(level="WARN")) == [lines[1].line, lines[3].line]
    assert texts(LogQuery(text="loaded")) == [lines[0].line]
    assert texts(LogQuery(since=1, until=3)) == [lines[1].line, lines[2].line]
    assert LogQuery(level="ERROR").narrowed and not LogQuery(worker="w").narrowed


# -- the buffer and the job attribution, without processes -----------------------------------


def test_a_workers_buffer_keeps_its_last_lines_cut_to_length(monkeypatch) -> None:
    monkeypatch.setattr(logbook, "LINES_PER_WORKER", 3)
    book = logbook.EndpointLogs()
    for n in range(10):
        book.add("w1", STDOUT, f"line {n}\n")
    book.add("w1", STDOUT, "x" * 100_000)
    lines = book.select(logbook.LogQuery(tail=5000))
    assert [x.line for x in lines[:2]] == ["line 8", "line 9"]
    assert len(lines[2].line) < 8300 and lines[2].line.endswith("(100000 characters, cut)")


def test_a_workers_buffer_keeps_at_most_so_many_characters(monkeypatch) -> None:
    monkeypatch.setattr(logbook, "CHARS_PER_WORKER", 25)
    book = logbook.EndpointLogs()
    for n in range(10):
        book.add("w1", STDOUT, f"line {n:04d}")  # 9 characters each
    assert [x.line for x in book.select(logbook.LogQuery())] == ["line 0008", "line 0009"]
    assert book.workers["w1"].chars == 18


def test_a_slow_follower_loses_lines_and_is_told_how_many() -> None:
    book = logbook.EndpointLogs()
    follower = logbook.Follower(logbook.LogQuery(), size=2)
    book.followers.add(follower)
    for n in range(5):
        book.add("w1", STDOUT, f"line {n}")
    assert follower.queue.qsize() == 2
    assert follower.take_dropped() == 3 and follower.take_dropped() == 0


def test_exited_workers_are_forgotten_after_a_while(monkeypatch) -> None:
    book = logbook.EndpointLogs()
    book.add("w1", STDOUT, "bye")
    book.add("w1", "stdout", None)
    book.add("w1", "stderr", None)
    assert book.select(logbook.LogQuery())
    monkeypatch.setattr(logbook, "KEEP_EXITED_S", -1.0)
    assert book.select(logbook.LogQuery()) == []


@pytest.mark.parametrize(
    ("line", "job", "ends"),
    [
        ('{"requestId": "j-1", "message": "Handling Job", "level": "DEBUG"}', "j-1", False),
        ('{"requestId": "j-1", "message": "Finished Job", "level": "DEBUG"}', "j-1", True),
        ('{"requestId": null, "message": "Worker started", "level": "INFO"}', None, False),
        ("INFO   | sync-abc-123 | Finished Job", "sync-abc-123", True),
        ("2026-11-23 00:50:00,123 INFO    lockgate.worker | job j-2 started", "j-2", False),
        ("1 INFO    lockgate.worker | job j-2 completed in 3 ms", "j-2", True),
        ("2026-11-23 00:50:01,123 INFO    lockgate.worker | job j-2 stopped; its r", "j-2", True),
        ("hello | world | again", None, False),
        ("plain print", None, False),
    ],
)
def test_the_job_a_line_names(line: str, job: str | None, ends: bool) -> None:
    assert job_named(line) == (job, ends)


def test_unnamed_lines_go_to_the_only_job_in_hand() -> None:
    tracker = JobTracker()
    seq = [
        "loading",
        "x lockgate.worker | job a started",
        "print in a",
        "x lockgate.worker | job b started",
        "print in a or b",
        "x lockgate.worker | job a completed in 1 ms",
        "print in b",
        "x lockgate.worker | job b failed in 1 ms",
        "after",
    ]
    assert [tracker.job_of(t) for t in seq] == [None, "a", "a", "b", None, "a", "b", "b", None]
    assert LineMaker("w").make("x\n").line == "x"


def test_a_line_read_just_after_its_jobs_end_on_the_other_stream_is_that_jobs() -> None:
    """stdout and stderr are two pipes: a handler's print written before the job's end line
    (the runtime's, on stderr) may be read just after it."""
    maker = LineMaker("w")
    maker.make("x lockgate.worker | job a started", STDERR, 1_000)
    maker.make("x lockgate.worker | job a completed in 1 ms", STDERR, 1_001)
    assert maker.make("print in a", STDOUT, 1_050).job == "a"  # the other stream, soon
    assert maker.make("said after a", STDERR, 1_050).job is None  # its own stream: in order
    assert maker.make("long after", STDOUT, 1_001 + CROSS_STREAM_MS + 1).job is None


async def _event_with(resp: aiohttp.ClientResponse, text: str) -> dict:
    """The first SSE line event whose line contains `text`."""
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("data: "):
            event = json.loads(line[len("data: ") :])
            if text in event["line"]:
                return event
    raise AssertionError(f"the stream ended before a line with {text!r}")


def _epoch(iso: str) -> float:
    from lockgate.manage.loglines import parse_time

    return parse_time(iso, "ts")


# -- Kubernetes pod log text, without a cluster (the node test reads real pods) ----------------


def test_timestamped_pod_log_text_becomes_lines_of_that_pod() -> None:
    from lockgate.kube.podlogs import parse_pod_log

    text = (
        "2026-11-23T00:50:00.123456789Z 2026 INFO    lockgate.worker | job j-9 started\n"
        "2026-11-23T00:50:00.200000000Z hello from the handler\n"
        "2026-11-23T00:50:01Z 2026 INFO    lockgate.worker | job j-9 completed in 5 ms\n"
    )
    lines = parse_pod_log(LineMaker("echo-workers-abc"), text)
    assert [x.to_json()["ts"] for x in lines] == [
        "2026-11-23T00:50:00.123Z",
        "2026-11-23T00:50:00.200Z",
        "2026-11-23T00:50:01.000Z",
    ]
    assert [x.job for x in lines] == ["j-9", "j-9", "j-9"]
    assert lines[1].line == "hello from the handler" and lines[1].worker == "echo-workers-abc"


def test_pod_log_options_follow_the_query() -> None:
    from lockgate.kube.podlogs import log_options
    from lockgate.manage.loglines import LogQuery

    now = 1_800_000_000_000
    assert log_options(LogQuery(tail=7), now) == {
        "container": "worker", "timestamps": True, "tail_lines": 7,
    }  # fmt: skip
    since = log_options(LogQuery(since=now - 2500), now)
    assert since["since_seconds"] == 3 and since["tail_lines"] == 500
    assert log_options(LogQuery(job="j", tail=3), now)["tail_lines"] == 5000


def test_kubelet_timestamps_keep_their_nanoseconds() -> None:
    """A followed pod log tells lines apart by these (a job's start and end lines often
    share a millisecond): the fraction's digits, however many, are nanoseconds."""
    base = 1_795_395_000 * 10**9  # 2026-11-23T00:50:00Z
    assert stamp_ns("2026-11-23T00:50:00.123456789Z") == base + 123_456_789
    assert stamp_ns("2026-11-23T00:50:00.1234Z") == base + 123_400_000
    assert stamp_ns("2026-11-23T00:50:00Z") == base
    assert stamp_ns("2026-11-23T00:50:00.123456789Z") > stamp_ns("2026-11-23T00:50:00.123456Z")
    for bad in ("", "x", "2026-11-23T00:50:00.12a4Z"):
        assert stamp_ns(bad) is None


@pytest.mark.parametrize(
    ("raw", "lines"),
    [
        ('{"level": "DEBUG", "message": "a"}{"level": "INFO", "message": "b"}',
         ['{"level": "DEBUG", "message": "a"}', '{"level": "INFO", "message": "b"}']),
        ('{"message": "}{"}{"n": 2}\n', ['{"message": "}{"}', '{"n": 2}']),
        ('{"a": 1} {"b": 2}', ['{"a": 1} {"b": 2}']),  # not back to back: one line
        ("{not}{json}", ["{not}{json}"]),
        ("plain }{ text", ["plain }{ text"]),
        ('{"a": 1}', ['{"a": 1}']),
    ],
)  # fmt: skip
def test_json_lines_two_threads_printed_into_one_are_told_apart(raw: str, lines: list[str]):
    """The runpod SDK's heartbeat thread and job loop both `print` JSON; print writes the
    text and the line break apart, so two can land as `{…}{…}`: each is its own line, with
    its level (seen in a loaded test run)."""
    assert unglued(raw) == lines
    book = logbook.EndpointLogs()
    book.add("w1", STDOUT, raw)
    kept = [line.line for line in book.select(LogQuery(tail=10))]
    assert kept == lines
