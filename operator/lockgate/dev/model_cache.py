"""Cached models in dev mode: an endpoint's `modelReferences` fetched once, before its workers.

Each reference `org/name[:revision]` is downloaded with `huggingface_hub.snapshot_download`
(`HF_ENDPOINT` honoured, so a mirror works) into `<root>/huggingface-cache/hub`, the Hugging
Face cache layout (`models--{org}--{name}/snapshots/{commit}/`); `root` is the data dir, or
the endpoint's network volume folder when it has one (RunPod's `/runpod-volume`). Workers
get `HF_HOME`, `HF_HUB_CACHE` and `HF_HUB_OFFLINE=1`, so `huggingface_hub` in them finds the
files without the network. A reference and revision is fetched once per root, however many
workers or endpoints want it; a failed fetch is tried again by the next endpoint start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

CACHE_DIR = "huggingface-cache"
ERROR_CHARS = 300  # a hub error kept in a status message


def parse_reference(reference: str) -> tuple[str, str | None]:
    """`org/name[:revision]` as (repo id, revision or None: the default branch)."""
    repo, _, revision = reference.partition(":")
    return repo, revision or None


def hub_dir(root: Path) -> Path:
    """Where `huggingface_hub` keeps repositories under `root` (`HF_HUB_CACHE`)."""
    return root / CACHE_DIR / "hub"


def cache_env(root: Path) -> dict[str, str]:
    """Worker env that makes `huggingface_hub` read the cache under `root`, offline."""
    return {
        "HF_HOME": str(root / CACHE_DIR),
        "HF_HUB_CACHE": str(hub_dir(root)),
        "HF_HUB_OFFLINE": "1",
    }


class ModelFetchFailed(Exception):
    """A reference could not be fetched; the message names it and the hub's answer."""


def _download(reference: str, root: Path) -> str:
    try:
        from huggingface_hub import snapshot_download  # imported when a model is wanted
    except ImportError as err:
        raise ModelFetchFailed(
            f"modelReferences: {reference}: huggingface_hub is not installed: "
            "pip install 'lockgate[models]'"
        ) from err
    repo, revision = parse_reference(reference)
    try:
        return snapshot_download(repo, revision=revision, cache_dir=str(hub_dir(root)))
    except Exception as err:  # the hub's 401/404, a refused connection…
        said = " ".join(str(err).split())[:ERROR_CHARS]
        raise ModelFetchFailed(f"modelReferences: {reference}: {said}") from err


class ModelDownloads:
    """Downloads in threads, one per (reference, root) however many callers wait for it."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], asyncio.Future[str]] = {}

    async def fetch(self, references: Sequence[str], root: Path) -> None:
        """Return once every reference is in the cache under `root`; the first failure
        raises `ModelFetchFailed` (and is forgotten, so a later call tries again)."""
        futures = [self._future(ref, root) for ref in references]
        # shielded: a caller cancelled (shutdown) leaves the download to the others
        await asyncio.gather(*(asyncio.shield(f) for f in futures))

    def _future(self, reference: str, root: Path) -> asyncio.Future[str]:
        key = (reference, str(root))
        future = self._pending.get(key)
        failed = (
            future is not None
            and future.done()
            and (future.cancelled() or future.exception() is not None)
        )
        if future is None or failed:
            future = asyncio.ensure_future(asyncio.to_thread(_download, reference, root))
            self._pending[key] = future
        return future
