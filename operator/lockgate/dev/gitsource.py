"""A git repository as a dev-mode worker's source: a cached clone at a ref, a virtual
environment of its own, and the command that runs its handler.

- `checkout(url, ref, cache_root)` keeps one clone per URL under `cache_root/clones/`,
  fetches it again on each call and checks out `ref` (a branch, a tag or a commit; the
  remote's HEAD when None) into a work tree of that commit's own under
  `cache_root/trees/`. It speaks to git through the `git` CLI, so every URL git itself
  takes works: `file://` URLs, plain local paths, http(s).
- `environment(checkout, cache_root)` is the python of a venv under `cache_root/venvs/`,
  keyed by the sha256 of what it installs: `requirements.txt`, or without one the
  Dockerfile's `pip install` lines. A venv whose key matches is reused as it is.
- `entrypoint(checkout)` is what that python runs: the repository's `handler.py`, or the
  Dockerfile's CMD when that is a Python command (its script mapped back from the image
  path its COPY lines put it at to the repository's file).
A file in `.runpod/` is taken over the one of the same name at the root (`models.hub`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lockgate.dev.dockerfile import (
    image_command,
    instructions,
    pip_installs,
    python_args,
    repository_path,
    script_index,
    workdir_at,
)
from lockgate.models.hub import runpod_path

GIT_TIMEOUT_S = 300  # one clone or fetch of a repository; a stuck server ends with an error
ORIGIN = "origin"
PIP_TIMEOUT_S = 1800  # one venv's whole install; past it the install is a failure
READY = ".lockgate-ready"  # written in a venv once its install has finished
HANDLER = "handler.py"
REQUIREMENTS = "requirements.txt"
DOCKERFILE = "Dockerfile"


class GitSourceError(Exception):
    """A repository that cannot be cloned, checked out, installed or run; the message is
    one line."""


class EnvironmentFailed(GitSourceError):
    """The repository's requirements could not be installed; the message ends with pip's
    last lines."""


@dataclass(frozen=True, slots=True)
class Checkout:
    """A repository's work tree at one commit, with what a build record shows of it."""

    url: str
    path: Path  # the commit's own work tree (its files never change under a running worker)
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
        if re.fullmatch(r"[0-9a-f]{40}", wanted):
            # a commit no branch or tag holds (a pull request's): asked for by its hash,
            # which servers that allow it send; otherwise _resolve says it is not there
            _run(["git", "fetch", "--quiet", ORIGIN, wanted], path, url, check=False)
        commit, branch = _resolve(path, wanted, url)
        tree = _work_tree(path, commit, cache_root / "trees" / path.name / commit[:16], url)
        return _describe(url, tree, commit, wanted, branch)


def _work_tree(clone: Path, commit: str, tree: Path, url: str) -> Path:
    """A work tree of its own for `commit` (a `git worktree` of the clone), so a process
    running from one commit's files never sees them change when another is checked out;
    one made before gets its tracked files back as the commit has them."""
    if (tree / ".git").exists():
        _run(["git", "checkout", "--quiet", "--force", "--detach", commit], tree, url)
        return tree
    _run(["git", "worktree", "prune"], clone, url, check=False)  # trees deleted by hand
    tree.parent.mkdir(parents=True, exist_ok=True)
    argv = ["git", "worktree", "add", "--quiet", "--force", "--detach", str(tree), commit]
    _run(argv, clone, url)
    return tree


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


# -- the environment ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a repository's venv installs: pip's arguments, the bytes its key hashes, and
    where they come from (for messages)."""

    args: tuple[str, ...]
    content: bytes
    origin: str


def requirements_of(co: Checkout) -> Requirements:
    """`requirements.txt` when the repository has one; else the Dockerfile's `pip install`
    lines (with the `-r` files they name, mapped back to the repository); else nothing."""
    found = runpod_path(co.path, REQUIREMENTS)
    if found is not None:
        shown = str(found.relative_to(co.path))
        return Requirements(("-r", str(found)), found.read_bytes(), shown)
    dockerfile = runpod_path(co.path, DOCKERFILE)
    if dockerfile is None:
        return Requirements((), b"", "nothing to install")
    steps = instructions(dockerfile.read_text(errors="replace"))
    words, content = list(pip_installs(steps).words), bytearray()
    files = tracked_files(co.path)
    for i, word in enumerate(words):
        if i and words[i - 1] in {"-r", "-c"}:
            rel = repository_path(word, steps, files, folders_of(files))
            if rel is None:
                raise GitSourceError(
                    f"{DOCKERFILE}: pip install {words[i - 1]} {word}: no COPY or ADD brings "
                    "that file from the repository"
                )
            words[i] = str(co.path / rel)
            content += (co.path / rel).read_bytes()
    content = "\n".join(pip_installs(steps).words).encode() + b"\n" + bytes(content)
    return Requirements(tuple(words), content, f"the {DOCKERFILE}'s pip install lines")


def environment_key(requirements: Requirements) -> str:
    """The venv's key: the sha256 of what it installs and of the Python it is made with
    (a venv is tied to its interpreter's version)."""
    python = f"python {sys.version_info.major}.{sys.version_info.minor}\n".encode()
    return hashlib.sha256(python + requirements.content).hexdigest()


def venv_dir(cache_root: Path, requirements: Requirements) -> Path:
    """Where the venv of `requirements` is kept (its pip log beside it, `<dir>.log`)."""
    return cache_root / "venvs" / environment_key(requirements)[:16]


def is_ready(venv: Path) -> bool:
    """Whether the venv's install finished (a venv is used only then)."""
    return (venv / READY).is_file() and (venv / "bin" / "python").exists()


def environment(co: Checkout, cache_root: Path, *, timeout_s: float = PIP_TIMEOUT_S) -> Path:
    """The python of the repository's venv: reused when its key matches, else made with
    `python -m venv` and pip (pip's own cache of downloads and wheels is used as usual).
    Raises `EnvironmentFailed` with pip's last lines when the install fails."""
    wanted = requirements_of(co)
    key = environment_key(wanted)
    venv = venv_dir(cache_root, wanted)
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.with_name(venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install of a venv at a time
        if is_ready(venv):
            return python
        shutil.rmtree(venv, ignore_errors=True)  # an install cut short
        log = venv.with_name(venv.name + ".log")
        try:
            _install(venv, wanted, co.path, log, timeout_s)
        except BaseException:
            shutil.rmtree(venv, ignore_errors=True)
            raise
        (venv / READY).write_text(key + "\n")
    return python


def _install(venv: Path, wanted: Requirements, cwd: Path, log: Path, timeout_s: float) -> None:
    steps = [[sys.executable, "-m", "venv", str(venv)]]
    if wanted.args:
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-input"]
        steps.append([*pip, "--disable-pip-version-check", *wanted.args])
    with open(log, "w") as out:
        for argv in steps:
            try:
                done = subprocess.run(
                    argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired as err:
                raise EnvironmentFailed(
                    f"installing {wanted.origin} took over {timeout_s:.0f} s (log: {log})"
                ) from err
            if done.returncode != 0:
                what = "pip install" if "pip" in argv else "python -m venv"
                raise EnvironmentFailed(
                    f"{what} of {wanted.origin} failed (exit {done.returncode}): "
                    f"{last_lines(log.read_text(errors='replace'))} (log: {log})"
                )


def last_lines(text: str, count: int = 3) -> str:
    """The last `count` non-blank lines of a program's output, joined with ` | `."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "no output"


# -- the entrypoint -----------------------------------------------------------------------


def entrypoint(co: Checkout) -> list[str]:
    """The arguments for the environment's python: the repository's `handler.py`, else the
    Dockerfile's CMD (after ENTRYPOINT) when it is a Python command running a script, the
    script's image path mapped to the repository's file. Raises `GitSourceError` saying
    what is missing otherwise."""
    handler = runpod_path(co.path, HANDLER)
    if handler is not None:
        return [str(handler)]
    dockerfile = runpod_path(co.path, DOCKERFILE)
    if dockerfile is None:
        raise GitSourceError(f"git source {shown_url(co.url)}: no {HANDLER} and no {DOCKERFILE}")
    steps = instructions(dockerfile.read_text(errors="replace"))
    words = image_command(steps)
    args = python_args(words)
    where = f"no {HANDLER}, and the {DOCKERFILE}'s CMD {shlex.join(words) or '(none)'}"
    if args is None:
        raise GitSourceError(f"git source {shown_url(co.url)}: {where} is not a Python command")
    i = script_index(args)
    if i is None:
        raise GitSourceError(f"git source {shown_url(co.url)}: {where} runs no script file")
    image_path = posixpath.join(workdir_at(steps, len(steps)), args[i])
    files = tracked_files(co.path)
    rel = repository_path(image_path, steps, files, folders_of(files))
    if rel is None:
        raise GitSourceError(
            f"git source {shown_url(co.url)}: {where} runs {image_path}, which no COPY or "
            "ADD brings from the repository"
        )
    return [*args[:i], str(co.path / rel), *args[i + 1 :]]


def tracked_files(repo: Path) -> set[str]:
    """The repository's files (relative paths) as git tracks them."""
    out = _git(repo, "ls-files", "-z")
    return {name for name in out.split("\0") if name}


def folders_of(files: set[str]) -> set[str]:
    """Every folder holding one of `files`, the root as `.`."""
    folders = {"."}
    for name in files:
        parent = posixpath.dirname(name)
        while parent:
            folders.add(parent)
            parent = posixpath.dirname(parent)
    return folders
