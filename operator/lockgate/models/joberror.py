"""A failed job's `error` as a person reads it: the runpod SDK's JSON string
(`error_type`, `error_message`, `error_traceback`), its generator form (`handler: … \\n
traceback: …`), lockgate's own (`WORKER_LOST: …`) or any text, split into one line and the
traceback. Pure: the CLI prints the line in its table and the traceback below."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

CLASS_RE = re.compile(r"^<class '(?:[\w.]*\.)?(\w+)'>$")  # str(type(err)): "<class 'x.ValueError'>"
GENERATOR_RE = re.compile(r"^handler: (.*?) ?\ntraceback: (.*)$", re.DOTALL)


class JobError(NamedTuple):
    """What went wrong: the exception's class (may be empty), its message, its traceback."""

    kind: str
    message: str
    traceback: str = ""

    def line(self) -> str:
        """One line: `ValueError: bad input`."""
        text = " ".join(self.message.split())
        return f"{self.kind}: {text}" if self.kind else text


def _kind(error_type: Any) -> str:
    text = str(error_type or "").strip()
    found = CLASS_RE.match(text)
    return found.group(1) if found else text


def read_error(error: Any) -> JobError | None:
    """The error of a job's answer, read; None when it has none."""
    if error is None or error == "":
        return None
    data = error
    if isinstance(error, str) and error.lstrip().startswith("{"):
        try:
            data = json.loads(error)
        except ValueError:
            data = error
    if isinstance(data, dict):
        message = data.get("error_message", data.get("message", data.get("error")))
        if message is not None:
            return JobError(
                _kind(data.get("error_type")),
                str(message),
                str(data.get("error_traceback") or "").rstrip(),
            )
        return JobError("", json.dumps(data, separators=(",", ":")))
    text = str(data)
    if found := GENERATOR_RE.match(text):
        return JobError("", found.group(1), found.group(2).rstrip())
    first, _, rest = text.partition("\n")
    traceback = rest.rstrip() if rest.lstrip().startswith("Traceback") else ""
    return JobError("", first, traceback) if traceback else JobError("", text)
