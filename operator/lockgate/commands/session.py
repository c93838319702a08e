"""What every daily-work command shares: the URL, key and output format it was given, the
API client made from them, and printing an answer."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from lockgate import clientconfig
from lockgate.client import ApiClient
from lockgate.output import render

Action = Callable[[argparse.Namespace, ApiClient], Awaitable[int | None]]


def management(args: argparse.Namespace) -> ApiClient:
    """A client of the management API (`--url`)."""
    url, key, _ = clientconfig.resolve(getattr(args, "url", None), getattr(args, "key", None))
    return ApiClient(url, key)


def job_api(args: argparse.Namespace) -> ApiClient:
    """A client of the job API (`--job-url`, else `--url`)."""
    _, key, job_url = clientconfig.resolve(
        getattr(args, "url", None), getattr(args, "key", None), getattr(args, "job_url", None)
    )
    return ApiClient(job_url, key)


def run_action(args: argparse.Namespace, action: Action) -> int:
    """Open the client `args.client` names (`management` or `jobs`), await `action` with it,
    close it; the exit code."""
    client = job_api(args) if getattr(args, "client", "") == "jobs" else management(args)

    async def go() -> int:
        async with client as api:
            return int(await action(args, api) or 0)

    return asyncio.run(go())


def emit(
    args: argparse.Namespace,
    data: Any,
    headers: Sequence[str] = (),
    rows: Sequence[Sequence[Any]] = (),
) -> None:
    """Print `data` as `-o` asks (table: `headers` and `rows`)."""
    print(render(data, getattr(args, "output", None) or "table", headers, rows), flush=True)
