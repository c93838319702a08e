"""Queue endpoints' warm-up in the gateway: the warm-up job a new worker is handed, and
the sweep that marks unhealthy a worker whose warm-up outran its deadline
(store/warmups.py keeps the state; docs/warm-up.md)."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from lockgate.gateway.errors import NotFound
from lockgate.gateway.state import Gateway
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import TakenJob
from lockgate.store.warmups import mark_overdue

log = logging.getLogger("lockgate.gateway")


def warmup_input(entry: RegistryEntry, job: TakenJob) -> bytes:
    """The warm-up job's input: the endpoint's warm-up input of its index (`{}` when the
    setting changed meanwhile and has no such input any more)."""
    inputs = entry.warmup.inputs if entry.warmup is not None else None
    index = job.warmup or 0
    value: Any = inputs[index] if inputs is not None and index < len(inputs) else {}
    return orjson.dumps(value)


async def sweep_warmups(gw: Gateway, endpoint_id: str) -> None:
    """Mark unhealthy the workers of the endpoint whose warm-up job is overdue (past the
    endpoint's execution timeout); an endpoint without warm-up inputs costs no Redis call."""
    try:
        entry = await gw.endpoints.get(endpoint_id)
    except NotFound:
        return
    if entry.warmup is None or not entry.warmup.inputs:
        return
    for worker in await mark_overdue(gw.store, endpoint_id, entry.executionTimeoutMs):
        log.warning("endpoint %s: worker %s unhealthy: its warm-up is overdue", endpoint_id, worker)
