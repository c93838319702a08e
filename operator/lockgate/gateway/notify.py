"""Wake-ups across gateway replicas: one Redis pub/sub subscription per process.

The store's scripts publish on `lg:events`: `q:<ep>[:<id>]` (a job was queued onto empty
queues: a submit names it; or jobs were requeued), `d:<ep>:<id>[\n<record>]` (a /runsync
job, or one a `/status?wait=` watches, ended: with its final record when small),
`c:<ep>:<id>:<seq>[\n<chunk>...]` (stream chunks of a job read live, an OpenAI stream:
numbered, and carried when small), `s:<ep>:<worker>` (a stop signal), `r:<ep>` (registry
changed), `a:<ep>` (a worker new to the endpoint or a first worker-state report: see
gateway/activity.py), `k:<digest>` (an API key was changed or revoked), `u:<ep>` (a
worker was marked unhealthy: its control plane replaces it). A `q:` wakes
one job-take per replica; a taker that leaves jobs queued wakes the next (`kick`), so a
busy queue costs no PUBLISH per submit. A replica that submits a job while one of its own
job-takes waits hands the job over (`hand_over`): that taker is woken before the submit is
sent, so its take goes to Redis right behind the submit, in the same batch (one round trip
for both), and the submit's `q:` event, which names the job, wakes no second local taker.
Waiters also re-check Redis every few seconds, so a message lost while Redis restarts
delays a wake-up but never loses one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockgate.store.keys import EVENTS_CHANNEL
from lockgate.store.pipe import is_cluster, listen
from lockgate.store.records import JobRecord

log = logging.getLogger("lockgate.gateway")

Waiters = dict[object, dict[asyncio.Future[Any], object]]  # key -> {waiter: who waits}
HANDED_KEPT = 4096  # ids of handed-over jobs remembered until their `q:` event


@dataclass(eq=False)
class Listener:
    """What happened to one live job since its reader last looked: `changed` is set on each
    event; `pushed` holds the chunks the events carried, as (number of the first, chunks or
    None when they were too large to carry); `ended` says the job ended, and `final` is the
    record its end event carried (if it did); `stale` that events may have been missed
    (the subscription reconnected). The reader clears them."""

    changed: asyncio.Event = field(default_factory=asyncio.Event)
    pushed: list[tuple[int, list[bytes] | None]] = field(default_factory=list)
    ended: bool = False
    final: JobRecord | None = None
    stale: bool = False

    def take(self) -> list[tuple[int, list[bytes] | None]]:
        """The pushed chunks so far, clearing `changed` first (no event falls between)."""
        self.changed.clear()
        pushed, self.pushed = self.pushed, []
        return pushed


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _wait(timeout: float, *at: tuple[Waiters, object], who: object = None) -> object:
    """Wait until a key of `at` (table, key) is woken: what it was woken with (the table,
    unless said otherwise); None once `timeout` seconds pass. One future and one timer,
    however many keys. `who` names the waiter in the tables."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    for table, key in at:
        table[key][fut] = who
    handle = loop.call_later(timeout, _expire, fut)
    try:
        return await fut
    finally:
        handle.cancel()
        for table, key in at:
            waiters = table.get(key)
            if waiters is not None:
                waiters.pop(fut, None)
                if not waiters:
                    del table[key]


def _wake(table: Waiters, key: object, *, one: bool, value: object = None) -> list[object]:
    """Wake the key's waiters; with `one`, the one that began waiting last: for a job, most
    often the worker that just finished one (its process still running, its caches warm),
    while workers that wait longer may idle out and be scaled down. Who was woken."""
    woken = []
    for fut, who in reversed(list(table.get(key, {}).items())):
        if not fut.done():
            fut.set_result(table if value is None else value)
            woken.append(who)
            if one:
                break
    return woken


class Notifier:
    """Lets request handlers sleep until the store says something changed."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.on_registry_change: Callable[[str], None] = lambda _ep: None
        self.on_key_change: Callable[[str], None] = lambda _digest: None
        self.on_queued: Callable[[str], None] = lambda _ep: None
        # `q:`, `a:` and `r:` events: an endpoint to look after again (gateway/activity.py)
        self.on_activity: Callable[[str], None] = lambda _ep: None
        self.on_lb_change: Callable[[str], None] = lambda _ep: None
        self.on_unhealthy: Callable[[str], None] = lambda _ep: None  # `u:` (the scaler)
        # Each (re)subscription: events published while it was down are lost, so whoever
        # waits for signs of activity looks at everything once (a full pass).
        self.on_subscribed: Callable[[], None] = lambda: None
        self._jobs: Waiters = defaultdict(dict)
        self._done: Waiters = defaultdict(dict)
        self._listeners: dict[tuple[str, str], set[Listener]] = defaultdict(set)
        self._stops: Waiters = defaultdict(dict)
        # Jobs handed over (`hand_over`), until their `q:` event: id -> worker woken for it.
        self._handed: dict[str, object] = {}
        self._generation: dict[str, int] = defaultdict(int)
        self._nonce = secrets.token_hex(4)  # this process's, changed at each (re)subscribe
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def generation(self, endpoint_id: str) -> int:
        """Counts `queued` (and stop) events of an endpoint; a change means "take again
        before sleeping"."""
        return self._generation[endpoint_id]

    def idle_token(self, endpoint_id: str) -> str:
        """Names this process, its subscription and the endpoint's generation: read before
        a take that found the queue empty, it is still current when no job was queued
        (and no worker told to stop) since, as far as this process can know."""
        return f"{self._nonce}.{self._generation[endpoint_id]}"

    async def wait_for_job(self, endpoint_id: str, worker_id: str, timeout: float) -> bool:
        """Until a job is queued (True), or the worker is told to stop (its stop channel also
        carries `stop_taking`), or `timeout` passes (False)."""
        stops = (self._stops, (endpoint_id, worker_id))
        return await _wait(timeout, (self._jobs, endpoint_id), stops, who=worker_id) is self._jobs

    async def wait_done(self, endpoint_id: str, job_id: str, timeout: float) -> JobRecord | bool:
        """Until the job ends: its final record when the event carried it, else True (also
        when events may have been missed); False once `timeout` passes."""
        woken = await _wait(timeout, (self._done, (endpoint_id, job_id)))
        return woken if isinstance(woken, JobRecord) else woken is not None

    @contextmanager
    def listen(self, endpoint_id: str, job_id: str) -> Iterator[Listener]:
        """A listener of the job's events (its end; a live job's chunks) while the block
        runs: start it before the submit, so no event falls before it."""
        key, listener = (endpoint_id, job_id), Listener()
        self._listeners[key].add(listener)
        try:
            yield listener
        finally:
            self._listeners[key].discard(listener)
            if not self._listeners[key]:
                del self._listeners[key]

    def _chunks(self, message: bytes) -> None:
        """A `c:` event: hand its chunks (or the news of them) to the job's listeners."""
        head, _, payload = message.partition(b"\n")
        ep, _, rest = head[2:].decode().partition(":")
        job_id, _, seq = rest.rpartition(":")
        listeners = self._listeners.get((ep, job_id))
        if not listeners or not seq.isdigit():
            return  # another replica's reader, most of the time
        chunks = payload.split(b"\n") if payload else None
        for listener in listeners:
            listener.pushed.append((int(seq), chunks))
            listener.changed.set()

    async def wait_stop(self, endpoint_id: str, worker_id: str, timeout: float) -> bool:
        return await _wait(timeout, (self._stops, (endpoint_id, worker_id))) is not None

    def kick(self, endpoint_id: str) -> None:
        """Wake one local job waiter (more jobs are queued than wake-ups were sent)."""
        self._generation[endpoint_id] += 1
        _wake(self._jobs, endpoint_id, one=True)

    def hand_over(self, endpoint_id: str, job_id: str) -> None:
        """Call right before submitting a job (no await between): wake one local job waiter
        now, so its take is batched behind the submit, and let the submit's `q:` event for
        this job wake no other local waiter while that one has not come back to wait (its
        take then found nothing: the submit was sent again after it, as after a Redis
        restart, or another replica's worker took the job). A waiter woken so that does
        not take (its worker went, or was told to stop) passes the wake on, as any waiter
        does; other replicas are woken by the event as before."""
        self._generation[endpoint_id] += 1
        for worker in _wake(self._jobs, endpoint_id, one=True):
            self._handed[job_id] = worker
            if len(self._handed) > HANDED_KEPT:  # ids whose event never came (a busy queue)
                del self._handed[next(iter(self._handed))]

    def _ended(self, message: bytes) -> None:
        """A `d:` event: wake the job's waiters (with the record it carries) and listeners."""
        head, _, payload = message.partition(b"\n")
        ep, _, job_id = head[2:].decode().partition(":")
        key = (ep, job_id)
        listeners = self._listeners.get(key, ())
        if key not in self._done and not listeners:
            return  # another replica's waiter, most of the time
        record = JobRecord.from_event(job_id, payload) if payload else None
        _wake(self._done, key, one=False, value=record or True)
        for listener in listeners:
            listener.ended, listener.final = True, record
            listener.changed.set()

    def dispatch(self, message: bytes) -> None:
        """Route one event to its waiters."""
        if message.startswith(b"c:"):
            self._chunks(message)
            return
        if message.startswith(b"d:"):
            self._ended(message)
            return
        kind, _, rest = message.decode().partition(":")
        if kind == "q":
            ep, _, job_id = rest.partition(":")
            taker = self._handed.pop(job_id, None) if job_id else None
            if taker is not None and taker not in self._jobs.get(ep, {}).values():
                self._generation[ep] += 1  # its taker, woken at the submit, is taking it
            else:
                self.kick(ep)
            self.on_queued(ep)
            self.on_activity(ep)
        elif kind == "s":
            ep, _, worker = rest.partition(":")
            self._generation[ep] += 1  # a taker may be the one told to stop
            _wake(self._stops, (ep, worker), one=False)
        else:
            for call in self._callbacks(kind):
                call(rest)

    def _callbacks(self, kind: str) -> tuple[Callable[[str], None], ...]:
        """Who hears of an event that only names something (an endpoint, a key digest)."""
        return {
            "a": (self.on_activity,),
            "r": (self.on_registry_change, self.on_activity),
            "k": (self.on_key_change,),
            "l": (self.on_lb_change, self.on_activity),
            "u": (self.on_unhealthy,),
        }.get(kind, ())

    def wake_everyone(self) -> None:
        for table in (self._jobs, self._done, self._stops):
            for key in list(table):
                _wake(table, key, one=False)
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.stale = True
                listener.changed.set()

    def start(self) -> None:
        """Run the subscription in the background."""
        self._task = asyncio.create_task(self._run(), name="lockgate-events")

    async def close(self) -> None:
        """Stop the subscription (also when a cancellation lands inside a reconnect)."""
        task, self._task = self._task, None
        if task is None:
            return
        # redis-py may swallow a cancellation that lands while it connects: insist.
        for _ in range(20):
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.1)
            if done:
                return

    def _subscribed(self) -> None:
        self.connected.set()
        self._nonce = secrets.token_hex(4)  # idle tokens given before may have missed events
        self.wake_everyone()  # events may have been missed while disconnected
        self.on_subscribed()

    async def _run(self) -> None:
        """Subscribe and dispatch, reconnecting after Redis goes away. Outside a cluster
        the subscription's messages are parsed and dispatched as they arrive (`pipe.listen`),
        without redis-py's PubSub machinery per message."""
        delay = 0.05
        while self._task is not None:
            try:
                if is_cluster(self.redis):
                    await self._listen_cluster()
                else:
                    err = await listen(self.redis, EVENTS_CHANNEL, self.dispatch, self._subscribed)
                    raise err
            except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                if self.connected.is_set():  # it was subscribed: retry soon
                    delay = 0.05
                self.connected.clear()
                log.warning("event subscription lost (%s); reconnecting in %.2fs", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _listen_cluster(self) -> None:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(EVENTS_CHANNEL)
            self._subscribed()
            async for msg in pubsub.listen():
                if msg["type"] == "message":
                    self.dispatch(msg["data"])
        finally:
            await pubsub.aclose()
