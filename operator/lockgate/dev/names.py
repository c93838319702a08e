"""Pure helpers of dev mode: endpoint ids from handler paths, the banner."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

GENERIC_STEMS = {"handler", "main", "worker", "app", "rp_handler", "server"}


def endpoint_id_for(handler: str | None, command: str | None) -> str:
    """`examples/echo/handler.py` → `echo`; `sd_turbo.py` → `sd-turbo`; a command → its name."""
    if handler:
        path = Path(handler).resolve()
        raw = path.parent.name if path.stem in GENERIC_STEMS else path.stem
    elif command:
        raw = Path(shlex.split(command)[0]).stem
    else:
        raw = "dev"
    slug = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:63].strip("-")
    return slug or "dev"


def curl_line(base_url: str, endpoint_id: str, api_key: str) -> str:
    """A ready-to-paste command that runs one job synchronously."""
    return (
        f"curl -H 'authorization: {api_key}' -H 'content-type: application/json' "
        f"""-d '{{"input":{{"x":1}}}}' {base_url}/v2/{endpoint_id}/runsync"""
    )
