"""RunPod REST v2's workers and worker logs on a real node (issue 46, items 2 and 3;
docs/workers.md): `lockgate manage` lists the echo endpoint's worker pod as its worker,
the pod's Events are its system log, the kubelet's log its container log, and a stream
cut and resumed with `Last-Event-ID` loses no line and repeats none, also after the
management API's pod was replaced.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from node_release import (
    USER_NAMESPACE,
    Release,
    manage_values,
    running,
    wait_until,
    worker_pods,
)
from tests.conftest import REPO

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ADMIN_KEY = "lg_node_workers_admin_" + "k" * 24
ECHO = REPO / "examples" / "echo"


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    """The chart with an admin key, its management API serving the examples' namespace."""
    rel = Release(node)
    rel.install(*manage_values(ADMIN_KEY))
    yield rel
    rel.uninstall()


class Manage:
    """The management API through its Service, with the admin key."""

    def __init__(self, release: Release) -> None:
        self.release = release
        self.http = requests.Session()
        self.http.headers["authorization"] = f"Bearer {ADMIN_KEY}"

    @property
    def url(self) -> str:
        return self.release.service_url(f"{self.release.name}-manage")

    def workers(self, endpoint: str) -> dict:
        resp = self.http.get(f"{self.url}/v2/serverless/{endpoint}/workers", timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def events(
        self, path: str, until: Any, headers: dict | None = None, timeout_s: float = 60
    ) -> list[dict]:
        """Events of a log stream until `until(events)` holds (a live stream stays open)."""
        events: list[dict] = []
        deadline = time.monotonic() + timeout_s
        with self.http.get(
            f"{self.url}{path}", headers=headers or {}, stream=True, timeout=timeout_s
        ) as resp:
            assert resp.status_code == 200, resp.text
            assert resp.headers["content-type"] == "text/event-stream"
            event: dict = {}
            for raw in resp.iter_lines(decode_unicode=True):
                if raw.startswith("id: "):
                    event["id"] = raw[4:]
                elif raw.startswith("data: "):
                    event["data"] = json.loads(raw[6:])
                elif not raw and event:
                    events.append(event)
                    event = {}
                    if until(events):
                        return events
                assert time.monotonic() < deadline, f"the stream stopped short: {events}"
        return events


@pytest.fixture(scope="module")
def manage(release: Release) -> Manage:
    release.node.kubectl("-n", USER_NAMESPACE, "apply", "-f", str(ECHO))
    api = Manage(release)
    resp = api.http.patch(f"{api.url}/v1/endpoints/echo", json={"workersMin": 1}, timeout=30)
    assert resp.status_code == 200, resp.text  # one worker pod stays up
    return api


@pytest.fixture(scope="module")
def pod(release: Release, manage: Manage) -> dict:
    return wait_until(
        lambda: [p for p in worker_pods(release, "echo") if running(p)], "a running echo pod", 120
    )[0]


def test_the_worker_pod_is_the_endpoints_worker(manage: Manage, pod: dict) -> None:
    name = pod["metadata"]["name"]

    def idle() -> dict | None:
        body = manage.workers("echo")
        return body if [w["status"] for w in body["workers"]] == ["IDLE"] else None

    body = wait_until(idle, "the pod IDLE (polling)", 60)
    [worker] = body["workers"]
    assert worker["id"] == name
    assert worker["image"] == pod["spec"]["containers"][0]["image"]
    assert (worker["gpuCount"], worker["gpuTypeId"]) == (0, None)  # a CPU endpoint, CPU node
    assert worker["startedAt"] and worker["uptimeSeconds"] >= 0
    assert body["summary"]["idle"] == body["summary"]["total"] == 1
    assert body["endpointVersion"] == 1


def test_the_pods_events_are_its_system_log(release: Release, manage: Manage, pod: dict) -> None:
    """Every Event the API holds about the pod is a line of its system log. Compared with
    what kubectl lists, not with a fixed set: the scheduler posts its `Scheduled` Event
    apart from the kubelet's, and a CI run once had none for the pod at all."""
    name = pod["metadata"]["name"]
    path = f"/v2/serverless/echo/workers/{name}/logs?source=system&tail=100"
    selector = f"involvedObject.kind=Pod,involvedObject.name={name}"

    def listed() -> list[dict] | None:
        out = release.node.kubectl(
            "-n", USER_NAMESPACE, "get", "events", "-o", "json", "--field-selector", selector
        )
        items = json.loads(out)["items"]
        return items if any(e["reason"] == "Started" for e in items) else None

    reasons = {e["reason"] for e in wait_until(listed, "the kubelet's Started Event", 60)}

    # Read on until a line of every reason kubectl listed has come (a missing one times out):
    # stopping at the first `Started` once cut off a `Scheduled` sorted after it.
    def has_all(got: list[dict]) -> bool:
        seen = [e["data"]["line"] for e in got]
        return all(any(line.startswith(f"{r}: ") for line in seen) for r in reasons)

    events = manage.events(path, has_all)
    lines = [e["data"]["line"] for e in events]
    for reason in reasons:
        assert any(line.startswith(f"{reason}: ") for line in lines), (reason, lines)
    assert {e["data"]["source"] for e in events} == {"system"}


def test_a_container_log_resumes_exactly_across_a_manage_restart(
    release: Release, manage: Manage, pod: dict
) -> None:
    name = pod["metadata"]["name"]
    for n in range(3):
        resp = requests.post(
            f"{release.gateway_url}/v2/echo/runsync?wait=60000",
            json={"input": {"n": n}},
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
            timeout=90,
        )
        assert resp.json()["status"] == "COMPLETED", resp.text
    path = f"/v2/serverless/echo/workers/{name}/logs?source=container&tail=5000"
    whole = manage.events(path, lambda got: sum("completed" in e["data"]["line"] for e in got) >= 3)
    assert len(whole) >= 6, whole
    cut = whole[len(whole) // 2]
    expected = whole[len(whole) // 2 + 1 :]
    resume = {"Last-Event-ID": cut["id"]}
    path = f"/v2/serverless/echo/workers/{name}/logs?source=container"
    assert manage.events(path, lambda got: len(got) >= len(expected), resume)[: len(expected)] == (
        expected
    )
    # the management API's pod replaced: the id names the same place (the kubelet's times)
    release.kubectl("rollout", "restart", f"deployment/{release.name}-manage")
    release.kubectl("rollout", "status", f"deployment/{release.name}-manage", "--timeout=120s")
    again = wait_until(
        lambda: _try(lambda: manage.events(path, lambda got: len(got) >= len(expected), resume)),
        "the new management API's answer",
        90,
    )
    assert again[: len(expected)] == expected


def _try(call: Any) -> Any:
    try:
        return call()
    except (requests.RequestException, AssertionError):
        return None
