"""CORS on the load-balancing route, against dev mode and the real example worker doing
its own CORS for every origin: the gateway answers only the origins of
`LOCKGATE_CORS_ALLOW_ORIGINS`, the worker everyone else, and no CORS header is repeated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from lockgate.gateway.cors import lb_preflight_headers, merged_list
from tests.devproc import DevProcess
from tests.lb_dev import lb_dev, lb_url

CONSOLE = "http://console.test:8081"  # allowed by the gateway
OTHER = "https://elsewhere.example"  # not: the worker's CORS answers it


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    env = {
        "LOAD_SECONDS": "0",
        "LOCKGATE_CORS_ALLOW_ORIGINS": f'["{CONSOLE}"]',
        "CORS_ALLOW_ORIGINS": "*",  # the example worker's own CORS
        "LOCKGATE_LB_DOMAIN": "lb.test",
    }
    with lb_dev(tmp_path_factory.mktemp("lbcors"), "lbcors", env=env) as proc:
        requests.get(lb_url(proc, "echo/warm"), headers=proc.headers(), timeout=60)
        yield proc


def _preflight(origin: str, method: str = "PUT") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "Authorization, Content-Type, X-Custom",
    }


def _one(answer: requests.Response, name: str) -> str:
    """The header's only value (requests joins repeated headers with ", ")."""
    values = answer.raw.headers.getlist(name)
    assert len(values) == 1, (name, values)
    return values[0]


def test_a_preflight_from_an_allowed_origin_is_answered_by_the_gateway(lb: DevProcess) -> None:
    answer = requests.options(lb_url(lb, "echo/x"), headers=_preflight(CONSOLE), timeout=30)
    assert answer.status_code == 204, answer.text  # no key sent: a 401 would mean the route
    assert "X-Runpod-Worker-Id" not in answer.headers  # never reached a worker
    assert _one(answer, "Access-Control-Allow-Origin") == CONSOLE
    assert _one(answer, "Access-Control-Allow-Methods") == "PUT"
    allowed = {h.strip().lower() for h in _one(answer, "Access-Control-Allow-Headers").split(",")}
    assert {"authorization", "content-type", "x-custom", "x-runpod-worker-id"} <= allowed
    assert "origin" in answer.headers["Vary"].lower()


def test_the_host_form_takes_part_too(lb: DevProcess) -> None:
    host = {"Host": f"{lb.endpoint}.lb.test:{lb.port}"}
    url = f"{lb.url}/echo/hosted"
    answer = requests.options(url, headers={**host, **_preflight(CONSOLE, "POST")}, timeout=30)
    assert answer.status_code == 204, answer.text
    assert _one(answer, "Access-Control-Allow-Methods") == "POST"
    answer = requests.post(url, headers={**host, **lb.headers(), "Origin": CONSOLE}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert _one(answer, "Access-Control-Allow-Origin") == CONSOLE
    assert "x-runpod-worker-id" in answer.headers["Access-Control-Expose-Headers"].lower()
    other = requests.options(url, headers={**host, **_preflight(OTHER)}, timeout=30)
    assert other.status_code == 401  # the worker's to answer, once the key is checked


def test_a_preflight_from_another_origin_reaches_the_worker(lb: DevProcess) -> None:
    headers = _preflight(OTHER)
    refused = requests.options(lb_url(lb, "echo/x"), headers=headers, timeout=30)
    assert refused.status_code == 401  # the LB route's key check, as for any request
    answer = requests.options(lb_url(lb, "echo/x"), headers={**headers, **lb.headers()}, timeout=30)
    assert answer.status_code == 200, answer.text  # Starlette's pre-flight answer
    assert answer.headers["X-Runpod-Worker-Id"]
    assert _one(answer, "Access-Control-Allow-Origin") == "*"  # the worker's, untouched


def test_an_options_without_a_requested_method_reaches_the_worker(lb: DevProcess) -> None:
    headers = {**lb.headers(), "Origin": CONSOLE}
    answer = requests.options(lb_url(lb, "echo/plain"), headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["method"] == "OPTIONS"
    assert _one(answer, "Access-Control-Allow-Origin") == CONSOLE


def test_an_actual_request_from_an_allowed_origin_carries_one_set_of_cors_headers(
    lb: DevProcess,
) -> None:
    headers = {**lb.headers(), "Origin": CONSOLE}
    answer = requests.put(lb_url(lb, "echo/a"), data=b"x", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["headers"]["origin"] == CONSOLE  # the worker sees the origin
    assert _one(answer, "Access-Control-Allow-Origin") == CONSOLE  # the gateway's wins
    exposed = [h.strip().lower() for h in _one(answer, "Access-Control-Expose-Headers").split(",")]
    assert sorted(exposed) == sorted({"x-worker-own", "x-runpod-worker-id", "retry-after"})
    vary = [v.strip().lower() for v in _one(answer, "Vary").split(",")]
    assert vary.count("origin") == 1


def test_gateway_errors_to_an_allowed_origin_carry_the_header(lb: DevProcess) -> None:
    answer = requests.get(lb_url(lb, "echo/a"), headers={"Origin": CONSOLE}, timeout=30)
    assert answer.status_code == 401  # the page can read why
    assert _one(answer, "Access-Control-Allow-Origin") == CONSOLE


def test_answers_to_other_origins_carry_the_workers_cors_only(lb: DevProcess) -> None:
    headers = {**lb.headers(), "Origin": OTHER}
    answer = requests.get(lb_url(lb, "echo/a"), headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert _one(answer, "Access-Control-Allow-Origin") == "*"
    assert _one(answer, "Access-Control-Expose-Headers").lower() == "x-worker-own"


def test_merged_lists_keep_each_name_once() -> None:
    assert merged_list("Origin, Accept-Encoding", "origin", "", "X-A") == (
        "Origin, Accept-Encoding, X-A"
    )
    headers = lb_preflight_headers("*", "DELETE", "")
    assert headers["Access-Control-Allow-Methods"] == "DELETE"
    assert (
        headers["Access-Control-Allow-Headers"] == "authorization, content-type, x-runpod-worker-id"
    )
    assert "Origin" not in headers["Vary"]  # "*" does not vary by origin
