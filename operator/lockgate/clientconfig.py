"""The `lockgate` command's config file: which URL and API key the daily-work commands use.

`lockgate login` writes it, and so does `lockgate dev` when it starts (its own URL and
admin key), unless the file was written by `lockgate login`. It lives in
`$LOCKGATE_CONFIG`, else `$XDG_CONFIG_HOME/lockgate/config.json`, else
`~/.config/lockgate/config.json`, mode 0600 (it holds a key).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"  # `lockgate dev`'s default
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


def resolve(
    url: str | None, key: str | None, job_url: str | None = None
) -> tuple[str, str | None, str]:
    """URL, key and job API URL: flags, else LOCKGATE_URL / LOCKGATE_API_KEY /
    LOCKGATE_JOB_URL, else the config file, else dev mode's default URL and no key."""
    saved = load()
    given = url or os.environ.get("LOCKGATE_URL")
    url = given or saved.get("url") or DEFAULT_URL
    key = key or os.environ.get("LOCKGATE_API_KEY") or saved.get("key")
    # the saved job API URL goes with the saved URL only
    saved_job_url = None if given else saved.get("jobUrl")
    job_url = job_url or os.environ.get("LOCKGATE_JOB_URL") or saved_job_url or url
    return url, key, job_url
