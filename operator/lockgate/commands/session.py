"""What every daily-work command shares: the URL, key and output format it was given, the
API client made from them, and printing an answer."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from lockgate import clientconfig
from lockgate.client import ApiClient, NotSent, in_clear, in_clear_refused, key_withheld
from lockgate.output import render

Action = Callable[[argparse.Namespace, ApiClient], Awaitable[int | None]]
INSECURE_ENV = "LOCKGATE_INSECURE"  # "1": as --insecure, for scripts on a trusted network


def insecure(args: argparse.Namespace) -> bool:
    """--insecure, or LOCKGATE_INSECURE=1: the key may go over plain HTTP to another host."""
    return bool(getattr(args, "insecure", False)) or os.environ.get(INSECURE_ENV) == "1"


def sending(target: clientconfig.Target, *, allowed: bool) -> tuple[str | None, str | None]:
    """Whether `target`'s request may be made: (the refusal, None) or (None, a warning or
    None). Refused: a saved key kept from another origin (nothing would authenticate), and
    a key in clear (`in_clear`) unless `allowed` (warned) or consented at login."""
    if target.withheld:
        return key_withheld(target.url, target.withheld), None
    if not target.key or not in_clear(target.url) or target.consented:
        return None, None
    if not allowed:
        return in_clear_refused(target.url), None
    return None, f"warning: the API key goes in clear to {target.url} (--insecure)"


def client_for(args: argparse.Namespace, *, jobs: bool = False) -> ApiClient:
    """A client of the management API (`--url`), or with `jobs` of the job API
    (`--job-url`, else `--url`); raises `NotSent` where the key must not go, or for an
    endpoint's URL given as lockgate's."""
    try:
        target = clientconfig.target(
            getattr(args, "url", None),
            getattr(args, "key", None),
            getattr(args, "job_url", None),
            jobs=jobs,
        )
    except clientconfig.BadUrl as err:
        raise NotSent(str(err)) from err
    refusal, warning = sending(target, allowed=insecure(args))
    if refusal:
        raise NotSent(refusal)
    if warning:
        print(f"lockgate: {warning}", file=sys.stderr)
    return ApiClient(target.url, target.key)


def run_action(args: argparse.Namespace, action: Action) -> int:
    """Open the client `args.client` names (`management` or `jobs`), await `action` with it,
    close it; the exit code."""
    client = client_for(args, jobs=getattr(args, "client", "") == "jobs")

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
