"""Where endpoint and template records live: the `ControlPlane` protocol, its errors,
and the management app's key for it (`CONTROL_PLANE`).

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
from lockgate.manage.workersource import LogBatch, LogRead
from lockgate.models import EndpointRecord, EndpointSpec, TemplateSpec
from lockgate.models.build import Build, BuildReason
from lockgate.models.running_build import RunningBuild


class EndpointNotFound(LookupError):
    """No endpoint has this id."""


class EndpointExists(ValueError):
    """An endpoint with this id exists already."""


class TemplateNotFound(LookupError):
    """No template has this id."""


class TemplateExists(ValueError):
    """A template with this id exists already."""


class UnusableSettings(ValueError):
    """Valid settings this backend cannot act on (e.g. a dev-mode handler file that does
    not exist); the message names the field."""


class NoSource(ValueError):
    """The endpoint has no `source` to build (400)."""


class BuildsUnavailable(Exception):
    """This control plane does not build (yet); the message says what to do instead (501)."""


class BuildEnded(ValueError):
    """The build has ended already: there is nothing to cancel (409)."""


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

    async def restart_workers(self, endpoint_id: str) -> None:
        """Clear the endpoint's crash loop (`models.crashloop`): its workers start again,
        counted afresh. Raises `EndpointNotFound`. On a cluster the operator acts on it
        shortly after this returns."""
        ...

    async def run_build(self, endpoint_id: str, build: RunningBuild | None) -> None:
        """Make the endpoint's workers run `build` (None: its template's image or command),
        a release when that changes what runs; nothing when it runs it already (a
        rollback's last step). Raises `EndpointNotFound`, or `UnusableSettings` when the
        build cannot run here now (dev mode: its checkout's copy is no longer kept)."""
        ...

    def build_problem(self, build: RunningBuild) -> str | None:
        """Why `build` cannot run here now (checked before a rollback changes anything),
        or None."""
        ...

    async def start_build(self, endpoint_id: str, ref: str | None, reason: BuildReason) -> Build:
        """Start a build of the endpoint's `source` at `ref` (None: the source's own) and
        return it as recorded (PENDING or further). Raises `EndpointNotFound`, `NoSource`,
        or `BuildsUnavailable` where this backend does not build."""
        ...

    async def cancel_build(self, endpoint_id: str, build_id: str) -> Build:
        """Cancel a live build (CANCELLED; its builder stops). Raises
        `store.builds.BuildNotFound` or `BuildEnded`."""
        ...

    async def build_logs(self, endpoint_id: str, build_id: str, read: LogRead) -> LogBatch:
        """A build's log lines, read as a worker's (`manage.workersource`); `alive` while
        the build has not ended. Raises `store.builds.BuildNotFound`."""
        ...

    async def create_template(self, template_id: str, spec: TemplateSpec) -> TemplateSpec:
        """Keep a new template; raises `TemplateExists`."""
        ...

    async def get_template(self, template_id: str) -> TemplateSpec:
        """The template; raises `TemplateNotFound`."""
        ...

    async def list_templates(self) -> dict[str, TemplateSpec]:
        """Every template by id."""
        ...

    async def replace_template(self, template_id: str, spec: TemplateSpec) -> TemplateSpec:
        """Replace a template's fields with `spec`; the endpoints that use it roll their
        workers (queued jobs kept, jobs in hand finished) and their `version` goes up.
        Raises `TemplateNotFound` (or `UnusableSettings` when an endpoint using it could
        not run the new one)."""
        ...

    async def delete_template(self, template_id: str) -> None:
        """Delete a template (the API checks first that no endpoint uses it); raises
        `TemplateNotFound`."""
        ...


# The management app's control plane: set by `create_manage_app`, read by its routes.
CONTROL_PLANE = web.AppKey("control_plane", ControlPlane)
