"""API keys from a mounted file (a Kubernetes Secret), re-read when it changes.

The file is a JSON list of `{"name", "sha256", "scopes", "endpoints"?}` (`KeyFileEntry`):
digests only, so the Secret holds no usable key. `lockgate keys create --file-entry`
prints a new key once and the entry to paste. Kubernetes swaps a mounted Secret's files
atomically; the gateway looks at the file every `keys_file_reload_s` and keeps the last
good list when a new one does not parse.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

import orjson
from pydantic import TypeAdapter, ValidationError

from lockgate.models.keys import KeyFileEntry

log = logging.getLogger("lockgate.gateway")

ENTRIES = TypeAdapter(list[KeyFileEntry])


class KeyFileError(ValueError):
    """The key file cannot be read or is not a list of key entries."""


def parse_key_file(raw: bytes) -> dict[str, KeyFileEntry]:
    """The entries of a key file by digest; KeyFileError naming the problem."""
    try:
        entries = ENTRIES.validate_python(orjson.loads(raw))
    except orjson.JSONDecodeError as err:
        raise KeyFileError(f"not JSON: {err}") from err
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise KeyFileError(f"[{where}]: {first['msg']}") from err
    return {e.sha256: e for e in entries}


class KeyFile:
    """The keys of one file, reloaded when its identity (inode, size, mtime) changes."""

    def __init__(self, path: str | Path, *, reload_s: float) -> None:
        self.path = Path(path)
        self.reload_s = reload_s
        self.entries: dict[str, KeyFileEntry] = {}
        self._seen: tuple[int, int, int] | None = None
        self.on_change: Callable[[], None] = lambda: None

    def load(self) -> None:
        """Read the file now; raises KeyFileError (used at start-up: fail fast)."""
        try:
            stat = os.stat(self.path)
            raw = self.path.read_bytes()
        except OSError as err:
            raise KeyFileError(f"{self.path}: {err.strerror}") from err
        self.entries = parse_key_file(raw)
        self._seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        self.on_change()

    def reload(self) -> bool:
        """Re-read the file if it changed; keep the last good keys on error. True: reloaded."""
        try:
            stat = os.stat(self.path)
        except OSError as err:
            log.warning("key file %s unreadable (%s); keeping its last keys", self.path, err)
            return False
        if (stat.st_ino, stat.st_size, stat.st_mtime_ns) == self._seen:
            return False
        try:
            self.load()
        except KeyFileError as err:
            log.error("key file %s: %s; keeping its last keys", self.path, err)
            return False
        log.info("key file %s reloaded: %d keys", self.path, len(self.entries))
        return True

    async def watch(self) -> None:
        """Reload every `reload_s` until cancelled."""
        while True:
            await asyncio.sleep(self.reload_s)
            self.reload()
