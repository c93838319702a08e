"""A git repository made by a test in a folder of its own: `git init`, files, commits."""

from __future__ import annotations

import subprocess
from pathlib import Path

AUTHOR = ["-c", "user.name=lockgate tests", "-c", "user.email=tests@lockgate.invalid"]


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its stdout."""
    done = subprocess.run(
        ["git", *AUTHOR, *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str], message: str = "first") -> Path:
    """A new repository at `path` on branch main, with `files` in one commit."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    return commit(path, files, message)


def commit(repo: Path, files: dict[str, str], message: str) -> Path:
    """Write `files` (relative path -> text) and commit them all."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", message)
    return repo
