"""`lockgate login`: check a URL and API key and keep them in the config file."""

from __future__ import annotations

import argparse
import sys

from lockgate import clientconfig
from lockgate.client import ApiClient, ClientError, in_clear
from lockgate.commands.session import insecure


async def login(args: argparse.Namespace, api: ApiClient) -> None:
    """Ask the management API who may list endpoints; save the URL and key if it answers."""
    if not api.key:
        raise ClientError("give the API key: lockgate login --url URL --key KEY")
    try:
        await api.call("GET", "/v1/endpoints", params={"limit": 1})
        note = ""
    except ClientError as err:
        # a key without the admin scope: 401 naming the scope (403 from a proxy in front)
        if err.status != 403 and "may not use" not in str(err):
            raise
        note = " (not an admin key: jobs commands only)"
    fields = {"url": api.url, "key": api.key, "writtenBy": clientconfig.BY_LOGIN}
    if job_url := getattr(args, "job_url", None):
        try:
            job_url = fields["jobUrl"] = clientconfig.normalised(job_url)
        except clientconfig.BadUrl as err:
            raise ClientError(str(err)) from err
    if insecure(args) and any(in_clear(u) for u in (api.url, job_url) if u):
        # accepted once for the saved origins: later commands do not ask
        fields["insecure"] = True
    path = clientconfig.save(fields)
    print(f"logged in to {api.url}{note}; saved in {path}", file=sys.stderr)
