"""The dynamic batching bench (`make bench-batching`, `make bench --only batching`) runs
against real `lockgate dev`s with the embedding-shaped handler and prints every row; its
arithmetic is right. Speed is never asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bench.batching import rows

REPO = Path(__file__).resolve().parent.parent


def test_the_target_rows_compare_max_size_32_with_unbatched() -> None:
    table = rows({0: (40.0, 1.5, 2.0), 8: (200.0, 0.2, 0.3), 32: (400.0, 0.1, 0.25)})
    ratio = next(r for r in table if r.figure == "batching: max_size 32 jobs/s vs unbatched")
    assert (ratio.value, ratio.passed) == ("10.0x", True)
    p95 = next(r for r in table if r.figure == "batching: max_size 32 p95 vs unbatched p95")
    assert p95.passed is True
    missed = rows({0: (40.0, 1.5, 2.0), 32: (300.0, 0.1, 2.5)})
    assert [r.passed for r in missed if r.passed is not None] == [False, False]


def test_bench_batching_prints_every_figure() -> None:
    command = ["-m", "bench.core", "--only", "batching", "--scale", "0.1"]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}{os.pathsep}{REPO}"}
    run = subprocess.run(
        [sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=150,
        env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for name in ("unbatched", "max_size 8", "max_size 32", "max_size 64"):
        assert re.search(rf"^batching {name}: jobs/s, 64 clients\s+\d+", out, re.MULTILINE), out
        p50_p95 = rf"^batching {name}: /runsync p50 / p95\s+[\d,.]+ ms / [\d,.]+ ms"
        assert re.search(p50_p95, out, re.MULTILINE), out
    assert re.search(r"^batching: max_size 32 jobs/s vs unbatched\s+[\d.]+x", out, re.MULTILINE)
    assert "ERROR" not in out
