"""Dev mode's worker logs: a bounded buffer of each local worker's output, and followers.

`LocalLogs.sink(endpoint)` is what a `LocalProcessPool` calls with each line a worker
writes. Each worker keeps its last `LINES_PER_WORKER` lines (at most `CHARS_PER_WORKER`
characters of them), and is kept `KEEP_EXITED_S`
after it exits (a failed cold start can still be read), at most `WORKERS_KEPT` workers per
endpoint (the oldest exited go first). A follower gets new lines through a bounded queue:
a reader slower than the workers loses lines (and is told how many), memory stays bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from lockgate.manage.loglines import STDERR, STDOUT, LineMaker, LogLine, LogQuery

LINES_PER_WORKER = 5000
CHARS_PER_WORKER = 2 * 1024 * 1024  # and at most this much text: 5000 long lines would be 40 MB
KEEP_EXITED_S = 900.0  # 15 min: long enough to read why a worker died
WORKERS_KEPT = 64  # per endpoint, running ones included
FOLLOW_QUEUE = 1000  # lines a follower may have unread before new ones are dropped

LineSink = Callable[[str, str, str | None], None]  # (worker id, stream, line or None at EOF)


class Follower:
    """New lines for one client, through a bounded queue; `dropped` counts lost lines."""

    def __init__(self, query: LogQuery, size: int = FOLLOW_QUEUE) -> None:
        self.query = query
        self.queue: asyncio.Queue[LogLine] = asyncio.Queue(size)
        self.dropped = 0

    def offer(self, line: LogLine) -> None:
        if not self.query.matches(line):
            return
        try:
            self.queue.put_nowait(line)
        except asyncio.QueueFull:
            self.dropped += 1

    def take_dropped(self) -> int:
        dropped, self.dropped = self.dropped, 0
        return dropped


@dataclass
class WorkerBuffer:
    maker: LineMaker
    lines: deque[LogLine] = field(default_factory=lambda: deque(maxlen=LINES_PER_WORKER))
    closed: set[str] = field(default_factory=set)  # streams at end of file
    exited_at: float | None = None
    chars: int = 0  # of the lines kept

    def keep(self, line: LogLine) -> None:
        if len(self.lines) == self.lines.maxlen:
            self.chars -= len(self.lines[0].line)
        self.lines.append(line)
        self.chars += len(line.line)
        while self.chars > CHARS_PER_WORKER and len(self.lines) > 1:
            self.chars -= len(self.lines.popleft().line)


class EndpointLogs:
    """The buffers of one endpoint's workers, and who follows them."""

    def __init__(self) -> None:
        self.workers: dict[str, WorkerBuffer] = {}
        self.followers: set[Follower] = set()

    def add(self, worker: str, stream: str, text: str | None) -> None:
        buf = self.workers.get(worker)
        if buf is None:
            buf = self.workers[worker] = WorkerBuffer(LineMaker(worker))
            self._forget_old()
        if text is None:  # one of its pipes closed; both: the worker is gone
            buf.closed.add(stream)
            if buf.closed >= {STDOUT, STDERR}:
                buf.exited_at = time.monotonic()
            return
        for line in buf.maker.make_all(text, stream):
            buf.keep(line)
            for follower in self.followers:
                follower.offer(line)

    def select(self, query: LogQuery) -> list[LogLine]:
        self._forget_old()
        wanted = [b for w, b in self.workers.items() if query.worker in (None, w)]
        return query.select([line for buf in wanted for line in buf.lines])

    def _forget_old(self) -> None:
        now = time.monotonic()
        for worker, buf in list(self.workers.items()):
            if buf.exited_at is not None and now - buf.exited_at > KEEP_EXITED_S:
                del self.workers[worker]
        exited = sorted(
            (b.exited_at, w) for w, b in self.workers.items() if b.exited_at is not None
        )
        for _, worker in exited[: max(0, len(self.workers) - WORKERS_KEPT)]:
            del self.workers[worker]


class LocalLogs:
    """Every dev-mode endpoint's worker logs (a `LogSource`)."""

    def __init__(self) -> None:
        self._endpoints: dict[str, EndpointLogs] = {}

    def book(self, endpoint_id: str) -> EndpointLogs:
        return self._endpoints.setdefault(endpoint_id, EndpointLogs())

    def sink(self, endpoint_id: str) -> LineSink:
        """The callback a worker pool feeds: `(worker, stream, line)`, `line=None` at EOF."""
        return self.book(endpoint_id).add

    def worker(self, endpoint_id: str, worker_id: str) -> WorkerBuffer | None:
        """One worker's buffer (kept `KEEP_EXITED_S` after it exits), if there is one."""
        book = self._endpoints.get(endpoint_id)
        if book is None:
            return None
        book._forget_old()
        return book.workers.get(worker_id)

    def forget(self, endpoint_id: str) -> None:
        """A deleted endpoint's logs go with it."""
        self._endpoints.pop(endpoint_id, None)

    async def lines(self, endpoint_id: str, query: LogQuery) -> list[LogLine]:
        return self.book(endpoint_id).select(query)

    async def follow(self, endpoint_id: str, query: LogQuery) -> tuple[list[LogLine], Follower]:
        """The tail, and a follower of what comes after it; `unfollow` it when done."""
        book = self.book(endpoint_id)
        follower = Follower(query)
        book.followers.add(follower)
        return book.select(query), follower

    async def unfollow(self, endpoint_id: str, follower: Follower) -> None:
        self.book(endpoint_id).followers.discard(follower)
