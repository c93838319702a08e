"""Pure: one worker's log as v2 serves it (`GET /v2/serverless/{id}/workers/{w}/logs`):
events of two sources, where each one is in its source, and the event ids that resume a
stream.

A line's place in its source is a `Position`: its time (epoch ms) and its `seq`, how many
lines of the same source and the same millisecond came before it. Both come from what
the log store keeps (the kubelet's timestamped container log, a pod's Events, dev mode's
buffer), so a position names the same line after the management API restarts.
Ordering a source by position is ordering it as written.

The two sources are read apart (a pod's Events arrive late and second-grained, its
container log at once), so a reader's place is a `Cursor`: the last position given of
each source. An event's id is the cursor after it, `<ts>/<seq>` per source, the container's
first, joined by `|` when both are read (`2026-06-01T12:05:04.123Z/000000000042`, RunPod's
shape, for one source). `Last-Event-ID` gives it back; a bare RFC 3339 time is taken as
"from then" for every source.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lockgate.gateway.http import iso_ms

CONTAINER, SYSTEM = "container", "system"
SOURCES = (CONTAINER, SYSTEM)  # the merge order of lines of the same millisecond
SEQ_DIGITS = 12


class BadEventId(ValueError):
    """A `Last-Event-ID` this API did not write."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where a line is in its source: its time (epoch ms), then how many lines of the same
    source and millisecond came before it. `seq=-1` is just before the millisecond."""

    ms: int
    seq: int = 0

    def text(self) -> str:
        """`<RFC 3339 time, ms>/<seq, 12 digits>` (`-00000000001`: before the first)."""
        return f"{iso_ms(self.ms)}/{self.seq:0{SEQ_DIGITS}d}"


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One line of a worker's log, with its place in its source."""

    source: str
    pos: Position
    line: str

    def data(self) -> dict[str, str]:
        """The `data:` object of its event (RunPod's `{ts, source, line}`)."""
        return {"ts": iso_ms(self.pos.ms), "source": self.source, "line": self.line}

    def key(self) -> tuple[int, int, int]:
        """Its place in the merged stream: time, then source, then seq."""
        return (self.pos.ms, SOURCES.index(self.source), self.pos.seq)


@dataclass(frozen=True)
class Cursor:
    """The last position given of each source (absent: nothing given yet: from the start)."""

    after: dict[str, Position] = field(default_factory=dict)

    def admits(self, event: LogEvent) -> bool:
        last = self.after.get(event.source)
        return last is None or event.pos > last

    def moved(self, event: LogEvent) -> Cursor:
        """The cursor once `event` is given."""
        return Cursor({**self.after, event.source: event.pos})

    def event_id(self, sources: Sequence[str]) -> str:
        """The id of the event after which the reader is here, for a stream of `sources`."""
        return "|".join(self.after[s].text() if s in self.after else "-" for s in sources)

    @classmethod
    def since(cls, ms: int, sources: Iterable[str]) -> Cursor:
        """Every line from `ms` on (inclusive)."""
        return cls({s: Position(ms, -1) for s in sources})


def parse_rfc3339(text: str) -> int:
    """An RFC 3339 time (a `Z` or an offset, any fraction) as epoch ms; ValueError else."""
    head, dot, rest = text.strip().partition(".")
    if dot:  # at most microseconds for fromisoformat; keep the zone after the fraction
        digits = len(rest) - len(rest.lstrip("0123456789"))
        rest = rest[:digits][:6].ljust(6, "0") + rest[digits:]
    moment = datetime.fromisoformat((head + dot + rest).replace("Z", "+00:00"))
    if moment.tzinfo is None or "T" not in head.upper():
        raise ValueError(f"not an RFC 3339 date-time with a zone: {text!r}")
    whole = int(moment.replace(microsecond=0).timestamp())
    return whole * 1000 + moment.microsecond // 1000


def _position(text: str) -> Position:
    ts, sep, seq = text.rpartition("/")
    if not sep or not seq.removeprefix("-").isdigit():
        raise BadEventId(text)
    return Position(parse_rfc3339(ts), int(seq))


def parse_event_id(text: str, sources: Sequence[str]) -> Cursor:
    """The cursor an event id names, for a stream of `sources`. One position (a one-source
    stream's id) stands for every source; of a two-source id, a source it has no line of
    starts at the earliest time it names. A bare RFC 3339 time: from then on. Raises
    `BadEventId`."""
    text = text.strip()
    try:
        if "/" not in text:
            return Cursor.since(parse_rfc3339(text), sources)
        parts = text.split("|")
        if len(parts) == 1:
            pos = _position(text)
            return Cursor({s: pos for s in sources})
        if len(parts) != len(SOURCES):
            raise BadEventId(text)
        named = {s: _position(p) for s, p in zip(SOURCES, parts, strict=True) if p != "-"}
    except ValueError as err:
        raise BadEventId(text) from err
    if not named:
        raise BadEventId(text)
    start = Position(min(p.ms for p in named.values()), -1)
    return Cursor({s: named.get(s, start) for s in sources})


def before(events: Sequence[LogEvent], start: Cursor) -> Cursor:
    """Where a tail's reader starts: just before the first of `events` of each source they
    have, at `start` for the others (so each event's id resumes right after it)."""
    after = dict(start.after)
    for source in SOURCES:
        first = next((e.pos for e in events if e.source == source), None)
        if first is not None:
            after[source] = Position(first.ms, first.seq - 1)
    return Cursor(after)


class Numbering:
    """Positions of one source's lines, given in the order written. A clock going back is
    held at the last time, so the order of positions stays the order written."""

    def __init__(self) -> None:
        self.last: Position | None = None

    def place(self, ms: int) -> Position:
        if self.last is not None and ms <= self.last.ms:
            self.last = Position(self.last.ms, self.last.seq + 1)
        else:
            self.last = Position(ms, 0)
        return self.last


def numbered(source: str, lines: Iterable[tuple[int, str]], *, whole: bool) -> list[LogEvent]:
    """Lines of one source in the order written, `(epoch ms, text)`, with their positions.
    `whole=False`: the read may have cut the first millisecond's lines (a `tail`), whose
    seqs would be wrong: they are left out."""
    numbering = Numbering()
    events = [LogEvent(source, numbering.place(ms), text) for ms, text in lines]
    if not whole and events:
        first = events[0].pos.ms
        events = [e for e in events if e.pos.ms != first]
    return events


def merged(*streams: Iterable[LogEvent]) -> list[LogEvent]:
    """Events of several sources as one stream (time, then source, then seq)."""
    return sorted((e for stream in streams for e in stream), key=LogEvent.key)


def after(events: Iterable[LogEvent], cursor: Cursor, limit: int) -> list[LogEvent]:
    """The first `limit` events past `cursor`, merged."""
    return [e for e in merged(events) if cursor.admits(e)][:limit]


def last(events: Iterable[LogEvent], tail: int) -> list[LogEvent]:
    """The last `tail` events, merged (none for 0)."""
    return merged(events)[-tail:] if tail > 0 else []


def newest(events: Iterable[LogEvent]) -> Cursor:
    """The cursor past every one of `events`: where a live-only reader starts."""
    cursor = Cursor()
    for event in merged(events):
        cursor = cursor.moved(event)
    return cursor
