"""The web console: static files (no build step, no CDN) at `/console/` of the process that
serves `/v1` — `lockgate manage` on a cluster, `lockgate dev` locally.

Every action of the console is a call of the public REST APIs (`/v1` with an admin key,
the job API at each endpoint's `jobApiUrl`), so these routes serve files and nothing else.
A strict Content-Security-Policy goes with every console answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

STATIC = Path(__file__).parent / "static"
PREFIX = "/console"


def origin_of(url: str) -> list[str]:
    """The origin (`scheme://host[:port]`) of an absolute URL, as a CSP source; none for
    an empty or relative one (the console's own origin needs no entry)."""
    parts = urlsplit(url)
    return [f"{parts.scheme}://{parts.netloc}"] if parts.scheme and parts.netloc else []


def content_security_policy(connect_src: Iterable[str] = ()) -> str:
    """The console's CSP: its own scripts, styles and images only; `connect_src` adds the
    origins it may call besides its own (the job API's, when another process serves it)."""
    connect = " ".join(["'self'", *connect_src])
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src {connect}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


def security_headers(connect_src: Iterable[str] = ()) -> dict[str, str]:
    """Headers of every console answer."""
    return {
        "Content-Security-Policy": content_security_policy(connect_src),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


async def _index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def _to_index(_request: web.Request) -> web.Response:
    raise web.HTTPFound(f"{PREFIX}/")


def add_console(app: web.Application, *, connect_src: Iterable[str] = ()) -> None:
    """Serve the console at `/console/` of `app` (a root application)."""
    headers = security_headers(connect_src)

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if request.path == PREFIX or request.path.startswith(f"{PREFIX}/"):
            response.headers.update(headers)

    app.router.add_get(PREFIX, _to_index)
    app.router.add_get(f"{PREFIX}/", _index)
    app.router.add_static(f"{PREFIX}/", STATIC, append_version=False)
    app.on_response_prepare.append(on_prepare)
