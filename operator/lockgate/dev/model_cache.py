"""Cached models in dev mode: an endpoint's `modelReferences` fetched once, before its workers.

Each reference is downloaded by `hfcache.download` in a thread into the cache under a root:
the data dir, or the endpoint's network volume folder when it has one (RunPod's
`/runpod-volume`). A reference and revision is fetched once per root, however many workers
or endpoints want it; a failed fetch is tried again by the next endpoint start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from lockgate.hfcache import download


class ModelDownloads:
    """Downloads in threads, one per (reference, root) however many callers wait for it."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], asyncio.Future[str]] = {}

    async def fetch(self, references: Sequence[str], root: Path, token: str | None = None) -> None:
        """Return once every reference is in the cache under `root`; the first failure
        raises `hfcache.ModelFetchFailed` (and is forgotten, so a later call tries again).
        `token` reads gated models (else `HF_TOKEN` of this process)."""
        futures = [self._future(ref, root, token) for ref in references]
        # shielded: a caller cancelled (shutdown) leaves the download to the others
        await asyncio.gather(*(asyncio.shield(f) for f in futures))

    def _future(self, reference: str, root: Path, token: str | None) -> asyncio.Future[str]:
        key = (reference, str(root))
        future = self._pending.get(key)
        failed = (
            future is not None
            and future.done()
            and (future.cancelled() or future.exception() is not None)
        )
        if future is None or failed:
            future = asyncio.ensure_future(asyncio.to_thread(download, reference, root, token))
            self._pending[key] = future
        return future
