"""The scaler's `/metrics` parse (`scaling.readings.parse_metrics`) against the library it
stands in for: on expositions prometheus_client itself writes (any endpoint and worker
names, any counts, the replica's own counters and histograms), its strict line grammar
reads every line (no fallback) and gives prometheus_client's parser's readings; on those
texts mutated at random, and on arbitrary text, both give the same readings or both refuse
it (MetricsUnreadable, or the same error)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from lockgate.gateway.metrics import endpoint_families
from lockgate.scaling import readings
from lockgate.scaling.readings import parse_metrics, parse_metrics_with_library
from lockgate.store.records import Snapshot

NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
TRICKY = st.sampled_from(['"', "\\", "\n", "{", "}", ",", "=", " ", "#", "é", "_"])
LABEL = st.one_of(NAMES, st.lists(TRICKY, min_size=1, max_size=4).map("".join))
COUNT = st.integers(min_value=0, max_value=10**6)
AGE_MS = st.one_of(st.none(), st.integers(min_value=0, max_value=10**9))


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    return Snapshot(
        in_queue=draw(COUNT), in_queue_low=draw(COUNT), in_progress=draw(COUNT),
        workers_idle=draw(COUNT), workers_running=draw(COUNT), completed=draw(COUNT),
        failed=draw(COUNT), retried=draw(COUNT), oldest_queued_ms=draw(AGE_MS),
        oldest_queued_low_ms=draw(AGE_MS),
        worker_jobs=draw(st.dictionaries(LABEL, COUNT, max_size=3)),
        requests_held=draw(COUNT), requests_in_flight=draw(COUNT),
    )  # fmt: skip


@st.composite
def expositions(draw: st.DrawFn) -> str:
    """A gateway's `/metrics` as prometheus_client writes it: the endpoints' families and
    a replica's own labelled counter and histogram."""
    snaps = draw(st.dictionaries(LABEL, snapshots(), max_size=6))
    own = CollectorRegistry()
    requests = Counter("lockgate_http_requests", "requests", ["route"], registry=own)
    hold = Histogram("lockgate_lb_hold_seconds", "held", ["endpoint"], registry=own)
    for ep in draw(st.lists(LABEL, max_size=3)):
        requests.labels(ep).inc(draw(st.integers(min_value=1, max_value=5)))
        hold.labels(ep).observe(draw(st.floats(min_value=0, max_value=1e4)))

    class Both:
        def collect(self):
            yield from own.collect()
            yield from endpoint_families(snaps, draw(st.integers(0, 2 * 10**9)))

    return generate_latest(Both()).decode()  # type: ignore[arg-type]


def outcome(parse, text: str) -> object:
    """The readings, or the error's type and (for MetricsUnreadable) nothing more: the two
    parsers word their refusals alike but not identically."""
    try:
        return parse(text)
    except Exception as err:
        return type(err).__name__


@given(expositions())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_written_exposition_is_read_by_the_strict_grammar_as_the_library_reads_it(
    text: str,
) -> None:
    list(readings._plain_samples(text))  # no line needed the library
    assert parse_metrics(text) == parse_metrics_with_library(text)


MUTATIONS = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1),
        st.integers(min_value=0, max_value=3),
        st.one_of(
            TRICKY,
            st.sampled_from(["NaN", "+Inf", "1e999", "1_0", " 12", "\t", "\r", "__name__=",
                             "# TYPE lockgate_jobs_queued counter\n", "# HELP\n", "{}",
                             'lockgate_jobs_queued{endpoint="x"} 3\n', "٣", "0x1"]),
        ),
    ),
    min_size=1, max_size=4,
)  # fmt: skip


def mutated(text: str, edits: list[tuple[float, int, str]]) -> str:
    """`text` with each edit applied at a relative place: 0 insert, 1 replace one
    character, 2 delete one, 3 insert a line."""
    for where, how, what in edits:
        i = math.floor(where * len(text))
        if how == 0:
            text = text[:i] + what + text[i:]
        elif how == 1:
            text = text[:i] + what + text[i + 1 :]
        elif how == 2:
            text = text[:i] + text[i + 1 :]
        else:
            line = text.rfind("\n", 0, i) + 1
            text = text[:line] + what + "\n" + text[line:]
    return text


@given(expositions(), MUTATIONS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_mutated_exposition_gives_the_librarys_readings_or_its_refusal(
    text: str, edits: list[tuple[float, int, str]]
) -> None:
    changed = mutated(text, edits)
    assert outcome(parse_metrics, changed) == outcome(parse_metrics_with_library, changed)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_text_gives_the_librarys_readings_or_its_refusal(text: str) -> None:
    assert outcome(parse_metrics, text) == outcome(parse_metrics_with_library, text)
