"""The suite's leak check (tests/run_report.py) finds a process this run left behind."""

from __future__ import annotations

import os
import subprocess
import uuid

from tests.run_report import RUN_VAR, leaked


def test_a_watched_process_carrying_the_run_id_is_found_until_it_ends() -> None:
    run_id = uuid.uuid4().hex
    env = {**os.environ, RUN_VAR: run_id}
    # A process named as a watched one; another, unwatched, with the same id; and a
    # watched one of another run.
    ours = subprocess.Popen(["bash", "-c", "exec -a redis-server sleep 30"], env=env)
    unwatched = subprocess.Popen(["bash", "-c", "exec -a other sleep 30"], env=env)
    other_run = {**os.environ, RUN_VAR: "not-this-run"}
    theirs = subprocess.Popen(["bash", "-c", "exec -a kubelet sleep 30"], env=other_run)
    try:
        for _ in range(50):  # until bash has exec'd
            if ours.pid in leaked(run_id):
                break
            subprocess.run(["sleep", "0.05"], check=True)
        found = leaked(run_id)
        assert set(found) == {ours.pid} and found[ours.pid].startswith("redis-server")
    finally:
        for proc in (ours, unwatched, theirs):
            proc.kill()
            proc.wait()
    assert leaked(run_id) == {}
