"""How the `lockgate` command prints what an API answered: a table for people, or the
answer itself as JSON or YAML (`-o json|yaml`) for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "json", "yaml")
EMPTY = "-"  # a table cell with nothing in it


def cell(value: Any) -> str:
    """A value as a table cell: lists joined by commas, nothing as `-`."""
    if value is None or value == "" or value == []:
        return EMPTY
    if isinstance(value, list):
        return ",".join(cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return str(value).lower()
    return " ".join(str(value).split())


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns aligned with two spaces between them, kubectl-style; headers in capitals."""
    cells = [[h.upper() for h in headers], *[[cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def yaml(data: Any, indent: int = 0) -> str:
    """`data` (what JSON can hold) as block-style YAML; strings are JSON-quoted when plain
    YAML could read them as something else."""
    pad = " " * indent
    if isinstance(data, dict) and data:
        lines = []
        for key, value in data.items():
            if _nested(value):
                lines.append(f"{pad}{_scalar(str(key))}:\n{yaml(value, indent + 2)}")
            else:
                lines.append(f"{pad}{_scalar(str(key))}: {_scalar(value)}")
        return "\n".join(lines)
    if isinstance(data, list) and data:
        lines = []
        for value in data:
            text = yaml(value, indent + 2) if _nested(value) else f"{pad}  {_scalar(value)}"
            lines.append(f"{pad}- {text.lstrip()}")
        return "\n".join(lines)
    return pad + _scalar(data)


def _nested(value: Any) -> bool:
    return isinstance(value, dict | list) and bool(value)


def _scalar(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    if isinstance(value, str):
        plain = value and value.replace("-", "").replace("_", "").replace(".", "").isalnum()
        unsafe = value.lower() in {"true", "false", "null", "yes", "no", "on", "off", "~"}
        number = value.replace(".", "", 1).lstrip("-").isdigit()
        safe = plain and not unsafe and not number and value[0] != "-"
        return value if safe else json.dumps(value)
    return json.dumps(value)


def render(data: Any, fmt: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """`data` in the chosen format; for `table`, the given headers and rows."""
    if fmt == "json":
        return json.dumps(data, indent=2)
    if fmt == "yaml":
        return yaml(data)
    return table(headers, rows)
