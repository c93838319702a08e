"""The `lockgate` command's config file: which URL and API key the daily-work commands use.

`lockgate login` writes it, and so does `lockgate dev` when it starts (its own URL and
admin key), unless the file was written by `lockgate login`. It lives in
`$LOCKGATE_CONFIG`, else `$XDG_CONFIG_HOME/lockgate/config.json`, else
`~/.config/lockgate/config.json`, mode 0600 (it holds a key).

Its key is tied to its URL's origin: a command sent elsewhere (another `--url` or
`LOCKGATE_URL`: scheme, host or port) does not send it (`Target.withheld`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from yarl import URL

DEFAULT_URL = "http://127.0.0.1:8080"  # `lockgate dev`'s default
API_ROOTS = ("v1", "v2")  # lockgate's API paths, which a user may add (RunPod's base URL ends /v2)
BY_LOGIN, BY_DEV = "login", "dev"  # `writtenBy`: dev mode never replaces a login's file


def config_path() -> Path:
    """Where the config file is (it may not exist)."""
    if explicit := os.environ.get("LOCKGATE_CONFIG"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lockgate" / "config.json"


def load() -> dict[str, Any]:
    """The config file's fields; {} when it is absent or unreadable."""
    try:
        data = json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(fields: dict[str, Any]) -> Path:
    """Write `fields` as the config file, readable by its owner only; its path."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(fields, out, indent=2)
        out.write("\n")
    path.chmod(0o600)  # an older file may have had a wider mode
    return path


def save_for_dev(url: str, key: str) -> Path | None:
    """Point the CLI at this dev mode, unless `lockgate login` chose a URL: the path, or None."""
    if load().get("writtenBy") == BY_LOGIN:
        return None
    return save({"url": url, "key": key, "writtenBy": BY_DEV})


def signed_in_key() -> tuple[str, str] | None:
    """The key the daily-work commands use when no `--key` is given, and where it comes
    from (`LOCKGATE_API_KEY`, else the config file's path); None without one."""
    if key := os.environ.get("LOCKGATE_API_KEY"):
        return key, "LOCKGATE_API_KEY"
    key = load().get("key")
    return (key, str(config_path())) if isinstance(key, str) and key else None


class BadUrl(ValueError):
    """A URL given that is an API path, not lockgate's URL; the message names the fix."""


def normalised(url: str) -> str:
    """`url` as the user meant it: `http://` before one given without a scheme (as curl
    reads `127.0.0.1:8080`), and a last `/v1` or `/v2` taken off (the RunPod habit:
    lockgate adds its API paths to the URL). An endpoint's URL (`…/v2/ID`) raises `BadUrl`;
    a URL yarl cannot parse is left for the request to refuse."""
    text = url.strip()
    if text and "://" not in text:
        text = f"http://{text}"
    try:
        parsed = URL(text)
    except (TypeError, ValueError):
        return text
    parts = [part for part in parsed.path.split("/") if part]
    if len(parts) >= 2 and parts[-2] in API_ROOTS:
        root = str(parsed.with_path("/".join(parts[:-2])).with_query(None)).rstrip("/")
        raise BadUrl(
            f"{url} is an endpoint's URL, not lockgate's: use --url {root} and name the "
            f"endpoint ({parts[-1]}) in the command"
        )
    if parts and parts[-1] in API_ROOTS:
        return str(parsed.with_path("/".join(parts[:-1])).with_query(None)).rstrip("/")
    return text


class Target(NamedTuple):
    """Where one command connects, and the key it sends there."""

    url: str
    key: str | None
    withheld: str | None = None  # the saved URL, when its key was kept from `url` (elsewhere)
    consented: bool = False  # `lockgate login --insecure` accepted plain HTTP to this origin


def origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port (the scheme's default filled in) of `url`, lowercase: what a
    saved key is tied to. A URL yarl cannot parse is its own origin."""
    try:
        parsed = URL(url)
    except (TypeError, ValueError):
        return (url, "", None)
    return ((parsed.scheme or "").lower(), (parsed.host or "").lower(), parsed.port)


def saved_origins(saved: dict[str, Any]) -> set[tuple[str, str, int | None]]:
    """The origins the config file's key may go to: its `url` (else dev mode's default)
    and its `jobUrl`, which `lockgate login` checked and saved with it."""
    urls = [saved.get("url") or DEFAULT_URL, saved.get("jobUrl")]
    return {origin(u) for u in urls if isinstance(u, str) and u}


def target(
    url: str | None, key: str | None, job_url: str | None = None, *, jobs: bool = False
) -> Target:
    """Where a command connects (`jobs`: the job API) and with which key. URLs: flags,
    else LOCKGATE_URL / LOCKGATE_JOB_URL, else the config file, else dev mode's default
    URL (the saved job API URL goes with the saved URL only), `normalised`. Key: `--key`, else
    LOCKGATE_API_KEY (both sent wherever the URL says), else the config file's key when the
    URL has one of its origins (`saved_origins`); for another origin it is withheld."""
    saved = load()
    given = url or os.environ.get("LOCKGATE_URL")
    where = given or saved.get("url") or DEFAULT_URL
    if jobs:
        saved_job_url = None if given else saved.get("jobUrl")
        where = job_url or os.environ.get("LOCKGATE_JOB_URL") or saved_job_url or where
    where = normalised(where)
    if explicit := key or os.environ.get("LOCKGATE_API_KEY"):
        return Target(where, explicit)
    saved_key = saved.get("key")
    if not isinstance(saved_key, str) or not saved_key:
        return Target(where, None)
    if origin(where) in saved_origins(saved):
        return Target(where, saved_key, consented=saved.get("insecure") is True)
    return Target(where, None, withheld=str(saved.get("url") or DEFAULT_URL))
