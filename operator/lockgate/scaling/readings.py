"""Metrics readings for the decision: parsed from the gateway's `/metrics`, or built from
a store snapshot (dev mode reads its own Redis). Both give the same `EndpointMetrics`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from lockgate.gateway.metrics import (
    IN_PROGRESS,
    LB_HELD,
    LB_IN_FLIGHT,
    OLDEST_AGE,
    QUEUED,
    WORKER_JOBS,
    WORKERS,
    age_s,
)
from lockgate.scaling.decision import EndpointMetrics
from lockgate.store import Snapshot


class MetricsUnreadable(Exception):
    """The gateway's `/metrics` could not be fetched or parsed."""


def from_snapshot(snap: Snapshot, now_ms: int) -> EndpointMetrics:
    """The reading the gateway would publish for this snapshot at `now_ms`."""
    return EndpointMetrics(
        queued=snap.in_queue,
        queued_low=snap.in_queue_low,
        oldest_queued_age_s=age_s(snap.oldest_queued_ms, now_ms),
        oldest_queued_low_age_s=age_s(snap.oldest_queued_low_ms, now_ms),
        in_progress=snap.in_progress,
        workers_idle=snap.workers_idle,
        workers_running=snap.workers_running,
        worker_jobs=dict(snap.worker_jobs),
        requests_held=snap.requests_held,
        requests_in_flight=snap.requests_in_flight,
    )


def _fields(name: str, labels: dict[str, str]) -> tuple[str, str] | None:
    """The `EndpointMetrics` field a gauge sample fills, and the key inside it if any."""
    low = labels.get("priority") == "low"
    if name == QUEUED:
        return ("queued_low" if low else "queued"), ""
    if name == OLDEST_AGE:
        return ("oldest_queued_low_age_s" if low else "oldest_queued_age_s"), ""
    if name == IN_PROGRESS:
        return "in_progress", ""
    if name == WORKERS:
        return f"workers_{labels.get('state')}", ""
    if name == LB_HELD:
        return "requests_held", ""
    if name == LB_IN_FLIGHT:
        return "requests_in_flight", ""
    if name == WORKER_JOBS:
        return "worker_jobs", labels.get("worker", "")
    return None


def parse_metrics(text: str) -> dict[str, EndpointMetrics]:
    """Every endpoint the exposition reports, by endpoint id."""
    values: dict[str, dict[str, Any]] = defaultdict(lambda: {"worker_jobs": {}})
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as err:
        raise MetricsUnreadable(f"not Prometheus text: {err}") from err
    for family in families:
        for sample in family.samples:
            where = _fields(sample.name, sample.labels)
            endpoint = sample.labels.get("endpoint")
            if where is None or endpoint is None:
                continue
            field, key = where
            entry = values[endpoint]
            if key:
                entry[field][key] = int(sample.value)
            elif field in EndpointMetrics.__dataclass_fields__:
                number = sample.value if field.endswith("_s") else int(sample.value)
                entry[field] = number
    return {ep: EndpointMetrics(**fields) for ep, fields in values.items()}
