"""`lockgate gateway`: serve the job API until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from aiohttp import web

from lockgate.gateway.app import create_app
from lockgate.gateway.state import GATEWAY
from lockgate.logs import setup_logging
from lockgate.settings import Settings

log = logging.getLogger("lockgate.gateway")


def settings_from(args: argparse.Namespace) -> Settings:
    """LOCKGATE_* variables, overridden by the flags given."""
    flags = {"host": args.host, "port": args.port, "redis_url": args.redis_url}
    return Settings(**{k: v for k, v in flags.items() if v is not None})


async def serve(settings: Settings) -> None:
    runner = web.AppRunner(create_app(settings), access_log=None, shutdown_timeout=5)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port, reuse_port=True).start()
    log.info("gateway listening on %s:%d", settings.host, settings.port)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("gateway stopping")
    runner.app[GATEWAY].drain()
    await runner.cleanup()


def main(args: argparse.Namespace) -> int:
    setup_logging(args.log_format)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(settings_from(args)))
    return 0
