"""A load-balancing endpoint on a real node (issue 33): the example LB worker
(examples/loadbalancer, built by hack/images.sh) behind the gateway Service.

The operator builds the worker Deployment with the HTTP port and a readiness probe; the
scaler writes each pod's `podIP:PORT` to Redis; the gateway finds it there (it never asks
the Kubernetes API), holds the first request while the endpoint goes 0 -> 1, polls the
pod's `/ping` until 200 and proxies to it; the answer names the pod in
`X-Runpod-Worker-Id`. SSE arrives event by event through the gateway, and with no request
the endpoint goes back to zero.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from node_release import USER_NAMESPACE, Release, endpoint_status, wait_until, worker_pods

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

IMAGE = "registry.example.com/lockgate-lb-example:0.1.0"
NAME = "lb"
REQUEST_TIMEOUT_S = 30


class Lb:
    """The LB endpoint's URL through the gateway Service, with the client key."""

    def __init__(self, release: Release) -> None:
        self.url = f"{release.gateway_url}/lb/{NAME}"
        self.http = requests.Session()
        self.http.headers["authorization"] = release.client_key()

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.http.get(f"{self.url}{path}", timeout=kw.pop("timeout", 150), **kw)


@pytest.fixture(scope="module")
def lb(release: Release) -> Iterator[Lb]:
    meta = {"name": NAME, "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template", "metadata": meta,
                   "spec": {"image": IMAGE, "command": ["python", "-u", "/app/worker.py"],
                            "ports": ["8000/http"], "env": {"LOAD_SECONDS": "1"}}})  # fmt: skip
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                   "spec": {"templateId": NAME, "type": "LB", "scalerType": "REQUEST_COUNT",
                            "scalerValue": 4, "computeType": "CPU", "vcpuCount": 1,
                            "workersMin": 0, "workersMax": 1, "idleTimeout": 5,
                            "requestTimeoutS": REQUEST_TIMEOUT_S}})  # fmt: skip
    wait_until(lambda: endpoint_status(release, NAME).get("phase") == "Ready", f"{NAME} Ready")
    yield Lb(release)


@pytest.fixture(scope="module")
def first(release: Release, lb: Lb) -> tuple[requests.Response, list[dict[str, Any]]]:
    """The first request, sent while the endpoint has no worker; the pods after it."""
    assert worker_pods(release, NAME) == []
    try:
        answer = lb.get("/echo/hello?x=1", headers={"X-Test": "kept"})
    except requests.RequestException:
        print(release.describe())
        raise
    if answer.status_code != 200:
        print(release.describe())
    return answer, worker_pods(release, NAME)


def test_the_first_request_scales_from_zero_and_is_answered_by_the_new_pod(first) -> None:
    answer, pods = first
    assert answer.status_code == 200, answer.text
    assert [p["metadata"]["name"] for p in pods] == [answer.headers["X-Runpod-Worker-Id"]]
    seen = answer.json()
    assert seen["worker"] == answer.headers["X-Runpod-Worker-Id"]  # RUNPOD_POD_ID: the pod
    assert (seen["path"], seen["query"]) == ("/echo/hello", "x=1")
    assert seen["headers"]["x-test"] == "kept"
    assert "authorization" not in seen["headers"]  # the client's key never reaches a worker


def test_the_worker_pod_listens_on_the_templates_port_with_a_probe_and_grace(first) -> None:
    _, pods = first
    spec = pods[0]["spec"]
    container = spec["containers"][0]
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert (values["PORT"], values["PORT_HEALTH"], values["HEALTH_CHECK_PATH"]) == (
        "8000", "8000", "/ping",
    )  # fmt: skip
    assert container["readinessProbe"]["httpGet"]["port"] == 8000
    assert spec["terminationGracePeriodSeconds"] >= REQUEST_TIMEOUT_S


def test_only_the_gateways_pods_may_reach_the_workers_http_port(release: Release, first) -> None:
    """The operator's NetworkPolicy (the test node's bridge plugin stores it and does not
    enforce it: the selectors are what is checked)."""
    name = f"{NAME}-lb-workers"
    got = release.node.kubectl("-n", USER_NAMESPACE, "get", "networkpolicy", name, "-o", "json")
    policy = json.loads(got)
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    gateway = release.get("pods", "", "-l", "app.kubernetes.io/component=gateway")["items"][0]
    wanted = rule["from"][0]["podSelector"]["matchLabels"]
    assert wanted.items() <= gateway["metadata"]["labels"].items()
    worker = first[1][0]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= worker.items()


def test_server_sent_events_arrive_one_by_one_through_the_gateway(lb: Lb, first) -> None:
    events: list[str] = []
    got_first = threading.Event()

    def read() -> None:
        with lb.get("/sse?n=3&hold=node", stream=True, timeout=60) as answer:
            assert answer.status_code == 200
            for line in answer.iter_lines(chunk_size=1):
                if line.startswith(b"data:"):
                    events.append(line.decode())
                    got_first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # The last event waits for the release below: the first ones must arrive before it.
    assert got_first.wait(30), "no event arrived before the worker was told to finish"
    assert len(events) < 3
    released = lb.http.post(f"{lb.url}/release/node", timeout=30)
    assert released.status_code == 200, released.text
    reader.join(30)
    assert len(events) == 3, events


def test_with_no_request_the_endpoint_goes_back_to_zero(release: Release, first) -> None:
    def no_worker_pod() -> bool:
        return worker_pods(release, NAME, live=False) == []

    try:
        wait_until(no_worker_pod, "the idle LB worker pod to go", timeout=150, every=1)
    except AssertionError:
        print(release.describe())
        raise
