"""Metrics readings for the decision: parsed from the gateway's `/metrics`, or built from
a store snapshot (dev mode reads its own Redis). Both give the same `EndpointMetrics`.

`parse_metrics` reads the exposition with a strict line grammar for the text
prometheus_client writes (`name{label="value",...} value`, no timestamp), keeping the
samples of the gauges the scaler uses. prometheus_client's own parser reads each character
in Python: at a thousand endpoints (12,000 lines) it took ~0.6 s, every tick, with the
operator's event loop blocked (a lone job's wake-up waited behind it); this reads the same
text in a few tens of ms. Any line outside that grammar (a timestamp, another escape, the
UTF-8 name form, a quote in a comment, a `# TYPE` that would make one of those gauges a
counter) hands the whole text to prometheus_client's parser instead, so the readings, or
the refusal, are always the library's (tests/test_readings_parse.py compares both on
generated, mutated and arbitrary text)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import METRIC_TYPES
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


Sample = tuple[str, dict[str, str], float]  # name, labels, value
READ = frozenset({QUEUED, OLDEST_AGE, IN_PROGRESS, WORKERS, LB_HELD, LB_IN_FLIGHT, WORKER_JOBS})
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_VALUE = r'(?:[^"\\\n]|\\[\\n"])*'  # a label value: only the three escapes the format has
_LABEL = rf'{_LABEL_NAME}="{_VALUE}"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{((?:{_LABEL}(?:,{_LABEL})*)?)\}})? (\S+)")
_LABELS = re.compile(rf'({_LABEL_NAME})="({_VALUE})"')
_LEGACY_NAME = re.compile(_NAME)
_TYPES = frozenset(METRIC_TYPES) | {"untyped"}  # the library's types and the format's untyped
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPED = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}


class _NotPlain(Exception):
    """A line the strict grammar does not cover: the library parses the text."""


def parse_metrics(text: str) -> dict[str, EndpointMetrics]:
    """Every endpoint the exposition reports, by endpoint id."""
    try:
        samples: Iterable[Sample] = list(_plain_samples(text))
    except _NotPlain:
        samples = _library_samples(text)
    return readings_of(samples)


def parse_metrics_with_library(text: str) -> dict[str, EndpointMetrics]:
    """`parse_metrics` by prometheus_client's parser alone (what the fast path must equal)."""
    return readings_of(_library_samples(text))


def _library_samples(text: str) -> list[Sample]:
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as err:
        raise MetricsUnreadable(f"not Prometheus text: {err}") from err
    return [(s.name, s.labels, s.value) for f in families for s in f.samples]


def _plain_samples(text: str) -> Iterator[Sample]:
    """The samples of the `READ` gauges. Every line must be one prometheus_client's parser
    reads the same way (lines split at \\n, stripped): a comment, or `name value` or
    `name{label="value",...} value` (no timestamp); else `_NotPlain`."""
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            _check_comment(line)
            continue
        matched = _SAMPLE.fullmatch(line)
        if matched is None:
            raise _NotPlain
        name, labels, value = matched[1], matched[2], _value(matched[3])
        if labels and "__name__=" in labels:
            raise _NotPlain  # the library takes (or refuses) a name given as a label
        if name in READ:
            yield name, {k: _unescape(v) for k, v in _LABELS.findall(labels or "")}, value


def _check_comment(line: str) -> None:
    """A comment as the library reads it: `# HELP` and `# TYPE` lines name a metric (else
    it raises), and a `# TYPE` of a `READ` gauge other than `gauge` could rename its
    samples (a counter's get `_total`): `_NotPlain` for those, and for any quote."""
    if '"' in line:
        raise _NotPlain  # the library splits comments honouring quotes
    parts = line.split(None, 3)
    if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
        return
    if _LEGACY_NAME.fullmatch(parts[2]) is None:
        raise _NotPlain
    if parts[1] == "TYPE" and (
        len(parts) < 4
        or parts[3] not in _TYPES
        or (parts[2] in READ and parts[3] != "gauge")
        or parts[2] == "_total"  # a counter's name without `_total` would be empty
    ):
        raise _NotPlain


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED[m[0]], value) if "\\" in value else value


def _value(text: str) -> float:
    """As prometheus_client reads a sample's value (`\\S+`: no whitespace around it): an
    int when it is one, else a float."""
    if "_" in text:  # int() and float() take `1_0`; the library refuses it
        raise _NotPlain
    if (text[1:] if text[0] in "+-" else text).isdecimal():  # what int() takes (no raise)
        try:
            return int(text)
        except ValueError:  # over Python's digit limit: the library's float
            pass
    try:
        return float(text)
    except ValueError:
        raise _NotPlain from None


def readings_of(samples: Iterable[Sample]) -> dict[str, EndpointMetrics]:
    """The endpoints' readings from the exposition's samples, in order (a later sample of
    the same series wins)."""
    values: dict[str, dict[str, Any]] = defaultdict(lambda: {"worker_jobs": {}})
    for name, labels, value in samples:
        where = _fields(name, labels)
        endpoint = labels.get("endpoint")
        if where is None or endpoint is None:
            continue
        field, key = where
        entry = values[endpoint]
        if key:
            entry[field][key] = int(value)
        elif field in EndpointMetrics.__dataclass_fields__:
            entry[field] = value if field.endswith("_s") else int(value)
    return {ep: EndpointMetrics(**fields) for ep, fields in values.items()}
