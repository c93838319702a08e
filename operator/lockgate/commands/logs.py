"""`lockgate logs ENDPOINT [-f]`: an endpoint's worker log lines, over the management API
(`/v1/endpoints/{id}/logs`, with `follow=true` a Server-Sent Events tail)."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from lockgate.client import ApiClient


def line_text(line: dict[str, Any]) -> str:
    """A log line as `time worker [job] line`."""
    job = f" {line['job']}" if line.get("job") else ""
    return f"{line.get('ts', '')} {line.get('worker', '')}{job} | {line.get('line', '')}"


def show(args: argparse.Namespace, line: dict[str, Any]) -> None:
    as_json = getattr(args, "output", None) in ("json", "yaml")
    print(json.dumps(line) if as_json else line_text(line), flush=True)


async def logs(args: argparse.Namespace, api: ApiClient) -> None:
    path = f"/v1/endpoints/{quote(args.endpoint, safe='')}/logs"
    params = {"tail": args.tail, "worker": args.worker, "job": args.job}
    if args.follow:
        async for line in api.events(path, {**params, "follow": "true"}):
            show(args, line)
        return
    answer = await api.call("GET", path, params=params)
    for line in answer.get("lines") or []:
        show(args, line)
