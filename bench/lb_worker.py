"""The load-balancing bench's worker: a bare aiohttp server on `HOST`:`PORT`, as dev mode
starts it (`python bench/lb_worker.py`).

- `GET /ping`: 200 at once (healthy from the start: the bench measures the proxy, not a
  cold start);
- `GET /small`: a small JSON body naming the worker's port (so the bench can send the same
  request straight to it);
- `GET /sse?n=N`: N Server-Sent Events, the first written as soon as the answer's head is;
- `GET /deny`: 403 with a short body, a WebSocket upgrade too (an HTTP-only route);
- `GET /ws`: a WebSocket answering each message with its size, or itself with `?echo`
  (bench/lb_ws_probe.py).
"""

from __future__ import annotations

import asyncio
import os
import signal

import orjson
from aiohttp import web

PORT = int(os.environ.get("PORT", "8000"))
SMALL = orjson.dumps({"ok": True, "port": PORT, "pad": "x" * 64})


async def ping(_request: web.Request) -> web.Response:
    return web.Response(status=200)


async def small(_request: web.Request) -> web.Response:
    return web.Response(body=SMALL, content_type="application/json")


async def sse(request: web.Request) -> web.StreamResponse:
    n = int(request.query.get("n", "3"))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for i in range(n):
        await response.write(b'data: {"i": %d}\n\n' % i)
    await response.write_eof()
    return response


async def deny(_request: web.Request) -> web.Response:
    return web.Response(status=403, text="no WebSocket here")


async def sizes(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    echo = "echo" in request.query
    async for msg in ws:
        await (ws.send_bytes(msg.data) if echo else ws.send_str(str(len(msg.data))))
    return ws


async def serve() -> None:
    """Listen until SIGINT or SIGTERM (no access log)."""
    app = web.Application()
    app.router.add_get(os.environ.get("HEALTH_CHECK_PATH", "/ping"), ping)
    app.router.add_get("/small", small)
    app.router.add_get("/sse", sse)
    app.router.add_get("/deny", deny)
    app.router.add_get("/ws", sizes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, os.environ.get("HOST", "127.0.0.1"), PORT).start()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve())
