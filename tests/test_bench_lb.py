"""The load-balancing bench (`make bench-lb`, `make bench --only lb`) runs against a real
`lockgate dev --endpoint-type LB` and prints its rows beside the direct floor; its
arithmetic is right. Speed is never asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bench.lb_proxy import latency_rows

REPO = Path(__file__).resolve().parent.parent


def test_the_added_p50_is_the_gateway_p50_less_the_direct_one() -> None:
    rows = latency_rows({"gateway": [0.001] * 9 + [0.009], "direct": [0.0004] * 10})
    added = next(r for r in rows if r.figure.endswith("added by the gateway"))
    assert added.value == "0.60 ms"
    assert added.passed is False  # over the 0.30 ms target
    p50 = next(r for r in rows if "p50, gateway vs direct" in r.figure)
    assert (p50.value, p50.floor) == ("1.00 ms", "0.40 ms")


def test_bench_lb_prints_every_figure_beside_the_direct_floor() -> None:
    command = ["-m", "bench.core", "--only", "lb", "--scale", "0.03", "--rounds", "1"]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}{os.pathsep}{REPO}"}
    run = subprocess.run(
        [sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=150,
        env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for name in (
        "LB small GET p50, gateway vs direct",
        "LB small GET p95, gateway vs direct",
        "LB GETs/s, 32 clients, gateway vs direct",
        "LB SSE time to first byte p50, gateway vs direct",
        "LB GETs/s, 32 clients, FastAPI example, gateway vs direct",
    ):
        row = re.search(rf"^{re.escape(name)}\s+(\S+ \S+)\s+(\S+ \S+)", out, re.MULTILINE)
        assert row, f"no row {name!r} in:\n{out}"
        assert all(re.match(r"[\d,.]+ (ms|/s)$", cell) for cell in row.groups()), row[0]
    assert re.search(r"^LB gateway CPU per proxied GET\s+[\d,]+ us", out, re.MULTILINE)
    assert "ERROR" not in out
