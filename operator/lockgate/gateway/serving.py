"""How the gateway's HTTP server is set up: aiohttp's own server, with the connection
limits of docs/operations.md ("Connection limits").

Every connection is aiohttp's: its parser (llhttp) bounds a request line and each header
field to 8190 bytes and a head to 128 fields, holds at most 32 parsed pipelined requests
(reading pauses past that until they are answered), stops reading a connection whose
answers the client does not read, and drops what is queued when the client goes. The
gateway adds its header timeout (`Gateway.header_timeout`), the idle keep-alive timeout
and the lingering time below. (A hand-written fast path on llhttp served the job and
worker routes until issue 30: it saved ~20% of the gateway's CPU per job but had to
re-implement this hardening; see docs/operations.md.)
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from lockgate.gateway.resources import HeaderTimeout
from lockgate.settings import Settings


def connection_options(settings: Settings) -> dict[str, float]:
    """`web.AppRunner` options for the idle keep-alive timeout and the lingering time (the
    header timeout is `Gateway.header_timeout`, watching the runner's server)."""
    return {
        "keepalive_timeout": settings.idle_timeout_s,
        # After an answer that left a body unread (413, 401, 408), aiohttp reads on for this
        # long (its default: 10 s) so the client sees the answer: no longer than a body may
        # take.
        "lingering_time": min(10.0, settings.body_timeout_s),
    }


def app_runner(app: web.Application, settings: Settings, **options: Any) -> web.AppRunner:
    """A runner of `app` with the connection limits of `settings` (`options` on top)."""
    quiet_malformed_requests()
    return web.AppRunner(app, **(connection_options(settings) | options))


class MalformedRequests(logging.Filter):
    """aiohttp logs a request its parser refuses (no `Host`, a bad header, a head too long)
    as an ERROR with a traceback: anyone who can reach the gateway could fill its logs and
    page its operators. Such a record becomes one INFO line, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            reason = " ".join(str(exc.message).split())[:512]
            record.msg, record.args = (
                "refused a malformed request from %s: %s %s",
                (
                    record.args[0] if isinstance(record.args, tuple) and record.args else "?",
                    exc.code,
                    reason,
                ),
            )
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info = record.exc_text = None
        return True


def quiet_malformed_requests() -> None:
    """Install `MalformedRequests` on aiohttp's server logger (once)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequests) for f in logger.filters):
        logger.addFilter(MalformedRequests())


async def serve_runner(
    runner: web.AppRunner,
    settings: Settings,
    port: int,
    header_timeout: HeaderTimeout,
    *,
    reuse_port: bool | None = None,
) -> None:
    """Set `runner` up and serve it on `settings.host`, `port`, its connections watched by
    `header_timeout`."""
    await runner.setup()
    assert runner.server is not None
    header_timeout.watch(runner.server)
    await web.TCPSite(runner, settings.host, port, reuse_port=reuse_port).start()
