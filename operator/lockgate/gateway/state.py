"""What every handler shares, stored once on the application under a typed key."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from lockgate.gateway.auth import Authenticator
from lockgate.gateway.endpoints import EndpointCache
from lockgate.gateway.notify import Notifier
from lockgate.settings import Settings
from lockgate.store import JobStore, Registry


@dataclass
class Gateway:
    """The gateway's collaborators; one per application, no globals."""

    settings: Settings
    store: JobStore
    registry: Registry
    endpoints: EndpointCache
    auth: Authenticator
    notifier: Notifier


GATEWAY = web.AppKey("gateway", Gateway)


def gateway_of(request: web.Request) -> Gateway:
    return request.app[GATEWAY]
