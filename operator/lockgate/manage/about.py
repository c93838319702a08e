"""`GET /v1/about`: what the console needs to know of the process that serves it — dev mode
(`lockgate dev`: workers are local processes, so GPU types, CUDA versions, data centres,
vCPUs and FlashBoot mean nothing) or a cluster, and dev mode's command-line endpoint with
the fields its command line names (those win over edits at every start; edits of the
others are kept), and the catalogue of ready-to-deploy repositories the Create page offers
(`settings.ConsoleSettings`). Admin keys only, like all of `/v1`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from lockgate.gateway.http import json_response

DEV, CLUSTER = "dev", "cluster"


@dataclass(frozen=True)
class About:
    """The serving process: `mode` (`dev` or `cluster`) and, in dev mode, the id of the
    endpoint the command line defines and the fields its command line names; `catalogue`:
    the ready-to-deploy repositories to offer (`{url, ref, title}` each)."""

    mode: str = CLUSTER
    command_line_endpoint: str | None = None
    command_line_fields: tuple[str, ...] = ()
    catalogue: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "commandLineEndpoint": self.command_line_endpoint,
            "commandLineFields": list(self.command_line_fields),
            "catalogue": list(self.catalogue),
        }


ABOUT = web.AppKey("about", About)


async def about(request: web.Request) -> web.Response:
    return json_response(request.app[ABOUT].to_json())


def add_about_route(app: web.Application, facts: About, *, prefix: str = "/v1") -> None:
    """Serve `facts` at `{prefix}/about` of the management app."""
    app[ABOUT] = facts
    app.router.add_get(f"{prefix}/about", about)
