"""Where endpoint records live: the `ControlPlane` protocol, its errors, and the management
app's key for it (`CONTROL_PLANE`).

The management API validates payloads and hands a `ControlPlane` complete, valid settings;
a backend only stores them, acts on them and reports status. `KubernetesControlPlane`
(`kube.controlplane`) keeps each endpoint as an Endpoint custom resource (the operator does
the rest); dev mode's `LocalControlPlane` (`dev.controlplane`) keeps them in the registry and
runs a local worker pool. The process's wiring builds one and hands it to
`create_manage_app`: `manage` imports neither, so dev mode needs no Kubernetes client.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from lockgate.manage.listing import EndpointPage, EndpointQuery
from lockgate.models import EndpointRecord, EndpointSpec


class EndpointNotFound(LookupError):
    """No endpoint has this id."""


class EndpointExists(ValueError):
    """An endpoint with this id exists already."""


class UnusableSettings(ValueError):
    """Valid settings this backend cannot act on (e.g. a dev-mode handler file that does
    not exist); the message names the field."""


class ControlPlane(Protocol):
    """Create, read, edit and delete endpoints. Settings arrive validated."""

    async def create(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        """Create an endpoint; raises `EndpointExists` (or `UnusableSettings`)."""
        ...

    async def get(self, endpoint_id: str) -> EndpointRecord:
        """The endpoint's record; raises `EndpointNotFound`."""
        ...

    async def page(self, query: EndpointQuery) -> EndpointPage:
        """The endpoints `query` asks for, ordered by id: every one without a limit, else
        one page and where the next starts. Raises `ContinueInvalid` or `ContinueExpired`
        (`manage.listing`) for a cursor this backend cannot continue from."""
        ...

    async def patch(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        """Replace the endpoint's settings with `spec`; raises `EndpointNotFound` (or
        `UnusableSettings`)."""
        ...

    async def delete(self, endpoint_id: str) -> None:
        """Delete the endpoint with its configuration and job history; raises
        `EndpointNotFound`. Removal may finish shortly after this returns."""
        ...


# The management app's control plane: set by `create_manage_app`, read by its routes.
CONTROL_PLANE = web.AppKey("control_plane", ControlPlane)
