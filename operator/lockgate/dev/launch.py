"""How a dev-mode endpoint's `templateId` starts its workers: a handler file or a command.

In a cluster `templateId` names a Template (an image); in `lockgate dev` it names a
template kept through `/v1/templates` (its `dockerEntrypoint` then `dockerStartCmd` are
the worker command, its `env` the workers' variables: `template_launch`), or what to run
on this machine:
- a **handler file**: one path ending in `.py` (`examples/echo/handler.py`), run as
  `python FILE` in the file's folder, with the Python that runs `lockgate dev`;
- anything else is a **worker command** (`python -m mypkg.worker`, `./worker.sh`), split
  like a shell would and run in the folder `lockgate dev` started in. A leading `python`
  or `python3` means the Python that runs `lockgate dev` (it has lockgate installed).
Relative paths are resolved against that folder; a handler's `templateId` is stored as
its absolute path, so the record says exactly which file runs.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from lockgate.manage.controlplane import UnusableSettings

HANDLER_SUFFIX = ".py"
PYTHON_NAMES = {"python", "python3"}
HOW = "name a handler file (*.py) or a worker command"


@dataclass(frozen=True, slots=True)
class Launch:
    """What each worker process of an endpoint runs, and where."""

    template_id: str  # the templateId as stored: handler files as absolute paths
    command: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...] = ()  # a template's variables, sorted


def template_launch(
    template_id: str, words: list[str], env: dict[str, str], *, base_dir: Path, python: str
) -> Launch:
    """The launch of a kept template: `words` (its `dockerEntrypoint` + `dockerStartCmd`)
    by the rules of a worker command, with its `env`. Raises `UnusableSettings` naming
    `dockerStartCmd` when there is nothing to run or it cannot run here."""
    if not words:
        raise UnusableSettings(
            f"dockerStartCmd: template {template_id!r} has no dockerEntrypoint or "
            "dockerStartCmd; dev mode runs them (not the image) on this machine"
        )
    text = shlex.join(words)
    launch = launch_for(text, base_dir=base_dir, python=python, field="dockerStartCmd")
    return Launch(template_id, launch.command, launch.cwd, tuple(sorted(env.items())))


def launch_for(
    template_id: str, *, base_dir: Path, python: str, field: str = "templateId"
) -> Launch:
    """The launch a `templateId` asks for; raises `UnusableSettings` naming the field
    (`field`) when it is empty, unparsable, or names a file or program that does not exist."""
    text = template_id.strip()
    if not text:
        raise UnusableSettings(f"{field}: required in dev mode: {HOW}")
    if text.endswith(HANDLER_SUFFIX) and (base_dir / text).expanduser().is_file():
        return _handler(base_dir / text, python)  # a path with spaces, given unquoted
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise UnusableSettings(f"{field}: cannot split {text!r} into words: {err}") from err
    if len(words) == 1 and words[0].endswith(HANDLER_SUFFIX):
        path = (base_dir / words[0]).expanduser()
        if not path.is_file():
            raise UnusableSettings(f"{field}: handler file {str(path)!r} not found")
        return _handler(path, python)
    return _command(words, text, base_dir, python, field)


def _handler(path: Path, python: str) -> Launch:
    path = path.resolve()
    return Launch(str(path), (python, str(path)), str(path.parent))


def _command(words: list[str], text: str, base_dir: Path, python: str, field: str) -> Launch:
    program = words[0]
    if program in PYTHON_NAMES:
        return Launch(text, (python, *words[1:]), str(base_dir))
    if os.sep in program:
        found = (base_dir / program).expanduser()
        usable = found.is_file() and os.access(found, os.X_OK)
    else:
        usable = shutil.which(program) is not None
    if not usable:
        raise UnusableSettings(f"{field}: program {program!r} not found; {HOW}")
    return Launch(text, tuple(words), str(base_dir))
