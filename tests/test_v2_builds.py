"""`/v2/serverless/{id}/builds` (issue 48, items 1-2) over real HTTP on loopback: dev mode's
app building a real git repository (a `file://` clone, no image), RunPod's v2 shapes and
cursor pages, cancel, the log as a resumable Server-Sent Events stream, RFC 9457 problems
for every refusal, and no 5xx for any body; on a cluster (envtest's apiserver) a start is
answered 501 and a `file://` source refused."""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import site
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, eventually
from tests.devproc import DevProcess
from tests.gitrepo import commit, git, make_repo
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    api,
    jobs_key,
    kubernetes_api,
    local_api,
)
from tests.test_v2_openapi import answer_schema, conforms
from tests.test_v2_serverless import PROBLEM, cpu_body, v2
from tests.test_v2_workers import read_events

pytest_plugins = ["kube_fixtures"]
pytestmark = pytest.mark.asyncio

ECHO = "tests/handlers/sync_echo.py"
HANDLER = "import runpod\nrunpod.serverless.start({'handler': lambda job: job['input']})\n"
BUILD_KEYS = {
    "id",
    "status",
    "commitHash",
    "commitMessage",
    "branch",
    "commitDate",
    "imageName",
    "startedAt",
    "completedAt",
    "error",
}  # fmt: skip RunPod's Build; lockgate's fields come beside them


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"handler.py": HANDLER}, "the first handler")


async def with_source(
    api: Api, url: str, *, fields: dict[str, Any] | None = None, **git_fields: Any
) -> dict[str, Any]:
    """A v2 endpoint (the echo handler's template; `fields` over the body) built from `url`."""
    source = {"git": {"url": url, **git_fields}}
    status, _, body = await v2(api, "POST", body=cpu_body(source=source, **(fields or {})))
    assert status == 201, body
    return body


async def builds_of(api: Api, endpoint_id: str) -> list[dict[str, Any]]:
    """The endpoint's builds, newest first."""
    status, _, page = await v2(api, "GET", f"/{endpoint_id}/builds")
    assert status == 200, page
    return page["builds"]


async def first_build(api: Api, endpoint_id: str) -> dict[str, Any]:
    """The build a create with a source started by itself (the endpoint's only one)."""
    [build] = await builds_of(api, endpoint_id)
    return build


async def ended(api: Api, endpoint_id: str, build_id: str) -> dict[str, Any]:
    """The build once it has ended (bounded in time)."""

    async def done() -> dict[str, Any] | None:
        status, _, build = await v2(api, "GET", f"/{endpoint_id}/builds/{build_id}")
        assert status == 200, build
        return build if build["status"] not in ("PENDING", "BUILDING", "TESTING") else None

    return await eventually(done, timeout=60)


@contextlib.asynccontextmanager
async def silent_git_server() -> AsyncIterator[str]:
    """An HTTP server on loopback that never answers: a clone from it stays under way (its
    build BUILDING) until the server goes."""
    release = asyncio.Event()

    async def hold(_request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=503)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hold)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/org/repo.git"
    finally:
        release.set()
        await runner.cleanup()


# -- the source on the endpoint --------------------------------------------------------------


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_an_endpoint_keeps_its_source_in_v2_and_v1_and_a_patch_removes_it(
    api: Api, repo: Path
) -> None:
    ep = await with_source(api, f"file://{repo}", ref="main", trigger="PUSH")
    assert ep["source"]["git"] == {
        "url": f"file://{repo}", "ref": "main", "dockerfilePath": "Dockerfile",
        "contextPath": ".", "credentialsSecret": "", "trigger": "PUSH", "buildTimeoutMin": 60,
    }  # fmt: skip
    status, record = await api.call("GET", f"/{ep['id']}")
    assert status == 200 and record["source"] == ep["source"]
    status, _, plain = await v2(api, "POST", body=cpu_body())
    assert status == 201 and "source" not in plain  # absent when none, as `cpu` for a GPU one
    status, _, patched = await v2(api, "PATCH", f"/{ep['id']}", {"source": None})
    assert status == 200 and "source" not in patched, patched


@pytest.mark.parametrize("api", ["local"], indirect=True)
@pytest.mark.parametrize(
    ("git_fields", "named"),
    [
        ({"url": "ftp://example.test/repo"}, "url"),
        ({"url": "https://example.test/r", "ref": "a..b"}, "ref"),
        ({"url": "https://example.test/r", "buildTimeoutMin": 0}, "buildTimeoutMin"),
        ({"url": "https://example.test/r", "dockerfilePath": "../x"}, "dockerfilePath"),
        ({"url": "https://example.test/r", "branch": "main"}, "branch"),
    ],
)
async def test_a_bad_source_is_a_422_naming_the_field(
    api: Api, git_fields: dict, named: str
) -> None:
    status, kind, problem = await v2(api, "POST", body=cpu_body(source={"git": git_fields}))
    assert (status, kind) == (422, PROBLEM), problem
    assert any(named in e for e in problem["errors"]), problem
    status, record = await api.call("POST", body={"templateId": api.template,
                                                  "source": {"git": git_fields}})  # fmt: skip
    assert status == 400 and named in record["error"], record  # v1's shape


# -- builds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_build_checks_out_the_repository_and_shows_runpods_fields(
    api: Api, repo: Path
) -> None:
    ep = await with_source(api, f"file://{repo}", trigger="MANUAL")  # no build by itself
    assert await builds_of(api, ep["id"]) == []
    status, _, build = await v2(api, "POST", f"/{ep['id']}/builds")
    assert status == 201, build
    assert re.fullmatch(r"build_[a-z0-9]+", build["id"]) and build["status"] == "PENDING"
    assert set(build) >= BUILD_KEYS and build["startedAt"] is None
    done = await ended(api, ep["id"], build["id"])
    assert done["status"] == "COMPLETED", done
    short = git(repo, "rev-parse", "--short", "HEAD")
    assert (done["commitHash"], done["branch"]) == (short, "main")
    assert done["commitMessage"] == "the first handler"
    assert done["commit"] == git(repo, "rev-parse", "HEAD")
    assert done["startedAt"] and done["completedAt"] and done["error"] is None
    assert done["reason"] == "MANUAL"


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_an_endpoint_created_with_a_source_builds_at_once_unless_its_trigger_is_manual(
    api: Api, repo: Path
) -> None:
    """RunPod builds at once when an endpoint is created from a repository: so does a v2 or
    v1 create (`CREATE`) and an edit giving a source to an endpoint with none
    (`SOURCE_SET`); `trigger: MANUAL` builds only when asked, on create too."""
    ep = await with_source(api, f"file://{repo}")
    build = await first_build(api, ep["id"])
    assert (build["reason"], build["ref"]) == ("CREATE", ""), build
    done = await ended(api, ep["id"], build["id"])
    assert done["status"] == "COMPLETED", done
    assert done["commitHash"] == git(repo, "rev-parse", "--short", "HEAD")

    source = {"git": {"url": f"file://{repo}", "ref": "main"}}
    status, record = await api.call("POST", body={"templateId": api.template, "source": source})
    assert status == 200, record
    by_v1 = await first_build(api, record["id"])
    assert by_v1["reason"] == "CREATE", by_v1  # v1 as v2

    manual = await with_source(api, f"file://{repo}", trigger="MANUAL")
    status, _, plain = await v2(api, "POST", body=cpu_body())
    assert status == 201, plain
    status, _, edited = await v2(api, "PATCH", f"/{plain['id']}", {"source": source})
    assert status == 200, edited
    given = await first_build(api, plain["id"])
    assert given["reason"] == "SOURCE_SET", given
    changed = {"source": {"git": {**source["git"], "ref": ""}}}
    assert (await v2(api, "PATCH", f"/{plain['id']}", changed))[0] == 200
    # a source changed, not given: no build by itself
    assert [b["id"] for b in await builds_of(api, plain["id"])] == [given["id"]]
    assert await builds_of(api, manual["id"]) == []
    for endpoint_id, one in ((record["id"], by_v1), (plain["id"], given)):
        assert (await ended(api, endpoint_id, one["id"]))["status"] == "COMPLETED"


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_ref_the_repository_lacks_fails_the_build_saying_why(api: Api, repo: Path) -> None:
    ep = await with_source(api, f"file://{repo}", trigger="MANUAL")
    status, _, build = await v2(api, "POST", f"/{ep['id']}/builds", {"ref": "no-such-branch"})
    assert status == 201 and build["ref"] == "no-such-branch", build
    done = await ended(api, ep["id"], build["id"])
    assert done["status"] == "FAILED" and "no-such-branch" in done["error"], done
    assert done["commitHash"] is None


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_repository_with_nothing_to_run_fails_its_build(api: Api, tmp_path: Path) -> None:
    empty = make_repo(tmp_path / "empty", {"README.md": "nothing to run\n"})
    ep = await with_source(api, f"file://{empty}")
    build = await first_build(api, ep["id"])  # created with a source: built at once
    done = await ended(api, ep["id"], build["id"])
    assert done["status"] == "FAILED" and "no handler.py" in done["error"], done
    assert done["commitHash"] == git(empty, "rev-parse", "--short", "HEAD")  # which one failed


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_builds_list_newest_first_in_cursor_pages(api: Api, repo: Path) -> None:
    ep = await with_source(api, f"file://{repo}", trigger="MANUAL")
    ids = []
    for _ in range(3):
        status, _, build = await v2(api, "POST", f"/{ep['id']}/builds")
        assert status == 201, build
        ids.append(build["id"])
    status, _, page = await v2(api, "GET", f"/{ep['id']}/builds?limit=2")
    assert status == 200, page
    assert [b["id"] for b in page["builds"]] == [ids[2], ids[1]]
    assert page["pagination"]["hasNextPage"] is True
    cursor = page["pagination"]["nextCursor"]
    status, _, rest = await v2(api, "GET", f"/{ep['id']}/builds?limit=2&cursor={cursor}")
    assert [b["id"] for b in rest["builds"]] == [ids[0]]
    assert rest["pagination"] == {"nextCursor": None, "hasNextPage": False}
    status, _, whole = await v2(api, "GET", f"/{ep['id']}/builds")
    assert [b["id"] for b in whole["builds"]] == ids[::-1]
    for build_id in ids:
        await ended(api, ep["id"], build_id)


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_live_build_is_cancelled_and_an_ended_one_is_a_409(api: Api) -> None:
    async with silent_git_server() as url:
        ep = await with_source(api, url)
        running = await first_build(api, ep["id"])  # the one the create started
        assert running["reason"] == "CREATE", running
        status, _, waiting = await v2(api, "POST", f"/{ep['id']}/builds")  # behind the first
        assert status == 201, waiting

        async def building() -> bool:
            build = (await v2(api, "GET", f"/{ep['id']}/builds/{running['id']}"))[2]
            return build["status"] == "BUILDING"

        await eventually(building, timeout=30)
        status, _, cancelled = await v2(api, "POST", f"/{ep['id']}/builds/{waiting['id']}/cancel")
        assert status == 200 and cancelled["status"] == "CANCELLED", cancelled
        assert cancelled["startedAt"] is None and cancelled["completedAt"]
        status, _, cancelled = await v2(api, "POST", f"/{ep['id']}/builds/{running['id']}/cancel")
        assert status == 200 and cancelled["status"] == "CANCELLED", cancelled
        assert cancelled["startedAt"] and cancelled["completedAt"]
        again = await v2(api, "POST", f"/{ep['id']}/builds/{running['id']}/cancel")
        assert again[:2] == (409, PROBLEM) and "ended already" in again[2]["detail"], again
    # the clone failed once the server went: the record stays CANCELLED
    status, _, build = await v2(api, "GET", f"/{ep['id']}/builds/{running['id']}")
    assert build["status"] == "CANCELLED"


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_refusals_are_problems(api: Api, repo: Path) -> None:
    status, _, plain = await v2(api, "POST", body=cpu_body())
    assert status == 201
    status, kind, problem = await v2(api, "POST", f"/{plain['id']}/builds")
    assert (status, kind) == (400, PROBLEM) and "no source" in problem["detail"], problem
    ep = await with_source(api, f"file://{repo}", trigger="MANUAL")
    cases = [
        ("GET", "/nosuchendpoint/builds", None, 404),
        ("POST", "/nosuchendpoint/builds", None, 404),
        ("GET", f"/{ep['id']}/builds/build_nosuch", None, 404),
        ("POST", f"/{ep['id']}/builds/build_nosuch/cancel", None, 404),
        ("GET", f"/{ep['id']}/builds/build_nosuch/logs", None, 404),
        ("GET", f"/{ep['id']}/builds?limit=0", None, 422),
        ("GET", f"/{ep['id']}/builds?limit=101", None, 422),
        ("GET", f"/{ep['id']}/builds?cursor=bm9wZQ", None, 422),
        ("GET", f"/{ep['id']}/builds/build_x/logs?tail=-1", None, 422),
        ("POST", f"/{ep['id']}/builds", {"ref": "-x"}, 422),
        ("POST", f"/{ep['id']}/builds", {"branch": "main"}, 422),
        ("POST", f"/{ep['id']}/builds", [1], 400),
    ]
    for method, path, body, expected in cases:
        status, kind, problem = await v2(api, method, path, body)
        assert (status, kind) == (expected, PROBLEM), (path, body, problem)
        assert problem["status"] == expected and problem["detail"], problem


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_builds_log_streams_and_resumes_after_the_last_event_id(
    api: Api, repo: Path
) -> None:
    ep = await with_source(api, f"file://{repo}")
    build = await first_build(api, ep["id"])
    await ended(api, ep["id"], build["id"])
    logs = f"{api.url}/v2/serverless/{ep['id']}/builds/{build['id']}/logs"
    headers = {"authorization": f"Bearer {api.key}"}
    async with api.http.get(f"{logs}?tail=5000", headers=headers) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
        events = await asyncio.wait_for(read_events(resp), 30)  # it ends: the build has
    lines = [e["data"]["line"] for e in events]
    assert lines[0].startswith("build asked (CREATE)")
    assert any(line.startswith("HEAD is now at") for line in lines), lines
    assert lines[-1].startswith("build completed at")
    assert {e["data"]["source"] for e in events} == {"system", "container"}
    resume = {**headers, "Last-Event-ID": events[1]["id"]}
    async with api.http.get(logs, headers=resume) as resp:
        rest = await asyncio.wait_for(read_events(resp), 30)
    assert [e["data"]["line"] for e in rest] == lines[2:]
    async with api.http.get(f"{logs}?source=system&tail=1", headers=headers) as resp:
        last = await asyncio.wait_for(read_events(resp), 30)
    assert [e["data"]["line"] for e in last] == [lines[-1]]


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_deleting_the_endpoint_deletes_its_builds(api: Api, repo: Path) -> None:
    ep = await with_source(api, f"file://{repo}")
    await ended(api, ep["id"], (await first_build(api, ep["id"]))["id"])
    assert (await v2(api, "DELETE", f"/{ep['id']}"))[0] == 204
    redis = api.plane.builds.redis
    assert [k async for k in redis.scan_iter(match=f"lg:{{{ep['id']}}}:b*")] == []


# -- no body gets a 5xx ---------------------------------------------------------------------


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and objects of `inner` (a named function: Hypothesis reads a lambda's source)."""
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    containers,
    max_leaves=8,
)
start_bodies = json_values | st.fixed_dictionaries({"ref": json_values})
git_parts = st.fixed_dictionaries(
    {"url": json_values},
    optional={"ref": json_values, "trigger": json_values, "buildTimeoutMin": json_values},
)
source_bodies = st.fixed_dictionaries(
    {"source": st.none() | st.fixed_dictionaries({"git": json_values | git_parts})}
)


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_no_start_or_source_body_gets_a_5xx(api: Api, repo: Path) -> None:
    ep = await with_source(api, f"file://{repo}", trigger="MANUAL")
    plain = (await v2(api, "POST", body=cpu_body()))[2]
    seen: list[tuple[str, Any]] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(start=start_bodies, edit=source_bodies)
    def run(start: Any, edit: Any) -> None:
        seen.extend([("start", start), ("edit", edit)])

    run()
    manual = {"source": {"git": {"url": f"file://{repo}", "trigger": "MANUAL"}}}
    for kind, body in seen:  # generated first, then sent: hypothesis runs no coroutine
        if kind == "start":
            status, content, _ = await v2(api, "POST", f"/{plain['id']}/builds", body)
        else:
            status, content, _ = await v2(api, "PATCH", f"/{ep['id']}", body)
            if status == 200 and body["source"] is None:  # given its source back at once:
                assert (await v2(api, "PATCH", f"/{ep['id']}", manual))[0] == 200
        assert status == 200 or (status < 500 and content == PROBLEM), (kind, body, status)
    # nothing built: that endpoint has no source, and the fuzzed sources only ever replaced
    # one (no `SOURCE_SET` build), so git never clones a generated URL off this machine
    for endpoint_id in (plain["id"], ep["id"]):
        assert await builds_of(api, endpoint_id) == []


# -- on a cluster ----------------------------------------------------------------------------


@pytest.mark.envtest
async def test_a_cluster_keeps_the_source_but_answers_a_start_501(kubernetes_api: Api) -> None:
    api = kubernetes_api
    status, record = await api.call("POST", body={
        "templateId": api.template, "source": {"git": {"url": "https://git.example.test/o/r"}},
    })  # fmt: skip
    assert status == 200, record  # no build started: this control plane does not build
    api.forget(record["id"])
    assert record["source"]["git"]["url"] == "https://git.example.test/o/r"
    status, kind, problem = await v2(api, "POST", f"/{record['id']}/builds")
    assert (status, kind) == (501, PROBLEM), problem
    assert "in-cluster builds are off" in problem["detail"]
    status, _, page = await v2(api, "GET", f"/{record['id']}/builds")
    assert status == 200 and page["builds"] == [], page  # no PENDING build left behind
    status, record = await api.call("POST", body={
        "templateId": api.template, "source": {"git": {"url": "file:///srv/repo"}},
    })  # fmt: skip
    assert status == 400 and "file:// is for dev mode only" in record["error"], record


# -- the push webhook ------------------------------------------------------------------------


async def hook(api: Api, endpoint_id: str, headers: dict[str, str], body: bytes):
    """POST the hook with no API key: status and JSON body."""
    url = f"{api.url}/v1/hooks/git/{endpoint_id}"
    async with api.http.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def github_push(secret: str, branch: str) -> tuple[dict[str, str], bytes]:
    body = json.dumps({"ref": f"refs/heads/{branch}", "after": "a" * 40}).encode()
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-GitHub-Event": "push", "X-Hub-Signature-256": sig}, body


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_signed_push_to_the_tracked_branch_builds_and_a_bad_signature_is_401(
    api: Api, repo: Path
) -> None:
    ep = await with_source(api, f"file://{repo}", ref="main", trigger="PUSH")
    status, _, made = await v2(api, "POST", f"/{ep['id']}/builds/webhook")
    assert status == 201 and made["url"] == f"{api.url}/v1/hooks/git/{ep['id']}", made
    secret = made["secret"]

    headers, body = github_push(secret, "main")
    status, answer = await hook(api, ep["id"], headers, body)
    assert status == 202 and answer["event"] == "push", answer
    assert (answer["build"]["reason"], answer["build"]["ref"]) == ("PUSH", "main")
    done = await ended(api, ep["id"], answer["build"]["id"])
    assert done["status"] == "COMPLETED" and done["branch"] == "main", done

    status, answer = await hook(api, ep["id"], *github_push(secret, "feature"))
    assert status == 200 and answer["build"] is None and "feature" in answer["why"], answer
    gitlab = {"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": secret}
    tag = json.dumps({"ref": "refs/tags/v1", "after": "b" * 40}).encode()
    status, answer = await hook(api, ep["id"], gitlab, tag)
    assert status == 200 and answer["build"] is None and answer["event"] == "tag", answer

    signature = headers["X-Hub-Signature-256"]
    flipped = signature[:-1] + ("1" if signature.endswith("0") else "0")  # one digit off
    refused = [
        ({"X-GitHub-Event": "push"}, body),  # no signature
        (github_push("not-the-secret", "main")[0], body),
        ({**headers, "X-Hub-Signature-256": flipped}, body),
        ({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "guess"}, body),
        ({"X-Gitea-Event": "push", "X-Gitea-Signature": "00"}, body),
    ]
    for bad_headers, bad_body in refused:
        status, answer = await hook(api, ep["id"], bad_headers, bad_body)
        assert status == 401 and "signature" in answer["error"], (bad_headers, answer)
    status, answer = await hook(api, "nosuchendpoint", headers, body)
    assert status == 401, answer  # an unknown endpoint has no secret: nothing said of it
    for not_an_id in ("Not_An_Id", f"{ep['id']}%0A"):  # `$` would match before a newline
        status, answer = await hook(api, not_an_id, headers, body)
        assert status == 404, (not_an_id, answer)
    status, answer = await hook(api, ep["id"], {"Content-Type": "application/json"}, body)
    assert status == 400 and "X-GitHub-Event" in answer["error"], answer

    status, _, renewed = await v2(api, "POST", f"/{ep['id']}/builds/webhook")
    assert status == 201 and renewed["secret"] != secret
    status, _ = await hook(api, ep["id"], headers, body)
    assert status == 401  # the old secret stopped working
    reasons = [b["reason"] for b in await builds_of(api, ep["id"])]
    assert reasons == ["PUSH", "CREATE"]  # only the push to main built, after the create


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_signed_hook_for_an_endpoint_without_a_source_is_a_409(api: Api) -> None:
    status, _, plain = await v2(api, "POST", body=cpu_body())
    assert status == 201
    secret = (await v2(api, "POST", f"/{plain['id']}/builds/webhook"))[2]["secret"]
    status, answer = await hook(api, plain["id"], *github_push(secret, "main"))
    assert status == 409 and "no source" in answer["error"], answer


# -- `lockgate dev` as a user runs it --------------------------------------------------------


async def test_dev_builds_survive_a_restart_and_a_stop_mid_build_ends_it_failed(
    http: aiohttp.ClientSession, tmp_path: Path, repo: Path
) -> None:
    data = tmp_path / "data"
    admin = {}

    async def call(dev: DevProcess, method: str, path: str, body: Any = None):
        url = f"{dev.url}/v2/serverless/{dev.endpoint}{path}"
        async with http.request(method, url, json=body, headers=admin) as resp:
            return resp.status, await resp.json(content_type=None)

    with DevProcess(ECHO, data_dir=data) as dev:
        admin["authorization"] = f"Bearer {dev.key}"
        status, ep = await call(dev, "PATCH", "", {"source": {"git": {"url": f"file://{repo}"}}})
        assert status == 200 and ep["source"]["git"]["trigger"] == "RELEASE", ep
        [built] = (await call(dev, "GET", "/builds"))[1]["builds"]  # a source given: built
        assert built["reason"] == "SOURCE_SET", built

        async def completed() -> bool:
            return (await call(dev, "GET", f"/builds/{built['id']}"))[1]["status"] == "COMPLETED"

        await eventually(completed, timeout=60)
        async with silent_git_server() as url:
            status, _ = await call(dev, "PATCH", "", {"source": {"git": {"url": url}}})
            assert status == 200
            status, stuck = await call(dev, "POST", "/builds")

            async def building() -> bool:
                return (await call(dev, "GET", f"/builds/{stuck['id']}"))[1]["status"] == "BUILDING"

            await eventually(building, timeout=30)
            assert await asyncio.to_thread(dev.stop) == 0  # a clone under way does not hold it
    with DevProcess(ECHO, data_dir=data) as dev:
        admin["authorization"] = f"Bearer {dev.key}"
        status, page = await call(dev, "GET", "/builds")
        assert status == 200, page
        by_id = {b["id"]: b for b in page["builds"]}
        assert by_id[built["id"]]["status"] == "COMPLETED"
        assert by_id[stuck["id"]]["status"] == "FAILED"
        assert by_id[stuck["id"]]["error"] == "lockgate dev stopped"


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_build_answers_conform_to_the_openapi_document(api: Api, repo: Path) -> None:
    async with api.http.get(f"{api.url}/v2/openapi.json") as resp:
        doc = await resp.json()
    ep = await with_source(api, f"file://{repo}", trigger="MANUAL")
    one = "/v2/serverless/{id}/builds/{buildId}"
    status, _, build = await v2(api, "POST", f"/{ep['id']}/builds", {"ref": "main"})
    conforms(doc, answer_schema(doc, "post", "/v2/serverless/{id}/builds", 201), build)
    done = await ended(api, ep["id"], build["id"])
    conforms(doc, answer_schema(doc, "get", one, 200), done)
    status, _, page = await v2(api, "GET", f"/{ep['id']}/builds")
    conforms(doc, answer_schema(doc, "get", "/v2/serverless/{id}/builds", 200), page)
    status, _, problem = await v2(api, "POST", f"/{ep['id']}/builds/{build['id']}/cancel")
    assert status == 409
    conforms(doc, answer_schema(doc, "post", one + "/cancel", 409), problem)
    status, _, made = await v2(api, "POST", f"/{ep['id']}/builds/webhook")
    conforms(doc, answer_schema(doc, "post", "/v2/serverless/{id}/builds/webhook", 201), made)


# The handler of a repository built in dev mode, run by the build's venv: it borrows this
# project's site-packages and source for `lockgate.worker` (no pip install in the test).
BUILT_HANDLER = f"""import sys
sys.path[:0] = [{str(Path(site.getsitepackages()[0]))!r}, {str(REPO / "operator")!r}]
import lockgate.worker

if __name__ == "__main__":
    lockgate.worker.start({{"handler": lambda job: {{"built": job["input"]["v"]}}}})
"""


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_completed_build_is_what_the_workers_run_then(
    api: Api, tmp_path: Path, jobs_key: str
) -> None:
    built = make_repo(tmp_path / "built", {"handler.py": BUILT_HANDLER}, "a built handler")
    ep = await with_source(
        api, f"file://{built}", trigger="MANUAL", fields={"workers": {"min": 1, "max": 1}}
    )  # the template runs until the build asked for below
    url = ep["requestUrls"]["runSync"] + "?wait=60000"

    async def run(value: str) -> dict[str, Any]:
        body = {"input": {"v": value}}
        async with api.http.post(url, json=body, headers={"authorization": jobs_key}) as resp:
            job = await resp.json()
        assert job["status"] == "COMPLETED", job
        return job["output"]

    assert await run("before") == {"echo": {"v": "before"}}  # the template, until a build
    status, _, build = await v2(api, "POST", f"/{ep['id']}/builds")
    assert status == 201
    assert (await ended(api, ep["id"], build["id"]))["status"] == "COMPLETED"

    async def runs_the_build() -> bool:
        return await run("after") == {"built": "after"}

    await eventually(runs_the_build, timeout=60)
    status, _, patched = await v2(api, "PATCH", f"/{ep['id']}", {"workers": {"min": 1, "max": 2}})
    assert status == 200, patched
    assert await run("still") == {"built": "still"}  # a scaling edit keeps the build
    status, _, patched = await v2(api, "PATCH", f"/{ep['id']}", {"source": None})
    assert status == 200, patched

    async def back_to_the_template() -> bool:
        return await run("again") == {"echo": {"v": "again"}}

    await eventually(back_to_the_template, timeout=60)


def _handler_of_revision(rev: int) -> str:
    """BUILT_HANDLER answering its revision too (each commit of a repository its own)."""
    return BUILT_HANDLER.replace(
        '{"built": job["input"]["v"]}', '{"built": job["input"]["v"], "rev": ' + str(rev) + "}"
    )


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_completed_build_is_a_git_build_release_and_rollback_runs_it_again(
    api: Api, tmp_path: Path, jobs_key: str
) -> None:
    """Each completed build is a `GIT_BUILD` release with its `buildId`; a failed build
    changes nothing; a rollback to a build's release runs its checkout again (no rebuild),
    one to the first release the template again; a build whose checkout dev mode no longer
    keeps (the newest 3 are) is a 409 problem, with nothing changed."""
    repo = make_repo(tmp_path / "revs", {"handler.py": _handler_of_revision(1)}, "rev 1")
    ep = await with_source(
        api, f"file://{repo}", trigger="MANUAL", fields={"workers": {"min": 1, "max": 1}}
    )  # the builds are the ones asked for below
    url = ep["requestUrls"]["runSync"] + "?wait=60000"

    async def run() -> dict[str, Any]:
        body = {"input": {"v": "x"}}
        async with api.http.post(url, json=body, headers={"authorization": jobs_key}) as resp:
            job = await resp.json()
        assert job["status"] == "COMPLETED", job
        return job["output"]

    async def runs(output: dict[str, Any]) -> None:
        async def same() -> bool:
            return await run() == output

        await eventually(same, timeout=60)

    async def releases() -> list[dict[str, Any]]:
        status, _, page = await v2(api, "GET", f"/{ep['id']}/releases")
        assert status == 200, page
        return page["releases"]

    async def build(ref: str | None = None) -> dict[str, Any]:
        status, _, asked = await v2(
            api, "POST", f"/{ep['id']}/builds", {"ref": ref} if ref else None
        )
        assert status == 201, asked
        return await ended(api, ep["id"], asked["id"])

    [first] = await releases()
    assert (first["source"], first["buildId"]) == ("MANUAL", None)
    await runs({"echo": {"v": "x"}})  # the template, before any build

    one = await build()
    assert one["status"] == "COMPLETED", one
    await runs({"built": "x", "rev": 1})
    newest = (await releases())[0]
    assert (newest["source"], newest["buildId"]) == ("GIT_BUILD", one["id"])
    assert [d["field"] for d in newest["diff"]] == ["build"]
    assert newest["diff"][0]["new"] == {"buildId": one["id"], "image": None}

    commit(repo, {"handler.py": _handler_of_revision(2)}, "rev 2")
    two = await build()
    assert two["status"] == "COMPLETED", two
    await runs({"built": "x", "rev": 2})
    newest = (await releases())[0]
    assert (newest["source"], newest["buildId"]) == ("GIT_BUILD", two["id"])

    # a failing build changes nothing: no release, the workers stay on the second build
    failed = await build("no-such-branch")
    assert failed["status"] == "FAILED", failed
    assert (await releases())[0]["id"] == newest["id"]
    assert await run() == {"built": "x", "rev": 2}

    # rollback to the first build's release: its checkout again, at once, no new build
    one_release = next(r for r in await releases() if r["buildId"] == one["id"])
    path = f"/{ep['id']}/releases/{one_release['id']}/rollback"
    status, _, rolled = await v2(api, "POST", path)
    assert status == 201, rolled
    assert (rolled["source"], rolled["buildId"]) == ("GIT_BUILD", one["id"])
    await runs({"built": "x", "rev": 1})
    status, _, page = await v2(api, "GET", f"/{ep['id']}/builds")
    assert len(page["builds"]) == 3  # no rebuild

    # rollback to the first release (before any build): the template again, MANUAL
    status, _, rolled = await v2(api, "POST", f"/{ep['id']}/releases/{first['id']}/rollback")
    assert status == 201, rolled
    assert (rolled["source"], rolled["buildId"]) == ("MANUAL", None)
    await runs({"echo": {"v": "x"}})

    # two more builds: the first build's checkout is no longer kept (the newest 3 are)
    for _ in range(2):
        assert (await build())["status"] == "COMPLETED"
    before = (await releases())[0]
    status, kind, problem = await v2(api, "POST", path)
    assert (status, kind) == (409, PROBLEM), problem
    assert "no longer kept" in problem["detail"], problem
    assert (await releases())[0]["id"] == before["id"]  # nothing changed
