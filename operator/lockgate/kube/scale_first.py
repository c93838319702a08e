"""Scale first: what a wake-up writes first, and what waits for it (issue 51).

A job queued onto an idle endpoint's empty queues is a *wake-up*: its Deployment's scale
patch is the one write a cold start waits on. Everything else the operator would write
about it, or about any other endpoint, while wake-ups wait for their scale patch (Events,
status patches, a resync's reconcile) waits for them (`ScaleFirst`), and an endpoint's
reports queued meanwhile are merged into one (`Report.merged`): a thousand endpoints
woken at once get their thousand scale patches before any of it.

No Secret is written, nor checked, because a worker count changed: a resync checks the
worker-key Secret only when a worker pod cannot create its container
(`key_check_due`: `CreateContainerConfigError` is what a missing Secret gives a pod), or
at a full reconcile (a change of the Endpoint, the operator's start).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockgate.kube.podstates import CONFIG_ERRORS
from lockgate.kube.status import at_rest

Obj = Mapping[str, Any]


def cannot_configure(pods: Iterable[Obj]) -> bool:
    """Whether a worker pod has a container the kubelet cannot create (a Secret or
    ConfigMap it refers to is missing: `CreateContainerConfigError`)."""
    for pod in pods:
        status = pod.get("status") or {}
        for each in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            waiting = (each.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in CONFIG_ERRORS:
                return True
    return False


def key_check_due(status: Obj | None, pods: Iterable[Obj] | None) -> bool:
    """Whether a steady resync checks that the worker-key Secret still exists (a dry-run
    update). `pods`: the endpoint's worker pods as watched (None: not watched, then the
    check follows the status alone: not at rest). With pods watched, only when one cannot
    create its container: a wake-up (a worker count changed) never calls on a Secret."""
    if pods is None:
        return not at_rest(status)
    return cannot_configure(pods)


@dataclass
class Report:
    """What the scaler writes about one endpoint after its decisions: Events (in order),
    then one status write: a refresh (`refresh`), or the new counts alone (`workers`). Reports
    of an endpoint still waiting to be written are merged (`merged`): one status write for
    all of them."""

    events: list[Obj] = field(default_factory=list)
    refresh: bool = False
    force: bool = False  # refresh even if the status seems to show it (`_refresh_status`)
    workers: dict[str, int] | None = None  # the last decision's counts, for the status

    def merged(self, later: Report) -> Report:
        """This report and a later one of the same endpoint, as one (the later counts)."""
        return Report(
            [*self.events, *later.events],
            self.refresh or later.refresh,
            self.force or later.force,
            later.workers if later.workers is not None else self.workers,
        )

    def empty(self) -> bool:
        return not self.events and not self.refresh and self.workers is None


class ScaleFirst:
    """The endpoints woken (a job queued onto empty queues) whose decision has not yet
    been made and applied; `clear` waits for those pending when it is called. Shared by
    the scaler (its report lane) and the Endpoints' resyncs, on the operator's event loop."""

    def __init__(self, longest_wait_s: float = 30.0) -> None:
        self.pending: set[str] = set()
        self.longest_wait_s = longest_wait_s  # a wake-up never decided holds nothing longer
        self._moved = asyncio.Event()  # set (and replaced) each time one is decided

    def waking(self, endpoint_id: str) -> None:
        """A job was queued onto the endpoint's empty queues: its decision comes first."""
        self.pending.add(endpoint_id)

    def decided(self, endpoint_id: str) -> None:
        """The endpoint's decision was applied (or it was not one to decide)."""
        if endpoint_id in self.pending:
            self.pending.discard(endpoint_id)
            self._moved.set()
            self._moved = asyncio.Event()

    def keep(self, deciding: Collection[str]) -> None:
        """Forget the pending endpoints not in `deciding` (a full tick found no decision
        to make of them: not ours, or settled)."""
        for endpoint_id in self.pending - set(deciding):
            self.decided(endpoint_id)

    async def clear(self) -> None:
        """Wait until the wake-ups pending now are decided (those woken later do not hold
        this caller: a steady stream of wake-ups never starves it), at most
        `longest_wait_s`."""
        ahead = set(self.pending)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.longest_wait_s
        while ahead & self.pending:
            left = deadline - loop.time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left)
