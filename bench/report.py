"""The bench's output: one table of figures with their targets, and the machine they ran on."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    """One figure: lockgate's value, the floor's and Celery's where they apply, the target
    and verdict."""

    figure: str
    value: str
    floor: str = ""
    target: str = ""
    passed: bool | None = None  # None: shown for information, no target
    detail: bool = False  # printed under the table, as `figure: value`
    noisy: bool = False  # other processes were busy while it was measured
    peer: str = ""  # Celery's figure for the same load, where the bench measured one

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "MISS", None: ""}[self.passed]


def ms(seconds: float) -> str:
    """A duration in milliseconds, as the table shows it."""
    return f"{seconds * 1000:.2f} ms"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")


def machine() -> str:
    """Cores, CPU, Python, event loop and current load: what the figures depend on."""
    try:
        import uvloop

        loop = f"uvloop {uvloop.__version__}"
    except ImportError:
        loop = "asyncio (no uvloop)"
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return (
        f"machine: {os.cpu_count()} cores, {cpu_model()}; Python {platform.python_version()}; "
        f"{loop}; load average {load}"
    )


def table(rows: list[Row]) -> str:
    """The rows as an aligned plain-text table (a Celery column when a row has a figure for
    it), then the detail rows one per line."""
    head = Row("figure", "lockgate", "floor", "target", None, peer="Celery")
    main = [r for r in rows if not r.detail]
    peer = any(r.peer for r in main)
    cells = [
        (r.figure, r.value, r.floor, *([r.peer] if peer else []), r.target, r.verdict)
        for r in (head, *main)
    ]
    cells[0] = (*cells[0][:-1], "result")
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"{r.figure}: {r.value}" + (" <- busy machine" * r.noisy) for r in rows if r.detail]
    if any(r.noisy for r in rows):
        lines.append("Other processes were busy during a measurement: its figures are low; rerun.")
    return "\n".join(line.rstrip() for line in lines)
