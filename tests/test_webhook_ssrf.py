"""The webhook SSRF guard: private IPv6 transition forms, and DNS rebinding between the
submit-time check and the delivery (the delivery connects only where its lookup was checked)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import aiohttp.connector
import pytest
from aiohttp.resolver import ThreadedResolver

from lockgate.gateway.ssrf import is_private
from tests.conftest import eventually
from tests.test_job_api import done, submit, take
from tests.test_lifecycle import Receiver

GATEWAY_SETTINGS = dict(
    sweep_interval_s=0.1, webhook_timeout_s=1.0, webhook_retry_interval_s=0.2, webhook_attempts=3
)

# IPv6 addresses that reach a private IPv4 address, or are private by their own prefix.
PRIVATE_TRANSITION_FORMS = [
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::a00:1",  # IPv4-compatible 10.0.0.1
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
    "fec0::1",  # site-local
    "::ffff:7f00:1",  # IPv4-mapped 127.0.0.1
]


@pytest.mark.parametrize("address", PRIVATE_TRANSITION_FORMS)
def test_ipv6_forms_that_embed_a_private_ipv4_address_are_private(address):
    assert is_private(address)


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "8.8.8.8"])
def test_transition_forms_of_a_public_ipv4_address_stay_public(address):
    assert not is_private(address)


@pytest.mark.parametrize("address", ["64:ff9b::7f00:1", "2002:7f00:1::1", "fec0::1"])
async def test_a_webhook_url_on_a_private_transition_form_is_refused_at_submit(
    http, gateway, address
):
    body = {"input": {}, "webhook": f"http://[{address}]:8080/hook"}
    async with http.post(gateway.job_url("run"), json=body, headers=gateway.client_headers()) as r:
        assert r.status == 400
        assert "private" in (await r.json())["error"]


class RebindingDns:
    """An attacker's DNS for one name, in front of the process's resolver: a public address
    for the first `public_answers` lookups, then 127.0.0.1 (TTL 0, so nothing is cached)."""

    PUBLIC = "93.184.215.14"  # example.com's (IANA's): a lookup that passes any check

    def __init__(self, name: str, real, public_answers: int) -> None:
        self.name, self.real, self.public_answers = name, real, public_answers
        self.lookups = 0

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        if host != self.name:
            return await self.real(host, port, family=family, type=type, proto=proto, flags=flags)
        self.lookups += 1
        address = self.PUBLIC if self.lookups <= self.public_answers else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 0)))]


def stay_on_this_machine(loop, monkeypatch) -> list[str]:
    """No test traffic leaves the machine: a connect to an address off loopback is refused
    before any packet is sent (and recorded), as an unreachable receiver would be."""
    real, outside = loop.sock_connect, []

    async def sock_connect(sock, address):
        if not ipaddress.ip_address(address[0]).is_loopback:
            outside.append(address[0])
            raise ConnectionRefusedError(f"test: no traffic off this machine ({address[0]})")
        return await real(sock, address)

    monkeypatch.setattr(loop, "sock_connect", sock_connect)
    return outside


@pytest.fixture
def system_resolver(monkeypatch):
    """aiohttp's default resolver is the system's (getaddrinfo), as in the gateway image:
    this venv has aiodns, which aiohttp would otherwise pick. Before `gateway` starts."""
    monkeypatch.setattr(aiohttp.connector, "DefaultResolver", ThreadedResolver)


async def _metric(http, gateway, outcome: str) -> float:
    async with http.get(f"{gateway.url}/metrics") as r:
        text = await r.text()
    prefix = f'lockgate_webhook_deliveries_total{{endpoint="echo",outcome="{outcome}"}} '
    return next((float(ln[len(prefix) :]) for ln in text.splitlines() if ln.startswith(prefix)), 0)


async def test_a_webhook_host_that_rebinds_to_loopback_after_the_checks_is_never_called(
    system_resolver, http, gateway, monkeypatch
):
    """The name answers a public address to the submit-time check and to one more lookup,
    then 127.0.0.1, where a receiver listens: the delivery must not reach it."""
    receiver = Receiver()
    url = await receiver.start()
    port = url.rsplit(":", 1)[1].split("/")[0]
    loop = asyncio.get_running_loop()
    dns = RebindingDns("rebind.lockgate.test", loop.getaddrinfo, public_answers=2)
    monkeypatch.setattr(loop, "getaddrinfo", dns.getaddrinfo)
    outside = stay_on_this_machine(loop, monkeypatch)
    try:
        job = await submit(
            http, gateway, {"input": {}, "webhook": f"http://rebind.lockgate.test:{port}/hook"}
        )
        await take(http, gateway)
        await done(http, gateway, job["id"], {"output": {"secret": "of the job"}})

        async def settled() -> bool:
            return bool(receiver.calls) or await _metric(http, gateway, "refused") >= 1

        await eventually(settled, "the delivery to be refused (or made)", timeout=20)
        assert receiver.calls == [], "the webhook reached 127.0.0.1 through a rebound name"
        assert dns.lookups >= 3  # the checks saw the public address; delivery saw loopback
        assert set(outside) <= {RebindingDns.PUBLIC}  # an attempt went only where it checked
    finally:
        await receiver.runner.cleanup()
