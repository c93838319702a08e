"""Bounds on what clients and workers can make one gateway process hold.

- `BodyBudget`: bytes of request bodies (and of job inputs handed to workers) held in
  memory at once, gateway-wide. A request that would pass it is refused with 503 and
  `Retry-After` before its body is read; what it held is given back when it ends.
- `HeaderTimeout`: aiohttp closes a connection idle between requests after its keep-alive
  timeout, but gives a new connection as long to send its first request head; this closes
  one that has not sent a whole head within `header_timeout_s` of opening (a connection
  trickling its headers, or sending nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from lockgate.gateway.errors import PayloadTooLarge, Unavailable

log = logging.getLogger("lockgate.gateway")

MIB = 1024 * 1024
BUSY_RETRY_S = "1"
HELD = web.RequestKey("lockgate_body_bytes_held", int)
LARGE = 64 * 1024  # an answer body this large is sent at once and not kept (see send_now)


@dataclass
class BodyBudget:
    """A count of bytes held by requests in flight, refused past `limit`."""

    limit: int
    held: int = 0
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _waiting: int = 0  # callers in `wait_for_room`: no wake-up to make without one

    async def wait_for_room(self, timeout_s: float) -> None:
        """Return when some request gave bytes back, or after `timeout_s`."""
        self._waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), timeout_s)
        finally:
            self._waiting -= 1

    def free(self) -> int:
        return self.limit - self.held

    def take(self, request: web.Request, size: int) -> None:
        """Count `size` more bytes for `request`, or refuse the request: 413 when the body
        alone can never fit, else 503 with `Retry-After` (the budget is busy now)."""
        if size > self.limit:
            raise PayloadTooLarge(
                f"request body exceeds this gateway's body budget of {self.limit // MIB} MB "
                "(LOCKGATE_BODY_BUDGET_BYTES)"
            )
        if self.held + size > self.limit:
            raise Unavailable(
                f"gateway busy: {self.held // MIB} MB of request bodies in flight, its budget "
                f"is {self.limit // MIB} MB; retry shortly",
                headers={"Retry-After": BUSY_RETRY_S},
            )
        self.charge(request, size)

    def charge(self, request: web.Request, size: int) -> None:
        """Count `size` bytes for `request` even past the limit (they are already held;
        a negative size gives part of a reservation back)."""
        self.held += size
        request[HELD] = request.get(HELD, 0) + size
        if size < 0:
            self._wake()

    def _wake(self) -> None:
        """Wake every waiter for room (each then waits anew if there is not enough)."""
        if not self._waiting:
            return
        self._freed.set()
        self._freed = asyncio.Event()

    def give_back(self, request: web.Request) -> None:
        """The request ended: what it held is free again."""
        if given := request.get(HELD, 0):
            self.held -= given
            request[HELD] = 0
            self._wake()


@dataclass
class HeaderTimeout:
    """Closes connections of the watched servers that sent no whole request head within
    `timeout_s` of being first seen (checked every `timeout_s / 4`, at most every second)."""

    timeout_s: float
    _servers: list[web.Server] = field(default_factory=list)
    # Connections by the ids of handler and transport (aiohttp's handlers take no weak
    # reference; two ids make a reused one unlikely to pass for another): pruned each sweep.
    _seen: dict[tuple[int, int], float] = field(default_factory=dict)
    _served: set[tuple[int, int]] = field(default_factory=set)

    def watch(self, server: web.Server) -> None:
        self._servers.append(server)

    def served(self, request: web.Request) -> None:
        """A whole request head arrived on this connection."""
        self._served.add((id(request.protocol), id(request.transport)))

    def sweep(self, now: float) -> int:
        """Close the connections past their time; returns how many."""
        closed = 0
        live = {
            (id(conn), id(conn.transport)): conn
            for server in self._servers
            for conn in server.connections
        }
        self._served &= live.keys()
        self._seen = {key: self._seen.get(key, now) for key in live.keys() - self._served}
        for key, opened in self._seen.items():
            if now - opened >= self.timeout_s:
                live[key].force_close()
                closed += 1
        if closed:
            log.info("closed %d connection(s) that sent no request head in %.0f s",
                     closed, self.timeout_s)  # fmt: skip
        return closed

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 4))
            self.sweep(loop.time())


def resources_middleware(budget: BodyBudget, header_timeout: HeaderTimeout) -> Middleware:
    """Marks the connection as served and gives the request's bytes back when it ends: an
    answer made while bytes are held (e.g. jobs taken) is sent first, so the bytes stay
    counted until the client has them (a slow reader holds them that long)."""

    @web.middleware
    async def bound(request: web.Request, handler: Handler) -> web.StreamResponse:
        header_timeout.served(request)
        try:
            response = await handler(request)
            body = response.body if isinstance(response, web.Response) else None
            large = isinstance(body, bytes | bytearray) and len(body) > LARGE
            if request.get(HELD) or large:
                return await send_now(request, response)
            return response
        finally:
            budget.give_back(request)

    return bound


async def send_now(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Send `response` now; a large body goes out through a stand-in that does not keep it
    (aiohttp keeps a connection's last response until its next request: an idle keep-alive
    connection would hold megabytes). A small one is sent as it is: aiohttp writes its head
    and body in one write (the stand-in, a StreamResponse, writes the head on its own first:
    two send calls per answer)."""
    body = response.body if isinstance(response, web.Response) else None
    if not isinstance(body, bytes) or len(body) <= LARGE:
        await response.prepare(request)
        await response.write_eof()
        return response
    sent = web.StreamResponse(
        status=response.status, reason=response.reason, headers=response.headers
    )
    sent.content_length = len(body)
    await sent.prepare(request)
    await sent.write(body)
    await sent.write_eof()
    return sent
