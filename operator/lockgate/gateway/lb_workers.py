"""Load-balancing endpoints' workers as one gateway process sees them: which are routable
(health polled here), which to send a request to, requests held through a cold start, and
the held and in-flight counts reported to Redis for the scaler.

The registry of workers is in Redis (`store.lb_workers`), written by whoever runs them; an
`l:<ep>` event reloads it at once. Each worker's health path is polled every
`lb_health_fast_s` (<= 250 ms) until it answers 200, then every `lb_health_calm_s`; a held
request is woken the moment a poll sees 200. A worker answering neither 200 nor 204 (or a
proxied request that cannot reach it) is out of routing until a poll sees 200 again; after
a failed request, only a poll begun after the failure counts (one in progress may still
carry the worker's last 200).

A request pinned to one worker (`strict <id>`, `strict-resume <id>`: `gateway.affinity`)
waits for that worker only: 404 `affinity_worker_gone` when it is gone, 400
`worker_timeout` when it is not routable within the hold. `strict-resume` asks a parked
worker (`lbp`: scaled down, still resumable) back through Redis (`lbpw` and a `q:` event
to the scaler), again every `RESUME_ASK_S` while it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import random
import time
from collections.abc import Callable, Collection, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from lockgate.gateway.affinity import (
    ABSENT,
    DRAINING,
    GO,
    GONE,
    PARKED,
    RESUME,
    ROUTABLE,
    STRICT_RESUME,
    WAITING,
    Affinity,
    WorkerGone,
    WorkerTimeout,
    gone_because,
    parse_affinity,
    pinned_step,
)
from lockgate.gateway.errors import ApiError
from lockgate.gateway.lb_upstream import WorkerPool
from lockgate.gateway.lb_warmup import LbWarmer
from lockgate.store import keys
from lockgate.store.connection import raise_if_cancelled
from lockgate.store.lb_workers import HEALTHY, INITIALIZING, UNHEALTHY, LbWorker, LbWorkers

# Its own generator: the global `random` is shared with every thread of the process.
_RANDOM = random.Random()

log = logging.getLogger("lockgate.gateway")

HEALTH_TIMEOUT_S = 2.0  # one health poll's limit
PING_BODY_MAX = 64 * 1024  # a health answer's body read up to this length, else left unread
START_GRACE_S = 60.0  # a worker not listening yet is initializing this long, then unhealthy
RELOAD_S = 2.0  # the worker list is read again this often besides `l:` events
REPORT_EVERY_S = 0.05  # held/in-flight changes reach Redis within this (batched)
REFRESH_S = keys.LB_REQUESTS_TTL_MS / 1000 / 3  # a report is rewritten before it expires
IDLE_FORGET_S = 300.0  # an endpoint with no worker and no request is dropped after this
POOL_PER_WORKER = 256  # kept-alive connections per worker (aiohttp's TCPConnector limit)
CONNECT_TIMEOUT_S = 5.0  # a new connection to a worker must be made within this
GATEWAY_HOLD = "LOCKGATE_LB_HOLD_S"  # the hold's setting, as a 503 names it
OWN_HOLD = "the endpoint's lbHoldS"
RESUME_ASK_S = 1.0  # a strict-resume request asks for its parked worker again this often


REFUSAL_MAX = 64 * 1024  # a refused WebSocket upgrade's body is passed back up to this


@dataclass(frozen=True, slots=True)
class Refusal:
    """A worker's answer other than 101 to a WebSocket upgrade: the worker's own answer
    (not a failure), passed back to the caller with at most `REFUSAL_MAX` of its body."""

    status: int
    reason: str | None
    headers: CIMultiDictProxy[str]
    body: bytes


class Attempts:
    """How many times, since `track_attempts`, a worker session began sending a request:
    aiohttp resends an idempotent request on a new connection when a kept-alive one
    fails, so a connection error of any attempt but the first does not prove that nothing
    was sent. (Counted by a client middleware, aiohttp >= 3.12: a `TraceConfig` would do
    too, but it builds a parameters object per signal, ~20 us per proxied request.) The
    middleware also keeps the worker's `refusal` of a WebSocket upgrade (aiohttp's
    `ws_connect` raises on it, its body unread)."""

    __slots__ = ("count", "refusal")

    def __init__(self) -> None:
        self.count = 0
        self.refusal: Refusal | None = None

    @property
    def resent(self) -> bool:
        """More than one attempt: the first one's connection was made, and may have
        carried the request."""
        return self.count > 1


_ATTEMPTS: contextvars.ContextVar[Attempts | None] = contextvars.ContextVar(
    "lb_attempts", default=None
)


def track_attempts() -> Attempts:
    """Count, in this task, the attempts a worker session makes."""
    attempts = Attempts()
    _ATTEMPTS.set(attempts)
    return attempts


async def _count_attempt(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    attempts = _ATTEMPTS.get()
    if attempts is not None:
        attempts.count += 1
    response = await handler(request)
    if attempts is not None and response.status != 101:  # this session only upgrades
        attempts.refusal = await refusal_of(response)
    return response


async def refusal_of(response: aiohttp.ClientResponse) -> Refusal:
    """The worker's answer to an upgrade it refused, its body read up to `REFUSAL_MAX`."""
    body = bytearray()
    while len(body) < REFUSAL_MAX and (chunk := await response.content.readany()):
        body += chunk
    return Refusal(response.status, response.reason, response.headers, bytes(body[:REFUSAL_MAX]))


@dataclass(frozen=True, slots=True)
class HoldTime:
    """How long a request may wait for a routable worker, and the setting that said so."""

    seconds: float
    setting: str


class NoWorker(ApiError):
    """No routable worker within the hold time, or too many requests held."""

    status = 503


@dataclass(eq=False)
class Target:
    """One worker: its record, its health as polled here, and its requests in flight."""

    id: str
    worker: LbWorker
    session: aiohttp.ClientSession  # WebSocket upgrades
    upstream: WorkerPool  # every other request
    registered: float = field(default_factory=time.monotonic)
    state: str = INITIALIZING
    code: int = 0
    answered: bool = False  # its health path answered at least once
    in_flight: int = 0
    gone: bool = False  # unregistered: closed once its last request ends
    reported: tuple[str, int, float] = ("", -1, 0.0)
    failed_at: float = float("-inf")  # monotonic: a proxied request last failed to reach it
    poller: asyncio.Task[None] | None = None
    warmup: str = INITIALIZING  # HEALTHY: warmed up (or none to run); UNHEALTHY: it failed

    @property
    def routable(self) -> bool:
        return self.state == HEALTHY and not self.worker.draining and not self.gone

    async def close(self) -> None:
        """Close its connections (requests still on them fail)."""
        self.upstream.close()
        await self.session.close()


@dataclass(eq=False)
class LbEndpoint:
    """One endpoint's targets, its held requests, and the event that wakes them."""

    id: str
    targets: dict[str, Target] = field(default_factory=dict)
    parked: set[str] = field(default_factory=set)  # scaled down, still resumable
    held: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    used: float = field(default_factory=time.monotonic)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self) -> None:
        """Wake every request waiting for a routable worker (they look again)."""
        self.changed.set()
        self.changed = asyncio.Event()


def pick(
    targets: Iterable[Target], affinity: str | None, exclude: Collection[str] = ()
) -> Target | None:
    """The worker a request goes to: the one it asked for when routable, else the one with
    the fewest requests in flight here (ties broken at random); never one in `exclude`.
    One pass, no list: this is on every request's path."""
    chosen: Target | None = None
    least = ties = 0
    for t in targets:
        if not t.routable or t.id in exclude:
            continue
        if t.id == affinity:
            return t
        if chosen is None or t.in_flight < least:
            chosen, least, ties = t, t.in_flight, 1
        elif t.in_flight == least:
            ties += 1
            if _RANDOM.randrange(ties) == 0:  # each of the tied ones as likely (reservoir)
                chosen = t
    return chosen


def worker_pool(worker: LbWorker) -> WorkerPool:
    """Kept-alive connections to the worker's `address` (host:port; an IPv6 host in [])."""
    host, _, port = worker.address.rpartition(":")
    return WorkerPool(host.strip("[]"), int(port), connect_timeout_s=CONNECT_TIMEOUT_S)


def pinned_seen(ep: LbEndpoint, worker_id: str, exclude: Collection[str] = ()) -> str:
    """How a pinned request's worker looks here now (`gateway.affinity`'s words)."""
    t = ep.targets.get(worker_id)
    if t is not None:
        if t.worker.draining:
            return DRAINING
        return ROUTABLE if t.routable and t.id not in exclude else WAITING
    return PARKED if worker_id in ep.parked else ABSENT


def health_state(code: int, *, answered: bool, starting: bool) -> str:
    """200: routable; 204: initializing; no answer before the first one, while starting:
    initializing (not listening yet); anything else: unhealthy."""
    if code == 200:
        return HEALTHY
    if code == 204 or (code == 0 and not answered and starting):
        return INITIALIZING
    return UNHEALTHY


class LbRouter:
    """Every load-balancing endpoint this process has seen: routing, health, demand."""

    def __init__(
        self,
        store: LbWorkers,
        *,
        clock_ms: Callable[[], int],
        hold_s: float,
        max_held: int,
        fast_s: float,
        calm_s: float,
        on_hold: Callable[[str, float], None] | None = None,
        warmer: LbWarmer | None = None,
    ) -> None:
        self.store = store
        self.warmer = warmer  # None: workers are routable at their first 200
        self.on_hold = on_hold  # (endpoint, seconds held): each held request, sent or 503
        self.clock_ms = clock_ms
        self.hold_s = hold_s
        self.max_held = max_held
        self.fast_s = fast_s
        self.calm_s = calm_s
        self.reporter = f"{os.getpid()}-{_RANDOM.getrandbits(32):08x}"
        self.endpoints: dict[str, LbEndpoint] = {}
        self._dirty: set[str] = set()
        self._kick = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._health: aiohttp.ClientSession | None = None

    # -- routing ----------------------------------------------------------------------

    async def endpoint(self, endpoint_id: str) -> LbEndpoint:
        """The endpoint's state, its workers loaded from Redis the first time."""
        ep = self.endpoints.get(endpoint_id)
        if ep is None:
            ep = self.endpoints[endpoint_id] = LbEndpoint(endpoint_id)
            self._spawn(self._watch(ep), f"lockgate-lb-{endpoint_id}")
        ep.used = time.monotonic()
        await ep.loaded.wait()
        return ep

    async def acquire(
        self,
        endpoint_id: str,
        affinity_header: str | None,
        *,
        hold_s: float | None = None,
        exclude: Collection[str] = (),
        since: float | None = None,
    ) -> Target:
        """A routable worker not in `exclude` with this request counted in flight on it
        (`release` it). Without one the request is held until one turns routable; 503 after
        `hold_s` (the endpoint's `lbHoldS`; None: the gateway's) counted from `since` (the
        loop time the request first asked; None: now), or at once beyond `max_held` held
        requests. A pinned request (`strict`, `strict-resume`) waits for its worker only:
        `WorkerGone` (404) when it is gone, `WorkerTimeout` (400) past the hold."""
        ep = self.endpoints.get(endpoint_id)
        if ep is not None and ep.loaded.is_set():  # the common case, without an await
            ep.used = time.monotonic()
        else:
            ep = await self.endpoint(endpoint_id)
        affinity = parse_affinity(affinity_header)
        changed = ep.changed  # taken before looking: a wake from here on is not missed
        if affinity.pinned:
            target = await self._pinned(ep, affinity, exclude)
        else:
            target = pick(ep.targets.values(), affinity.worker, exclude)
        if target is None:
            if hold_s is not None:  # the endpoint's own
                hold = HoldTime(hold_s, OWN_HOLD)
            else:
                hold = HoldTime(self.hold_s, GATEWAY_HOLD)
            target = await self._hold(ep, affinity, hold, changed, exclude, since)
        target.in_flight += 1
        self._changed(ep)
        return target

    def release(self, endpoint_id: str, target: Target) -> None:
        """The request on `target` ended."""
        target.in_flight -= 1
        ep = self.endpoints.get(endpoint_id)
        if ep is not None:
            self._changed(ep)
        if target.gone and target.in_flight == 0:
            self._spawn(target.close(), f"lockgate-lb-close-{target.id}")

    def failed(self, endpoint_id: str, target: Target, why: str) -> None:
        """A proxied request could not reach `target`: out of routing (here) until a health
        poll begun after now sees 200, or the worker list drops it."""
        if target.state == HEALTHY:
            log.warning("endpoint %s: worker %s out of routing: %s", endpoint_id, target.id, why)
        self.out_of_routing(target)

    @staticmethod
    def out_of_routing(target: Target) -> None:
        """`failed` without its log line (the caller logs)."""
        target.state, target.code = UNHEALTHY, 0
        target.failed_at = time.monotonic()

    async def _choose(
        self, ep: LbEndpoint, affinity: Affinity, exclude: Collection[str] = ()
    ) -> Target | None:
        if affinity.pinned:
            return await self._pinned(ep, affinity, exclude)
        return pick(ep.targets.values(), affinity.worker, exclude)

    async def _pinned(
        self, ep: LbEndpoint, affinity: Affinity, exclude: Collection[str] = ()
    ) -> Target | None:
        """The pinned worker when routable; None to wait for it (asked back first when
        parked and the request says `strict-resume`); `WorkerGone` when it is gone."""
        worker_id = affinity.worker or ""
        seen = pinned_seen(ep, worker_id, exclude)
        step = pinned_step(affinity.mode, seen)
        if step == GO:
            return ep.targets[worker_id]
        if step == GONE:
            why = gone_because(affinity.mode, seen)
            raise WorkerGone(
                f"endpoint {ep.id!r}: worker {worker_id!r} ({affinity.mode}) is gone: {why}"
            )
        if step == RESUME:
            await self.store.ask_resume(ep.id, worker_id)
        return None

    async def _hold(
        self,
        ep: LbEndpoint,
        affinity: Affinity,
        hold: HoldTime,
        changed: asyncio.Event,
        exclude: Collection[str] = (),
        since: float | None = None,
    ) -> Target:
        """Wait for a worker until the hold's deadline. `changed` is the endpoint's event
        as it was before the caller last looked: each look takes the event first, so a
        wake during a look or during the awaits here (the report, the scaler's wake) is
        seen, not lost until the deadline."""
        if ep.held >= self.max_held:
            raise NoWorker(
                f"endpoint {ep.id!r}: no routable worker and {ep.held} requests already held "
                f"(LOCKGATE_LB_MAX_HELD); retry later",
                headers={"Retry-After": "1"},
            )
        ep.held += 1
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = (began if since is None else since) + hold.seconds
        try:
            await self._report(ep)  # the scaler sees this request before it wakes
            if ep.held == 1:
                await self.store.wake_scaler(ep.id)
            raise_if_cancelled()  # a client gone meanwhile (`ClientWatch`): not held on
            while (left := deadline - loop.time()) > 0:
                if affinity.mode == STRICT_RESUME:  # looks (and asks) again now and then
                    left = min(left, RESUME_ASK_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), left)
                changed = ep.changed
                target = await self._choose(ep, affinity, exclude)
                if target is not None:
                    return target
        finally:
            ep.held -= 1
            self._changed(ep)
            if self.on_hold is not None:
                self.on_hold(ep.id, loop.time() - began)
        held = f"held {hold.seconds:g} s ({hold.setting})"
        if affinity.pinned:
            raise WorkerTimeout(
                f"endpoint {ep.id!r}: timed out waiting for worker {affinity.worker!r} "
                f"({affinity.mode}): not routable; {held}"
            )
        raise NoWorker(self._why(ep, held), headers={"Retry-After": "5"})

    def _why(self, ep: LbEndpoint, held: str) -> str:
        if not ep.targets:
            return f"endpoint {ep.id!r}: no worker became healthy: none started; {held}"
        states = ", ".join(
            f"{t.id}: {t.state}" + (f" (health answered {t.code})" if t.code else "")
            for t in ep.targets.values()
        )
        return f"endpoint {ep.id!r}: no worker became healthy ({states}); {held}"

    # -- workers and their health ------------------------------------------------------

    def reload(self, endpoint_id: str) -> None:
        """The endpoint's worker list changed (`l:` event): read it again now."""
        ep = self.endpoints.get(endpoint_id)
        if ep is not None:
            self._spawn(self._load(ep), f"lockgate-lb-load-{endpoint_id}")

    async def _watch(self, ep: LbEndpoint) -> None:
        while True:
            try:
                await self._load(ep)
            except Exception as err:  # Redis away: keep what is known, try again
                log.warning("endpoint %s: LB workers not read: %s", ep.id, err)
            ep.loaded.set()
            raise_if_cancelled()  # a cancel redis-py swallowed (`raise_if_cancelled`)
            quiet = not ep.targets and not ep.held
            if quiet and time.monotonic() - ep.used > IDLE_FORGET_S:
                self.endpoints.pop(ep.id, None)
                return
            await asyncio.sleep(RELOAD_S)

    async def _load(self, ep: LbEndpoint) -> None:
        roster = await self.store.roster(ep.id)
        found, now_ms = roster.workers, self.clock_ms()
        parked = {w for w, p in roster.parked.items() if p.until_ms >= now_ms and w not in found}
        if parked != ep.parked:
            ep.parked = parked
            ep.wake()
        for worker_id, worker in found.items():
            t = ep.targets.get(worker_id)
            if t is None:
                self._add(ep, worker_id, worker)
            elif t.worker != worker:
                if t.worker.address != worker.address:
                    t.upstream.close()
                    t.upstream = worker_pool(worker)
                t.worker = worker
                ep.wake()
        for worker_id in ep.targets.keys() - found.keys():
            t = ep.targets.pop(worker_id)
            ep.wake()  # a request pinned to it learns it is gone
            t.gone = True
            if t.poller is not None:
                t.poller.cancel()
            if t.in_flight == 0:
                await t.close()

    def _add(self, ep: LbEndpoint, worker_id: str, worker: LbWorker) -> None:
        connector = aiohttp.TCPConnector(limit=POOL_PER_WORKER, keepalive_timeout=30)
        # No cookie jar: a proxy passes Set-Cookie on and never sends one client's cookie
        # with another's request (aiohttp's jar ignores IP hosts only; a worker may have a
        # name), and the jar's work per request is saved.
        session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            middlewares=(_count_attempt,),
        )  # fmt: skip
        t = ep.targets[worker_id] = Target(worker_id, worker, session, worker_pool(worker))
        t.poller = self._spawn(self._poll(ep, t), f"lockgate-lb-health-{worker_id}")

    async def _poll(self, ep: LbEndpoint, t: Target) -> None:
        while not t.gone:
            asked = time.monotonic()
            code = await self._check(t)
            t.answered = t.answered or code != 0
            starting = time.monotonic() - t.registered < START_GRACE_S
            state = health_state(code, answered=t.answered, starting=starting)
            if state == HEALTHY and asked <= t.failed_at:  # asked before a request failed
                state, code = t.state, t.code
            if state == HEALTHY and t.warmup != HEALTHY:
                state = await self._warmed(ep, t)
            if (state, code) != (t.state, t.code):
                if state == UNHEALTHY:
                    log.warning("endpoint %s: worker %s unhealthy (%s)", ep.id, t.id, code)
                t.state, t.code = state, code
                if state == HEALTHY:
                    ep.wake()
            await self._report_health(ep, t)
            raise_if_cancelled()
            await asyncio.sleep(self.calm_s if t.state == HEALTHY else self.fast_s)

    async def _warmed(self, ep: LbEndpoint, t: Target) -> str:
        """The state of a worker that answered 200 but has not warmed up yet, as far as
        this process knows (lb_warmup.py): HEALTHY, INITIALIZING while it warms, or
        UNHEALTHY for good when its warm-up failed."""
        if self.warmer is None:
            t.warmup = HEALTHY
        elif t.warmup != UNHEALTHY:
            try:
                t.warmup = await self.warmer.ready(ep.id, t.id, t.worker.address)
            except Exception as err:  # Redis away: it waits initializing, asked again
                log.warning("endpoint %s: warm-up of %s not checked: %s", ep.id, t.id, err)
                return INITIALIZING
        return t.warmup

    async def _check(self, t: Target) -> int:
        """The health path's status code; 0 when it did not answer. Its body is read
        only when it says it is up to `PING_BODY_MAX` bytes long (so the connection is
        kept for the next poll); any other is left unread, its connection closed."""
        if self._health is None or self._health.closed:
            timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
            self._health = aiohttp.ClientSession(timeout=timeout)
        url = f"http://{t.worker.health}{t.worker.path}"
        try:
            async with self._health.get(url, allow_redirects=False) as answer:
                if keeps_body(answer.content_length):
                    await answer.read()
                return answer.status
        except (aiohttp.ClientError, TimeoutError, OSError):
            return 0

    async def _report_health(self, ep: LbEndpoint, t: Target) -> None:
        """Write the polled health to Redis when it changed, or before it goes stale."""
        now = time.monotonic()
        last_state, last_code, at = t.reported
        fresh = now - at < keys.LB_HEALTH_REFRESH_MS / 1000
        if (t.state, t.code) == (last_state, last_code) and fresh:
            return
        try:
            await self.store.report_health(ep.id, t.id, t.state, t.code, self.clock_ms())
            t.reported = (t.state, t.code, now)
        except Exception as err:  # Redis away: reported again on the next poll
            log.warning("endpoint %s: health of %s not reported: %s", ep.id, t.id, err)

    # -- demand reported to Redis -------------------------------------------------------

    def _changed(self, ep: LbEndpoint) -> None:
        self._dirty.add(ep.id)
        self._kick.set()

    async def _report(self, ep: LbEndpoint) -> None:
        flight = {t.id: t.in_flight for t in ep.targets.values() if t.in_flight}
        await self.store.report_requests(
            ep.id, self.reporter, held=ep.held, in_flight=flight, now_ms=self.clock_ms()
        )

    async def run(self) -> None:
        """Report held and in-flight requests: changes within `REPORT_EVERY_S`, and again
        every `REFRESH_S` while any exist (a report expires unless rewritten)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), REFRESH_S)
            self._kick.clear()
            busy = {e.id for e in self.endpoints.values() if e.held or _flying(e)}
            due, self._dirty = self._dirty | busy, set()
            for endpoint_id in due:
                ep = self.endpoints.get(endpoint_id)
                try:
                    if ep is not None:
                        await self._report(ep)
                except Exception as err:  # Redis away: the next round writes it
                    log.warning("endpoint %s: LB requests not reported: %s", endpoint_id, err)
                    self._dirty.add(endpoint_id)
            raise_if_cancelled()
            await asyncio.sleep(REPORT_EVERY_S)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Stop polling; close every connection pool; withdraw this process's reports."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for ep in self.endpoints.values():
            with contextlib.suppress(Exception):
                await self.store.report_requests(
                    ep.id, self.reporter, held=0, in_flight={}, now_ms=self.clock_ms()
                )
            for t in ep.targets.values():
                await t.close()
        if self._health is not None:
            await self._health.close()
        if self.warmer is not None:
            await self.warmer.close()


def keeps_body(length: int | None) -> bool:
    """Whether a health answer's body is read (a `Content-Length` up to `PING_BODY_MAX`:
    its connection then serves the next poll); any other is never read."""
    return length is not None and length <= PING_BODY_MAX


def _flying(ep: LbEndpoint) -> bool:
    return any(t.in_flight for t in ep.targets.values())
