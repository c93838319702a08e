"""Webhook URLs must not reach inside the cluster: refuse private destinations (SSRF)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit


def is_private(address: str) -> bool:
    """Loopback, link-local, private, reserved, multicast or unspecified."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


async def private_destination(url: str) -> str | None:
    """The first private address `url`'s host resolves to (or a reason), else None."""
    host = urlsplit(url).hostname or ""
    port = urlsplit(url).port or 443
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return f"host {host!r} does not resolve"
    for info in infos:
        address = info[4][0]
        if is_private(address):
            return address
    return None
