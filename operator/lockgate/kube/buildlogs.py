"""Where the operator is in a build container's log (pure; docs/builds.md "Live builder
logs").

The operator appends a build pod's log lines to the build's log while the build runs
(`kube.builds`), reading each container's log again at every look. A `Cursor` says which
lines it has taken already, so that a second look, the Job's event and a reconcile of the
same build, or an operator restarted meanwhile, never take a line twice nor skip one:

- `since`: a second (epoch): the kubelet's timestamp of the last line taken, cut to the
  second, less SLACK_S; None before any line was taken;
- `seen`: how many of the log's lines stamped at or after `since` were taken.

Each read asks the kubelet for the lines of the last seconds since `since` (with
`SKEW_S` more, for a node's clock ahead of the operator's), with their timestamps; the
lines stamped before `since` are dropped here, so what is left is the same sequence at
every read, and its first `seen` lines are the ones taken (`take`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lockgate.timestamps import NS, stamp_ns

SKEW_S = 60  # seconds a node's clock may be ahead of the operator's without a line lost
READ_BYTES = 4 * 1024 * 1024  # at most this much of a container's log per read
LINES_PER_READ = 1000  # at most this many lines taken per read
# stdout and stderr are stamped apart, so a line may come after one stamped a little later:
# the window starts SLACK_S before the last line taken, never later than it was.
SLACK_S = 1


@dataclass(frozen=True)
class Cursor:
    """The lines of one container's log taken so far (see the module's docstring)."""

    since: int | None = None
    seen: int = 0
    done: bool = False  # the container had ended and every line of it was taken

    def encoded(self) -> str:
        """`<since>:<seen>` (`:<seen>` when no line was taken; `:end` after it when
        `done`), as the store keeps it."""
        return f"{'' if self.since is None else self.since}:{self.seen}" + (
            ":end" if self.done else ""
        )

    @classmethod
    def decoded(cls, text: str | None) -> Cursor:
        """The cursor `encoded` wrote; the start of the log for None or anything else."""
        since, _, rest = (text or "").partition(":")
        seen, _, end = rest.partition(":")
        try:
            return cls(int(since) if since else None, int(seen or 0), end == "end")
        except ValueError:
            return cls()


@dataclass(frozen=True)
class Row:
    """One line of a log read with timestamps: when the kubelet stamped it (epoch ns;
    None when the line has no stamp) and its text."""

    ns: int | None
    text: str


def rows(text: str, *, cut: bool) -> list[Row]:
    """A log read with timestamps as rows. `cut`: the read stopped at its byte limit, so an
    unfinished last line is left for the next read."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line
    elif cut and lines:
        lines.pop()  # cut short: read again whole next time
    found: list[Row] = []
    for line in lines:
        stamp, _, rest = line.partition(" ")
        ns = stamp_ns(stamp)
        found.append(Row(ns, rest) if ns is not None else Row(None, line))
    return found


def read_options(cursor: Cursor, now: float) -> dict[str, Any]:
    """`read_namespaced_pod_log` options reading every line at or after `cursor.since`
    (`now`: the operator's clock, epoch seconds)."""
    options: dict[str, Any] = {"timestamps": True, "limit_bytes": READ_BYTES}
    if cursor.since is not None:
        options["since_seconds"] = max(1, math.ceil(now - cursor.since)) + SKEW_S
    return options


def take(cursor: Cursor, found: list[Row], most: int = LINES_PER_READ) -> tuple[list[str], Cursor]:
    """The lines of `found` (a read with `read_options(cursor)`) not taken yet, at most
    `most`, and the cursor past them. A line without a stamp counts as stamped as the line
    before it."""
    window: list[tuple[int, str]] = []
    last = 0
    for row in found:
        last = row.ns if row.ns is not None else last
        if cursor.since is None or last >= cursor.since * NS:
            window.append((last, row.text))
    new = window[cursor.seen : cursor.seen + most]
    if not new:
        return [], cursor
    since = max(cursor.since or 0, new[-1][0] // NS - SLACK_S)
    taken = window[: cursor.seen + len(new)]
    seen = sum(1 for ns, _ in taken if ns >= since * NS)
    return [text for _, text in new], Cursor(since, seen)


def marked_done(cursor: Cursor, taken: int, *, ended: bool, cut: bool) -> Cursor:
    """The cursor after a read that took `taken` lines, marked `done` when the container
    had ended before the read and the read left nothing (fewer lines than a read takes,
    none cut off): its log is not read again."""
    if ended and not cut and taken < LINES_PER_READ:
        return Cursor(cursor.since, cursor.seen, done=True)
    return cursor
