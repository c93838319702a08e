"""Builds for the management API and the control planes: asking for one, cancelling one,
reading its log (as worker logs are read: `manage.workerlogs`), pages of them by cursor.

The records live in one `BuildStore` (Redis) whoever builds: dev mode's builder
(`dev.builder`) and, later, the cluster's build Job write there; the control planes'
`start_build`, `cancel_build` and `build_logs` are made of these.
A build's log has the two sources of a worker's: `system` for lockgate's own steps
(asked, checked out, status changes), `container` for the builder's output (git, pip, the
image builder).
"""

from __future__ import annotations

from lockgate.manage.controlplane import BuildEnded, NoSource
from lockgate.manage.releases import decode_cursor, encode_cursor
from lockgate.manage.workerlogs import CONTAINER, SYSTEM, LogEvent, after, last, newest, numbered
from lockgate.manage.workersource import LogBatch, LogRead
from lockgate.models import EndpointRecord
from lockgate.models.build import Build, BuildReason, BuildStatus, IllegalTransition, new_build
from lockgate.models.source import source_of
from lockgate.store.builds import BuildStore

LIMIT_DEFAULT = 100  # RunPod's: 1..100, default 100
LIMIT_MAX = 100
CURSOR_KIND = "builds"


def page_cursor(endpoint_id: str, seq: int) -> str:
    """The opaque cursor of the page after the build numbered `seq`."""
    return encode_cursor(endpoint_id, seq, kind=CURSOR_KIND)


def below_of(cursor: str, endpoint_id: str) -> int:
    """The sequence number a cursor continues below; `BadCursor` when it is not one a
    builds list of this endpoint gave."""
    return decode_cursor(cursor, endpoint_id, kind=CURSOR_KIND)


async def ask(
    store: BuildStore, endpoint: EndpointRecord, ref: str | None, reason: BuildReason
) -> Build:
    """Record a new PENDING build of the endpoint's source at `ref` (None: the source's);
    `NoSource` when it has none."""
    if endpoint.source is None:
        raise NoSource(
            f"endpoint {endpoint.id!r} has no source to build: set its source "
            "({git: {url, ref}}) first"
        )
    build = new_build(ref or "", reason)
    await store.add(endpoint.id, build)
    wanted = ref or _git_ref(endpoint) or "the default branch"
    await store.log(endpoint.id, build.id, SYSTEM, [f"build asked ({reason.value}) at {wanted}"])
    return build


def _git_ref(endpoint: EndpointRecord) -> str:
    source = source_of(endpoint.source)
    return source.git.ref if source is not None else ""


async def cancel(store: BuildStore, endpoint_id: str, build_id: str) -> Build:
    """Mark a live build CANCELLED (its builder stops at its next step); `BuildEnded` when
    it has ended, `BuildNotFound` (store) when there is none."""
    current = await store.get(endpoint_id, build_id)
    if current.terminal:
        raise BuildEnded(f"build {build_id} has ended already ({current.status.value})")
    try:
        build = await store.change(endpoint_id, build_id, BuildStatus.CANCELLED)
    except IllegalTransition as err:  # it ended meanwhile
        ended = await store.get(endpoint_id, build_id)
        raise BuildEnded(f"build {build_id} has ended already ({ended.status.value})") from err
    await store.log(endpoint_id, build_id, SYSTEM, ["build cancelled"])
    return build


async def read_log(store: BuildStore, endpoint_id: str, build_id: str, read: LogRead) -> LogBatch:
    """A build's log as a worker's is read (`LogRead` → `LogBatch`); `alive` while the
    build has not ended. Raises `BuildNotFound` (store)."""
    build = await store.get(endpoint_id, build_id)  # first: a line written after is read next
    rows = await store.log_lines_of(endpoint_id, build_id)
    events: list[LogEvent] = []
    for source in (CONTAINER, SYSTEM):
        if source in read.sources:
            lines = [(ms, text) for ms, src, text in rows if src == source]
            events += numbered(source, lines, whole=True)
    if read.cursor is not None:
        return LogBatch(after(events, read.cursor, read.limit), read.cursor, not build.terminal)
    return LogBatch(last(events, read.tail), newest(events), not build.terminal)
