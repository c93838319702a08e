"""Load-balancing endpoints in dev mode, against real worker processes (the FastAPI
example): held through a cold start, requests and answers intact, limits, SSE, WebSocket,
failures, the job API refused."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import requests

from tests.devproc import REPO, DevProcess
from tests.lb_dev import lb_dev, lb_url


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """One `lockgate dev --endpoint-type LB` with the example worker, from zero workers."""
    env = {"LOAD_SECONDS": "1", "LOCKGATE_LB_DOMAIN": "lb.test"}
    args = ("--workers-max", "2", "--scaler-value", "1")
    with lb_dev(tmp_path_factory.mktemp("lb"), "lbx", *args, env=env) as proc:
        yield proc


def test_a_request_at_zero_workers_is_held_then_answered_once_ping_says_200(
    lb: DevProcess,
) -> None:
    answer = requests.get(lb_url(lb, "echo/first"), headers=lb.headers(), timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["path"] == "/echo/first"
    assert answer.headers["X-Runpod-Worker-Id"] == answer.json()["worker"]


def test_path_query_method_body_and_headers_arrive_and_the_key_does_not(lb: DevProcess) -> None:
    body = bytes(range(256)) * 4  # not JSON, not even text
    answer = requests.put(
        lb_url(lb, "echo/a/b%20c?x=1&y=%2F"),
        data=body,
        headers={**lb.headers(), "X-Custom": "kept", "Content-Type": "application/octet-stream"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["method"] == "PUT"
    assert seen["path"] == "/echo/a/b c"
    assert seen["query"] == "x=1&y=%2F"
    assert base64.b64decode(seen["body"]) == body
    assert seen["headers"]["x-custom"] == "kept"
    assert "authorization" not in seen["headers"]
    assert lb.key not in str(seen)
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert seen["headers"]["x-forwarded-proto"] == "http"
    assert seen["headers"]["x-forwarded-host"] == f"127.0.0.1:{lb.port}"


def test_the_host_form_reaches_the_worker_with_the_path_untouched(lb: DevProcess) -> None:
    host = {**lb.headers(), "Host": f"{lb.endpoint}.LB.test:{lb.port}"}
    answer = requests.get(f"{lb.url}/echo/hosted?q=1", headers=host, timeout=60)
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert (seen["path"], seen["query"]) == ("/echo/hosted", "q=1")
    assert answer.headers["X-Runpod-Worker-Id"] == seen["worker"]
    assert seen["headers"]["x-forwarded-host"] == f"{lb.endpoint}.LB.test:{lb.port}"
    # Every path is the worker's, the job API's included (the worker has no such route).
    job_api = requests.get(f"{lb.url}/v2/{lb.endpoint}/health", headers=host, timeout=60)
    assert job_api.status_code == 404 and "X-Runpod-Worker-Id" in job_api.headers
    counted = requests.get(f"{lb.url}/metrics", headers=lb.headers(), timeout=30).text
    # One route label for the host form, whatever path it carried.
    assert 'route="{endpoint}.<LOCKGATE_LB_DOMAIN>",status="404"' in counted
    assert (
        requests.get(f"{lb.url}/echo/x", headers={"Host": host["Host"]}, timeout=30).status_code
        == 401
    )


def test_other_hosts_route_as_usual(lb: DevProcess) -> None:
    for name in ("lb.test", "a.b.lb.test", f"{lb.endpoint}.lb.test.evil", "localhost"):
        headers = {**lb.headers(), "Host": name}
        answer = requests.get(f"{lb.url}/v2/{lb.endpoint}/health", headers=headers, timeout=30)
        assert answer.status_code == 200, (name, answer.text)  # the gateway's own /health
        assert "requests" in answer.json() and "X-Runpod-Worker-Id" not in answer.headers


@pytest.mark.parametrize(
    ("host", "endpoint"),
    [("chat.lb.example.com", "chat"), ("Chat.LB.Example.com:8443", "chat"),
     ("chat.lb.example.com.", "chat"), ("lb.example.com", None), ("a.chat.lb.example.com", None),
     ("chat.lb.example.org", None), ("-x.lb.example.com", None), (None, None)],
)  # fmt: skip
def test_the_host_names_one_endpoint_label_under_the_domain(host, endpoint) -> None:
    from lockgate.gateway.lb_proxy import host_endpoint

    assert host_endpoint(host, "lb.example.com") == endpoint
    assert host_endpoint(host, "") is None


def test_a_body_over_30_mb_is_413(lb: DevProcess) -> None:
    big = b"x" * (30 * 1024 * 1024 + 1)
    answer = requests.post(lb_url(lb, "echo/big"), data=big, headers=lb.headers(), timeout=60)
    assert answer.status_code == 413
    assert "30 MB" in answer.json()["error"]


def test_no_key_is_401(lb: DevProcess) -> None:
    answer = requests.get(lb_url(lb, "echo/x"), timeout=30)
    assert answer.status_code == 401


def test_sse_events_arrive_one_by_one(lb: DevProcess) -> None:
    """The worker produces its last event only after the client saw the first one and
    said so: a gateway that buffered the answer would never let the client say it."""
    with requests.get(
        lb_url(lb, "sse?n=3&hold=t1"), headers=lb.headers(), stream=True, timeout=60
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        worker = answer.headers["X-Runpod-Worker-Id"]
        lines = answer.iter_lines()
        first = next(line for line in lines if line)
        assert b'"i": 0' in first
        released = requests.post(
            lb_url(lb, "release/t1"),
            headers={**lb.headers(), "X-Runpod-Worker-Id": f"strict {worker}"},
            timeout=30,
        )
        assert released.status_code == 200
        rest = [line for line in lines if line]
        assert b'"i": 2' in rest[-1]


async def test_websocket_messages_are_relayed(lb: DevProcess) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(lb_url(lb, "ws"), headers=lb.headers()) as ws,
    ):
        await ws.send_str("hello")
        assert (await ws.receive_str()) == "echo: hello"


def test_the_job_api_on_an_lb_endpoint_is_400_naming_its_type(lb: DevProcess) -> None:
    for method, path in [("POST", "run"), ("POST", "runsync"), ("GET", "status/x")]:
        answer = requests.request(
            method, lb.job_url(path), json={"input": {}}, headers=lb.headers(), timeout=30
        )
        assert answer.status_code == 400, (path, answer.text)
        assert "type LB" in answer.json()["error"]


def test_health_counts_requests_and_workers(lb: DevProcess) -> None:
    """Once every earlier request (and WebSocket) ended, nothing is held or in flight."""
    for _ in range(200):  # reports reach Redis shortly after a request ends
        health = requests.get(lb.job_url("health"), headers=lb.headers(), timeout=30).json()
        if health["requests"] == {"held": 0, "inFlight": 0}:
            break
        threading.Event().wait(0.05)
    assert health["requests"] == {"held": 0, "inFlight": 0}
    assert health["workers"]["idle"] + health["workers"]["running"] >= 1


def test_concurrent_slow_requests_scale_up_to_workers_max(lb: DevProcess) -> None:
    """scalerValue 1, workersMax 2: two requests in flight ask for two workers; while
    they run, more requests spread over both."""
    seen: set[str] = set()
    lock = threading.Lock()

    def call() -> None:
        answer = requests.get(lb_url(lb, "slow?s=1.5"), headers=lb.headers(), timeout=90)
        assert answer.status_code == 200, answer.text
        with lock:
            seen.add(answer.headers["X-Runpod-Worker-Id"])

    for _ in range(6):  # waves until both workers served (the second one starts meanwhile)
        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(seen) >= 2:
            break
    assert len(seen) == 2, seen
    assert len(lb.workers()) == 2


def test_a_worker_killed_mid_answer_is_502_then_the_next_request_is_served(
    lb: DevProcess,
) -> None:
    first = requests.get(lb_url(lb, "echo/who"), headers=lb.headers(), timeout=60)
    victim_id = first.headers["X-Runpod-Worker-Id"]
    victim = next(w for w in lb.workers() if w.environ().get("RUNPOD_POD_ID") == victim_id)
    result: dict = {}

    def call() -> None:
        headers = {**lb.headers(), "X-Runpod-Worker-Id": f"strict {victim_id}"}
        result["answer"] = requests.get(lb_url(lb, "slow?s=60"), headers=headers, timeout=90)

    t = threading.Thread(target=call)
    t.start()
    for _ in range(400):  # until the gateway reports the request in flight
        health = requests.get(lb.job_url("health"), headers=lb.headers(), timeout=30).json()
        if health["requests"]["inFlight"] >= 1:
            break
        threading.Event().wait(0.05)
    # In flight counts from when the worker was chosen, a moment before the request is
    # written to it; killed before that, the request was not sent and is held for the
    # strict worker (test_lb_retry.py), not answered 502.
    threading.Event().wait(0.5)
    victim.kill()
    t.join(60)
    answer = result["answer"]
    assert answer.status_code == 502
    assert answer.headers["X-Runpod-Worker-Id"] == victim_id
    assert "did not answer" in answer.json()["error"]
    after = requests.get(lb_url(lb, "echo/after"), headers=lb.headers(), timeout=60)
    assert after.status_code == 200
    assert after.headers["X-Runpod-Worker-Id"] != victim_id


def test_a_queue_endpoint_refuses_the_lb_route(tmp_path: Path) -> None:
    handler = str(REPO / "examples" / "echo" / "handler.py")
    proc = DevProcess(handler, "--endpoint-id", "q1", data_dir=tmp_path).start()
    try:
        answer = requests.get(lb_url(proc, "anything"), headers=proc.headers(), timeout=30)
        assert answer.status_code == 400
        assert "type QUEUE" in answer.json()["error"]
    finally:
        proc.stop()


def test_a_worker_that_never_turns_healthy_is_503_after_the_hold_and_unhealthy(
    tmp_path: Path,
) -> None:
    command = f"python {REPO / 'tests' / 'workers' / 'lb_unhealthy.py'}"
    proc = DevProcess(
        "--worker-command", command, "--endpoint-id", "sick", "--endpoint-type", "LB",
        data_dir=tmp_path, env={"LOCKGATE_LB_HOLD_S": "3"},
    )  # fmt: skip
    proc.start()
    try:
        answer = requests.get(lb_url(proc, "x"), headers=proc.headers(), timeout=60)
        assert answer.status_code == 503
        assert "Retry-After" in answer.headers
        assert "no worker became healthy" in answer.json()["error"]
        assert "503" in answer.json()["error"]  # the code its health check answered
        assert "held 3 s (LOCKGATE_LB_HOLD_S)" in answer.json()["error"]  # no lbHoldS
        health = requests.get(proc.job_url("health"), headers=proc.headers(), timeout=30)
        body = health.json()
        assert body["workers"]["unhealthy"] >= 1
        assert 503 in body["unhealthyCodes"].values()
    finally:
        proc.stop()


def test_the_openai_sdk_streams_a_chat_completion_through_the_lb_route(lb: DevProcess) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=lb_url(lb, "v1"), api_key=lb.key, max_retries=0)
    stream = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": "one two three"}], stream=True
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len([p for p in pieces if p]) == 3
    assert "".join(pieces) == "one two three"


def test_answers_of_known_length_arrive_whole_below_and_above_the_one_write_size(
    lb: DevProcess,
) -> None:
    """Up to 64 KB an answer is read whole and sent in one write; above, streamed: both
    arrive intact with their length."""
    for size in (10, 200_000):  # the echo answers its body base64: ~0.3 KB and ~267 KB
        body = bytes(range(256)) * (size // 256 + 1)
        answer = requests.post(lb_url(lb, "echo/size"), data=body, headers=lb.headers(), timeout=60)
        assert answer.status_code == 200, answer.text
        assert int(answer.headers["Content-Length"]) == len(answer.content)
        assert base64.b64decode(answer.json()["body"]) == body


def test_a_client_that_goes_away_cancels_its_upstream_request(lb: DevProcess) -> None:
    """A client hangs up while its stream waits for an event the worker only sends when
    told (never, here): the request is no longer in flight, so the gateway cancelled it."""

    def in_flight() -> int:
        health = requests.get(lb.job_url("health"), headers=lb.headers(), timeout=30).json()
        return health["requests"]["inFlight"]

    requests.get(lb_url(lb, "echo/warm"), headers=lb.headers(), timeout=60)  # a worker is up
    for _ in range(200):  # earlier tests' requests have ended
        if in_flight() == 0:
            break
        threading.Event().wait(0.05)
    with socket.create_connection(("127.0.0.1", lb.port)) as client:
        client.sendall(
            f"GET /lb/{lb.endpoint}/sse?n=2&hold=gone HTTP/1.1\r\nHost: x\r\n"
            f"authorization: {lb.key}\r\n\r\n".encode()
        )
        for _ in range(200):
            if in_flight() >= 1:
                break
            threading.Event().wait(0.05)
        assert in_flight() >= 1
    started = time.monotonic()
    while in_flight() and time.monotonic() - started < 10:
        threading.Event().wait(0.05)
    assert in_flight() == 0


def test_a_cookie_one_client_was_set_never_reaches_the_worker_for_another(
    lb: DevProcess,
) -> None:
    """The gateway passes `Set-Cookie` to its client and keeps nothing: the next request
    (another client's, same worker) arrives without a `Cookie`."""
    first = requests.get(lb_url(lb, "set-cookie?v=secret1"), headers=lb.headers(), timeout=60)
    assert first.status_code == 200
    assert "session=secret1" in first.headers["Set-Cookie"]
    same = {**lb.headers(), "X-Runpod-Worker-Id": f"strict {first.headers['X-Runpod-Worker-Id']}"}
    seen = requests.get(lb_url(lb, "echo/next"), headers=same, timeout=60).json()
    assert "cookie" not in seen["headers"]
    assert "secret1" not in str(seen)


def test_the_header_lines_sent_upstream_drop_hop_by_hop_key_and_framing() -> None:
    """`upstream_lines` on a request as aiohttp parsed it: the client's bytes as sent,
    without hop-by-hop headers (and those `Connection` names), the key, Host, Expect and
    Content-Length; every `X-Forwarded-For` joined, the client's address last."""
    from aiohttp.test_utils import make_mocked_request
    from multidict import CIMultiDict

    from lockgate.gateway.lb_proxy import upstream_lines

    headers = CIMultiDict(
        [
            ("Host", "api.example:8080"), ("Authorization", "Bearer secret"),
            ("Connection", "keep-alive, X-Private"), ("X-Private", "p"), ("Keep-Alive", "5"),
            ("Transfer-Encoding", "chunked"), ("Content-Length", "3"), ("Expect", "100-continue"),
            ("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "10.0.0.2"),
            ("X-Forwarded-Proto", "https"), ("Cookie", "a=1"), ("X-Twice", "1"), ("X-Twice", "2"),
        ]
    )  # fmt: skip
    request = make_mocked_request("POST", "/lb/ep/x", headers=headers)
    lines = upstream_lines(request).split(b"\r\n")
    assert lines[-1] == b""
    assert lines[:-1] == [
        b"X-Forwarded-Proto: https", b"Cookie: a=1", b"X-Twice: 1", b"X-Twice: 2",
        b"X-Forwarded-For: 10.0.0.1, 10.0.0.2, ", b"X-Forwarded-Host: api.example:8080",
    ]  # fmt: skip
