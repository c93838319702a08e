"""RunPod's REST v2 workers and worker logs (issue 46, items 2 and 3):
`GET /v2/serverless/{id}/workers` and `GET /v2/serverless/{id}/workers/{workerId}/logs`.

The decisions (statuses, summary, event ids) are pure and tested with tables; dev mode is a
real `lockgate dev` driven over HTTP; the pod → worker mapping and the pods' Events as
system logs run against envtest's kube-apiserver (pods made with lockgate's labels and
statuses: envtest has no kubelet, so no container log there).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from kubernetes import client as k8s
from redis.asyncio import Redis

from lockgate.kube.gpus import GpuLabels
from lockgate.kube.manifests.names import selector
from lockgate.kube.podworkers import lifecycle, log_lines, pod_facts, system_lines
from lockgate.manage.v2.workers import parse_log_params
from lockgate.manage.workerlogs import (
    CONTAINER,
    SYSTEM,
    BadEventId,
    Cursor,
    Position,
    after,
    before,
    last,
    numbered,
    parse_event_id,
)
from lockgate.manage.workerstates import is_stale, summary, worker_status
from lockgate.store import JobStore, NewJob, Registry
from tests.conftest import eventually
from tests.devproc import DevProcess

if TYPE_CHECKING:
    from kube_fixtures import Resources, RunningOperator

pytest_plugins = ["kube_fixtures"]

NUMBERED = "tests/workers/numbered_lines.py"  # prints `<tag> 1` … `<tag> N`, then sleeps

# -- pure: statuses and summary ------------------------------------------------------------


@pytest.mark.parametrize(
    ("lifecycle_", "jobs", "status"),
    [
        ("throttled", {}, "THROTTLED"),
        ("ready", {"w": 1}, "RUNNING"),
        ("ready", {"w": 0}, "IDLE"),
        ("starting", {"w": 0}, "IDLE"),  # polling: up, whatever the pod says yet
        ("unhealthy", {"w": 2}, "RUNNING"),  # between crashes it holds a job
        ("unhealthy", {}, "UNHEALTHY"),
        ("ready", {}, "INITIALIZING"),  # up, not polling yet
        ("ready", None, "IDLE"),  # no job view: the lifecycle alone
        ("starting", None, "INITIALIZING"),
        ("unhealthy", None, "UNHEALTHY"),
    ],
)
def test_a_workers_status_reconciles_its_lifecycle_with_the_job_view(
    lifecycle_: str, jobs: dict | None, status: str
) -> None:
    assert worker_status(lifecycle_, jobs, "w") == status


def test_the_summary_counts_every_status_and_adds_up() -> None:
    got = summary(["RUNNING", "IDLE", "IDLE", "UNHEALTHY"])
    assert got == {
        "running": 1, "idle": 2, "initializing": 0, "throttled": 0, "unhealthy": 1, "total": 4,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("version", "image", "stale"),
    [(3, "a", False), (2, "a", True), (None, "a", False), (None, "b", True), (None, None, False)],
)
def test_a_worker_is_stale_by_version_else_by_image(version, image, stale) -> None:
    assert is_stale(version, image, 3, "a") is stale


# -- pure: positions and event ids ---------------------------------------------------------


def test_lines_of_one_millisecond_are_numbered_in_the_order_written() -> None:
    events = numbered(CONTAINER, [(5, "a"), (5, "b"), (7, "c"), (6, "d")], whole=True)
    # a clock going back (6 after 7) is held at the last time: the order stays
    assert [(e.pos.ms, e.pos.seq, e.line) for e in events] == [
        (5, 0, "a"), (5, 1, "b"), (7, 0, "c"), (7, 1, "d"),
    ]  # fmt: skip


def test_a_cut_first_millisecond_is_left_out() -> None:
    events = numbered(SYSTEM, [(5, "b"), (6, "c")], whole=False)
    assert [e.line for e in events] == ["c"]


def test_an_event_id_resumes_right_after_its_line() -> None:
    lines = [(1_000 + i // 3, f"line {i}") for i in range(9)]  # 3 lines per ms
    events = numbered(CONTAINER, lines, whole=True)
    cursor = Cursor().moved(events[4])
    event_id = cursor.event_id((CONTAINER,))
    assert event_id == "1970-01-01T00:00:01.001Z/000000000001"  # RunPod's shape
    resumed = after(events, parse_event_id(event_id, (CONTAINER,)), 100)
    assert [e.line for e in resumed] == [f"line {i}" for i in range(5, 9)]


def test_a_two_source_id_keeps_each_sources_place() -> None:
    container = numbered(CONTAINER, [(10, "c0"), (20, "c1"), (30, "c2")], whole=True)
    system = numbered(SYSTEM, [(15, "s0"), (25, "s1")], whole=True)
    both = (CONTAINER, SYSTEM)
    cursor = Cursor().moved(container[1]).moved(system[0])  # s1 (25) came late: not given
    event_id = cursor.event_id(both)
    assert "|" in event_id
    resumed = after(container + system, parse_event_id(event_id, both), 100)
    assert [e.line for e in resumed] == ["s1", "c2"]


@pytest.mark.parametrize(
    ("text", "sources", "expected"),
    [
        ("2026-06-01T12:05:04Z", (CONTAINER,), {CONTAINER: Position(1780315504000, -1)}),
        (
            "2026-06-01T12:05:04.5+02:00/000000000003",
            (CONTAINER, SYSTEM),
            {CONTAINER: Position(1780308304500, 3), SYSTEM: Position(1780308304500, 3)},
        ),
        (
            "-|1970-01-01T00:00:00.002Z/000000000001",
            (CONTAINER, SYSTEM),
            {CONTAINER: Position(2, -1), SYSTEM: Position(2, 1)},
        ),
    ],
)
def test_event_ids_and_bare_times_parse(text: str, sources, expected) -> None:
    assert parse_event_id(text, sources).after == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2026-06-01T12:05:04Z/x", "a/1|b/2|c/3", "-|-"])
def test_a_foreign_event_id_is_refused(text: str) -> None:
    with pytest.raises(BadEventId):
        parse_event_id(text, (CONTAINER, SYSTEM))


def test_a_tails_reader_starts_just_before_its_first_line_of_each_source() -> None:
    container = numbered(CONTAINER, [(1, "a"), (1, "b"), (2, "c")], whole=True)
    system = numbered(SYSTEM, [(1, "s")], whole=True)
    tail = last(container + system, 2)
    assert [e.line for e in tail] == ["s", "c"]  # a millisecond's container lines go first
    start = before(tail, Cursor({CONTAINER: Position(2, 0), SYSTEM: Position(1, 0)}))
    assert start.after == {CONTAINER: Position(2, -1), SYSTEM: Position(1, -1)}
    assert [e.line for e in after(container + system, start, 10)] == ["s", "c"]


@pytest.mark.parametrize(
    ("query", "header", "wrong"),
    [
        ({"tail": "5001"}, None, ["tail"]),
        ({"tail": "-1"}, None, ["tail"]),
        ({"source": "both"}, None, ["source"]),
        ({"since": "12:00"}, None, ["since"]),
        ({"since": "2026-06-01T12:00:00"}, None, ["since"]),  # no zone: not RFC 3339
        ({}, "not-an-id", ["Last-Event-ID"]),
        ({"tail": "x", "source": "all"}, None, ["source", "tail"]),
    ],
)
def test_a_malformed_logs_query_is_a_422_naming_each_parameter(query, header, wrong) -> None:
    with pytest.raises(Exception) as caught:
        parse_log_params(query, header)
    assert caught.value.status == 422
    assert [e.split(":")[0] for e in caught.value.errors] == wrong


def test_logs_query_defaults_and_precedence() -> None:
    plain = parse_log_params({}, None)
    assert (plain.sources, plain.cursor, plain.tail) == ((CONTAINER, SYSTEM), None, 100)
    since = parse_log_params({"since": "2026-06-01T12:05:04Z", "source": "system"}, None)
    assert since.sources == (SYSTEM,)
    assert since.cursor.after == {SYSTEM: Position(1780315504000, -1)}
    resumed = parse_log_params(
        {"since": "2026-06-01T12:05:04Z"}, "1970-01-01T00:00:00Z/000000000002"
    )
    assert resumed.cursor.after[CONTAINER] == Position(0, 2)  # Last-Event-ID wins


# -- pure: pods as workers ---------------------------------------------------------------


def _status(**kwargs: Any) -> dict:
    return {"metadata": {"name": "p"}, "spec": {}, "status": kwargs}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (_status(), "starting"),
        (_status(conditions=[{"type": "Ready", "status": "True"}]), "ready"),
        (_status(conditions=[{"type": "PodScheduled", "status": "False",
                              "reason": "Unschedulable"}]), "throttled"),
        (
            _status(containerStatuses=[{
                "name": "worker", "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }]),
            "unhealthy",
        ),
        (  # restarted (a failed liveness probe) and not ready again
            _status(containerStatuses=[{"name": "worker", "restartCount": 1,
                                        "state": {"running": {}}}]),
            "unhealthy",
        ),
    ],
)  # fmt: skip
def test_a_pods_lifecycle(pod: dict, expected: str) -> None:
    assert lifecycle(pod, {"computeType": "GPU", "gpuTypeIds": ["NVIDIA L4"]}) == expected


def test_a_pods_events_and_terminations_are_its_system_lines() -> None:
    pod = _status(containerStatuses=[{
        "name": "worker",
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                     "finishedAt": "2026-06-01T12:00:03Z"}},
        "state": {"running": {"startedAt": "2026-06-01T12:00:04Z"}},
    }])  # fmt: skip
    events = [
        {"metadata": {"name": "p.2"}, "reason": "Started", "message": "Started container worker",
         "lastTimestamp": "2026-06-01T12:00:02Z"},
        {"metadata": {"name": "p.1"}, "reason": "Pulling", "message": "Pulling image",
         "lastTimestamp": "2026-06-01T12:00:02Z"},
        {"metadata": {"name": "p.3"}, "reason": "BackOff", "message": "Back-off", "count": 3,
         "lastTimestamp": "2026-06-01T12:00:05Z"},
    ]  # fmt: skip
    assert [text for _, text in system_lines(events, pod)] == [
        "Pulling: Pulling image",
        "Started: Started container worker",
        "container worker terminated: OOMKilled (exit code 137)",
        "BackOff: Back-off (x3)",
    ]


def test_the_schedulers_event_stamped_to_the_microsecond_comes_before_the_kubelets() -> None:
    """The kubelet stamps its Events to the second, the scheduler `Scheduled` (eventTime)
    to the microsecond: within one second the names (creation order) decide."""
    pod = _status(containerStatuses=[{"name": "worker", "state": {"running": {}}}])
    events = [
        {"metadata": {"name": "p.18a2"}, "reason": "Started", "message": "Started",
         "lastTimestamp": "2026-06-01T12:00:02Z"},
        {"metadata": {"name": "p.18a1"}, "reason": "Scheduled", "message": "Assigned",
         "lastTimestamp": None, "eventTime": "2026-06-01T12:00:02.523456Z"},
    ]  # fmt: skip
    assert [text for _, text in system_lines(events, pod)] == [
        "Scheduled: Assigned",
        "Started: Started",
    ]


def test_a_log_read_cut_mid_line_leaves_that_line_for_the_next_read() -> None:
    text = "2026-06-01T12:00:00.000000001Z one\n2026-06-01T12:00:00.000000002Z tw"
    assert log_lines(text) == [(1780315200000, "one")]


@pytest.mark.parametrize(
    ("preset", "labels", "gpu"),
    [
        ("gke", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, "NVIDIA L4"),
        ("nvidia-gfd", {"nvidia.com/gpu.product": "Tesla-T4"}, "NVIDIA T4"),
        ("nvidia-gfd", {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"},
         "NVIDIA GeForce RTX 4090"),
        ("nvidia-gfd", {}, None),
    ],
)  # fmt: skip
def test_a_workers_gpu_type_is_its_nodes_as_the_catalog_names_it(
    preset: str, labels: dict, gpu: str | None
) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {}, "status": {}}
    facts = pod_facts(pod, {}, labels, GpuLabels.resolve(preset), "topology.kubernetes.io/zone")
    assert facts.gpu_type == gpu


# -- dev mode: a real `lockgate dev` -------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


def _admin(dev: DevProcess) -> dict[str, str]:
    return {"authorization": f"Bearer {dev.key}"}


async def _get(http: aiohttp.ClientSession, url: str, headers: dict) -> tuple[int, Any]:
    async with http.get(url, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def read_events(resp: aiohttp.ClientResponse, count: int | None = None) -> list[dict]:
    """Events of an SSE answer (`id` and parsed `data`), until `count` of them or its end."""
    events, event = [], {}
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("id: "):
            event["id"] = line[4:]
        elif line.startswith("data: "):
            event["data"] = json.loads(line[6:])
        elif not line and event:
            events.append(event)
            event = {}
            if count is not None and len(events) == count:
                break
    return events


async def _workers(http: aiohttp.ClientSession, dev: DevProcess) -> dict:
    status, body = await _get(http, f"{dev.url}/v2/serverless/{dev.endpoint}/workers", _admin(dev))
    assert status == 200, body
    return body


async def test_dev_a_busy_and_an_idle_worker_with_a_summary_that_adds_up(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    args = (NUMBERED, "--workers-min", "2", "--idle-timeout", "60")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        run = {"input": {"lines": 1, "tag": "long", "sleep": 10}}
        async with http.post(dev.job_url("run"), json=run, headers=dev.headers()) as resp:
            job_id = (await resp.json())["id"]

        async def busy_and_idle() -> dict | None:
            body = await _workers(http, dev)
            statuses = sorted(w["status"] for w in body["workers"])
            return body if statuses == ["IDLE", "RUNNING"] else None

        # (a worker is INITIALIZING until it first polls)
        body = await eventually(busy_and_idle, "a RUNNING and an IDLE worker", timeout=30)
        assert body["summary"] == {
            "running": 1, "idle": 1, "initializing": 0, "throttled": 0, "unhealthy": 0, "total": 2,
        }  # fmt: skip
        assert body["endpointVersion"] == 1
        for worker in body["workers"]:
            assert worker["id"].startswith(f"{dev.endpoint}-")
            assert worker["version"] == 1 and worker["isStale"] is False
            assert worker["gpuCount"] >= 0 and worker["uptimeSeconds"] >= 0
            assert datetime.fromisoformat(worker["startedAt"].replace("Z", "+00:00")) <= (
                datetime.now(UTC)
            )
        status, problem = await _get(http, f"{dev.url}/v2/serverless/nope/workers", _admin(dev))
        assert (status, problem["title"]) == (404, "Not Found")
        status, _ = await _get(
            http, f"{dev.url}/v2/serverless/{dev.endpoint}/workers", {"authorization": "Bearer x"}
        )
        assert status == 401
        async with http.post(dev.job_url(f"cancel/{job_id}"), headers=dev.headers()) as resp:
            assert resp.status == 200  # (dev mode then stops without waiting for it)


async def test_dev_a_log_stream_cut_and_resumed_loses_no_line_and_repeats_none(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    tag = f"n{secrets.token_hex(3)}"
    args = (NUMBERED, "--workers-min", "1", "--workers-max", "1", "--idle-timeout", "60")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        run = {"input": {"lines": 60, "tag": tag}}
        async with http.post(dev.job_url("runsync"), json=run, headers=dev.headers()) as resp:
            assert (await resp.json())["status"] == "COMPLETED"
        [worker] = (await _workers(http, dev))["workers"]
        logs = f"{dev.url}/v2/serverless/{dev.endpoint}/workers/{worker['id']}/logs"
        async with http.get(f"{logs}?tail=5000", headers=_admin(dev)) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/event-stream"
            assert resp.headers["Cache-Control"] == "no-cache"
            assert resp.headers["X-Accel-Buffering"] == "no"
            first = await read_events(resp, 30)  # then the client cuts the stream
        assert first[0]["data"] == {
            "ts": first[0]["data"]["ts"], "source": "system",
            "line": first[0]["data"]["line"],
        }  # fmt: skip
        assert "worker process started" in first[0]["data"]["line"]
        headers = {**_admin(dev), "Last-Event-ID": first[-1]["id"]}
        async with http.get(logs, headers=headers) as resp:
            rest = await read_events_until(resp, lambda got: len(tagged(tag, first + got)) >= 60)
        seen = [e["data"]["line"] for e in first + rest]
        mine = [line for line in seen if line.startswith(f"{tag} ")]
        assert sorted(mine, key=lambda x: int(x.split()[1])) == [f"{tag} {n}" for n in range(1, 61)]
        assert len(seen) == len(set(seen))  # none repeated (each line's text is unique here)
        ids = [e["id"] for e in first + rest]
        assert len(ids) == len(set(ids))

        # the container source alone, from the 10th numbered line's id on
        container = f"{logs}?source=container&tail=5000"
        async with http.get(container, headers=_admin(dev)) as resp:
            lines = await read_events_until(resp, lambda got: len(tagged(tag, got)) == 60)
        assert {e["data"]["source"] for e in lines} == {"container"}
        tenth = next(e for e in lines if e["data"]["line"] == f"{tag} 10")
        headers = {**_admin(dev), "Last-Event-ID": tenth["id"]}
        async with http.get(f"{logs}?source=container", headers=headers) as resp:
            after_tenth = await read_events_until(resp, lambda got: got[-1:] == lines[-1:])
        expected = [e["data"]["line"] for e in lines[lines.index(tenth) + 1 :]]
        assert [e["data"]["line"] for e in after_tenth] == expected

        # tail: the last lines; since: from a time on; 422 and 404 are problems
        async with http.get(f"{logs}?tail=3&source=container", headers=_admin(dev)) as resp:
            assert len(await read_events(resp, 3)) == 3
        bad = f"{logs}?tail=6000"
        status, problem = await _get(http, bad, _admin(dev))
        assert status == 422 and problem["errors"] == [
            "tail: expected a whole number from 0 to 5000"
        ]
        gone = f"{dev.url}/v2/serverless/{dev.endpoint}/workers/no-such-worker/logs"
        status, problem = await _get(http, gone, _admin(dev))
        assert (status, problem["status"]) == (404, 404)
        last_id = rest[-1]["id"] if rest else first[-1]["id"]
    # Dev mode's workers end with it, and their logs (kept in memory) with them: after a
    # restart on the same data dir the old worker is unknown (a cluster keeps its pods).
    with DevProcess(*args, data_dir=tmp_path) as dev:
        logs = f"{dev.url}/v2/serverless/{dev.endpoint}/workers/{worker['id']}/logs"
        status, problem = await _get(http, logs, {**_admin(dev), "Last-Event-ID": last_id})
        assert status == 404, problem


async def read_events_until(
    resp: aiohttp.ClientResponse, done: Callable[[list[dict]], bool]
) -> list[dict]:
    """Events of a live stream until `done(events so far)` (bounded in time)."""
    events: list[dict] = []

    async def read() -> None:
        while not done(events):
            got = await read_events(resp, 1)
            if not got:
                return
            events.extend(got)

    await asyncio.wait_for(read(), 30)
    return events


def tagged(tag: str, events: list[dict]) -> list[str]:
    """The numbered lines of `tag` among `events` (stdout's and stderr's come through two
    pipes: in order within each, in any order between them)."""
    return [e["data"]["line"] for e in events if e["data"]["line"].startswith(f"{tag} ")]


async def test_dev_a_stream_ends_once_its_worker_is_gone_and_drained(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    args = (NUMBERED, "--workers-min", "0", "--idle-timeout", "1")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        run = {"input": {"lines": 2, "tag": "bye"}}
        async with http.post(dev.job_url("runsync"), json=run, headers=dev.headers()) as resp:
            assert (await resp.json())["status"] == "COMPLETED"
        [worker] = (await _workers(http, dev))["workers"]
        logs = f"{dev.url}/v2/serverless/{dev.endpoint}/workers/{worker['id']}/logs"
        async with http.get(f"{logs}?source=system&tail=0", headers=_admin(dev)) as resp:
            events = await asyncio.wait_for(read_events(resp), 30)  # to its end
        lines = [e["data"]["line"] for e in events]
        assert lines[0].startswith("stopping (idle)")
        assert lines[-1].startswith("worker process exited with 0")


async def _post(http: aiohttp.ClientSession, url: str, headers: dict) -> tuple[int, Any]:
    async with http.post(url, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_dev_one_worker_restarted_then_stopped_over_http(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """`POST …/workers/{workerId}/restart`: a fresh worker in its place, the old one exits;
    `…/stop`: it exits and (workersMin 0, an empty queue) none replaces it."""
    args = (NUMBERED, "--workers-min", "0", "--idle-timeout", "300")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        run = {"input": {"lines": 1, "tag": "up"}}
        async with http.post(dev.job_url("runsync"), json=run, headers=dev.headers()) as resp:
            assert (await resp.json())["status"] == "COMPLETED"
        [first] = (await _workers(http, dev))["workers"]
        assert first["nodeName"]  # dev mode: this machine
        base = f"{dev.url}/v2/serverless/{dev.endpoint}/workers"
        status, body = await _post(http, f"{base}/{first['id']}/restart", _admin(dev))
        assert status == 202, body
        assert (body["id"], body["endpointId"], body["action"]) == (
            first["id"], dev.endpoint, "restart",
        )  # fmt: skip

        async def replaced() -> str | None:
            ids = [w["id"] for w in (await _workers(http, dev))["workers"]]
            return ids[0] if len(ids) == 1 and ids[0] != first["id"] else None

        fresh = await eventually(replaced, "a fresh worker in the old one's place", timeout=30)
        # the old one is stopping or gone: a second restart of it is a 404
        status, problem = await _post(http, f"{base}/{first['id']}/restart", _admin(dev))
        assert status == 404 and problem["title"] == "Not Found", problem

        status, body = await _post(http, f"{base}/{fresh}/stop", _admin(dev))
        assert (status, body["action"]) == (202, "stop"), body

        async def none_left() -> bool:
            return not (await _workers(http, dev))["workers"]

        await eventually(none_left, "no worker: none replaces a stopped one", timeout=30)
        async with http.get(f"{base}/{fresh}/logs?source=system", headers=_admin(dev)) as resp:
            lines = [e["data"]["line"] for e in await asyncio.wait_for(read_events(resp), 30)]
        assert any(x.startswith("stopping (stopped by request)") for x in lines), lines
        status, problem = await _post(http, f"{base}/nope/stop", _admin(dev))
        assert status == 404 and problem["detail"].startswith("worker 'nope'"), problem
        status, problem = await _post(
            http, f"{dev.url}/v2/serverless/nope/workers/x/stop", _admin(dev)
        )
        assert status == 404 and problem["detail"] == "endpoint 'nope' not found"
        async with http.post(f"{base}/{fresh}/stop") as resp:
            assert resp.status == 401


# -- envtest: pods as workers, their Events as system logs ----------------------------------

NODE = "h46-gpu-node"


def _pod(name: str, endpoint_id: str, *, labels: dict | None = None, gpus: int = 0) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {**selector(endpoint_id, "worker"), **(labels or {})}},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "worker", "image": "example.test/echo:2",
                            "resources": {"limits": limits}}],
        },
    }  # fmt: skip


def _set_status(core: k8s.CoreV1Api, namespace: str, name: str, status: dict) -> None:
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


@pytest.mark.envtest
async def test_envtest_pods_are_workers_and_their_events_a_resumable_system_log(
    operator: RunningOperator,
    resources: Resources,
    kube: k8s.ApiClient,
    redis: Redis,
    http: aiohttp.ClientSession,
) -> None:
    core, ns = k8s.CoreV1Api(kube), resources.namespace
    endpoint_id = f"wk-{secrets.token_hex(3)}"
    resources.template(f"{endpoint_id}-tpl", image="example.test/echo:1")
    # workersMax 0: the queued job wakes no worker of the scaler's (this envtest runs a
    # controller-manager: its ReplicaSet's pod would be a sixth worker, INITIALIZING)
    resources.endpoint(
        endpoint_id, templateId=f"{endpoint_id}-tpl", gpuTypeIds=["NVIDIA L4"], workersMax=0
    )
    labels = {"nvidia.com/gpu.product": "Tesla-T4", "topology.kubernetes.io/zone": "eu-west-1a"}
    try:
        core.create_node({"metadata": {"name": NODE, "labels": labels}})
    except k8s.ApiException as err:
        assert err.status == 409
    now = datetime.now(UTC).replace(microsecond=0)
    ready = [{"type": "Ready", "status": "True"}]
    pods = {
        "run": ({"lockgate.dev/version": "1"}, {"conditions": ready, "startTime": now.isoformat()}),
        "idle": ({}, {"conditions": ready}),  # no version: stale by its image
        "throttled": ({}, {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}),
        "crash": ({}, {"containerStatuses": [{
            "name": "worker", "image": "example.test/echo:2", "imageID": "", "ready": False,
            "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                         "finishedAt": (now - timedelta(seconds=5)).isoformat()}},
        }]}),
        "start": ({}, {}),
    }  # fmt: skip
    names = {key: f"{endpoint_id}-{key}" for key in pods}
    for key, (notes, status) in pods.items():
        core.create_namespaced_pod(ns, _pod(names[key], endpoint_id, labels=notes, gpus=1))
        if status:
            _set_status(core, ns, names[key], status)
    store = JobStore(redis)
    await store.heartbeat(endpoint_id, names["idle"])
    await store.submit(endpoint_id, NewJob(id="job-1", input=b"{}", ttl_ms=600_000))
    taken, _ = await store.take(endpoint_id, names["run"], 1, 60_000)
    assert [j.id for j in taken] == ["job-1"]
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    admin = {"authorization": f"Bearer {key}"}
    base = f"{operator.manage_url}/v2/serverless/{endpoint_id}/workers"
    try:
        status, body = await _get(http, base, admin)
        assert status == 200, body
        got = {w["id"]: w for w in body["workers"]}
        assert {k: got[n]["status"] for k, n in names.items()} == {
            "run": "RUNNING", "idle": "IDLE", "throttled": "THROTTLED",
            "crash": "UNHEALTHY", "start": "INITIALIZING",
        }  # fmt: skip
        assert body["summary"] == {
            "running": 1, "idle": 1, "initializing": 1, "throttled": 1, "unhealthy": 1, "total": 5,
        }  # fmt: skip
        run = got[names["run"]]
        assert run["gpuTypeId"] == "NVIDIA T4" and run["dataCenterId"] == "eu-west-1a"
        assert (run["gpuCount"], run["image"], run["version"]) == (1, "example.test/echo:2", 1)
        assert run["isStale"] is False and run["startedAt"].startswith(now.strftime("%Y-%m-%dT%H"))
        assert got[names["idle"]]["version"] is None and got[names["idle"]]["isStale"] is True
        assert run["nodeName"] == NODE
        # a pod that is not one of this endpoint's workers is not stopped: a 404 problem
        # (the stop and restart themselves: tests/test_operator_worker_stop.py)
        async with http.post(f"{base}/{endpoint_id}-stranger/stop", headers=admin) as resp:
            assert resp.status == 404
            assert resp.content_type == "application/problem+json"
            assert "not found" in (await resp.json())["detail"]

        # the crashing pod's Events and its OOM kill are its system log
        def event(reason: str, message: str, at: datetime) -> None:
            core.create_namespaced_event(ns, {
                "metadata": {"name": f"{names['crash']}.{int(at.timestamp() * 1e9):x}"},
                "involvedObject": {"kind": "Pod", "name": names["crash"], "namespace": ns},
                "reason": reason, "message": message, "type": "Normal",
                "firstTimestamp": at.isoformat(), "lastTimestamp": at.isoformat(),
            })  # fmt: skip

        event("Scheduled", "Successfully assigned", now - timedelta(seconds=30))
        event("Pulling", "Pulling image", now - timedelta(seconds=29))
        logs = f"{base}/{names['crash']}/logs?source=system"
        async with http.get(logs, headers=admin) as resp:
            assert resp.status == 200
            first = await read_events(resp, 3)
        assert [e["data"]["line"] for e in first] == [
            "Scheduled: Successfully assigned",
            "Pulling: Pulling image",
            "container worker terminated: OOMKilled (exit code 137)",
        ]
        assert {e["data"]["source"] for e in first} == {"system"}
        event("BackOff", "Back-off restarting failed container", now)
        async with http.get(logs, headers={**admin, "Last-Event-ID": first[1]["id"]}) as resp:
            rest = await read_events(resp, 2)
        assert [e["data"]["line"] for e in rest] == [
            "container worker terminated: OOMKilled (exit code 137)",
            "BackOff: Back-off restarting failed container",
        ]
        status, problem = await _get(http, f"{base}/nope/logs", admin)
        assert status == 404 and problem["detail"].startswith("worker 'nope'")
    finally:
        for name in names.values():
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        core.delete_node(NODE)
