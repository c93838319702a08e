"""The HTTP floor: a bare aiohttp app with one POST route that returns its JSON body.

Run as `python -m bench.floor PORT`; it prints `floor ready` once it listens.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import orjson
from aiohttp import web


async def echo(request: web.Request) -> web.Response:
    """Parse the JSON body and send it back, as the gateway parses and answers JSON."""
    body = orjson.loads(await request.read())
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def serve(port: int) -> None:
    """Listen on 127.0.0.1:`port` until SIGINT or SIGTERM (no access log, like the gateway)."""
    app = web.Application()
    app.router.add_post("/echo", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("floor ready", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(int(sys.argv[1])))


if __name__ == "__main__":
    main()
