"""A git repository as a dev-mode worker's source: a cached clone at a ref.

`checkout(url, ref, cache_root)` keeps one clone per URL under `cache_root/clones/`,
fetches it again on each call and checks out `ref` (a branch, a tag or a commit; the
remote's HEAD when None) as a detached work tree. It speaks to git through the `git` CLI,
so every URL git itself takes works: `file://` URLs, plain local paths and http(s) URLs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

GIT_TIMEOUT_S = 300  # one clone or fetch of a repository; a stuck server ends with an error
ORIGIN = "origin"


class GitSourceError(Exception):
    """A repository that cannot be cloned or checked out; the message is one line."""


@dataclass(frozen=True, slots=True)
class Checkout:
    """A repository's work tree at one commit, with what a build record shows of it."""

    url: str
    path: Path  # the work tree
    commit: str  # the full hash
    short: str  # the abbreviated hash git prints
    message: str  # the whole commit message, without trailing blank lines
    date: datetime  # the committer date, with its time zone
    ref: str  # the ref asked for, or the remote's default branch when none was
    branch: str | None  # the branch checked out; None when `ref` is a tag or a commit


def split_source(text: str) -> tuple[str, str | None]:
    """`URL[@ref]` as the CLI takes it -> (url, ref). The ref follows the last `@`; an `@`
    that belongs to the URL itself is left alone: `https://user@host/…` (user info, before
    the path) and `git@host:org/repo` (scp-like ssh; a ref never holds a `:`)."""
    url, sep, ref = text.rpartition("@")
    if not sep or not url or not ref or ":" in ref:
        return text, None
    if "://" in url and "/" not in url.split("://", 1)[1]:
        return text, None
    return url, ref


def normalized_url(url: str) -> str:
    """The URL git is given: a plain local path made absolute (git clones it as a path;
    the cache is keyed by what names the repository, not by the folder one stood in)."""
    if "://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url):
        return url
    return str(Path(url).expanduser().resolve())


def shown_url(url: str) -> str:
    """`url` as an error message may show it: without a password or token in its user info."""
    return re.sub(r"://[^/@]*@", "://", url)


def clone_dir(url: str, cache_root: Path) -> Path:
    """The cached clone's folder for `url`: a readable tail plus a hash of the whole URL."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40] or "repo"
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return cache_root / "clones" / f"{tail.removesuffix('.git')}-{digest}"


def checkout(url: str, ref: str | None, cache_root: Path) -> Checkout:
    """Clone `url` (or fetch its cached clone again) and check out `ref` — a branch, tag or
    commit; the remote's HEAD when None. Raises `GitSourceError` for a URL git cannot
    reach or a ref the repository does not have."""
    if not url.strip():
        raise GitSourceError("git source: the repository URL is empty")
    url = normalized_url(url.strip())
    path = clone_dir(url, cache_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one checkout of a clone at a time, across processes
        if not (path / ".git").is_dir():
            _clone(url, path)
        else:
            _fetch(path, url)
        wanted = ref or _default_branch(path, url)
        commit, branch = _resolve(path, wanted, url)
        _git(path, "checkout", "--quiet", "--force", "--detach", commit)
        _git(path, "clean", "-q", "-f", "-d", "-x")
        return _describe(url, path, commit, wanted, branch)


def _clone(url: str, path: Path) -> None:
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # left by a clone that was cut short
    _run(["git", "clone", "--quiet", "--no-checkout", url, str(partial)], None, url)
    partial.rename(path)  # a clone cut short never looks like a finished one


def _fetch(path: Path, url: str) -> None:
    _run(
        ["git", "fetch", "--quiet", "--prune", "--tags", "--force", ORIGIN,
         "+refs/heads/*:refs/remotes/origin/*"],
        path, url,
    )  # fmt: skip
    # the remote's HEAD may have moved to another branch since the clone
    _run(["git", "remote", "set-head", ORIGIN, "--auto"], path, url, check=False)


def _default_branch(path: Path, url: str) -> str:
    head = _run(
        ["git", "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"], path, url, check=False
    )
    name = head.strip().removeprefix("refs/remotes/origin/")
    if not name:
        raise GitSourceError(
            f"git source {shown_url(url)}: the repository has no default branch (HEAD); name a ref"
        )
    return name


def _resolve(path: Path, ref: str, url: str) -> tuple[str, str | None]:
    """The commit `ref` names and the branch it is, if one: a remote branch first (a local
    branch of the cache would be stale), then a tag, then a commit hash."""
    if not ref.startswith("-"):
        for candidate, branch in (
            (f"refs/remotes/origin/{ref}", ref), (f"refs/tags/{ref}", None), (ref, None),
        ):  # fmt: skip
            argv = ["git", "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"]
            out = _run(argv, path, url, check=False).strip()
            if out:
                return out, branch
    raise GitSourceError(
        f"git source {shown_url(url)}: ref {ref!r} is not a branch, tag or commit of the repository"
    )


def _describe(url: str, path: Path, commit: str, ref: str, branch: str | None) -> Checkout:
    out = _git(path, "log", "-1", "--format=%H%x00%h%x00%cI%x00%B", commit)
    full, short, date, message = out.split("\0", 3)
    return Checkout(
        url=url, path=path, commit=full, short=short, message=message.strip(),
        date=datetime.fromisoformat(date), ref=ref, branch=branch,
    )  # fmt: skip


def _git(path: Path, *args: str) -> str:
    return _run(["git", *args], path, str(path))


def _run(argv: list[str], cwd: Path | None, url: str, *, check: bool = True) -> str:
    """Run git without a terminal (it never prompts for a password: a private repository
    without credentials fails at once); its stdout, or `GitSourceError` with its last line."""
    url = shown_url(url)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError as err:
        raise GitSourceError("git source: the `git` command is not installed") from err
    except subprocess.TimeoutExpired as err:
        raise GitSourceError(
            f"git source {url}: `git {argv[1]}` took over {GIT_TIMEOUT_S} s"
        ) from err
    if check and done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = shown_url(lines[-1].strip()) if lines else f"exit code {done.returncode}"
        raise GitSourceError(f"git source {url}: git {argv[1]} failed: {why}")
    return done.stdout
