"""Rate and concurrency limits on the load-balancing route, through the job API's limiter
(operation `lb`), against a real `lockgate dev --endpoint-type LB` and its worker
processes: 429 `{"error": ...}` with the job API's headers past each limit."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from lockgate.models.limits import DEFAULT_LIMITS, Operation
from tests.devproc import DevProcess
from tests.lb_dev import lb_dev, lb_url

RATE = 4  # requests per window on /lb/
WINDOW_S = 86_400  # windows are aligned to the clock: a day-long one keeps the test in one
LIMITS = {
    "lb": {"rate": RATE, "concurrency": 1, "requests_per_worker": 0},
    "health": {"rate": 1, "requests_per_worker": 0},  # a job API 429 to compare with
}


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    env = {
        "LOAD_SECONDS": "1",
        "LOCKGATE_RATE_LIMITS": json.dumps(LIMITS),
        "LOCKGATE_RATE_LIMIT_WINDOW_S": str(WINDOW_S),
    }
    with lb_dev(tmp_path_factory.mktemp("lbl"), "lbl", "--workers-max", "1", env=env) as proc:
        yield proc


def lb_counts(proc: DevProcess) -> dict[str, float]:
    """`lockgate_lb_requests_total` of the endpoint by code, and refusals by operation."""
    text = requests.get(f"{proc.url}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("endpoint") != proc.endpoint:
                continue
            if s.name == "lockgate_lb_requests_total":
                out[s.labels["code"]] = s.value
            elif s.name == "lockgate_rate_limited_total":
                out[f"refused {s.labels['operation']}"] = s.value
    return out


def test_the_lb_route_has_the_specs_openai_row_by_default() -> None:
    assert DEFAULT_LIMITS[Operation.LB] == DEFAULT_LIMITS[Operation.OPENAI]
    limit = DEFAULT_LIMITS[Operation.LB]
    assert (limit.rate, limit.concurrency, limit.requests_per_worker) == (2000, 400, 50)


def test_a_request_past_the_concurrency_limit_is_429_while_another_is_in_flight(
    lb: DevProcess,
) -> None:
    warm = requests.get(lb_url(lb, "echo/warm"), headers=lb.headers(), timeout=60)
    assert warm.status_code == 200, warm.text  # held through the cold start, then sent
    # An SSE answer whose last event waits for a release that never comes: its headers
    # arrived, so the request is in flight until this client hangs up.
    with requests.get(
        lb_url(lb, "sse?n=2&hold=never"), headers=lb.headers(), stream=True, timeout=60
    ) as streaming:
        assert streaming.status_code == 200
        refused = requests.get(lb_url(lb, "echo/second"), headers=lb.headers(), timeout=30)
        assert refused.status_code == 429, refused.text
        assert "/lb requests in flight" in refused.json()["error"]
        assert refused.headers["Retry-After"] == "1"
        assert "X-Runpod-Worker-Id" not in refused.headers  # no worker saw it
    # The client hung up: the gateway cancelled its upstream request and freed the slot.
    deadline = time.monotonic() + 30
    while (
        answer := requests.get(lb_url(lb, "echo/after"), headers=lb.headers(), timeout=30)
    ).status_code == 429 and time.monotonic() < deadline:
        assert "in flight" in answer.json()["error"]
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text


def test_requests_past_the_rate_are_429_with_the_job_apis_headers(lb: DevProcess) -> None:
    for _ in range(RATE + 1):  # earlier tests spent some of the window's requests
        answer = requests.get(lb_url(lb, "echo/rate"), headers=lb.headers(), timeout=30)
        if answer.status_code == 429:
            break
        assert answer.status_code == 200, answer.text
    assert answer.status_code == 429
    assert "too many /lb requests in this window" in answer.json()["error"]
    assert 1 <= int(answer.headers["Retry-After"]) <= WINDOW_S
    counts = lb_counts(lb)
    admitted = sum(n for code, n in counts.items() if code.isdigit() and code != "429")
    assert admitted == RATE  # every request the limiter let through, whatever its answer
    assert counts["429"] == counts["refused lb"] >= 2

    # The job API's 429 (its `health` is limited to 1 here) has the same headers.
    health = [requests.get(lb.job_url("health"), headers=lb.headers(), timeout=30)]
    health.append(requests.get(lb.job_url("health"), headers=lb.headers(), timeout=30))
    assert [h.status_code for h in health] == [200, 429]
    assert set(health[1].headers) == set(answer.headers)
    assert health[1].headers["Content-Type"] == answer.headers["Content-Type"]
