"""`lockgate dev --git URL[@ref]`: a repository's handler as the dev endpoint's worker.

The repository is checked out (`gitsource.checkout`), given its own venv
(`gitsource.environment`) and its handler found (`gitsource.entrypoint`); the worker
command is the venv's python running it, in the checkout's folder. The workers get the
variables a Hub deployment with the form left as it is would get (`hub.json`'s fixed values
and defaults, a preset's values over them), and with `--test` the variables of
`tests.json`'s `config.env` over those; a variable exported where `lockgate dev` runs wins
over both.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lockgate.dev.gitsource import (
    Checkout,
    checkout,
    entrypoint,
    environment,
    is_ready,
    requirements_of,
    shown_url,
    split_source,
    venv_dir,
)
from lockgate.dev.launch import Launch
from lockgate.models.hub import (
    HUB_FILE,
    TESTS_FILE,
    HubFile,
    HubFileError,
    HubTests,
    env_for_tests,
    hub_env,
    parse_hub,
    parse_tests,
    runpod_path,
)

CACHE_FOLDER = ("lockgate", "git")  # under $XDG_CACHE_HOME (default ~/.cache)


@dataclass(frozen=True, slots=True)
class GitWorker:
    """What the dev endpoint of a git source runs, and what the repository says of it."""

    checkout: Checkout
    launch: Launch  # its template_id is the worker command, as the endpoint shows it
    endpoint_id: str  # the repository's name, as an endpoint id
    hub: HubFile | None  # None: no hub.json, or one that could not be used (`say` told)
    tests: HubTests | None  # with `--test`: the repository's tests.json


def default_cache_root() -> Path:
    """Where clones and venvs are kept: `$XDG_CACHE_HOME/lockgate/git` (~/.cache/…)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, *CACHE_FOLDER)


def repository_endpoint_id(url: str) -> str:
    """The endpoint id a repository gets: its name (`…/worker-sdxl.git` -> `worker-sdxl`)."""
    tail = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    slug = re.sub(r"[^a-z0-9-]+", "-", tail.lower()).strip("-")[:63].strip("-")
    return slug or "git"


def git_worker(
    source: str,
    cache_root: Path,
    *,
    preset: str | None = None,
    with_tests: bool = False,
    say: Callable[[str], None] = lambda _: None,
    environ: Mapping[str, str] = os.environ,
) -> GitWorker:
    """Check out `source` (`URL[@ref]`), make or reuse its venv and find its handler,
    telling `say` each step. Raises `GitSourceError` (clone, ref, install, handler) or
    `HubFileError` (a bad tests.json with `with_tests`, a preset hub.json lacks)."""
    url, ref = split_source(source)
    say(f"git: fetching {shown_url(url)}{f' at {ref}' if ref else ''}")
    co = checkout(url, ref, cache_root)
    say(f"git: {co.ref} is {co.short} ({co.message.splitlines()[0] if co.message else ''})")
    args = entrypoint(co)  # what is wrong with the repository is said before any install
    hub = _hub(co.path, say)
    if preset and hub is None:
        raise HubFileError(f"--preset {preset!r}: the repository has no usable {HUB_FILE}")
    tests = load_tests(co.path) if with_tests else None
    env = (hub_env(hub.config, preset) if hub else {}) | (env_for_tests(tests) if tests else {})
    env = {k: v for k, v in env.items() if k not in environ}  # what you export wins
    wanted = requirements_of(co)
    venv = venv_dir(cache_root, wanted)
    if is_ready(venv):
        say(f"environment: {venv} ({wanted.origin}, unchanged: reused)")
    else:
        say(f"environment: installing {wanted.origin} into {venv} (once; log: {venv}.log)")
    python = environment(co, cache_root)
    command = (str(python), *args)
    launch = Launch(shlex.join(command), command, str(co.path), tuple(sorted(env.items())))
    return GitWorker(co, launch, repository_endpoint_id(co.url), hub, tests)


def _hub(repo: Path, say: Callable[[str], None]) -> HubFile | None:
    """The repository's hub.json; one that cannot be used is said and left out (dev mode
    runs the handler all the same)."""
    path = runpod_path(repo, HUB_FILE)
    if path is None:
        return None
    try:
        return parse_hub(path.read_text(errors="replace"))
    except HubFileError as err:
        say(f"{err} (its variables are not given to the workers)")
        return None


def load_tests(folder: Path) -> HubTests:
    """The tests.json of `folder` (`.runpod/tests.json` over `tests.json`); HubFileError
    when there is none or it cannot be used."""
    path = runpod_path(folder, TESTS_FILE)
    if path is None:
        raise HubFileError(f"{TESTS_FILE}: none in {folder} (nor in {folder}/.runpod)")
    return parse_tests(path.read_text(errors="replace"))
