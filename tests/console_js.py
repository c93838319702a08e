"""Run a console module's JavaScript under Node.js (which `make mcp` needs too) on cases
from Python, for the tests that compare the console's rules with their Python twins."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def run_js(module: Path, names: str, mapper: str, cases: list[Any]) -> list[Any]:
    """`cases.map(mapper)` in Node, with `names` (`{a, b}`) imported from `module`: the
    JSON-decoded results. `mapper` is a JavaScript arrow function of one case."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("needs Node.js (as make mcp does): install nodejs 20+")
    script = (
        f"import {names} from {json.dumps(module.as_uri())};"
        "const cases = JSON.parse(process.argv[1]);"
        f"console.log(JSON.stringify(cases.map({mapper})));"
    )
    ran = subprocess.run(
        [node, "--input-type=module", "-e", script, json.dumps(cases)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return json.loads(ran.stdout)
