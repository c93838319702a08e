"""Tested before it takes traffic (issue 48, item 3) in dev mode, over real HTTP on loopback:
dev mode's app building a real git repository (a `file://` clone) whose `.runpod/tests.json`
runs on a canary worker process of the new checkout. A build whose tests pass becomes the
release the workers run; one whose test fails is TEST_FAILED naming the test and why, and
the workers keep serving the release before it. The canary and everything of it is gone
after either; the endpoint's job counts never include a test's job."""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from lockgate.dev.canary import canary_entry, canary_id, canary_spec
from lockgate.dev.hub_tests import CaseResult, failed_test, failed_test_error
from lockgate.manage.listing import EndpointQuery
from lockgate.models.build import FailedTest
from lockgate.models.endpoint import EndpointSpec
from lockgate.models.hub import HubFileError, HubTest, parse_tests
from lockgate.models.verdicts import http_result, unanswered
from lockgate.store import NewJob, Registry
from lockgate.store.keys import ENDPOINT_ID_RE
from tests.conftest import eventually
from tests.devproc import DevProcess
from tests.gitrepo import commit, make_repo
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    api,
    jobs_key,
    local_api,
)
from tests.test_v2_builds import BUILT_HANDLER, ECHO, ended, first_build, with_source
from tests.test_v2_serverless import v2
from tests.test_v2_workers import read_events

# BUILT_HANDLER answering its revision; revision 2 fails every job, revision 3 sleeps when
# asked to (a test out of its time)
HANDLERS = {
    1: '{"built": job["input"]["v"], "rev": 1}',
    2: '(_ for _ in ()).throw(ValueError("revision 2 is broken"))',
    3: '(__import__("time").sleep(job["input"].get("sleep", 0)), {"rev": 3})[1]',
}


def handler(rev: int) -> str:
    return BUILT_HANDLER.replace('{"built": job["input"]["v"]}', HANDLERS[rev])


def runpod_tests(*tests: dict[str, Any]) -> str:
    return json.dumps({"tests": list(tests), "config": {"env": [{"key": "T", "value": "1"}]}})


BASIC = {"name": "basic", "input": {"v": "t"}, "timeout": 60_000}


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_build_is_tested_on_a_canary_before_it_takes_traffic(
    api: Api, tmp_path: Path, jobs_key: str
) -> None:
    repo = make_repo(
        tmp_path / "tested",
        {"handler.py": handler(1), ".runpod/tests.json": runpod_tests(BASIC)},
        "rev 1",
    )
    ep = await with_source(api, f"file://{repo}", fields={"workers": {"min": 1, "max": 1}})
    url = ep["requestUrls"]["runSync"] + "?wait=60000"
    user_jobs = 0

    async def run() -> dict[str, Any]:
        nonlocal user_jobs
        async with api.http.post(
            url, json={"input": {"v": "x"}}, headers={"authorization": jobs_key}
        ) as resp:
            job = await resp.json()
        assert job["status"] == "COMPLETED", job
        user_jobs += 1
        return job["output"]

    async def build() -> dict[str, Any]:
        status, _, asked = await v2(api, "POST", f"/{ep['id']}/builds")
        assert status == 201, asked
        return await ended(api, ep["id"], asked["id"])

    async def releases() -> list[dict[str, Any]]:
        status, _, page = await v2(api, "GET", f"/{ep['id']}/releases")
        assert status == 200, page
        return page["releases"]

    async def no_canary_left() -> None:
        registry = api.plane.gw.registry
        assert [i for i in await registry.endpoint_ids() if i.startswith("canary-")] == []
        names = [r.get("name", "") for r in (await registry.list_keys()).values()]
        assert [n for n in names if n.startswith("canary")] == []

    # the create's own build (CREATE): the tests pass, COMPLETED, a GIT_BUILD release, the
    # workers run it
    one = await ended(api, ep["id"], (await first_build(api, ep["id"]))["id"])
    assert one["status"] == "COMPLETED", one
    assert (one["error"], one["failedTest"]) == (None, None)
    assert await _runs(run, {"built": "x", "rev": 1})
    newest = (await releases())[0]
    assert (newest["source"], newest["buildId"]) == ("GIT_BUILD", one["id"])
    text = "\n".join(await _lines(api, ep["id"], one["id"]))
    assert "testing on a canary worker" in text and "test 'basic' passed (COMPLETED" in text
    await no_canary_left()

    # a commit that breaks the test: TEST_FAILED naming it, the first build keeps serving
    commit(repo, {"handler.py": handler(2)}, "rev 2")
    two = await build()
    assert two["status"] == "TEST_FAILED", two
    assert two["error"] == "test 'basic' failed: job FAILED: ValueError: revision 2 is broken"
    assert two["failedTest"] == {
        "name": "basic",
        "reason": "job FAILED: ValueError: revision 2 is broken",
    }
    text = "\n".join(await _lines(api, ep["id"], two["id"]))
    assert "build test_failed: test 'basic' failed: job FAILED" in text
    assert "revision 2 is broken" in text  # the canary's own traceback, in the build's log
    assert (await releases())[0]["id"] == newest["id"]  # no release, no rollback
    assert await run() == {"built": "x", "rev": 1}
    await no_canary_left()

    # a test out of its time: TEST_FAILED "timed out after 1 s"
    slow = {"name": "slow", "input": {"sleep": 30}, "timeout": 1000}
    commit(repo, {"handler.py": handler(3), ".runpod/tests.json": runpod_tests(slow)}, "rev 3")
    three = await build()
    assert three["status"] == "TEST_FAILED", three
    assert three["error"] == "test 'slow' failed: timed out after 1 s"
    assert await run() == {"built": "x", "rev": 1}
    await no_canary_left()

    # a checkout whose worker cannot start: TEST_FAILED at its first failed start
    broken_files = {"handler.py": "import no_such_module_here\n"}
    commit(repo, {**broken_files, ".runpod/tests.json": runpod_tests(BASIC)}, "rev 3b")
    broken = await build()
    assert broken["status"] == "TEST_FAILED", broken
    assert broken["error"].startswith(
        "test 'basic' failed: the canary worker did not start: workers crash at start (exit code 1"
    ), broken
    assert "No module named 'no_such_module_here'" in broken["error"], broken
    assert await run() == {"built": "x", "rev": 1}
    await no_canary_left()

    # an unusable tests.json fails the build itself, saying why
    commit(repo, {".runpod/tests.json": '{"tests": []}'}, "rev 4")
    four = await build()
    assert four["status"] == "FAILED", four
    assert "tests.json" in four["error"], four
    assert (await releases())[0]["id"] == newest["id"]

    # the endpoint's job counts hold the user's jobs alone, never a test's
    health_url = ep["requestUrls"]["runSync"].rsplit("/", 1)[0] + "/health"
    async with api.http.get(health_url, headers={"authorization": jobs_key}) as resp:
        health = await resp.json()
    assert (health["jobs"]["completed"], health["jobs"]["failed"]) == (user_jobs, 0), health


async def _runs(run: Any, output: dict[str, Any]) -> bool:
    """Whether the endpoint's jobs answer `output`, within a minute (the rolling rule)."""

    async def same() -> bool:
        return await run() == output

    return await eventually(same, timeout=60)


async def _lines(api: Api, endpoint_id: str, build_id: str) -> list[str]:
    """The ended build's log lines (Server-Sent Events: the stream ends with the log)."""
    logs = f"{api.url}/v2/serverless/{endpoint_id}/builds/{build_id}/logs?tail=5000"
    async with api.http.get(logs, headers={"authorization": f"Bearer {api.key}"}) as resp:
        assert resp.status == 200
        events = await asyncio.wait_for(read_events(resp), 30)
    return [e["data"]["line"] for e in events]


# -- the pure parts ----------------------------------------------------------------------------


def test_a_failed_test_says_why_as_the_build_names_it() -> None:
    test = HubTest(name="basic", input={}, timeout=30_000)
    ok = CaseResult("basic", True, "COMPLETED", "", 0.5)
    assert failed_test(test, ok) is None
    failed = failed_test(test, CaseResult("basic", False, "FAILED", "ValueError: no", 0.5))
    assert failed == FailedTest(name="basic", reason="job FAILED: ValueError: no")
    assert failed_test_error(failed) == "test 'basic' failed: job FAILED: ValueError: no"
    late = CaseResult("basic", False, "TIMED_OUT", "not final within 30 s", 30.0, True)
    assert failed_test(test, late) == FailedTest(name="basic", reason="timed out after 30 s")
    # the job's own executionTimeout is the job's status, not the test's time
    timed = failed_test(test, CaseResult("basic", False, "TIMED_OUT", "", 2.0))
    assert timed == FailedTest(name="basic", reason="job TIMED_OUT")
    refused = failed_test(test, CaseResult("basic", False, "HTTP 400", "bad input", 0.1))
    assert refused == FailedTest(name="basic", reason="the job API answered HTTP 400: bad input")


def test_a_load_balancing_test_passes_on_200_alone_and_says_what_else_came() -> None:
    test = HubTest(name="chat", input={"q": 1}, timeout=30_000)
    assert (test.method, test.path) == ("POST", "/")  # lockgate's defaults
    assert http_result(test, 200, b"", 0.2).passed
    for status in (201, 204, 404, 500, 503):  # RunPod says 200: no other 2xx
        assert not http_result(test, status, b"", 0.2).passed
    long_body = b'{"error": "broken"}\n' + b"x" * 1000
    failed = failed_test(test, http_result(test, 500, long_body, 0.2))
    assert failed is not None and failed.reason.startswith(
        'the load-balancing route answered HTTP 500: {"error": "broken"} xxx'
    )
    assert len(failed.reason) < 400  # the body's start, on one line
    late = failed_test(test, unanswered(test, 30.0))
    assert late == FailedTest(name="chat", reason="timed out after 30 s")
    refused = failed_test(test, unanswered(test, 0.1, "ClientConnectorError: refused"))
    assert refused == FailedTest(
        name="chat", reason="the load-balancing route did not answer: ClientConnectorError: refused"
    )
    with pytest.raises(HubFileError, match=r"tests\.json: tests\[0\]\.path"):
        parse_tests('{"tests": [{"name": "x", "input": {}, "path": "no-slash"}]}')
    with pytest.raises(HubFileError, match=r"tests\.json: tests\[0\]\.method"):
        parse_tests('{"tests": [{"name": "x", "input": {}, "method": "TRACE"}]}')


def test_a_canary_is_a_hidden_endpoint_of_one_worker() -> None:
    assert canary_id("build_k3v9x2mqa1b2") == "canary-k3v9x2mqa1b2"
    assert ENDPOINT_ID_RE.fullmatch(canary_id("build_k3v9x2mqa1b2"))
    spec = canary_spec(EndpointSpec(workersMin=3, workersMax=9))
    assert (spec.workersMin, spec.workersMax, spec.warmup) == (1, 1, None)


# -- `lockgate dev` as a user runs it --------------------------------------------------------


@pytest.mark.asyncio
async def test_lockgate_dev_tests_builds_and_a_stop_mid_test_leaves_no_canary(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """The real command: a build whose test passes runs; one whose test fails does not,
    the build saying which; a stop while a test runs ends the build FAILED with the canary
    gone (its process, and after a restart no trace of it in lockgate's Redis)."""
    data = tmp_path / "data"
    repo = make_repo(
        tmp_path / "repo",
        {"handler.py": handler(1), ".runpod/tests.json": runpod_tests(BASIC)},
        "rev 1",
    )
    admin: dict[str, str] = {}

    async def call(dev: DevProcess, method: str, path: str, body: Any = None) -> Any:
        url = f"{dev.url}/v2/serverless/{dev.endpoint}{path}"
        async with http.request(method, url, json=body, headers=admin) as resp:
            assert resp.status < 300, await resp.text()
            return await resp.json(content_type=None)

    async def build(dev: DevProcess, *live: str, asked: dict[str, Any] | None = None) -> Any:
        """`asked` (default: a build asked for now) once it has ended, or is in `live`."""
        asked = asked or await call(dev, "POST", "/builds")

        async def ended() -> dict[str, Any] | None:
            got = await call(dev, "GET", f"/builds/{asked['id']}")
            return got if got["status"] not in ("PENDING", "BUILDING", *live) else None

        return await eventually(ended, timeout=90)

    async def run(dev: DevProcess) -> Any:
        url = f"{dev.url}/v2/{dev.endpoint}/runsync?wait=60000"
        body = {"input": {"v": "x"}}
        async with http.post(url, json=body, headers=dev.headers()) as resp:
            job = await resp.json()
        assert job["status"] == "COMPLETED", job
        return job["output"]

    with DevProcess(ECHO, data_dir=data) as dev:
        admin["authorization"] = f"Bearer {dev.key}"
        await call(dev, "PATCH", "", {"source": {"git": {"url": f"file://{repo}"}}})
        [given] = (await call(dev, "GET", "/builds"))["builds"]  # the source given: built
        one = await build(dev, "TESTING", asked=given)
        assert one["status"] == "COMPLETED", one

        async def runs_rev_1() -> bool:
            return await run(dev) == {"built": "x", "rev": 1}

        await eventually(runs_rev_1, timeout=60)
        commit(repo, {"handler.py": handler(2)}, "rev 2")
        two = await build(dev, "TESTING")
        assert two["status"] == "TEST_FAILED", two
        assert two["failedTest"]["name"] == "basic", two
        assert await run(dev) == {"built": "x", "rev": 1}

        slow = {"name": "slow", "input": {"sleep": 300}, "timeout": 600_000}
        commit(repo, {"handler.py": handler(3), ".runpod/tests.json": runpod_tests(slow)}, "rev 3")
        three = await build(dev)  # returns once TESTING
        assert three["status"] == "TESTING", three
        dev.wait_for(r"worker canary-[a-z0-9]+-[0-9a-f]+ started", timeout_s=60)
        assert await asyncio.to_thread(dev.stop) == 0
    with DevProcess(ECHO, data_dir=data) as dev:
        admin["authorization"] = f"Bearer {dev.key}"
        stopped = await call(dev, "GET", f"/builds/{three['id']}")
        assert (stopped["status"], stopped["error"]) == ("FAILED", "lockgate dev stopped")
        redis = Redis.from_url(dev.redis_url)
        try:
            ids = await Registry(redis).endpoint_ids()
        finally:
            await redis.aclose()
        assert [i for i in ids if i.startswith("canary-")] == []


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_canary_left_by_a_killed_run_is_removed_at_the_next_start(api: Api) -> None:
    """`lockgate dev` killed mid-test (no cleanup ran) leaves a canary's entry and jobs in
    its Redis: the next start removes them, and never serves it as an endpoint."""
    plane, registry = api.plane, api.plane.gw.registry
    canary = canary_id("build_k3v9x2mqa1b2")
    spec = canary_spec(EndpointSpec())
    await registry.put_endpoint(canary, canary_entry(canary, spec, "http://x/v2/" + canary))
    await plane.gw.store.submit(canary, NewJob(id="job-1", input=b'{"v": 1}', ttl_ms=60_000))
    assert (await plane.gw.store.snapshot(canary)).in_queue == 1
    await plane.resume()
    assert canary not in await registry.endpoint_ids()
    assert (await plane.gw.store.snapshot(canary)).in_queue == 0
    assert all(not r.id.startswith("canary-") for r in (await plane.page(EndpointQuery())).items)


# A load-balancing worker of its own HTTP server (the standard library's): /ping is 200;
# revision 1 answers every POST 200 with what it got, revision 2 answers 500.
LB_HANDLER = """import json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REV = {rev}


class Worker(BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer(200 if self.path == "/ping" else 404, {{"rev": REV}})

    def do_POST(self):
        got = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or "null")
        if REV == 2:
            self.answer(500, {{"error": "revision 2 is broken"}})
        else:
            self.answer(200, {{"rev": REV, "path": self.path, "got": got}})

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Worker).serve_forever()
"""
LB_TEST = {"name": "check", "input": {"v": "t"}, "path": "/check", "timeout": 60_000}


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_load_balancing_endpoints_build_is_tested_through_its_route(
    api: Api, tmp_path: Path, jobs_key: str
) -> None:
    """A load-balancing endpoint's test is an HTTP request (its input the JSON body, to its
    `path`) through the canary's load-balancing route: an answer 200 passes and the build
    runs; a 500 is TEST_FAILED naming the test, the status and the body's start, and the
    endpoint keeps answering from the first build; no canary is left either way."""
    files = {"handler.py": LB_HANDLER.format(rev=1), ".runpod/tests.json": runpod_tests(LB_TEST)}
    repo = make_repo(tmp_path / "lb", files, "an LB worker's tests")
    fields = {
        "type": "LOAD_BALANCER",
        "workers": {"min": 0, "max": 1},
        "scaling": {"type": "REQUEST_COUNT", "requestCount": 1},
    }
    ep = await with_source(api, f"file://{repo}", fields=fields)

    async def build() -> dict[str, Any]:
        status, _, asked = await v2(api, "POST", f"/{ep['id']}/builds")
        assert status == 201, asked
        return await ended(api, ep["id"], asked["id"])

    async def user_request() -> tuple[int, Any]:
        url = f"{api.url}/lb/{ep['id']}/mine"
        async with api.http.post(url, json={"v": "u"}, headers={"authorization": jobs_key}) as r:
            return r.status, await r.json(content_type=None)

    async def no_canary_left() -> None:
        ids = await api.plane.gw.registry.endpoint_ids()
        assert [i for i in ids if i.startswith("canary-")] == []

    one = await ended(api, ep["id"], (await first_build(api, ep["id"]))["id"])  # the create's
    assert one["status"] == "COMPLETED", (one, await _lines(api, ep["id"], one["id"]))
    text = "\n".join(await _lines(api, ep["id"], one["id"]))
    assert "testing on a canary worker" in text and "test 'check' passed (HTTP 200" in text, text
    assert await _answers(user_request, {"rev": 1, "path": "/mine", "got": {"v": "u"}})
    await no_canary_left()

    commit(repo, {"handler.py": LB_HANDLER.format(rev=2)}, "rev 2 answers 500")
    two = await build()
    assert two["status"] == "TEST_FAILED", two
    reason = 'the load-balancing route answered HTTP 500: {"error": "revision 2 is broken"}'
    assert two["failedTest"] == {"name": "check", "reason": reason}, two
    assert two["error"] == f"test 'check' failed: {reason}", two
    assert await user_request() == (200, {"rev": 1, "path": "/mine", "got": {"v": "u"}})
    await no_canary_left()
    status, _, page = await v2(api, "GET", f"/{ep['id']}/releases")
    assert status == 200 and page["releases"][0]["buildId"] == one["id"], page  # not the 2nd


async def _answers(request: Any, body: dict[str, Any]) -> bool:
    """Whether the endpoint's route answers 200 `body`, within a minute (the rolling rule)."""

    async def same() -> bool:
        return await request() == (200, body)

    return await eventually(same, timeout=60)


@pytest.mark.asyncio
@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_cancel_while_testing_removes_the_canary(api: Api, tmp_path: Path) -> None:
    slow = {"name": "slow", "input": {"sleep": 300}, "timeout": 600_000}
    files = {"handler.py": handler(3), ".runpod/tests.json": runpod_tests(slow)}
    repo = make_repo(tmp_path / "slow", files, "a test that takes its time")
    ep = await with_source(api, f"file://{repo}")
    asked = await first_build(api, ep["id"])  # the create's
    registry = api.plane.gw.registry

    async def canary_busy() -> bool:  # the canary holds the test's job
        ids = [i for i in await registry.endpoint_ids() if i.startswith("canary-")]
        return bool(ids) and (await api.plane.gw.store.snapshot(ids[0])).in_progress == 1

    await eventually(canary_busy, timeout=60)
    status, _, cancelled = await v2(api, "POST", f"/{ep['id']}/builds/{asked['id']}/cancel")
    assert (status, cancelled["status"]) == (200, "CANCELLED"), cancelled

    async def canary_gone() -> bool:
        ids = await registry.endpoint_ids()
        return not [i for i in ids if i.startswith("canary-")]

    await eventually(canary_gone, timeout=30)
    status, _, build = await v2(api, "GET", f"/{ep['id']}/builds/{asked['id']}")
    assert build["status"] == "CANCELLED", build
    status, _, page = await v2(api, "GET", f"/{ep['id']}/releases")
    assert [r["source"] for r in page["releases"]] == ["MANUAL"]  # nothing taken
