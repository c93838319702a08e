"""The container images a real cluster runs in tests, built by `make cluster-images`.

The contract with hack/images.sh: its cache folder (``$LOCKGATE_IMAGES_DIR``, default
``~/.cache/lockgate-images``) holds ``images.list``, one line per built image,
``name<TAB>archive``; the archive is a docker-archive tagged ``name`` that
``ctr -n k8s.io images import`` loads under that exact name, and a relative path in it is
relative to the list's folder. An image that could not be built yet (the pause image
before hack/envtest.sh made its binary) is not listed. Pods use these images with an
``imagePullPolicy`` of ``IfNotPresent`` or ``Never``: nothing is ever pulled.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

IMAGES_DIR = Path(os.environ.get("LOCKGATE_IMAGES_DIR", Path.home() / ".cache/lockgate-images"))
NAMESPACE = "k8s.io"  # the containerd namespace the kubelet's CRI uses


def archives(images_dir: Path = IMAGES_DIR) -> dict[str, Path]:
    """Image name → archive file, as listed by the last `make cluster-images` (none yet: {})."""
    found: dict[str, Path] = {}
    if not (images_dir / "images.list").is_file():
        return found
    for line in (images_dir / "images.list").read_text().splitlines():
        name, _, path = line.partition("\t")
        if name and path:
            found[name] = images_dir / path  # an absolute path stays as it is
    return found


def import_all(socket: str | Path, images_dir: Path = IMAGES_DIR, ctr: str = "ctr") -> list[str]:
    """Import every listed image into the containerd listening on `socket` and return the
    names imported; an image containerd already has under its name with the same config
    digest (the image id) is skipped."""
    listed = archives(images_dir)
    present = _config_digests(socket, ctr, set(listed))
    imported = []
    for name, path in listed.items():
        if present.get(name) != _archive_config_digest(path):
            _ctr(socket, ctr, "images", "import", str(path))
            imported.append(name)
    return imported


def _ctr(socket: str | Path, ctr: str, *args: str) -> str:
    cmd = [ctr, "-a", str(socket), "-n", NAMESPACE, *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _config_digests(socket: str | Path, ctr: str, names: set[str]) -> dict[str, str]:
    """Image name → config digest of those of `names` containerd has (`ctr images ls`
    shows the manifest's digest; the manifest names the config)."""
    digests = {}
    for line in _ctr(socket, ctr, "images", "ls").splitlines()[1:]:
        name, _type, manifest_digest, *_ = line.split()
        if name in names:
            manifest = json.loads(_ctr(socket, ctr, "content", "get", manifest_digest))
            digests[name] = manifest.get("config", {}).get("digest", "")
    return digests


def _archive_config_digest(path: Path) -> str:
    """The config digest of a docker-archive: its config file is named after it."""
    with tarfile.open(path) as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        config = json.load(member)[0]["Config"]
    return "sha256:" + config.removeprefix("sha256:").removesuffix(".json")
