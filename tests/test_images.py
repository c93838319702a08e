"""tests/images.py: reading hack/images.sh's images.list, importing only what changed."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

from tests import images

CONFIG = "ab" * 32


def docker_archive(path: Path, name: str, config: str = CONFIG) -> Path:
    """A docker-archive holding only its manifest.json (all tests/images.py reads)."""
    manifest = json.dumps([{"Config": f"{config}.json", "RepoTags": [name], "Layers": []}])
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        archive.addfile(info, io.BytesIO(manifest.encode()))
    return path


def test_archives_are_read_from_the_list_relative_to_its_folder(tmp_path: Path):
    (tmp_path / "images.list").write_text(
        "localhost/a:1\tarchives/a.tar\n\nregistry.example.com/b:2\t/abs/b.tar\n"
    )
    assert images.archives(tmp_path) == {
        "localhost/a:1": tmp_path / "archives/a.tar",
        "registry.example.com/b:2": Path("/abs/b.tar"),
    }


# A stand-in for `ctr -a SOCK -n k8s.io …`: `images ls` prints what state.json holds in
# ctr's columns, `content get` the manifest naming its config, `images import` logs.
FAKE_CTR = """
import json, sys
from pathlib import Path
here = Path(__file__).parent
state = json.loads((here / "state.json").read_text())
args = sys.argv[5:]
if args[:2] == ["images", "ls"]:
    print("REF TYPE DIGEST SIZE PLATFORMS LABELS")
    for name, config in state.items():
        print(name, "application/vnd.docker.distribution.manifest.v2+json",
              "sha256:" + config, "1.0 MiB", "linux/amd64", "-")
elif args[:2] == ["content", "get"]:
    print(json.dumps({"config": {"digest": "sha256:" + args[2].removeprefix("sha256:")}}))
elif args[:2] == ["images", "import"]:
    with open(here / "imports", "a") as log:
        print(args[2], file=log)
"""


def test_import_all_skips_the_images_containerd_has_with_the_same_config(tmp_path: Path):
    docker_archive(tmp_path / "same.tar", "localhost/same:1")
    docker_archive(tmp_path / "changed.tar", "localhost/changed:1")
    docker_archive(tmp_path / "new.tar", "localhost/new:1")
    (tmp_path / "images.list").write_text(
        "".join(f"localhost/{n}:1\t{n}.tar\n" for n in ("same", "changed", "new"))
    )
    (tmp_path / "state.json").write_text(
        json.dumps({"localhost/same:1": CONFIG, "localhost/changed:1": "cd" * 32})
    )
    ctr = tmp_path / "ctr"
    ctr.write_text(f"#!{sys.executable}\n{FAKE_CTR}")
    ctr.chmod(0o755)

    imported = images.import_all(tmp_path / "sock", tmp_path, ctr=str(ctr))

    assert imported == ["localhost/changed:1", "localhost/new:1"]
    assert (tmp_path / "imports").read_text().split() == [
        str(tmp_path / "changed.tar"),
        str(tmp_path / "new.tar"),
    ]
