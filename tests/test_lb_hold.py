"""How long a load-balancing request is held for a routable worker, and how many are:
the endpoint's `lbHoldS` over the gateway's `LOCKGATE_LB_HOLD_S`, `LOCKGATE_LB_MAX_HELD`
per endpoint (503 beyond), and a held request whose client left no longer counted.
Against a real `lockgate dev` whose LB workers never turn healthy (their `/ping` says 503)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import requests

from lockgate.gateway.endpoints import lb_hold_s
from lockgate.models import EndpointSpec
from lockgate.models.registry_entry import RegistryEntry
from tests.devproc import REPO, DevProcess

ECHO = str(REPO / "examples" / "echo" / "handler.py")
SICK = f"python {REPO / 'tests' / 'workers' / 'lb_unhealthy.py'}"
ADMIN = {"authorization": "Bearer k-admin"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """Dev mode holding requests 120 s by default, at most one per endpoint."""
    env = {"LOCKGATE_LB_HOLD_S": "120", "LOCKGATE_LB_MAX_HELD": "1"}
    data = tmp_path_factory.mktemp("lbhold")
    with DevProcess(ECHO, "--api-key", "k-admin", data_dir=data, env=env) as proc:
        yield proc


def create(dev: DevProcess, endpoint_id: str, **fields) -> requests.Response:
    spec = {
        "id": endpoint_id, "type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1,
        "templateId": SICK, "workersMax": 1, "idleTimeout": 60, **fields,
    }  # fmt: skip
    return requests.post(f"{dev.url}/v1/endpoints", json=spec, headers=ADMIN, timeout=30)


def held(dev: DevProcess, endpoint_id: str) -> int:
    url = f"{dev.url}/v2/{endpoint_id}/health"
    return requests.get(url, headers=dev.headers(), timeout=30).json()["requests"]["held"]


def wait_until(predicate, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("entry", "seconds"), [({}, None), ({"lbHoldS": None}, None), ({"lbHoldS": 0}, 0.0),
                           ({"lbHoldS": 5}, 5.0)],
)  # fmt: skip
def test_the_endpoints_hold_is_its_lbHoldS_or_unset(entry, seconds) -> None:
    assert lb_hold_s(RegistryEntry(id="x", **entry)) == seconds


def test_lbHoldS_is_optional_and_bounded() -> None:
    assert EndpointSpec().lbHoldS is None
    assert EndpointSpec(lbHoldS=0).lbHoldS == 0
    for bad in (-1, 3601):
        with pytest.raises(ValueError, match="lbHoldS"):
            EndpointSpec(lbHoldS=bad)


def test_an_endpoints_lbHoldS_overrides_the_gateways_hold(dev: DevProcess) -> None:
    bad = create(dev, "sick-bad", lbHoldS=-1)
    assert bad.status_code == 400 and "lbHoldS" in bad.json()["error"]
    created = create(dev, "sick-short", lbHoldS=1)
    assert created.status_code == 200, created.text
    assert created.json()["lbHoldS"] == 1
    # The gateway holds 120 s; this endpoint 1 s: the client's 60 s would run out first.
    answer = requests.get(f"{dev.url}/lb/sick-short/x", headers=dev.headers(), timeout=60)
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert "no worker became healthy" in error
    assert "held 1 s (the endpoint's lbHoldS)" in error
    assert answer.headers["Retry-After"] == "5"


def test_requests_held_past_the_bound_are_503_at_once_until_the_held_one_leaves(
    dev: DevProcess,
) -> None:
    assert create(dev, "sick-busy").status_code == 200  # held 120 s, the gateway's
    with socket.create_connection(("127.0.0.1", dev.port)) as first:
        first.sendall(
            f"GET /lb/sick-busy/x HTTP/1.1\r\nHost: x\r\nauthorization: {dev.key}\r\n\r\n".encode()
        )
        wait_until(lambda: held(dev, "sick-busy") == 1, "the first request held")
        second = requests.get(f"{dev.url}/lb/sick-busy/y", headers=dev.headers(), timeout=30)
        assert second.status_code == 503, second.text
        assert "1 requests already held (LOCKGATE_LB_MAX_HELD)" in second.json()["error"]
        assert second.headers["Retry-After"] == "1"
    # Its client hung up: the first request is held no longer (long before its 120 s).
    wait_until(lambda: held(dev, "sick-busy") == 0, "the abandoned request still held")
