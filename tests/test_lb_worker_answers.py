"""Answers no framework would send, from a raw worker (tests/workers/lb_raw.py), through a
real `lockgate dev`: a head past aiohttp's client's limits is 502 with the gateway's
memory bounded and its other routes served meanwhile; the health poll never reads a
large `/ping` body; the worker gets the path that was routed; answers of any size are
streamed whole (issue 45, items 1, 2, 6, 7)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.devproc import REPO, DevProcess
from tests.lb_dev import lb_url

MB = 1024 * 1024
PING_BYTES = 1000 * MB  # every health poll's answer: 200 and a 1,000 MB body
GROWTH_MAX = 64 * MB  # the gateway's peak RSS over its start, whatever the workers send


def peak_rss(proc: DevProcess) -> int:
    """The dev process's (the gateway's) peak resident set, VmHWM, in bytes."""
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` with an LB endpoint `raw` of the raw worker; `raw.start_rss` is its
    peak RSS once started, before any worker."""
    command = f"python {REPO / 'tests' / 'workers' / 'lb_raw.py'}"
    proc = DevProcess(
        "--worker-command", command, "--endpoint-id", "raw", "--endpoint-type", "LB",
        "--idle-timeout", "60", data_dir=tmp_path_factory.mktemp("lbraw"),
        env={"PING_BYTES": str(PING_BYTES), "LOCKGATE_LB_DOMAIN": "lb.test"},
    )  # fmt: skip
    proc.start()
    proc.start_rss = peak_rss(proc)
    try:
        requests.get(lb_url(proc, "target/warm"), headers=proc.headers(), timeout=60)
        yield proc
    finally:
        proc.stop()


def assert_memory_bounded(proc: DevProcess) -> None:
    grown = peak_rss(proc) - proc.start_rss
    assert grown < GROWTH_MAX, f"the gateway's peak RSS grew {grown / MB:.0f} MB"


def test_the_health_poll_never_reads_a_large_ping_body(raw: DevProcess) -> None:
    """Every poll answers 200 with a 1,000 MB body: the worker is routable (the status is
    all a poll needs), the gateway takes little of any body before it closes the
    connection, and its memory stays where it was."""
    seen = requests.get(lb_url(raw, "pings"), headers=raw.headers(), timeout=60).json()
    for _ in range(200):  # ~2 s between polls of a healthy worker: three more
        now = requests.get(lb_url(raw, "pings"), headers=raw.headers(), timeout=60)
        assert now.status_code == 200, now.text
        if now.json()["pings"] >= seen["pings"] + 3:
            break
        threading.Event().wait(0.1)
    stats = now.json()
    assert stats["pings"] >= seen["pings"] + 3
    assert stats["written"] < 32 * MB  # of 1,000 MB: the sockets' buffers at most
    assert_memory_bounded(raw)


def test_a_100_mb_header_value_is_502_while_the_gateway_serves_other_calls(
    raw: DevProcess,
) -> None:
    """The worker sends one header value of 100 MB and never ends its head: the client
    gets 502 once the value is past 8190 bytes (not the whole head read, nor the request
    timeout waited for); the gateway's own routes answer meanwhile, and its memory stays
    bounded."""
    result: dict[str, requests.Response] = {}

    def call() -> None:
        result["answer"] = requests.get(
            lb_url(raw, f"big-header?bytes={100 * MB}"), headers=raw.headers(), timeout=60
        )

    caller = threading.Thread(target=call)
    caller.start()
    health = []
    while caller.is_alive() or not health:
        health.append(requests.get(raw.job_url("health"), headers=raw.headers(), timeout=60))
    caller.join(90)
    assert [h.status_code for h in health] == [200] * len(health)
    answer = result["answer"]
    assert answer.status_code == 502, answer.text
    assert "over 8190 bytes" in answer.json()["error"]
    assert_memory_bounded(raw)


def test_a_hundred_thousand_answer_headers_are_502(raw: DevProcess) -> None:
    answer = requests.get(lb_url(raw, "many-headers?n=100000"), headers=raw.headers(), timeout=60)
    assert answer.status_code == 502, answer.text
    assert "more than 128 headers" in answer.json()["error"]
    fine = requests.get(lb_url(raw, "many-headers?n=90"), headers=raw.headers(), timeout=60)
    assert fine.status_code == 200 and fine.text == "ok"
    assert sum(k.startswith("X-") and k[2:].isdigit() for k in fine.headers) == 90


def sent_raw(proc: DevProcess, target: str, host: str = "127.0.0.1") -> tuple[int, bytes]:
    """GET `target` written as is on a socket: the status and body."""
    with socket.create_connection(("127.0.0.1", proc.port), timeout=60) as client:
        client.sendall(
            f"GET {target} HTTP/1.1\r\nHost: {host}\r\nauthorization: {proc.key}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize(
    ("target", "host", "forwarded"),
    [("http://attacker.example/lb/raw/target/a?q", "127.0.0.1", "/target/a?q"),
     ("/lb/r%61w/target/b", "127.0.0.1", "/target/b"),
     ("/lb/raw/target/c?x=1#fragment", "127.0.0.1", "/target/c?x=1"),
     ("/lb/raw/target/d%2Fe%20f//g?y=%2F&z", "127.0.0.1", "/target/d%2Fe%20f//g?y=%2F&z"),
     ("/target/h?q#fragment", "raw.lb.test", "/target/h?q"),
     ("http://raw.lb.test/target/i?q", "127.0.0.1", "/target/i?q")],
    ids=["absolute-form", "encoded endpoint", "fragment", "encoding kept", "host form",
         "host form, absolute"],
)  # fmt: skip
def test_the_worker_gets_the_path_that_was_routed(
    raw: DevProcess, target: str, host: str, forwarded: str
) -> None:
    status, body = sent_raw(raw, target, host)
    assert (status, body.decode()) == (200, forwarded)


@pytest.mark.parametrize("chunked", [False, True], ids=["Content-Length", "chunked"])
def test_an_answer_over_30_mb_is_streamed_whole(raw: DevProcess, chunked: bool) -> None:
    """No size cap on answers (docs/load-balancing.md): one of 40 MB, with a length or
    chunked, arrives whole, streamed (the gateway's memory stays bounded)."""
    size = 40 * MB
    url = lb_url(raw, f"large?bytes={size}" + ("&chunked=1" if chunked else ""))
    with requests.get(url, headers=raw.headers(), stream=True, timeout=60) as answer:
        assert answer.status_code == 200
        got = sum(len(c) for c in answer.iter_content(MB) if c.strip(b"c") == b"")
    assert got == size
    assert_memory_bounded(raw)
