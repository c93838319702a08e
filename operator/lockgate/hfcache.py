"""Cached models: Hugging Face references fetched into the Hugging Face cache layout.

An endpoint's `modelReferences` (`org/name[:revision]`) are downloaded with
`huggingface_hub.snapshot_download` (`HF_ENDPOINT`, `HF_TOKEN` honoured, so a mirror works
and a gated model can be read) into `<root>/huggingface-cache/hub`, where they appear as
`models--{org}--{name}/snapshots/{commit}/`; `root` is `/runpod-volume` in a worker pod (the
network volume, or the node's cache mounted there) and the data dir or the volume folder in
dev mode. Workers get `cache_env(root)`, so `huggingface_hub` in them finds the files
offline. Used by dev mode (`dev.model_cache`) and by the worker pods' init container
(`lockgate fetch-models`, `kube.manifests`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

CACHE_DIR = "huggingface-cache"
ERROR_CHARS = 300  # a hub error kept in a status message
TERMINATION_LOG = Path("/dev/termination-log")  # what Kubernetes shows of a failed container


def parse_reference(reference: str) -> tuple[str, str | None]:
    """`org/name[:revision]` as (repo id, revision or None: the default branch)."""
    repo, _, revision = reference.partition(":")
    return repo, revision or None


def hub_dir(root: Path) -> Path:
    """Where `huggingface_hub` keeps repositories under `root` (`HF_HUB_CACHE`)."""
    return root / CACHE_DIR / "hub"


def cache_env(root: Path, *, offline: bool = True) -> dict[str, str]:
    """Env that makes `huggingface_hub` use the cache under `root`: a worker's reads it
    offline; the download's (`offline=False`) fills it."""
    env = {"HF_HOME": str(root / CACHE_DIR), "HF_HUB_CACHE": str(hub_dir(root))}
    return {**env, "HF_HUB_OFFLINE": "1"} if offline else env


class ModelFetchFailed(Exception):
    """A reference could not be fetched; the message names it and the hub's answer."""


def repo_dir(root: Path, repo: str) -> Path:
    """The folder `huggingface_hub` keeps a model repository in (`models--{org}--{name}`)."""
    return hub_dir(root) / f"models--{repo.replace('/', '--')}"


def outside(root: Path, reference: str) -> Path | None:
    """The first path a download of `reference` would write that resolves outside the
    cache under `root` (its folder, `refs/<revision>`, `snapshots/<revision>`), or None.
    The API and the CRD refuse such references already; this guards the root init
    container against an Endpoint validated by an older lockgate."""
    repo, revision = parse_reference(reference)
    hub = hub_dir(root).resolve()
    folder = repo_dir(root, repo)
    paths = [folder] + [folder / sub / revision for sub in ("refs", "snapshots") if revision]
    return next((p for p in paths if not p.resolve().is_relative_to(hub)), None)


def download(reference: str, root: Path, token: str | None = None) -> str:
    """Fetch one reference into the cache under `root` (what is there already is kept);
    the snapshot's folder. `token` (else `HF_TOKEN`) reads a gated model."""
    try:
        from huggingface_hub import snapshot_download  # imported when a model is wanted
    except ImportError as err:
        raise ModelFetchFailed(
            f"modelReferences: {reference}: huggingface_hub is not installed: "
            "pip install 'lockgate[models]'"
        ) from err
    if (path := outside(root, reference)) is not None:
        raise ModelFetchFailed(f"modelReferences: {reference}: {path} is outside {hub_dir(root)}")
    repo, revision = parse_reference(reference)
    try:
        return snapshot_download(
            repo, revision=revision, cache_dir=str(hub_dir(root)), token=token or None
        )
    except Exception as err:  # the hub's 401/404, a refused connection…
        said = " ".join(str(err).split())[:ERROR_CHARS]
        raise ModelFetchFailed(f"modelReferences: {reference}: {said}") from err


def main(args: argparse.Namespace) -> int:
    """`lockgate fetch-models`: every reference into `--root`'s cache, a line per step; a
    failure is one line on stderr and in the termination log (the pod's status shows it)."""
    root = Path(args.root)
    _quiet()
    for reference in args.references:
        print(f"fetching {reference} into {hub_dir(root)}", flush=True)
        try:
            folder = download(reference, root)
        except ModelFetchFailed as err:
            print(f"lockgate: {err}", file=sys.stderr, flush=True)
            _termination_message(str(err))
            return 1
        print(f"cached {reference} at {folder}", flush=True)
    return 0


def _quiet() -> None:
    """A line per model in a pod's log, not progress bars."""
    with contextlib.suppress(ImportError):  # download() says it is missing
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def _termination_message(message: str) -> None:
    with contextlib.suppress(OSError):  # not in a pod: stderr said it
        TERMINATION_LOG.write_text(message)


def fetch_command(references: Sequence[str], root: str) -> list[str]:
    """The `lockgate` arguments that fetch `references` into `root` (an init container's)."""
    return ["fetch-models", "--root", root, *references]
