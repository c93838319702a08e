"""`FileSecretValues`: dev mode's account secret values, one file per secret in
`<data dir>/secrets/<id>` (docs/secrets.md).

Why files and not the embedded Redis: a value then lives only where a cluster's lives
too, outside Redis (there, a Secret); `lockgate dev --redis-url` may point at a Redis that
is not private to this machine's user, while the data folder always is (0700, each file
0600: `dev.datadir`). Each file is written whole (a new 0600 file, then renamed over the
old), so a worker starting meanwhile reads the old value or the new, never half of one.
Local workers get the values in their environment as they start (`resolved_env`), so a
rotation reaches the next worker that starts, as on RunPod.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets as random
from collections.abc import Mapping
from pathlib import Path

from lockgate.dev.datadir import FOLDER_MODE
from lockgate.models import secrets

FILE_MODE = 0o600


class SecretMissing(LookupError):
    """An env value refers to an account secret that does not exist; says which."""


class FileSecretValues:
    """Values as 0600 files in `folder` (0700), by secret id."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, name: str) -> Path:
        return self.folder / secrets.secret_id(name)

    async def write(self, name: str, value: str, *, new: bool) -> None:
        await asyncio.to_thread(self._write, name, value)

    def _write(self, name: str, value: str) -> None:
        self.folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        path = self._path(name)
        temporary = path.with_name(f".{path.name}.{random.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(value)
        os.replace(temporary, path)

    async def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self._path(name).unlink)

    def read(self, name: str) -> str | None:
        """The value of the secret `name`, or None when there is none."""
        try:
            return self._path(name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def missing(self, env: Mapping[str, str]) -> list[str]:
        """The account secrets `env` refers to that have no value, sorted."""
        names = set(secrets.references(env).values())
        return sorted(n for n in names if not self._path(n).is_file())

    def resolved_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with each account secret reference replaced by the secret's value; raises
        `SecretMissing` naming the first one that has none."""
        out = dict(env)
        for var, name in secrets.references(env).items():
            value = self.read(name)
            if value is None:
                raise SecretMissing(f"env.{var}: {secrets.missing_problem(name)}")
            out[var] = value
        return out
