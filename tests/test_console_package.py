"""The console ships in the wheel: `pip install lockgate` serves it without Node or a build
step. Builds the real wheel (pip, with the venv's setuptools — the test extras pin the
version pyproject.toml's build backend asks for — so nothing is fetched) from a copy of the
sources and checks that every file under manage/static/ is in it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO

STATIC = REPO / "operator/lockgate/manage/static"


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the sources (the worktree gets no build/ or egg-info)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "operator", src / "operator", ignore=ignore)
    out = tmp_path / "dist"
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(src),
    ]
    subprocess.run(command, check=True, timeout=300)
    (wheel,) = out.glob("lockgate-*.whl")
    return wheel


def test_the_wheel_holds_every_console_file(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        packaged = {n for n in archive.namelist() if n.startswith("lockgate/manage/static/")}
    wanted = {
        f"lockgate/manage/static/{p.relative_to(STATIC).as_posix()}"
        for p in STATIC.rglob("*")
        if p.is_file()
    }
    assert "lockgate/manage/static/index.html" in wanted
    assert "lockgate/manage/static/pages/endpoints.js" in wanted
    assert wanted <= packaged, sorted(wanted - packaged)
