"""`POST /v1/hub/inspect`: what a ready-to-deploy repository's `hub.json` says, for the
console's "From a repository" form (docs/console.md, "Ready-to-deploy repositories").

The server fetches the repository itself (the person's browser could not: no CORS, and a
private repository's credentials are not the browser's), so the fetch is bounded:

- **which URLs**: `https://` and `http://` on a cluster; dev mode also takes `file://` URLs
  and plain local paths (the machine is the person's own). ssh is refused: the server has
  no key to offer. Admin keys only, like all of `/v1` (docs/security.md says what a URL
  fetched by the server means);
- **how much**: a shallow fetch of one commit (`--depth 1`, blobs left out where the
  server allows it: only the hub.json is read), cut off past `FETCH_MAX_BYTES` on disk or
  `FETCH_TIMEOUT_S`; a hub.json over `HUB_MAX_BYTES` is refused unread.

`.runpod/hub.json` wins over a `hub.json` at the root (`models.hub.RUNPOD_DIR`). Every
refusal is a 4xx with one line: 400 for a malformed body or URL, 422 (with a `reason`)
for a repository that cannot be fetched, has no hub.json, or whose hub.json is invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from lockgate.gateway.errors import ApiError, BadRequest, Unprocessable
from lockgate.gateway.http import json_object, json_response
from lockgate.manage.about import ABOUT, DEV
from lockgate.models.gitrefs import ref_problem
from lockgate.models.gpupools import POOLS
from lockgate.models.hub import HUB_FILE, RUNPOD_DIR, HubFileError, hub_env, parse_hub

FETCH_TIMEOUT_S = 60.0  # the whole fetch; a stuck server ends with a 422
FETCH_MAX_BYTES = 64 * 1024 * 1024  # what the fetch may write before it is cut off
HUB_MAX_BYTES = 256 * 1024  # a hub.json larger than this is no listing
WATCH_S = 0.2  # how often the fetch's size on disk is looked at
HUB_PATHS = (f"{RUNPOD_DIR}/{HUB_FILE}", HUB_FILE)  # the first found wins
CLUSTER_SCHEMES = ("https://", "http://")
DEV_SCHEMES = (*CLUSTER_SCHEMES, "file://")


class NoGit(ApiError):
    """This process cannot run git (an image without it)."""

    status = 501


class Unusable(Unprocessable):
    """A repository whose hub.json cannot be had; `reason` says which way."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Wanted:
    """What to inspect: a repository URL (as git takes it) and a ref (empty: its HEAD)."""

    url: str
    ref: str


def wanted(body: dict[str, Any], *, dev: bool) -> Wanted:
    """The body `{url, ref?}` checked: http(s) on a cluster; dev mode also `file://` and a
    local path (made an absolute `file://` URL). Raises BadRequest naming the field."""
    unknown = sorted(set(body) - {"url", "ref"})
    if unknown:
        raise BadRequest(f"{unknown[0]}: not a field (url, ref)")
    url, ref = body.get("url"), body.get("ref") or ""
    if not isinstance(url, str) or not url.strip():
        raise BadRequest("url: required, the repository's URL")
    if not isinstance(ref, str):
        raise BadRequest("ref: a branch, tag or commit (a string)")
    url, ref = url.strip(), ref.strip()
    if ref and (problem := ref_problem(ref)):
        raise BadRequest(f"ref: {problem}")
    if len(url) > 2048 or any(c.isspace() for c in url):
        raise BadRequest(f"url: {url[:80]!r} is not a URL")
    if url.startswith(DEV_SCHEMES if dev else CLUSTER_SCHEMES):
        rest = url.split("://", 1)[1]
        if not url.startswith("file://") and (not rest or rest.startswith("/")):
            raise BadRequest(f"url: {url!r} names no host")
        return Wanted(url, ref)
    scp_like = re.match(r"^[\w.-]+@[\w.-]+:", url)  # ssh: the server has no key to offer
    if dev and "://" not in url and not scp_like and not url.startswith("-"):
        # as a file:// URL: what an endpoint's source takes for a local repository
        return Wanted(Path(url).expanduser().resolve().as_uri(), ref)
    allowed = "http(s):// URL, a file:// URL or a local path" if dev else "https:// or http:// URL"
    raise BadRequest(f"url: {url!r}: give an {allowed}")


def inspection(url: str, ref: str, commit: str, path: str, text: str) -> dict[str, Any]:
    """The answer: the repository, the commit read, and the hub.json parsed, with what the
    console needs beside it (the endpoint type, `gpuIds` split into v2's pools and excluded
    types, every pool when it names none, the variables the form starts from). Raises
    Unusable for an invalid hub.json."""
    try:
        hub = parse_hub(text)
    except HubFileError as err:
        why = str(err).removeprefix(f"{HUB_FILE}: ")
        raise Unusable(f"{path}: {why}", "invalid-hub-json") from err
    pools, excluded = hub.config.gpu_ids()
    if hub.config.runsOn == "GPU" and not pools:
        pools = list(POOLS)  # no gpuIds: any GPU, i.e. every pool
    return {
        "url": url,
        "ref": ref,
        "commit": commit,
        "path": path,
        "hub": hub.model_dump(mode="json"),
        "endpointType": hub.config.endpoint_type,
        "gpuPools": pools,
        "gpuExcluded": excluded,
        "env": hub_env(hub.config),
    }


async def _git(
    *args: str, cwd: Path, watch: Path | None = None, protocols: str = "http:https"
) -> tuple[int, str, str]:
    """Run git without a terminal prompt, speaking only `protocols` (GIT_ALLOW_PROTOCOL: a
    redirect or a URL trick cannot reach another transport); (exit code, stdout, stderr).
    With `watch`, the run is killed once that folder holds over FETCH_MAX_BYTES (Unusable
    'too-large')."""
    env = {
        **os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C",
        "GIT_ALLOW_PROTOCOL": protocols,
    }  # fmt: skip
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", *args, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except FileNotFoundError as missing:
        raise NoGit("this server has no `git` command: it cannot read a repository") from missing
    talk = asyncio.ensure_future(proc.communicate())
    try:
        while True:
            done, _ = await asyncio.wait({talk}, timeout=WATCH_S)
            if done and (watch is None or _size(watch) <= FETCH_MAX_BYTES):
                out, err = (text.decode(errors="replace") for text in talk.result())
                return proc.returncode or 0, out, err
            if watch is not None and _size(watch) > FETCH_MAX_BYTES:
                raise Unusable(
                    f"the repository is over {FETCH_MAX_BYTES // (1024 * 1024)} MiB at one commit: "
                    "not fetched", "too-large",
                )  # fmt: skip
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await talk


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _last_line(text: str) -> str:
    """What git said went wrong: its first `fatal:` or `error:` line (the lines after it
    are advice: "Please make sure you have the correct access rights…"), else its last."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (said or lines or ["no output"])[0 if said else -1]


async def fetch_hub(want: Wanted, shown: str) -> dict[str, Any]:
    """Fetch one commit of the repository into a temporary folder and read its hub.json;
    the folder is gone afterwards. Raises Unusable. A local repository (dev mode only:
    `wanted` refuses one on a cluster) is fetched over git's `file` transport."""
    folder = Path(tempfile.mkdtemp(prefix="lockgate-hub-"))
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_S):
            return await _read(want, shown, folder)
    except TimeoutError as err:
        raise Unusable(f"{shown}: no answer within {FETCH_TIMEOUT_S:.0f} s", "unreachable") from err
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


async def _read(want: Wanted, shown: str, folder: Path) -> dict[str, Any]:
    await _git("init", "--quiet", cwd=folder)
    fetch = ["fetch", "--quiet", "--depth", "1", "--no-tags", "--filter=blob:none",
             want.url, want.ref or "HEAD"]  # fmt: skip
    local = not want.url.startswith(CLUSTER_SCHEMES)
    code, _, err = await _git(
        *fetch, cwd=folder, watch=folder, protocols="file" if local else "http:https"
    )
    if code != 0:
        why = _last_line(err).removeprefix("fatal: ").removeprefix("error: ")
        why = why.replace(want.url, shown)
        what = f"ref {want.ref!r}" if want.ref else "its default branch"
        raise Unusable(f"{shown}: cannot fetch {what}: {why}", "unreachable")
    _, commit, _ = await _git("rev-parse", "FETCH_HEAD", cwd=folder)
    for path in HUB_PATHS:
        code, size, _ = await _git("cat-file", "-s", f"FETCH_HEAD:{path}", cwd=folder, watch=folder)
        if code != 0:
            continue
        if (length := int(size.strip() or 0)) > HUB_MAX_BYTES:
            why = f"{length} bytes, over the {HUB_MAX_BYTES} a hub.json may have"
            raise Unusable(f"{path}: {why}", "invalid-hub-json")
        blob = f"FETCH_HEAD:{path}"
        code, text, err = await _git("cat-file", "blob", blob, cwd=folder, watch=folder)
        if code != 0:
            raise Unusable(f"{shown}: cannot read {path}: {_last_line(err)}", "unreachable")
        return inspection(want.url, want.ref, commit.strip(), path, text)
    where = f"ref {want.ref!r}" if want.ref else "its default branch"
    raise Unusable(
        f"{shown} has no {HUB_PATHS[0]} and no {HUB_FILE} at {where}: "
        "not a ready-to-deploy repository",
        "no-hub-json",
    )


def shown_url(url: str) -> str:
    """`url` without a password or token in its user info, as a message may show it."""
    if "://" in url and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://{rest.split('@', 1)[1]}"
    return url


async def inspect_hub(request: web.Request) -> web.Response:
    """`POST {prefix}/hub/inspect {url, ref?}` -> the repository's hub.json, parsed."""
    dev = request.app[ABOUT].mode == DEV
    want = wanted(await json_object(request), dev=dev)
    return json_response(await fetch_hub(want, shown_url(want.url)))


def add_hub_route(app: web.Application, *, prefix: str = "/v1") -> None:
    """Serve `{prefix}/hub/inspect` on the management app (after `add_about_route`: the
    route asks `About` whether local repositories are allowed)."""
    app.router.add_post(f"{prefix}/hub/inspect", inspect_hub)
