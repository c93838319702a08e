"""Pure helpers of dev mode: endpoint ids from handler paths, the banner."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

GENERIC_STEMS = {"handler", "main", "worker", "app", "rp_handler", "server"}


def _script_of(command: str) -> str | None:
    """The Python file or module a command runs (`python x/worker.py`, `python -m a.b`)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word.endswith(".py"):
            return word
        if word == "-m" and i + 1 < len(words):
            return words[i + 1].replace(".", "/") + ".py"
    return None


def endpoint_id_for(handler: str | None, command: str | None) -> str:
    """`examples/echo/handler.py` → `echo`; `sd_turbo.py` → `sd-turbo`; a command → the
    script it runs, named the same way (`python examples/loadbalancer/worker.py` →
    `loadbalancer`), else its program's name."""
    script = handler or (_script_of(command) if command else None)
    if script:
        path = Path(script).resolve()
        raw = path.parent.name if path.stem in GENERIC_STEMS else path.stem
    elif command:
        raw = Path(shlex.split(command)[0]).stem if command.strip() else "dev"
    else:
        raw = "dev"
    slug = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:63].strip("-")
    return slug or "dev"


def curl_line(base_url: str, endpoint_id: str, api_key: str, *, lb: bool = False) -> str:
    """A ready-to-paste command: one job run synchronously, or for a load-balancing
    endpoint one request to its worker's health path through `/lb/`."""
    if lb:
        return f"curl -H 'authorization: {api_key}' {base_url}/lb/{endpoint_id}/ping"
    return (
        f"curl -H 'authorization: {api_key}' -H 'content-type: application/json' "
        f"""-d '{{"input":{{"x":1}}}}' {base_url}/v2/{endpoint_id}/runsync"""
    )
