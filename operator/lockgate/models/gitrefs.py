"""Git ref names (pure): what `git check-ref-format` accepts, over the characters a URL,
a key and a path may carry safely. Used by model references' revisions and git sources."""

from __future__ import annotations

import re

_REF_CHARS = re.compile(r"[A-Za-z0-9_./-]+")


def revision_problem(revision: str) -> str | None:
    """Why `revision` is no git branch, tag or commit name (`git check-ref-format`'s rules
    over the characters the pattern allows), or None. A path-like revision cannot leave
    the cache's `refs/` folder."""
    parts = revision.split("/")
    bad = (
        not _REF_CHARS.fullmatch(revision)
        or ".." in revision
        or revision.endswith(".")
        or any(not p or p.startswith(".") or p.endswith(".lock") for p in parts)
    )
    return (
        f"revision {revision!r}: not a git branch, tag or commit name (no '..', no empty "
        "part between '/', no part starting with '.' or ending with '.lock')"
        if bad
        else None
    )


def ref_problem(ref: str) -> str | None:
    """Why `ref` is no branch, tag or commit a git source may name, or None: a revision
    (`revision_problem`) that does not start with '-' (git would read it as an option)."""
    if ref.startswith("-"):
        return f"ref {ref!r}: must not start with '-'"
    problem = revision_problem(ref)
    return problem.replace("revision", "ref", 1) if problem else None
