"""Dev mode's data folder (`lockgate dev --data-dir`, default `.lockgate`): private to its
owner, and used by one `lockgate dev` at a time.

- Private: the folder is 0700 and what dev mode and its Redis keep there 0600 (the
  append-only file holds registry passwords, `api-key` the admin key, `secrets/` the
  account secrets' values). A folder of an
  earlier version (0755, files 0644) is tightened at start. The contents of `volumes/` are
  the workers' files and keep their modes: the closed folder around them is enough.
- One at a time: `dev.lock` carries an `fcntl.flock` for as long as `lockgate dev` or its
  redis-server (which inherits the descriptor) lives, so the lock dies with them, SIGKILL
  included. The file names the holder (pid, port) for the refusal of a second start.
- The embedded Redis's password is `redis-password`, generated once.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FOLDER_MODE = 0o700
OTHERS = 0o077  # group and other permission bits: what a private file has none of
LOCK_FILE = "dev.lock"
REDIS_PASSWORD_FILE = "redis-password"
VOLUMES = "volumes"  # the workers' files (dev.storage): their modes are theirs
SECRETS = "secrets"  # account secrets' values, 0600 each (dev.secret_values)


@dataclass(frozen=True, slots=True)
class Holder:
    """The `lockgate dev` that holds a data folder, as its lock file says."""

    pid: int | None
    port: int | None


class DataDirInUse(Exception):
    """Another `lockgate dev` holds the data folder; the message is one line."""


def in_use_line(data_dir: Path, holder: Holder) -> str:
    """The refusal of a second `lockgate dev` on `data_dir`: who has it, and what to do."""
    who = ", ".join(
        f"{name} {value}" for name, value in (("pid", holder.pid), ("port", holder.port)) if value
    )
    return (
        f"data folder {data_dir} is in use by another lockgate dev ({who or 'starting'}): "
        "stop it, or give this one another folder with --data-dir"
    )


def holder_of(text: str) -> Holder:
    """The holder a lock file's text names; unknown fields are None."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    data = data if isinstance(data, dict) else {}
    pid, port = data.get("pid"), data.get("port")
    return Holder(pid if isinstance(pid, int) else None, port if isinstance(port, int) else None)


def claim(data_dir: Path, port: int) -> int:
    """Take `data_dir` for this process (created 0700 if absent), naming it and `port` in
    the lock file: the lock file's descriptor, to keep open (pass it on to a child that
    must hold the folder too). Raises `DataDirInUse` when another process holds it; that
    process's files are then left as they are."""
    data_dir.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        os.close(fd)
        raise DataDirInUse(in_use_line(data_dir, holder_of(text))) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "port": port}).encode(), 0)
    return fd


def make_private(data_dir: Path) -> None:
    """The folder 0700; each file and folder in it without group and other permissions
    (0644 -> 0600, 0755 -> 0700), except inside `volumes/`. Symbolic links are left."""
    data_dir.chmod(FOLDER_MODE)
    for path in _ours(data_dir):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & OTHERS:
            with contextlib.suppress(FileNotFoundError):  # a file Redis just replaced
                path.chmod(mode & ~OTHERS)


def _ours(data_dir: Path) -> Iterator[Path]:
    for entry in data_dir.iterdir():
        if entry.is_symlink():
            continue
        yield entry
        if entry.is_dir() and entry.name != VOLUMES:
            yield from (p for p in entry.rglob("*") if not p.is_symlink())


def kept_secret(data_dir: Path, name: str, prefix: str = "") -> str:
    """A secret generated once and kept in `data_dir/name` (created 0600), so restarts
    keep it: `whsec_` + base64 for a webhook secret, else `prefix` + URL-safe text."""
    path = data_dir / name
    if path.exists():
        return path.read_text().strip()
    value = prefix + (
        base64.b64encode(secrets.token_bytes(24)).decode()
        if prefix == "whsec_"
        else secrets.token_urlsafe(24)
    )
    data_dir.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")
    return value
