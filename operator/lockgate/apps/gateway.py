"""`lockgate gateway`: serve the job API until SIGTERM, in this process or in `--processes`
children under a supervising parent (`lockgate.supervisor`).

A parent of several gateway processes imports nothing heavy (no asyncio, aiohttp, redis,
pydantic: about 50 MB and half a second less), so it stays small and starts its children
at once: this module's top imports only the supervisor and the gateway's modules are
imported inside the functions that the serving process runs.
"""

from __future__ import annotations

import argparse
import logging
import signal
from typing import TYPE_CHECKING, Any

from lockgate.logs import setup_logging
from lockgate.supervisor import resolve, supervise

if TYPE_CHECKING:
    from aiohttp import web

    from lockgate.settings import Settings

log = logging.getLogger("lockgate.gateway")


def settings_from(args: argparse.Namespace) -> Settings:
    """LOCKGATE_* variables, overridden by the flags given (--redis-url over any Redis mode)."""
    from lockgate.settings import Settings
    from lockgate.store.connection import standalone

    flags = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    if args.redis_url is not None:
        flags |= standalone(args.redis_url)
    return Settings(**flags)


async def start(settings: Settings, **runner_options: Any) -> list[web.AppRunner]:
    """Serve the job API on `settings.port` and, when `settings.worker_port` is set, the
    worker API on that port. The runners come back in the order to clean them up: the
    worker API first, then the application that owns Redis and the background tasks."""
    from lockgate.gateway.app import create_app, create_worker_app
    from lockgate.gateway.serving import app_runner, serve_runner
    from lockgate.gateway.state import GATEWAY

    app = create_app(settings)
    gw = app[GATEWAY]
    runners = [(app_runner(app, settings, **runner_options), settings.port)]
    if settings.worker_port:
        worker_app = create_worker_app(gw)
        runners.insert(
            0, (app_runner(worker_app, settings, **runner_options), settings.worker_port)
        )
    for runner, port in reversed(runners):  # the owning application starts first
        await serve_runner(runner, settings, port, gw.header_timeout, reuse_port=True)
        log.info("gateway listening on %s:%d", settings.host, port)
    return [runner for runner, _ in runners]


async def serve(settings: Settings) -> None:
    import asyncio

    from lockgate.gateway.state import GATEWAY

    runners = await start(settings, access_log=None, shutdown_timeout=5)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("gateway stopping")
    runners[-1].app[GATEWAY].drain()
    for runner in runners:
        await runner.cleanup()


def serve_one(args: argparse.Namespace) -> int:
    """One gateway in this process."""
    import asyncio

    setup_logging(args.log_format)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(settings_from(args)))
    return 0


def main(args: argparse.Namespace) -> int:
    """`lockgate gateway`: one gateway in this process, or a parent of `--processes` ones."""
    n = resolve(args.processes)
    if n == 1:
        return serve_one(args)
    setup_logging(args.log_format)
    return supervise(args, n)
