"""The management API over both control planes, with the same tests.

`kubernetes`: served by the operator, writing Endpoint resources (envtest). `local`: served
by dev mode's gateway (`/v1` on its port), running local worker pools; tests of what only
the local plane does (workers, jobs, resume) are at the end.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
import psutil
import pytest
from aiohttp import web
from redis.asyncio import Redis

from lockgate.apps.dev import build_app
from lockgate.dev.controlplane import LocalControlPlane
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube import controlplane as kube_plane
from lockgate.kube.cluster import Cluster
from lockgate.manage.listing import Cursor
from lockgate.models import EndpointSpec
from lockgate.store import Registry
from tests.conftest import REPO, eventually, make_settings

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]

ECHO = "tests/handlers/sync_echo.py"  # a local templateId: relative to the repository


@dataclass
class Api:
    """A client of `/v1/endpoints` with an admin key, and what differs between planes."""

    http: aiohttp.ClientSession
    url: str
    key: str
    template: str  # a templateId this plane accepts
    job_api_base: str  # jobApiUrl is {job_api_base}/v2/{id}/
    stored: Callable[[str], Awaitable[dict | None]]  # settings as the backend keeps them
    forget: Callable[[str], None] = lambda _id: None  # delete it after the test
    plane: LocalControlPlane | None = field(default=None)

    async def call(
        self, method: str, path: str = "", body: Any = None, key: str | None = None
    ) -> tuple[int, Any]:
        headers = {"authorization": f"Bearer {key or self.key}"}
        async with self.http.request(
            method, f"{self.url}/v1/endpoints{path}", json=body, headers=headers
        ) as resp:
            payload = await resp.json() if resp.content_type == "application/json" else None
            return resp.status, payload

    async def listing(self, url: str) -> tuple[int, Any, Mapping[str, str]]:
        """GET `url` (resolved against `{url}/v1/endpoints`): status, body and headers."""
        headers = {"authorization": f"Bearer {self.key}"}
        async with self.http.get(urljoin(f"{self.url}/v1/endpoints", url), headers=headers) as resp:
            return resp.status, await resp.json(), resp.headers


async def admin_key(redis: Redis) -> str:
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    return key


@pytest.fixture
async def kubernetes_api(
    operator: RunningOperator, redis: Redis, http: aiohttp.ClientSession, resources: Resources
) -> Api:
    resources.template("manage-tpl")

    async def stored(endpoint_id: str) -> dict | None:
        return (resources.get("endpoints", endpoint_id) or {}).get("spec")

    def forget(endpoint_id: str) -> None:
        resources.created.append(("endpoints", endpoint_id))

    base = operator.settings.base_url
    key = await admin_key(redis)
    return Api(http, operator.manage_url, key, "manage-tpl", base, stored, forget)


@contextlib.asynccontextmanager
async def dev_app(redis_server: EmbeddedRedis) -> AsyncIterator[tuple[str, LocalControlPlane]]:
    """Dev mode's app (gateway + `/v1`) on loopback, handler paths relative to the repo."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = make_settings(redis_server.url, port, sweep_interval_s=0.2)
    # A dev build's git step runs on in its daemon thread after a cancel or the close (by
    # design: dev/builder.py), and may still write its checkout while this folder goes.
    with tempfile.TemporaryDirectory(
        prefix="lockgate-dev-", ignore_cleanup_errors=True
    ) as data_dir:
        app, plane = build_app(
            settings, gateway_url=url, base_dir=REPO, data_dir=Path(data_dir), stop_grace_s=5
        )
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            yield url, plane
        finally:
            await plane.close()
            await runner.cleanup()


def stored_entries(redis: Redis) -> Callable[[str], Awaitable[dict | None]]:
    """An endpoint's registry entry as Redis keeps it (a JSON object); None without one."""
    registry = Registry(redis)

    async def stored(endpoint_id: str) -> dict | None:
        entry = await registry.get_endpoint(endpoint_id)
        return entry.stored() if entry is not None else None

    return stored


@pytest.fixture
async def local_api(
    redis: Redis, redis_server: EmbeddedRedis, http: aiohttp.ClientSession
) -> AsyncIterator[Api]:
    async with dev_app(redis_server) as (url, plane):
        key = await admin_key(redis)
        yield Api(http, url, key, ECHO, url, stored_entries(redis), plane=plane)


@pytest.fixture(
    params=["local", pytest.param("kubernetes", marks=pytest.mark.envtest)],
)
def api(request: pytest.FixtureRequest) -> Api:
    """The same client over each control plane."""
    return request.getfixturevalue(f"{request.param}_api")


# -- round trip ----------------------------------------------------------------------------


async def create(api: Api, endpoint_id: str | None = None, **fields: Any) -> dict:
    """POST an endpoint running the plane's template; its record."""
    body = {"templateId": api.template, **fields}
    if endpoint_id is not None:
        body["id"] = endpoint_id
    status, record = await api.call("POST", body=body)
    assert status == 200, record
    api.forget(record["id"])
    return record


@pytest.mark.envtest
async def test_an_admin_key_from_the_operators_key_file_is_accepted(
    kubernetes_api: Api, operator: RunningOperator
) -> None:
    assert (await kubernetes_api.call("GET", key=operator.file_admin_key))[0] == 200
    assert (await kubernetes_api.call("GET", key="lg_not_in_the_file"))[0] == 401


async def test_post_creates_an_endpoint_with_a_runpod_style_id(api: Api) -> None:
    record = await create(api, name="echo", gpuTypeIds=["NVIDIA L4"])
    assert re.fullmatch(r"[a-z0-9]{14}", record["id"])
    assert record["name"] == "echo" and record["gpuTypeIds"] == ["NVIDIA L4"]
    assert record["workersMax"] == 3  # a default, filled in
    assert record["jobApiUrl"] == f"{api.job_api_base}/v2/{record['id']}/"
    assert "phase" in record["status"]
    assert (await api.stored(record["id"]))["gpuTypeIds"] == ["NVIDIA L4"]


async def test_model_references_are_kept_with_an_optional_revision(api: Api) -> None:
    refs = ["acme/tiny", "acme/small.v2:0123abc", "acme/base:refs/pr/1"]
    record = await create(api, name="models", modelReferences=refs)
    assert record["modelReferences"] == refs
    assert (await api.stored(record["id"]))["modelReferences"] == refs


async def test_created_endpoint_reads_back_ready_once_reconciled(
    api: Api, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.params["api"] == "kubernetes":
        request.getfixturevalue("metrics_served")  # a Ready endpoint needs readable metrics
    await create(api, "mg-ready")

    async def ready() -> dict | None:
        _, got = await api.call("GET", "/mg-ready")
        return got if got["status"]["phase"] == "Ready" else None

    got = await eventually(ready, "phase Ready")
    assert got["status"]["endpointId"] == "mg-ready"
    assert got["status"]["jobApiUrl"] == f"{api.job_api_base}/v2/mg-ready/"
    _, listed = await api.call("GET")
    assert "mg-ready" in [r["id"] for r in listed]


async def test_patch_changes_the_given_fields_and_keeps_the_others(api: Api) -> None:
    template = (await create(api, "mg-patch", name="a"))["templateId"]

    status, record = await api.call("PATCH", "/mg-patch", {"workersMax": 9, "idleTimeout": 60})
    assert status == 200, record
    assert (record["workersMax"], record["idleTimeout"], record["name"]) == (9, 60, "a")
    spec = await api.stored("mg-patch")
    assert (spec["workersMax"], spec["idleTimeout"], spec["templateId"]) == (9, 60, template)


async def test_delete_removes_the_endpoint(api: Api) -> None:
    await create(api, "mg-delete")

    status, _ = await api.call("DELETE", "/mg-delete")
    assert status == 204

    async def gone() -> bool:
        return (await api.call("GET", "/mg-delete"))[0] == 404

    await eventually(gone, "404 after delete")


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"computeType": "TPU"}, "computeType"),
        ({"executionTimeoutMs": 10}, "executionTimeoutMs"),
        ({"workersMin": 4, "workersMax": 2}, "workersMin"),
        ({"gpuCount": "many"}, "gpuCount"),
        ({"colour": "blue"}, "colour"),
        ({"id": "Not_An_Id"}, "id"),
        ({"id": "ep.dotted"}, "id"),  # a Kubernetes name, but no endpoint id (label value)
        ({"id": "a" * 64}, "id"),
        ({"gpuCount": 0}, "gpuCount must be at least 1 for a GPU endpoint"),
        ({"computeType": "GPU", "gpuCount": 0}, "gpuCount"),
        ({"replicas": -1}, "replicas"),
        ({"modelReferences": ["no-org"]}, "modelReferences"),
        ({"modelReferences": ["org/name:"]}, "modelReferences"),
        ({"modelReferences": "org/name"}, "modelReferences"),
    ],
)
async def test_invalid_payload_is_refused_naming_the_field(
    api: Api, body: dict, field: str
) -> None:
    status, error = await api.call("POST", body=body)
    assert status == 400
    assert field in error["error"]


async def test_body_that_is_not_a_json_object_is_refused(api: Api) -> None:
    status, error = await api.call("POST", body=[1, 2])
    assert status == 400 and "JSON object" in error["error"]


async def test_patch_that_makes_a_gpu_endpoint_without_gpus_is_refused(api: Api) -> None:
    await create(api, "mg-cpu", computeType="CPU", gpuCount=0)
    status, error = await api.call("PATCH", "/mg-cpu", {"computeType": "GPU"})
    assert status == 400 and "gpuCount must be at least 1" in error["error"]


async def test_patch_that_breaks_min_not_above_max_is_refused(api: Api) -> None:
    await create(api, "mg-minmax")
    status, error = await api.call("PATCH", "/mg-minmax", {"workersMin": 5})
    assert status == 400 and "workersMin (5) must not exceed workersMax (3)" in error["error"]


async def test_existing_id_is_a_conflict(api: Api) -> None:
    await create(api, "mg-twice")
    status, error = await api.call("POST", body={"id": "mg-twice"})
    assert status == 409 and "mg-twice" in error["error"]


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
async def test_unknown_endpoint_is_not_found(api: Api, method: str) -> None:
    status, error = await api.call(method, "/mg-nobody", {} if method == "PATCH" else None)
    assert status == 404 and "mg-nobody" in error["error"]


async def test_missing_or_non_admin_key_is_unauthorized(api: Api, redis: Redis) -> None:
    client_key = f"lg_{secrets.token_hex(8)}"
    await Registry(redis).put_key(client_key, {"name": "client", "scopes": ["jobs"]})
    assert (await api.call("GET", key="lg_unknown"))[0] == 401
    assert (await api.call("GET", key=client_key))[0] == 401
    async with api.http.get(f"{api.url}/v1/endpoints") as resp:
        assert resp.status == 401


# -- lists that page ----------------------------------------------------------------------


async def every_page(api: Api, query: str) -> list[list[dict]]:
    """The pages of `GET /v1/endpoints?{query}`, following each answer's `Link: <…>;
    rel="next"` (resolved against the URL asked, as RFC 8288 says) to the last page, and
    checking that its `continue` is the answer's `X-Continue`."""
    pages: list[list[dict]] = []
    url = f"?{query}"
    while True:
        status, body, headers = await api.listing(url)
        assert status == 200, body
        pages.append(body)
        token = headers.get("X-Continue")
        if token is None:
            assert "Link" not in headers
            return pages
        link = re.fullmatch(r'<([^>]*)>; rel="next"', headers["Link"])
        assert link, headers["Link"]
        url = urljoin(url, link[1])
        assert parse_qs(urlsplit(url).query)["continue"] == [token]


def ids(pages: list[list[dict]], prefix: str = "") -> list[str]:
    return [r["id"] for page in pages for r in page if r["id"].startswith(prefix)]


async def test_pages_give_every_endpoint_once_in_id_order_as_full_records(api: Api) -> None:
    made = ["pg-c", "pg-a", "pg-e", "pg-b", "pg-d"]
    for endpoint_id in made:
        await create(api, endpoint_id)

    pages = await every_page(api, "limit=2")

    listed = ids(pages)
    assert listed == sorted(set(listed))  # in order, each once
    assert ids(pages, "pg-") == sorted(made)
    assert [len(p) for p in pages[:-1]] == [2] * (len(pages) - 1) and len(pages[-1]) <= 2
    status, everything, headers = await api.listing("")  # unpaged: one list, as before
    assert status == 200 and "X-Continue" not in headers and "Link" not in headers
    assert ids([everything], "pg-") == sorted(made)
    [paged] = [r for page in pages for r in page if r["id"] == "pg-a"]
    [whole] = [r for r in everything if r["id"] == "pg-a"]
    assert paged.keys() == whole.keys() and paged["jobApiUrl"] == whole["jobApiUrl"]
    assert ids(await every_page(api, "limit=1000"), "pg-") == sorted(made)  # one page


async def test_the_name_filter_matches_part_of_the_id_or_the_name_in_any_case(api: Api) -> None:
    await create(api, "nf-alpha", name="Production LLM")
    await create(api, "nf-beta", name="staging")
    await create(api, "nf-gamma", name="llm canary")

    assert ids(await every_page(api, "name=llm")) == ["nf-alpha", "nf-gamma"]
    assert ids(await every_page(api, "name=NF-B")) == ["nf-beta"]
    assert ids(await every_page(api, "name=nf-&limit=1")) == ["nf-alpha", "nf-beta", "nf-gamma"]
    status, body, _ = await api.listing("?name=no-such-endpoint-anywhere")
    assert (status, body) == (200, [])


async def test_the_summary_view_has_only_id_name_phase_and_worker_bounds(api: Api) -> None:
    await create(api, "sv-one", name="first", workersMin=1, workersMax=4)
    await create(api, "sv-two")

    pages = await every_page(api, "view=summary&name=sv-&limit=1")

    assert [len(p) for p in pages] == [1, 1]
    one, two = pages[0][0], pages[1][0]
    assert one.keys() == {"id", "name", "phase", "workersMin", "workersMax"}
    assert (one["id"], one["name"], one["workersMin"], one["workersMax"]) == (
        "sv-one",
        "first",
        1,
        4,
    )
    assert (two["id"], two["name"], two["workersMin"], two["workersMax"]) == ("sv-two", "", 0, 3)
    assert one["phase"] in {"Pending", "Initializing", "Ready", "Degraded", "Failed"}


async def test_the_phase_filter_gives_the_endpoints_in_those_phases(
    api: Api, request: pytest.FixtureRequest
) -> None:
    kubernetes = request.node.callspec.params["api"] == "kubernetes"
    if kubernetes:
        request.getfixturevalue("metrics_served")  # a Ready endpoint needs readable metrics
    await create(api, "ph-ready")
    if kubernetes:  # its Template does not exist: Pending until it does
        await create(api, "ph-waiting", templateId="ph-no-such-template")

    async def phases() -> dict[str, str] | None:
        _, rows, _ = await api.listing("?name=ph-&view=summary")
        got = {r["id"]: r["phase"] for r in rows}
        return got if got.get("ph-ready") == "Ready" else None

    got = await eventually(phases, "ph-ready Ready")
    if kubernetes:
        assert got == {"ph-ready": "Ready", "ph-waiting": "Pending"}
        assert ids(await every_page(api, "name=ph-&phase=Pending")) == ["ph-waiting"]
        assert ids(await every_page(api, "name=ph-&phase=pending,READY&limit=1")) == [
            "ph-ready",
            "ph-waiting",
        ]
    assert ids(await every_page(api, "name=ph-&phase=Ready")) == ["ph-ready"]
    assert ids(await every_page(api, "name=ph-&phase=Failed,Degraded")) == []


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "limit"),
        ("limit=-5", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("phase=Running", "phase"),
        ("view=wide", "view"),
        ("continue=not-a-token", "continue"),
        ("limit=5&continue=eyJ4IjoxfQ", "continue"),  # {"x":1}: JSON, but not ours
    ],
)
async def test_a_bad_list_parameter_is_a_400_naming_it(api: Api, query: str, named: str) -> None:
    status, error, _ = await api.listing(f"?{query}")
    assert status == 400 and error["error"].startswith(f"{named}: ")


# -- lists that page on Kubernetes: the apiserver's own pages -------------------------------


def compact_etcd(etcd_url: str) -> None:
    """Compact etcd's history up to now, as the apiserver does every 5 min: continue
    tokens of lists read before are expired from here on."""
    key = base64.b64encode(b"/").decode()
    revision = json.loads(post_json(f"{etcd_url}/v3/kv/range", {"key": key}))["header"]
    post_json(f"{etcd_url}/v3/kv/compaction", {"revision": revision["revision"]})


def post_json(url: str, body: dict) -> bytes:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read()


@pytest.mark.envtest
async def test_kubernetes_an_expired_continue_token_is_410_and_a_forged_one_400(
    kubernetes_api: Api, request: pytest.FixtureRequest
) -> None:
    if os.environ.get("LOCKGATE_E2E_KUBECONFIG"):
        pytest.skip("compacts envtest's own etcd")
    api = kubernetes_api
    for endpoint_id in ("ex-a", "ex-b"):
        await create(api, endpoint_id)
    _, _, headers = await api.listing("?limit=1")
    token = headers["X-Continue"]
    await create(api, "ex-c")  # a write after the list: its revision is history now
    compact_etcd(request.getfixturevalue("envtest").etcd_url)

    status, error, _ = await api.listing(f"?limit=1&continue={token}")
    assert status == 410
    assert error["error"].startswith("continue: the token has expired")
    forged = Cursor(resume=base64.b64encode(b'{"v":"meta.k8s.io/v1","rv":"x"}').decode())
    status, error, _ = await api.listing(f"?limit=1&continue={forged.encode()}")
    assert status == 400 and error["error"].startswith("continue: ")


@pytest.mark.envtest
async def test_kubernetes_a_filtered_page_reads_a_bounded_number_of_apiserver_pages(
    kubernetes_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [f"fc-{i}" for i in range(7)]
    for endpoint_id in made:
        await create(kubernetes_api, endpoint_id, name="odd" if int(endpoint_id[3]) % 2 else "")
    monkeypatch.setattr(kube_plane, "MAX_CHUNK", 2)  # reads of at most 2 Endpoints
    monkeypatch.setattr(kube_plane, "MAX_SCANNED", 4)  # at most 4 read for one answer
    reads: list[int] = []
    list_page = Cluster.list_endpoints_page

    async def counted(self: Cluster, namespace: str, **options: Any) -> Any:
        reads.append(options["limit"])
        return await list_page(self, namespace, **options)

    monkeypatch.setattr(Cluster, "list_endpoints_page", counted)

    pages = await every_page(kubernetes_api, "name=fc-&limit=2")
    assert ids(pages) == made
    assert set(reads) == {2} and sum(reads) <= (4 + 2) * len(pages)
    reads.clear()
    odd = await every_page(kubernetes_api, "name=ODD&limit=1")
    assert ids(odd) == ["fc-1", "fc-3", "fc-5"]  # the ones named odd; the others skipped
    assert set(reads) <= {1, 2} and sum(reads) <= (4 + 2) * len(odd)


# -- the local plane: workers, jobs, restarts ----------------------------------------------


@pytest.fixture
async def jobs_key(redis: Redis) -> str:
    key = f"lg_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "client", "scopes": ["jobs"]})
    return key


async def job_call(
    http: aiohttp.ClientSession, url: str, key: str, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """A job API call: `{url}/v2/{path}`."""
    headers = {"authorization": key}
    async with http.request(method, f"{url}/v2/{path}", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


def worker_processes(handler: str) -> list[psutil.Process]:
    """Live child processes (workers) whose command line names `handler`."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.status() != psutil.STATUS_ZOMBIE and any(handler in a for a in p.cmdline())
    ]


async def running(handler: str) -> list[psutil.Process]:
    return worker_processes(handler)


async def stopped(handler: str) -> bool:
    return not worker_processes(handler)


async def test_local_round_trip_runs_jobs_and_delete_stops_workers_and_erases_jobs(
    local_api: Api, jobs_key: str, redis: Redis
) -> None:
    api = local_api
    record = await create(api, "lc-echo")
    assert record["templateId"] == str(REPO / ECHO)  # stored as the absolute path
    assert record["status"]["phase"] == "Ready"

    status, done = await job_call(
        api.http, api.url, jobs_key, "POST", "lc-echo/runsync", {"input": {"x": 1}}
    )
    assert (status, done["status"], done["output"]) == (200, "COMPLETED", {"echo": {"x": 1}})
    _, listed = await api.call("GET")
    [got] = [r for r in listed if r["id"] == "lc-echo"]
    assert got["status"]["workers"]["desired"] == 1
    workers = worker_processes(ECHO)
    assert len(workers) == 1

    await api.call("PATCH", "/lc-echo", {"workersMax": 0})  # the next job waits in the queue
    _, queued = await job_call(api.http, api.url, jobs_key, "POST", "lc-echo/run", {"input": {}})
    digest = (await api.stored("lc-echo"))["workerKeyDigest"]

    assert (await api.call("DELETE", "/lc-echo"))[0] == 204
    assert (await job_call(api.http, api.url, jobs_key, "GET", "lc-echo/health"))[0] == 404
    assert not [p for p in psutil.wait_procs(workers, timeout=10)[1]]
    assert await Registry(redis).get_key(digest) is None
    # the queued job and history are gone; a sweep that listed the endpoint just before the
    # delete may still take its lock key, which expires by itself (never a lasting key);
    # its usage (per endpoint and per API key) stays, as it is still billed, until it expires
    kept = await redis.keys("lg:{lc-echo}:*")
    billed = (b"lg:{lc-echo}:use:", b"lg:{lc-echo}:uk:")
    left = [k for k in kept if not k.startswith(billed)]
    assert left in ([], [b"lg:{lc-echo}:sweep"]), kept
    assert all([await redis.pttl(k) > 0 for k in kept])
    assert queued["status"] == "IN_QUEUE"


async def test_local_patch_rescales_and_a_new_template_id_replaces_the_workers(
    local_api: Api, jobs_key: str
) -> None:
    api = local_api
    await create(api, "lc-patch")
    assert worker_processes(ECHO) == []  # workersMin 0: none until a job comes

    await api.call("PATCH", "/lc-patch", {"workersMin": 1})
    await eventually(lambda: running(ECHO), "workersMin 1 starts a worker")

    status, record = await api.call(
        "PATCH", "/lc-patch", {"templateId": "tests/handlers/error_dict.py"}
    )
    assert status == 200 and record["templateId"].endswith("error_dict.py")
    _, done = await job_call(api.http, api.url, jobs_key, "POST", "lc-patch/runsync", {"input": {}})
    assert done["status"] == "FAILED" and "model not loaded" in done["error"]
    await eventually(lambda: stopped(ECHO), "the old worker to stop")


async def test_local_execution_timeout_ms_applies_to_the_endpoints_jobs(
    local_api: Api, jobs_key: str
) -> None:
    api = local_api
    sleeper = "python tests/handlers/sleeper.py async"  # a worker command, not a file
    record = await create(api, "lc-timeout", templateId=sleeper)
    assert record["templateId"] == sleeper
    await api.call("PATCH", "/lc-timeout", {"executionTimeoutMs": 5000})
    _, job = await job_call(
        api.http, api.url, jobs_key, "POST", "lc-timeout/run", {"input": {"sleep": 60}}
    )

    async def timed_out() -> bool:
        _, got = await job_call(
            api.http, api.url, jobs_key, "GET", f"lc-timeout/status/{job['id']}"
        )
        return got["status"] == "TIMED_OUT"

    await eventually(timed_out, "TIMED_OUT after 5 s", timeout=20)


@pytest.mark.parametrize(
    ("template_id", "message"),
    [
        ("", "templateId: required in dev mode"),
        ("tests/handlers/missing.py", "handler file"),
        ("no-such-program --flag", "program 'no-such-program' not found"),
        ('python "unbalanced', "cannot split"),
    ],
)
async def test_local_template_id_that_cannot_run_here_is_refused(
    local_api: Api, template_id: str, message: str
) -> None:
    status, error = await local_api.call("POST", body={"id": "lc-bad", "templateId": template_id})
    assert status == 400 and message in error["error"]
    await create(local_api, "lc-good")
    status, error = await local_api.call("PATCH", "/lc-good", {"templateId": template_id})
    assert status == 400 and message in error["error"]
    assert (await local_api.call("GET", "/lc-good"))[1]["templateId"] == str(REPO / ECHO)


async def test_next_dev_run_resumes_api_endpoints_and_reports_a_vanished_handler(
    local_api: Api, redis_server: EmbeddedRedis, jobs_key: str, tmp_path
) -> None:
    api = local_api
    handler = tmp_path / "gone.py"
    handler.write_text((REPO / ECHO).read_text())
    await create(api, "lc-resume", workersMin=1)
    await create(api, "lc-vanish", templateId=str(handler))
    await api.plane.apply("lc-cli", EndpointSpec(templateId=ECHO))  # the command line's
    await api.plane.close()
    handler.unlink()

    async with dev_app(redis_server) as (url, plane):
        resumed = {r.id: r for r in await plane.resume()}
        assert set(resumed) == {"lc-resume", "lc-vanish"}
        assert resumed["lc-resume"].status.phase == "Ready"
        assert resumed["lc-vanish"].status.phase == "Failed"
        assert "not found" in resumed["lc-vanish"].status.conditions[0].message
        _, done = await job_call(
            api.http, url, jobs_key, "POST", "lc-resume/runsync", {"input": {"n": 2}}
        )
        assert done["output"] == {"echo": {"n": 2}}


async def test_local_plane_starts_no_workers_once_shutting_down(local_api: Api) -> None:
    await local_api.plane.close()
    status, error = await local_api.call("POST", body={"id": "lc-late", "templateId": ECHO})
    assert status == 503 and "shutting down" in error["error"]
    assert worker_processes(ECHO) == []
