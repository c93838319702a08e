"""Releases for the management API: where they are read, which version each worker
runs, pages of them by cursor, and the rollback (lockgate's: a release's configuration made
the newest version).

Releases are written where an endpoint's configuration changes (`LocalControlPlane`,
`KubernetesControlPlane`, the operator for `kubectl` edits) into one `ReleaseStore`; this
module only reads them, and rolls back through the `ControlPlane` like any other edit, so
a rollback is one more release (`MANUAL`, its diff against the configuration it replaces).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from lockgate.manage.controlplane import ControlPlane, TemplateNotFound, UnusableSettings
from lockgate.manage.operations import template_users
from lockgate.models import EndpointRecord, EndpointSpec, TemplateSpec
from lockgate.models.releases import Release, restored_spec, restored_template
from lockgate.store.releases import ReleaseStore

# How many workers run each version of an endpoint (version -> count; 0: not known).
WorkerVersions = Callable[[str], Awaitable[dict[int, int]]]
LIMIT_DEFAULT = 1000  # RunPod's: 1..1000, default 1000
LIMIT_MAX = 1000
CURSOR_KIND = "releases"


@dataclass(frozen=True)
class Releases:
    """The releases backend of a process: the store, and its workers' versions (pods'
    labels on a cluster, dev mode's processes)."""

    store: ReleaseStore
    worker_versions: WorkerVersions


class BadCursor(ValueError):
    """A cursor that is not one this list gave for this endpoint."""


class SharedTemplate(ValueError):
    """A rollback would change a template other endpoints use too."""


def encode_cursor(endpoint_id: str, version: int, *, kind: str = CURSOR_KIND) -> str:
    """An opaque cursor: the page continues below `version` (a release's version, a
    build's number), for this endpoint's list of `kind` only."""
    raw = orjson.dumps({"k": kind, "e": endpoint_id, "v": version})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, endpoint_id: str, *, kind: str = CURSOR_KIND) -> int:
    """The version a cursor continues below; `BadCursor` when it is malformed, or another
    list's or another endpoint's."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = orjson.loads(raw)
    except (binascii.Error, ValueError) as err:
        raise BadCursor("cursor: not a cursor this list gave (pass nextCursor as is)") from err
    if not isinstance(body, dict) or body.get("k") != kind:
        raise BadCursor(f"cursor: not a cursor of a {kind} list")
    if body.get("e") != endpoint_id:
        raise BadCursor(f"cursor: it belongs to another endpoint's {kind}")
    version = body.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BadCursor("cursor: not a cursor this list gave (pass nextCursor as is)")
    return version


def page_of(
    releases: list[Release], endpoint_id: str, *, below: int | None, limit: int
) -> tuple[list[Release], str | None]:
    """One page of releases (newest first) below version `below`, and the cursor of the
    next page (None: this was the last)."""
    rest = [r for r in releases if below is None or r.version < below]
    page = rest[:limit]
    more = len(rest) > limit
    return page, encode_cursor(endpoint_id, page[-1].version) if more and page else None


def spec_of(record: EndpointRecord) -> EndpointSpec:
    """The settings of an endpoint record."""
    return EndpointSpec.model_validate(
        record.model_dump(mode="json", include=set(EndpointSpec.model_fields))
    )


async def rollback(
    plane: ControlPlane, store: ReleaseStore, endpoint_id: str, release: Release
) -> Release:
    """Make `release`'s configuration the newest version: its template's fields put back
    (refused with `SharedTemplate` when other endpoints use that template: they would
    change too), then its endpoint settings, then the build it ran (a `GIT_BUILD`
    release's build runs again, by its digest, with no rebuild; a release that ran none
    goes back to the template's image); returns the newest release (the new one, or the
    newest when nothing had changed)."""
    current = spec_of(await plane.get(endpoint_id))
    build = release.config.build
    if build is not None and (why := plane.build_problem(build)):
        raise UnusableSettings(why)  # before anything changed: no half rollback
    spec = restored_spec(current, release.config)
    if release.config.template is not None and spec.templateId:
        await _restore_template(plane, endpoint_id, spec.templateId, release)
    if spec != current:
        await plane.patch(endpoint_id, spec)
    await plane.run_build(endpoint_id, build)
    newest = await store.newest(endpoint_id)
    return newest if newest is not None else release


async def _restore_template(
    plane: ControlPlane, endpoint_id: str, template_id: str, release: Release
) -> None:
    wanted = release.config.template or {}
    try:
        template: TemplateSpec | None = await plane.get_template(template_id)
    except TemplateNotFound:
        template = None
    if template is None:  # deleted since: made again with the release's fields
        await plane.create_template(template_id, TemplateSpec.model_validate(wanted))
        return
    restored = restored_template(template, release.config)
    if restored == template:
        return
    others = [u for u in await template_users(plane, template_id) if u != endpoint_id]
    if others:
        raise SharedTemplate(
            f"template {template_id!r} is used by endpoint(s) {', '.join(others)} too: "
            "rolling back would change them as well; give this endpoint a template of its "
            "own (or edit the template) instead"
        )
    await plane.replace_template(template_id, restored)
