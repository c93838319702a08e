"""The console reads a failed job's error (`pages/joberror.js`'s `readError`, `errorLine`)
as the CLI does (`models.joberror`): both run on the same errors, the console's under
Node.js (which `make mcp` needs too), and must agree on every line and traceback."""

from __future__ import annotations

import json
import random
from typing import Any

from lockgate.models.joberror import read_error
from tests.conftest import REPO
from tests.console_js import run_js

JOBERROR_JS = REPO / "operator/lockgate/manage/static/pages/joberror.js"
TRACE = 'Traceback (most recent call last):\n  File "h.py", line 3\nValueError: bad'
SDK = {"error_type": "<class 'ValueError'>", "error_message": "bad\n input",
       "error_traceback": TRACE + "\n", "hostname": "h", "worker_id": "w"}  # fmt: skip
CASES: list[Any] = [
    None,
    "",
    json.dumps(SDK),
    json.dumps({"error_type": "<class 'torch.cuda.OutOfMemoryError'>", "error_message": "OOM"}),
    json.dumps({"error_type": "  KeyError ", "error_message": "x", "error_traceback": None}),
    json.dumps({"error_message": None, "message": "shadowed"}),
    json.dumps({"message": "from message"}),
    json.dumps({"error": "from error"}),
    json.dumps({"error_message": 42}),
    "  " + json.dumps(SDK),
    f"handler: boom \ntraceback: {TRACE}\n",
    "handler: multi\nline \ntraceback: T\n\n",
    "WORKER_LOST: the worker running this job was lost after 3 s (onWorkerLost: fail)",
    "job timed out",
    {"error_message": "as an object", "error_type": "KeyError"},
    {"no": "message"},
    '{"not": "sdk"}',
    "{not json",
    f"it broke\n{TRACE}",
    f"it broke\n   {TRACE}\n\n",
    "two\nlines, no traceback",
    "tabs\tand   spaces\n",
]


def mixed(seed: int, n: int) -> list[Any]:
    """`n` errors made of the pieces the readers look for, in random order."""
    rng = random.Random(seed)
    pieces = ["handler: ", "traceback: ", "Traceback", "\n", " ", "{", "}", '"', "x", "ValueError",
              ": ", "<class 'a.B'>", "\t", "error_message"]  # fmt: skip
    out: list[Any] = []
    for _ in range(n):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        if rng.random() < 0.3:
            fields = ["error_type", "error_message", "error_traceback", "message", "error"]
            text = json.dumps({rng.choice(fields): text for _ in range(rng.randint(1, 3))})
        out.append(text)
    return out


def console_reads(cases: list[Any]) -> list[Any]:
    return run_js(
        JOBERROR_JS, "{readError, errorLine}",
        "(error) => { const read = readError(error);"
        " return read && [read.kind, read.message, read.traceback, errorLine(read)]; }",
        cases,
    )  # fmt: skip


def cli_reads(cases: list[Any]) -> list[Any]:
    reads = [read_error(error) for error in cases]
    return [read and [read.kind, read.message, read.traceback, read.line()] for read in reads]


def test_the_console_reads_every_error_as_the_cli_does() -> None:
    assert console_reads(CASES) == cli_reads(CASES)
    sdk = cli_reads([json.dumps(SDK)])[0]
    assert sdk[3] == "ValueError: bad input" and sdk[2] == TRACE


def test_the_readers_agree_on_mixed_errors() -> None:
    cases = mixed(seed=50, n=300)
    assert console_reads(cases) == cli_reads(cases)
