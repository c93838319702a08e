"""The dynamic batching bench (`make bench-batching`, `make bench --only batching`) runs
against real `lockgate dev`s with the embedding-shaped handler and prints every row, the
/runsync p50 / p95 with and without a batch on the batch pool among them; its arithmetic
is right. Speed is never asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bench import under_batch
from bench.batching import rows
from bench.under_batch import Cpu, Sequential, UnderBatch

REPO = Path(__file__).resolve().parent.parent


def test_the_target_rows_compare_max_size_32_with_unbatched() -> None:
    table = rows({0: (40.0, 1.5, 2.0), 8: (200.0, 0.2, 0.3), 32: (400.0, 0.1, 0.25)})
    ratio = next(r for r in table if r.figure == "batching: max_size 32 jobs/s vs unbatched")
    assert (ratio.value, ratio.passed) == ("10.0x", True)
    p95 = next(r for r in table if r.figure == "batching: max_size 32 p95 vs unbatched p95")
    assert p95.passed is True
    missed = rows({0: (40.0, 1.5, 2.0), 32: (300.0, 0.1, 2.5)})
    assert [r.passed for r in missed if r.passed is not None] == [False, False]


def under(*, ended_first: bool, refused: int = 0) -> UnderBatch:
    return UnderBatch(
        requests=5000, alone=Sequential([0.030, 0.031, 0.040]),
        during=Sequential([0.033, 0.036, 0.050], refused),
        ended_first=ended_first, ended_by_then=5000 if ended_first else 1234, batch_s=10.0,
        waited_s=1.5, cpu_alone=Cpu({"gateway": 0.3, "workers": 0.05}, 0.02),
        cpu_during=Cpu({"gateway": 0.9, "workers": 0.4}, 0.25),
    )  # fmt: skip


def test_the_under_batch_rows_give_the_p50_ratio_beside_the_target() -> None:
    table = under_batch.rows(under(ended_first=False), "max_size 32")
    by_name = {r.figure: r for r in table}
    alone = by_name["batching max_size 32: sequential /runsync p50 / p95, no batch"]
    assert alone.value == "31.00 ms / 40.00 ms"
    running = "batching max_size 32: sequential /runsync p50 / p95, 5,000-request batch running"
    assert by_name[running].value == "36.00 ms / 50.00 ms"
    assert "1,234 of 5,000 ended" in by_name[running].target
    ratio = by_name["batching: /runsync p50 with a 5,000-request batch running vs none"]
    assert (ratio.value, ratio.target, ratio.passed) == ("1.16x", "<= 1.2x", True)
    took = by_name["batching: the 5,000-request batch on the batch pool"]
    assert took.detail and took.value.startswith("done in 10.0 s (500 requests/s)")
    none_refused = "batching: /runsync refused (503), no batch / with the batch"
    assert (by_name[none_refused].value, by_name[none_refused].passed) == ("0 / 0", True)
    cpu = by_name["batching: CPU while /runsync ran, 5,000-request batch running"]
    assert cpu.value == "gateway 90%, workers 40% of a core; other processes 25% of the CPUs"
    assert cpu.noisy and not by_name["batching: CPU while /runsync ran, no batch"].noisy


def test_a_runsync_refused_while_the_batch_runs_misses_its_target() -> None:
    table = under_batch.rows(under(ended_first=False, refused=3), "max_size 32")
    refused = next(r for r in table if r.figure.startswith("batching: /runsync refused (503)"))
    assert (refused.value, refused.passed) == ("0 / 3", False)


def test_a_batch_done_before_the_measurement_ended_is_said_and_not_judged() -> None:
    table = under_batch.rows(under(ended_first=True), "max_size 32")
    ratio = next(r for r in table if r.figure.endswith("batch running vs none"))
    assert ratio.passed is None
    assert "not judged: the batch ended first" in ratio.target
    assert any("DONE before the end" in r.target for r in table)


def test_a_batch_of_no_requests_is_refused() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.core", "--batch-requests", "0"], cwd=REPO,
        capture_output=True, text=True, timeout=60, env=bench_env(),
    )  # fmt: skip
    assert run.returncode == 2
    assert "--batch-requests must be at least 1" in run.stderr


def bench_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}{os.pathsep}{REPO}"}


def test_bench_batching_prints_every_figure() -> None:
    # --scale 0.1 of --batch-requests 2000: a batch of 200 requests
    command = ["-m", "bench.core", "--only", "batching", "--scale", "0.1"]
    command += ["--batch-requests", "2000"]
    run = subprocess.run(
        [sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=180,
        env=bench_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for name in ("unbatched", "max_size 8", "max_size 32", "max_size 64"):
        assert re.search(rf"^batching {name}: jobs/s, 64 clients\s+\d+", out, re.MULTILINE), out
        p50_p95 = rf"^batching {name}: /runsync p50 / p95\s+[\d,.]+ ms / [\d,.]+ ms"
        assert re.search(p50_p95, out, re.MULTILINE), out
    assert re.search(r"^batching: max_size 32 jobs/s vs unbatched\s+[\d.]+x", out, re.MULTILINE)
    pair = r"\s+[\d,.]+ ms / [\d,.]+ ms\s+\(\d+ requests"
    head = "batching max_size 32: sequential /runsync p50 / p95"
    assert re.search(rf"^{head}, no batch{pair}\)", out, re.MULTILINE), out
    state = r"; batch (DONE before the end|still running at the end, \d+ of 200 ended)\)"
    assert re.search(rf"^{head}, 200-request batch running{pair}{state}", out, re.MULTILINE), out
    ratio = r"^batching: /runsync p50 with a 200-request batch running vs none\s+[\d.]+x\s+<= 1.2x"
    assert re.search(ratio, out, re.MULTILINE), out
    took = r"^batching: the 200-request batch on the batch pool: done in [\d.]+ s \([\d,]+ req"
    assert re.search(took, out, re.MULTILINE), out
    refused = r"^batching: /runsync refused \(503\), no batch / with the batch\s+\d+ / \d+"
    assert re.search(refused, out, re.MULTILINE), out
    for during in ("no batch", "200-request batch running"):
        cpu = rf"^batching: CPU while /runsync ran, {during}: gateway \d+%, Redis \d+%, .*core"
        assert re.search(cpu, out, re.MULTILINE), out
    assert "ERROR" not in out
