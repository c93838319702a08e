"""Webhook URLs must not reach inside the cluster: refuse private destinations (SSRF).

The submit-time check (`private_destination`) only gives an early, clear 400. What keeps a
delivery out is `PublicOnlyResolver`: the sender's connector resolves each webhook host
once, through it, and connects to exactly the addresses it let through (with the URL's
Host header and TLS server name), so a name that answers a public address at submit and
a private one at delivery (DNS rebinding) is refused at delivery.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult

# IPv6 forms that carry an IPv4 address in their last 32 bits (RFC 6052 NAT64, RFC 4291
# IPv4-compatible); 6to4 (RFC 3056) and IPv4-mapped have their own `ipaddress` accessors.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
# Deprecated site-local (RFC 3879): private by intent, yet `is_global` in Python 3.11.
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 transition form reaches (mapped, NAT64, 6to4, compatible)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _private(ip: Address) -> bool:
    return not ip.is_global or ip.is_multicast


def is_private(address: str) -> bool:
    """Loopback, link-local, private, reserved, multicast, unspecified or site-local, or an
    IPv6 form that embeds such an IPv4 address."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _SITE_LOCAL:
            return True
        if (inner := embedded_ipv4(ip)) is not None and _private(inner):
            return True
    return _private(ip)


def private_literal(url: str) -> str | None:
    """The URL's host when it is a private IP literal (aiohttp connects to a literal without
    asking the resolver, so the sender checks literals itself), else None."""
    host = urlsplit(url).hostname or ""
    try:
        return host if is_private(host) else None
    except ValueError:
        return None  # a name: `PublicOnlyResolver` checks what it resolves to


async def private_destination(url: str) -> str | None:
    """The first private address `url`'s host resolves to (or a reason), else None."""
    host = urlsplit(url).hostname or ""
    port = urlsplit(url).port or 443
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return f"host {host!r} does not resolve"
    for info in infos:
        address = str(info[4][0])  # an IP address (an IPv6 one has more fields after)
        if is_private(address):
            return address
    return None


class PrivateDestination(OSError):
    """A webhook host resolved to a private address; the delivery is refused."""


class PublicOnlyResolver(AbstractResolver):
    """Resolves through `base`; refuses the whole host when any address is private.

    Given to the sender's `TCPConnector`, whose connections then go to the addresses
    returned here and nowhere else: one lookup is both checked and used."""

    def __init__(self, base: AbstractResolver) -> None:
        self.base = base

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self.base.resolve(host, port, family)
        for entry in found:
            if is_private(entry["host"]):
                raise PrivateDestination(f"{host} resolves to private address {entry['host']}")
        return found

    async def close(self) -> None:
        await self.base.close()
