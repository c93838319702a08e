"""A load-balancing endpoint on a real node (issue 33): the example LB worker
(examples/loadbalancer, built by hack/images.sh) behind the gateway Service.

The operator builds the worker Deployment with the HTTP port and a readiness probe; the
scaler writes each pod's `podIP:PORT` to Redis; the gateway finds it there (it never asks
the Kubernetes API), holds the first request while the endpoint goes 0 -> 1, polls the
pod's `/ping` until 200 and proxies to it; the answer names the pod in
`X-Runpod-Worker-Id`. SSE arrives event by event and a WebSocket is relayed through the
gateway; a burst of slow requests scales to workersMax pods; a scale-down that must remove
a pod with a request in flight, and a pod deleted mid-request, let that request finish
(the pod gets SIGTERM, its uvicorn drains within the grace period, the gateway routes the
next request elsewhere); with no request the endpoint goes back to zero. Last, the host
form: upgraded with `gateway.lbDomain` and the Ingress, the Ingress object routes
`*.<domain>` to the gateway, and `Host: <endpoint>.<domain>` reaches the worker.

One endpoint serves every test, in file order (its pods carry over from test to test):
each pod start costs seconds here.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import requests
from websockets.sync.client import connect

from node_release import (
    LB_PORT,
    USER_NAMESPACE,
    Release,
    apply_lb_endpoint,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

NAME = "lb"
REQUEST_TIMEOUT_S = 30
DOMAIN = "lb.example.test"  # gateway.lbDomain, in the last test


class Lb:
    """The LB endpoint's URL through the gateway Service, with the client key."""

    def __init__(self, release: Release) -> None:
        self.key = release.client_key()
        self.health_url = f"{release.gateway_url}/v2/{NAME}/health"
        self.url = f"{release.gateway_url}/lb/{NAME}"
        self.http = self.session()

    def session(self) -> requests.Session:
        """A client with the key (one per thread: a Session is not thread-safe)."""
        http = requests.Session()
        http.headers["authorization"] = self.key
        return http

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.http.get(f"{self.url}{path}", timeout=kw.pop("timeout", 150), **kw)

    def in_flight(self) -> int:
        """Requests in flight at the endpoint, as `/health` reports them."""
        return self.http.get(self.health_url, timeout=10).json()["requests"]["inFlight"]

    def slow(self, pool: ThreadPoolExecutor, seconds: float, worker: str) -> Future:
        """`GET /slow` on that worker only (strict affinity), in the background."""
        headers = {"X-Runpod-Worker-Id": f"strict {worker}"}
        return pool.submit(
            lambda: self.session().get(f"{self.url}/slow?s={seconds}", headers=headers, timeout=90)
        )


def patch_endpoint(release: Release, **spec: Any) -> None:
    """Change the LB Endpoint's spec as a user would (`kubectl patch`)."""
    release.node.kubectl("-n", USER_NAMESPACE, "patch", "endpoints.lockgate.dev", NAME,
                         "--type", "merge", "-p", json.dumps({"spec": spec}))  # fmt: skip


def names(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def stopped_listening(pod: dict[str, Any]) -> bool:
    """Whether the pod's server refuses new connections (its uvicorn got SIGTERM and
    drains; the test host reaches pod addresses on the node's bridge)."""
    try:
        with socket.create_connection((pod["status"]["podIP"], LB_PORT), timeout=1):
            return False
    except OSError:
        return True


def replicas(release: Release) -> int:
    deployment = json.loads(release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "deployment", f"{NAME}-workers", "-o", "json"
    ))  # fmt: skip
    return deployment["spec"]["replicas"]


@pytest.fixture(scope="module")
def lb(release: Release) -> Iterator[Lb]:
    apply_lb_endpoint(release, NAME, load_seconds=1, requestTimeoutS=REQUEST_TIMEOUT_S)
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


def test_a_websocket_is_relayed_through_the_gateway(lb: Lb, release: Release, first) -> None:
    url = lb.url.replace("http://", "ws://", 1) + "/ws"
    with connect(url, additional_headers={"authorization": lb.key}, open_timeout=150) as ws:
        for text in ("hello", "again"):
            ws.send(text)
            assert ws.recv(timeout=30) == f"echo: {text}"
        worker = ws.response.headers["X-Runpod-Worker-Id"]
    assert worker in names(worker_pods(release, NAME, live=False))


BURST_CLIENTS = 3  # more than workersMax: the cap is what stops the scale-up


@pytest.fixture(scope="module")
def burst(release: Release, lb: Lb, first) -> tuple[set[str], int]:
    """Slow requests from `BURST_CLIENTS` clients at once, with workersMax 2 and a worker
    per request, until two workers have answered: (the worker ids that answered, the
    Deployment's replica count then)."""
    patch_endpoint(release, workersMax=2, scalerValue=1)
    seen: set[str] = set()
    errors: list[str] = []
    done = threading.Event()

    def client() -> None:
        http = lb.session()
        while not done.is_set():
            answer = http.get(f"{lb.url}/slow?s=1", timeout=150)
            if answer.status_code != 200:
                errors.append(f"{answer.status_code} {answer.text}")
                done.set()
                return
            seen.add(answer.headers["X-Runpod-Worker-Id"])
            if len(seen) >= 2:
                done.set()

    with ThreadPoolExecutor(BURST_CLIENTS) as pool:
        clients = [pool.submit(client) for _ in range(BURST_CLIENTS)]
        if not done.wait(150):
            print(release.describe())
        count = replicas(release)
        done.set()
        for c in clients:
            c.result()
    assert not errors, errors
    return seen, count


def test_a_burst_of_slow_requests_scales_to_workers_max_pods(release: Release, burst) -> None:
    seen, count = burst
    assert len(seen) == 2, f"one worker answered every request: {seen}"
    assert seen <= names(worker_pods(release, NAME, live=False))
    assert count == 2  # three clients, one worker per request, but workersMax is 2


def test_a_scale_down_lets_the_requests_in_flight_finish(release: Release, lb: Lb, burst) -> None:
    """Both pods busy, workersMax lowered to 1: no pod is idle, so the ReplicaSet deletes
    a busy one; its request still completes (SIGTERM, uvicorn drains, grace period)."""
    pair, _ = burst
    pods = {p["metadata"]["name"]: p for p in worker_pods(release, NAME)}
    assert set(pods) == pair
    with ThreadPoolExecutor(2) as pool:
        answers = {w: lb.slow(pool, 8, w) for w in sorted(pair)}
        wait_until(lambda: lb.in_flight() >= 2, "both slow requests in flight", every=0.1)
        patch_endpoint(release, workersMax=1)

        def leaving() -> set[str]:
            return pair - names(worker_pods(release, NAME))

        try:
            [gone] = wait_until(leaving, "a pod to be removed by the scale-down", 60, every=0.2)
            wait_until(lambda: stopped_listening(pods[gone]), f"{gone} to get SIGTERM", every=0.1)
        except AssertionError:
            print(release.describe())
            raise
        assert not any(a.done() for a in answers.values()), "the scale-down came too late"
        for worker, answer in answers.items():
            got = answer.result()
            assert got.status_code == 200, f"{worker}: {got.status_code} {got.text}"
            assert got.json() == {"worker": worker, "slept": 8}


def test_a_pod_deleted_mid_request_finishes_it_and_the_next_goes_elsewhere(
    release: Release, lb: Lb, first
) -> None:
    [pod] = wait_until(lambda: worker_pods(release, NAME), "a worker pod", 60)
    victim = pod["metadata"]["name"]
    with ThreadPoolExecutor(1) as pool:
        answer = lb.slow(pool, 5, victim)
        wait_until(lambda: lb.in_flight() >= 1, "the slow request in flight", every=0.1)
        release.node.kubectl("-n", USER_NAMESPACE, "delete", "pod", victim, "--wait=false")
        wait_until(lambda: stopped_listening(pod), f"{victim} to get SIGTERM", every=0.1)
        assert not answer.done(), "the request ended before its pod got SIGTERM"
        got = answer.result()
    assert got.status_code == 200, got.text  # drained, not cut: the promise
    assert got.json() == {"worker": victim, "slept": 5}
    after = lb.get("/echo/after")
    assert after.status_code == 200, after.text
    assert after.headers["X-Runpod-Worker-Id"] != victim  # the Deployment's replacement


def test_with_no_request_the_endpoint_goes_back_to_zero(release: Release, first) -> None:
    def no_worker_pod() -> bool:
        return worker_pods(release, NAME, live=False) == []

    try:
        wait_until(no_worker_pod, "the idle LB worker pod to go", timeout=150, every=1)
    except AssertionError:
        print(release.describe())
        raise


def test_the_ingress_host_form_reaches_the_worker_with_the_path_untouched(
    release: Release, lb: Lb, first
) -> None:
    """`gateway.lbDomain` with the Ingress: the apiserver holds a rule for `*.<domain>` to
    the gateway Service's job API port, and a request to the Service with `Host:
    <endpoint>.<domain>` (what an ingress controller sends; this node runs none) reaches
    the worker with its path as sent (the gateway got LOCKGATE_LB_DOMAIN). From zero again:
    the last test let the endpoint go."""
    release.upgrade("--set", "gateway.ingress.enabled=true", "--set", f"gateway.lbDomain={DOMAIN}")
    service = release.get("service", f"{release.name}-gateway")
    job_api_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    ingress = release.get("ingress", f"{release.name}-gateway")
    [wildcard] = [r for r in ingress["spec"]["rules"] if r.get("host") == f"*.{DOMAIN}"]
    [path] = wildcard["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    backend = path["backend"]["service"]
    assert backend == {"name": f"{release.name}-gateway", "port": {"number": job_api_port}}

    answer = lb.http.get(
        f"{release.gateway_url}/echo/by-host?y=2", headers={"Host": f"{NAME}.{DOMAIN}"},
        timeout=150,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert (seen["path"], seen["query"]) == ("/echo/by-host", "y=2")
    assert seen["worker"] == answer.headers["X-Runpod-Worker-Id"]
    assert "authorization" not in seen["headers"]
