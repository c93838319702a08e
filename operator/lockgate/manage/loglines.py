"""Worker log lines: their shape, the query of `GET /v1/endpoints/{id}/logs`, and which job
a line belongs to. Pure functions and small state machines; the sources (`manage.logbook`
in dev mode, `kube.podlogs` on Kubernetes) feed them raw lines.

Which job: a line names its job when the runtime wrote it so —
- the runpod SDK (with `RUNPOD_ENDPOINT_ID` set, as every worker has) prints JSON
  `{"requestId": "<job>", "message": ..., "level": ...}`, else `LEVEL  | <job> | message`;
- lockgate's runtime prints `... lockgate.worker | job <job> ...` for each job's start and end.
Lines between a job's first line and its end that name no job (the handler's own prints,
a traceback) belong to that job when it is the only one the worker has in hand.
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lockgate.gateway.errors import BadRequest
from lockgate.gateway.http import iso_ms
from lockgate.manage.workerlogs import CONTAINER, SYSTEM, Numbering

MAX_LINE_CHARS = 8192  # a longer line is cut (a handler printing a base64 image)
TAIL_DEFAULT = 500
TAIL_MAX = 5000
STDOUT, STDERR = "stdout", "stderr"
LIFECYCLE = "system"  # dev mode's lines about a worker process (started, exited): v2's only

LOCKGATE_RE = re.compile(r"lockgate\.worker \| job (\S+) ")
LOCKGATE_END_RE = re.compile(r"lockgate\.worker \| job \S+ (completed|failed|stopped)\b")
RUNPOD_PLAIN_RE = re.compile(r"^[A-Z]+ *\| ([0-9A-Za-z][\w-]{2,}) \| ")
RUNPOD_END_MESSAGES = {"Finished Job", "Job stopped."}
FRACTION_RE = re.compile(r"\.\d+")  # seconds' fraction in an ISO time
# Levels, lowest first: the runpod SDK's (TRACE below DEBUG), Python logging's named as these.
LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR")
LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "ERROR", "FATAL": "ERROR", "TIP": "INFO"}
RUNPOD_LEVEL_RE = re.compile(r"^([A-Z]+) *\| (?:([0-9A-Za-z][\w-]{2,}) \| )?")
WORD_LEVEL_RE = re.compile(r"\b(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
WORD_LEVEL_CHARS = 48  # a level word counts only this early in a line (a logging prefix)
RECENTLY_ENDED = 64  # ended jobs remembered per worker, so late lines do not reopen them
# A worker's stdout and stderr are two pipes, read apart: a line written on one before a
# job's end line on the other may be read just after it. Such a line, read this soon after
# the end and on the other stream, with no job in hand, is still that job's.
CROSS_STREAM_MS = 200


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a worker wrote; `ms`: when, in epoch milliseconds."""

    ms: int
    worker: str
    stream: str
    line: str
    job: str | None = None
    seq: int = 0  # lines of the same worker, source and millisecond before it (v2's ids)

    def to_json(self) -> dict[str, Any]:
        level, message = level_of(self.line)
        return {
            "ts": iso_ms(self.ms),
            "worker": self.worker,
            "job": self.job,
            "stream": self.stream,
            "line": self.line,
            "level": level,
            "message": message,
        }


def _level(name: str) -> str | None:
    name = LEVEL_NAMES.get(name.upper(), name.upper())
    return name if name in LEVELS else None


def level_of(text: str) -> tuple[str | None, str]:
    """A line's level (one of `LEVELS`, None when it names none) and its message: the
    runpod SDK's JSON line `{"requestId", "message", "level"}` and its plain
    `LEVEL  | [job |] message` give both; a Python logging line (a level word early on)
    gives its level, the whole line as message."""
    if text.startswith("{") and '"level"' in text:
        try:
            entry = json.loads(text)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("level"), str):
            message = entry.get("message")
            return _level(entry["level"]), message if isinstance(message, str) else text
    if (found := RUNPOD_LEVEL_RE.match(text)) and (level := _level(found.group(1))):
        return level, text[found.end() :]
    if found := WORD_LEVEL_RE.search(text[:WORD_LEVEL_CHARS]):
        return _level(found.group(1)), text
    return None, text


def effective_level(line: LogLine) -> str:
    """The level a filter reads: the line's own, else INFO on stdout and ERROR on stderr
    (a traceback, a crash's last words)."""
    level, _ = level_of(line.line)
    return level or ("ERROR" if line.stream == STDERR else "INFO")


@dataclass(frozen=True, slots=True)
class LogQuery:
    """What a client asked for: lines after `since` and up to `until` (epoch ms), of one
    worker or job, containing `text` (any case), at `level` or above, the last `tail` of
    them (after filtering); `follow` streams new ones too."""

    since: int | None = None
    worker: str | None = None
    job: str | None = None
    tail: int = TAIL_DEFAULT
    follow: bool = False
    until: int | None = None
    text: str | None = None  # lower case
    level: str | None = None  # one of LEVELS

    @property
    def narrowed(self) -> bool:
        """Whether it keeps only some lines of a worker (a source then reads more of each)."""
        return any(x is not None for x in (self.job, self.text, self.level))

    def matches(self, line: LogLine) -> bool:
        return (
            line.stream != LIFECYCLE
            and (self.since is None or line.ms > self.since)
            and (self.until is None or line.ms <= self.until)
            and (self.worker is None or line.worker == self.worker)
            and (self.job is None or line.job == self.job)
            and (self.text is None or self.text in line.line.lower())
            and (
                self.level is None
                or LEVELS.index(effective_level(line)) >= LEVELS.index(self.level)
            )
        )

    def select(self, lines: list[LogLine]) -> list[LogLine]:
        """The last `tail` matching lines, oldest first (`lines` in any order); none for a
        tail of 0 (`follow` with no backlog, as `kubectl logs -f --tail 0`)."""
        if not self.tail:
            return []
        chosen = sorted((line for line in lines if self.matches(line)), key=lambda x: x.ms)
        return chosen[-self.tail :]


def parse_time(text: str, name: str) -> int:
    """ISO-8601 (a `Z` or an offset; no zone means UTC; any fraction) or epoch milliseconds,
    as epoch milliseconds (cut to whole ms); raises `BadRequest` naming the parameter."""
    if text.isdigit():
        return int(text)
    text = FRACTION_RE.sub(lambda m: m.group(0)[:7], text)  # ns (Kubernetes) -> us
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise BadRequest(f"{name}: expected an ISO-8601 time or epoch milliseconds") from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _ms(moment)


def _ms(moment: datetime) -> int:
    """Whole epoch milliseconds of an aware datetime (no float rounding up)."""
    whole = int(moment.replace(microsecond=0).timestamp())
    return whole * 1000 + moment.microsecond // 1000


def parse_query(params: Any) -> LogQuery:
    """The query string of `GET …/logs`; raises `BadRequest` naming the bad parameter."""
    since = parse_time(params["since"], "since") if params.get("since") else None
    tail_text = params.get("tail", str(TAIL_DEFAULT))
    if not tail_text.isdigit() or not 0 <= int(tail_text) <= TAIL_MAX:
        raise BadRequest(f"tail: expected a whole number from 0 to {TAIL_MAX}")
    follow = params.get("follow", "false").lower()
    if follow not in ("true", "false", "1", "0"):
        raise BadRequest("follow: expected true or false")
    until = parse_time(params["until"], "until") if params.get("until") else None
    level = params.get("level") or None
    if level is not None and _level(level) is None:
        raise BadRequest(f"level: expected one of {', '.join(LEVELS)}")
    return LogQuery(
        since=since,
        worker=params.get("worker") or None,
        job=params.get("job") or None,
        tail=int(tail_text),
        follow=follow in ("true", "1"),
        until=until,
        text=(params.get("q") or "").lower() or None,
        level=_level(level) if level else None,
    )


def clip_line(text: str) -> str:
    """A raw line without its line break, cut to `MAX_LINE_CHARS`."""
    text = text.rstrip("\r\n")
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}… ({len(text)} characters, cut)"


def job_named(text: str) -> tuple[str | None, bool]:
    """The job a line names, and whether it says that job ended."""
    if text.startswith("{") and '"requestId"' in text:
        try:
            entry = json.loads(text)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("requestId"), str):
            return entry["requestId"], entry.get("message") in RUNPOD_END_MESSAGES
    if found := LOCKGATE_RE.search(text):
        return found.group(1), LOCKGATE_END_RE.search(text) is not None
    if found := RUNPOD_PLAIN_RE.match(text):
        rest = text[found.end() :]
        return found.group(1), rest in RUNPOD_END_MESSAGES
    return None, False


class JobTracker:
    """Which job each line of ONE worker belongs to (lines given in the order read; each
    stream's in the order written)."""

    def __init__(self) -> None:
        self.open: list[str] = []
        self.ended: deque[str] = deque(maxlen=RECENTLY_ENDED)
        self._last_end: tuple[str, str | None, int | None] | None = None  # job, stream, ms

    def job_of(self, text: str, stream: str | None = None, ms: int | None = None) -> str | None:
        job, ends = job_named(text)
        if job is None:
            if len(self.open) == 1:
                return self.open[0]
            return self._just_ended(stream, ms) if not self.open else None
        if ends:
            if job in self.open:
                self.open.remove(job)
            self.ended.append(job)
            self._last_end = (job, stream, ms)
        elif job not in self.open and job not in self.ended:
            self.open.append(job)
        return job

    def _just_ended(self, stream: str | None, ms: int | None) -> str | None:
        """The job that ended on the other stream within `CROSS_STREAM_MS` of `ms`."""
        if self._last_end is None or stream is None or ms is None:
            return None
        job, end_stream, end_ms = self._last_end
        if end_stream is None or end_stream == stream or end_ms is None:
            return None
        return job if 0 <= ms - end_ms <= CROSS_STREAM_MS else None


class LineMaker:
    """Turns one worker's raw output into `LogLine`s (clipped, with their job)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.jobs = JobTracker()
        # v2's sources: its output (stdout and stderr as one), and its lifecycle lines
        self.numbering = {CONTAINER: Numbering(), SYSTEM: Numbering()}

    def make(self, text: str, stream: str = STDOUT, ms: int | None = None) -> LogLine:
        text = clip_line(text)
        ms = time.time_ns() // 1_000_000 if ms is None else ms
        if stream == LIFECYCLE:
            pos = self.numbering[SYSTEM].place(ms)
            return LogLine(pos.ms, self.worker, stream, text, None, pos.seq)
        pos = self.numbering[CONTAINER].place(ms)
        job = self.jobs.job_of(text, stream, pos.ms)
        return LogLine(pos.ms, self.worker, stream, text, job, pos.seq)
