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
import logging
from dataclasses import dataclass, field

from aiohttp import web

from lockgate.gateway.errors import PayloadTooLarge, Unavailable

log = logging.getLogger("lockgate.gateway")

MIB = 1024 * 1024
BUSY_RETRY_S = "1"
HELD = web.RequestKey("lockgate_body_bytes_held", int)


@dataclass
class BodyBudget:
    """A count of bytes held by requests in flight, refused past `limit`."""

    limit: int
    held: int = 0

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
        """Count `size` bytes for `request` even past the limit (they are already held)."""
        self.held += size
        request[HELD] = request.get(HELD, 0) + size

    def give_back(self, request: web.Request) -> None:
        """The request ended: what it held is free again."""
        self.held -= request.get(HELD, 0)
        request[HELD] = 0


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
        if request.protocol is not None:
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


def resources_middleware(budget: BodyBudget, header_timeout: HeaderTimeout):
    """Marks the connection as served and gives the request's bytes back when it ends."""

    @web.middleware
    async def bound(request: web.Request, handler) -> web.StreamResponse:
        header_timeout.served(request)
        try:
            return await handler(request)
        finally:
            budget.give_back(request)

    return bound
