"""What dev mode reads of a repository's Dockerfile, to run its worker without building it:
the `pip install` lines (what the image installs), the `CMD` when it is a Python command
(what the image runs), and the `COPY`/`ADD` lines (where each repository file lands, to map
the command's paths back to the repository). Pure functions over the file's text.

Only the last build stage counts (the image that runs), with the stages it is built on;
`COPY --from=…` brings nothing from the repository. Shell syntax beyond words, `&&`, `;`
and `||` is not interpreted.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass

PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")  # python, python3, python3.11
# pip options that take a value and are passed on (where packages come from) …
KEPT_WITH_VALUE = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links"}
KEPT_FLAGS = {"--pre"}
# … those that take a value and are dropped (where the image installs them, and pip's own
# behaviour there); `-r`/`-c` are followed (their files are the repository's)
DROPPED_WITH_VALUE = {
    "-t", "--target", "--prefix", "--root", "--src", "--platform", "--python-version",
    "--implementation", "--abi", "--trusted-host", "--cache-dir", "--log", "--timeout",
    "--retries", "--proxy", "--exists-action", "--cert", "--client-cert",
    "--upgrade-strategy", "--root-user-action", "--progress-bar", "--config-settings",
    "--global-option", "--only-binary", "--no-binary", "--python",
}  # fmt: skip
FILE_OPTIONS = {"-r": "-r", "--requirement": "-r", "-c": "-c", "--constraint": "-c"}
SEPARATORS = {"&&", "||", ";", "|"}


@dataclass(frozen=True, slots=True)
class Instruction:
    """One Dockerfile instruction: its keyword (upper case) and the rest of its line."""

    keyword: str
    text: str


@dataclass(frozen=True, slots=True)
class Copy:
    """A COPY or ADD from the build context: its sources (repository paths) and where they
    land in the image (absolute)."""

    sources: tuple[str, ...]
    dest: str


@dataclass(frozen=True, slots=True)
class PipInstall:
    """What the image's `pip install` lines install: requirement words in order (`-r FILE`
    and `-c FILE` with the file's image path), and the index options passed on."""

    words: tuple[str, ...]


def instructions(text: str) -> list[Instruction]:
    """The instructions that make the image: the last build stage's, after those of the
    stage it is built `FROM` (when that is an earlier stage, by its `AS` name), with
    continuation lines joined and comments dropped."""
    stages: dict[str, list[Instruction]] = {}
    current: list[Instruction] = []
    for step in _lines(text):
        if step.keyword == "FROM":
            words = [w for w in step.text.split() if not w.startswith("--")]
            base = words[0].lower() if words else ""
            current = list(stages.get(base, []))  # FROM an earlier stage continues it
            if len(words) >= 3 and words[1].lower() == "as":
                stages[words[2].lower()] = current
        current.append(step)
    return current


def _lines(text: str) -> list[Instruction]:
    """Every instruction of the file, in order."""
    out: list[Instruction] = []
    pending = ""
    for raw in [*text.splitlines(), ""]:
        line = raw.strip()
        if line.startswith("#") or (not pending and not line):
            continue  # comments (also inside a continued instruction) and blank lines
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole, pending = (pending + line).strip(), ""
        if whole:
            keyword, _, rest = whole.partition(" ")
            out.append(Instruction(keyword.upper(), rest.strip()))
    return out


def command_words(text: str) -> list[str]:
    """A CMD, ENTRYPOINT or RUN argument as words: the exec form (a JSON array) as it is,
    the shell form split as a shell would (an unsplittable one: empty)."""
    if text.startswith("["):
        try:
            words = json.loads(text)
        except json.JSONDecodeError:
            words = None
        if isinstance(words, list) and all(isinstance(w, str) for w in words):
            return words
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)  # `a;b` -> a ; b
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return []


def image_command(steps: list[Instruction]) -> list[str]:
    """What the image runs: ENTRYPOINT's words then CMD's (the last of each); a shell-form
    ENTRYPOINT ignores CMD, as Docker does."""
    entry = next((s for s in reversed(steps) if s.keyword == "ENTRYPOINT"), None)
    cmd = next((s for s in reversed(steps) if s.keyword == "CMD"), None)
    words = command_words(entry.text) if entry else []
    if entry is None or entry.text.startswith("["):
        words += command_words(cmd.text) if cmd else []
    return unwrap_shell(words)


def unwrap_shell(words: list[str]) -> list[str]:
    """`sh -c "python -u handler.py"` (or bash, with `exec`) -> the command it runs, when
    that is one simple command; other words as they are."""
    if len(words) == 3 and posixpath.basename(words[0]) in {"sh", "bash"} and words[1] == "-c":
        inner = command_words(words[2])
        if inner and not SEPARATORS & set(inner):
            return inner[1:] if inner[0] == "exec" else inner
    return words


def python_args(words: list[str]) -> list[str] | None:
    """The arguments of a Python command (`python3 -u /handler.py` -> ['-u', '/handler.py']);
    None when `words` is not a Python command."""
    if words and posixpath.basename(words[0]) == "env":
        words = words[1:]  # /usr/bin/env python3 …
    if not words or not PYTHON.match(posixpath.basename(words[0])):
        return None
    return words[1:]


def script_index(args: list[str]) -> int | None:
    """Where the script path is among a Python command's arguments; None for `-m`, `-c` or
    an interpreter without a script."""
    for i, word in enumerate(args):
        if word in {"-m", "-c"} or (word.startswith(("-m", "-c")) and len(word) > 2):
            return None
        if word in {"-W", "-X", "--check-hash-based-pycs"}:
            continue  # the next word is its value; it is skipped below
        if not word.startswith("-") and (i == 0 or args[i - 1] not in {"-W", "-X"}):
            return i
    return None


def workdir_at(steps: list[Instruction], index: int) -> str:
    """The image's working directory before instruction `index` (`/` when none is set)."""
    current = "/"
    for step in steps[:index]:
        if step.keyword == "WORKDIR":
            current = posixpath.normpath(posixpath.join(current, step.text.strip().strip('"')))
    return current


def copies(steps: list[Instruction]) -> list[Copy]:
    """The COPY and ADD instructions that take files from the build context, in order."""
    out = []
    for i, step in enumerate(steps):
        if step.keyword not in {"COPY", "ADD"}:
            continue
        words = command_words(step.text)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        if len(paths) < 2:
            continue
        *sources, dest = paths
        if any("://" in s for s in sources):
            continue  # ADD of a URL
        whole = posixpath.join(workdir_at(steps, i), dest)
        dest = posixpath.normpath(whole) + ("/" if dest.endswith("/") else "")
        out.append(Copy(tuple(posixpath.normpath(s.lstrip("/")) for s in sources), dest))
    return out


def repository_path(
    image_path: str, steps: list[Instruction], files: Collection[str], dirs: Collection[str]
) -> str | None:
    """The repository file (relative path) that lands at `image_path` in the image, by the
    last COPY/ADD that puts one there; None when none does. `files` and `dirs` are the
    repository's relative paths (`.` is its root)."""
    target = posixpath.normpath(image_path)
    for copy in reversed(copies(steps)):
        into_dir = copy.dest.endswith("/") or len(copy.sources) > 1
        dest = copy.dest.rstrip("/") or "/"
        for source in copy.sources:
            if source in dirs:
                found = _under(target, dest, source)
            else:
                names = fnmatch.filter(files, source) if _is_glob(source) else [source]
                found = _file_at(target, dest, names, into_dir or _is_glob(source))
            if found is not None and found in files:
                return found
    return None


def _under(target: str, dest: str, source: str) -> str | None:
    """A directory copied to `dest`: the repository path of `target` inside it."""
    rel = posixpath.relpath(target, dest)
    if rel.startswith(".."):
        return None
    return posixpath.normpath(posixpath.join(source, rel))


def _file_at(target: str, dest: str, names: list[str], into_dir: bool) -> str | None:
    """A file copied to `dest`: it lands inside it (a folder) or, for one file, at it."""
    for name in names:
        inside = posixpath.join(dest, posixpath.basename(name))
        if target == inside or (not into_dir and target == dest):
            return name
    return None


def _is_glob(source: str) -> bool:
    return any(c in source for c in "*?[")


def pip_installs(steps: list[Instruction]) -> PipInstall:
    """Every `pip install` of the image's RUN lines, in order, as one install: requirement
    specifiers, `-r`/`-c` files (their image paths, made absolute against WORKDIR) and
    the index options; the options that only say where or how pip installs are dropped."""
    words: list[str] = []
    for i, step in enumerate(steps):
        if step.keyword == "RUN":
            line = command_words(step.text)
            while line and line[0].startswith("--"):
                line = line[1:]  # RUN's own flags: --mount=…, --network=…
            for args in _pip_commands(line):
                words += _requirements(args, workdir_at(steps, i))
    return PipInstall(tuple(words))


def _pip_commands(words: list[str]) -> list[list[str]]:
    """The arguments after `install` of each pip command in a shell line."""
    found, current = [], []
    for word in [*words, "&&"]:
        if word in SEPARATORS:
            if args := _install_args(current):
                found.append(args)
            current = []
        else:
            current.append(word)
    return found


def _install_args(cmd: list[str]) -> list[str] | None:
    """The words after `install` when `cmd` is `pip install …`, `pip3 install …`,
    `python -m pip install …` or `uv pip install …`; None otherwise."""
    while cmd and (cmd[0] in {"sudo", "exec"} or ("=" in cmd[0] and not cmd[0].startswith("-"))):
        cmd = cmd[1:]  # VAR=value before the command
    if len(cmd) >= 3 and PYTHON.match(posixpath.basename(cmd[0])) and cmd[1:3] == ["-m", "pip"]:
        cmd = cmd[2:]
    elif cmd[:2] == ["uv", "pip"]:
        cmd = cmd[1:]
    if len(cmd) >= 2 and re.match(r"^pip(\d+(\.\d+)?)?$", posixpath.basename(cmd[0])):
        rest = [w for w in cmd[1:] if not w.startswith("-")][:1]
        if rest == ["install"]:
            return cmd[cmd.index("install", 1) + 1 :]
    return None


def _requirements(args: list[str], workdir: str) -> list[str]:
    out: list[str] = []
    words = iter(args)
    for word in words:
        name, eq, value = word.partition("=")
        if name in FILE_OPTIONS:
            path = value if eq else next(words, "")
            out += [FILE_OPTIONS[name], posixpath.normpath(posixpath.join(workdir, path))]
        elif name in KEPT_WITH_VALUE:
            out += [name, value if eq else next(words, "")]
        elif word in KEPT_FLAGS:
            out.append(word)
        elif word in DROPPED_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            out.append(word)
    return out
