"""Load-balancing metrics on `/metrics`, against a real `lockgate dev --endpoint-type LB`
with the example worker: a request held through the cold start, then proxied ones, move
the request counter by code, the hold histogram and the upstream histogram."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.devproc import DevProcess
from tests.lb_dev import lb_dev


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev --endpoint-type LB` from zero workers; the worker loads for 1 s."""
    data = tmp_path_factory.mktemp("lbm")
    with lb_dev(data, "lbm", "--workers-max", "1", env={"LOAD_SECONDS": "1"}) as proc:
        yield proc


def scrape(proc: DevProcess) -> dict[tuple[str, frozenset], float]:
    """Every sample of the gateway's `/metrics`, by name and label set."""
    text = requests.get(f"{proc.url}/metrics", timeout=30).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_held_request_and_proxied_ones_move_the_lb_metrics(lb: DevProcess) -> None:
    ep = lb.endpoint
    before = scrape(lb)
    assert value(before, "lockgate_lb_hold_seconds_count", endpoint=ep) == 0
    held = requests.get(f"{lb.url}/lb/{ep}/echo/held", headers=lb.headers(), timeout=60)
    assert held.status_code == 200, held.text  # held from zero workers, then sent
    proxied = requests.get(f"{lb.url}/lb/{ep}/echo/warm", headers=lb.headers(), timeout=30)
    assert proxied.status_code == 200
    missing = requests.get(f"{lb.url}/lb/{ep}/no-such-route", headers=lb.headers(), timeout=30)
    assert missing.status_code == 404  # the worker's own answer

    after = scrape(lb)
    assert value(after, "lockgate_lb_requests_total", endpoint=ep, code="200") == 2
    assert value(after, "lockgate_lb_requests_total", endpoint=ep, code="404") == 1
    # only the first request found no routable worker; it waited through the 1 s load
    assert value(after, "lockgate_lb_hold_seconds_count", endpoint=ep) == 1
    assert value(after, "lockgate_lb_hold_seconds_sum", endpoint=ep) > 0.5
    assert value(after, "lockgate_lb_hold_seconds_bucket", endpoint=ep, le="0.01") == 0
    # every request that reached the worker has its upstream time observed
    assert value(after, "lockgate_lb_upstream_seconds_count", endpoint=ep) == 3
    assert value(after, "lockgate_lb_upstream_seconds_sum", endpoint=ep) > 0


def test_refusals_are_counted_by_the_code_the_client_got(lb: DevProcess) -> None:
    ep = lb.endpoint
    before = value(scrape(lb), "lockgate_lb_requests_total", endpoint=ep, code="413")
    big = b"x" * (30 * 1024 * 1024 + 1)
    answer = requests.post(f"{lb.url}/lb/{ep}/echo/big", data=big, headers=lb.headers(), timeout=60)
    assert answer.status_code == 413
    after = value(scrape(lb), "lockgate_lb_requests_total", endpoint=ep, code="413")
    assert after == before + 1


def test_a_request_without_a_key_is_not_counted_per_endpoint(lb: DevProcess) -> None:
    """A refused key never creates an endpoint label (anyone can name any endpoint)."""
    assert requests.get(f"{lb.url}/lb/made-up/x", timeout=30).status_code == 401
    names = {labels for (name, labels) in scrape(lb) if name == "lockgate_lb_requests_total"}
    assert all(("endpoint", "made-up") not in labels for labels in names)
