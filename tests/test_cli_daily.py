"""The `lockgate` CLI for daily work, as a user runs it: the real command in a subprocess
against a real `lockgate dev` (endpoints, jobs, logs, keys, config file, output formats,
options after the action), and every expected error as one line on stderr."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import stat
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests
import yaml

from lockgate import cli, clientconfig
from lockgate.dev.redis_server import free_port
from lockgate.output import table
from lockgate.output import yaml as to_yaml
from tests.devproc import REPO, DevProcess

ECHO = str(REPO / "examples/echo/handler.py")
ECHO_ARGS = "python examples/echo/handler.py"  # dev mode runs a v2 endpoint's args
# A v2 endpoint running the echo handler on dev mode's CPUs.
ECHO_V2 = ("--image", "python:3.12-slim", "--args", ECHO_ARGS, "--cpu", "any")
RUNPOD_ECHO = str(REPO / "tests/workers/runpod_echo.py")
SCRUBBED = (
    "LOCKGATE_URL", "LOCKGATE_API_KEY", "LOCKGATE_JOB_URL", "LOCKGATE_CONFIG", "LOCKGATE_INSECURE",
)  # fmt: skip


def own_config(monkeypatch: pytest.MonkeyPatch, path: Path, env: dict[str, str]) -> None:
    """This test's config file and `env`, not those of whoever runs the tests."""
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCKGATE_CONFIG", str(path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def clean_env(config_home: Path, **extra: str) -> dict[str, str]:
    """The user's environment without LOCKGATE_URL & co., the config under `config_home`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SCRUBBED and k != "LOCKGATE_DEBUG" and not k.startswith("LOCKGATE_REDIS_")
    }
    return {**env, "XDG_CONFIG_HOME": str(config_home), **extra}


def lockgate(*args: str, env: dict[str, str], timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The error line of a failed run: exactly one line on stderr, a non-zero exit."""
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevProcess(ECHO, "--api-key", "k-cli", data_dir=tmp_path_factory.mktemp("dev")) as d:
        yield d


@pytest.fixture
def env(dev) -> dict[str, str]:
    """The CLI's environment: only the config file dev mode wrote says where and which key."""
    return clean_env(dev.config_home)


@pytest.fixture
def bare_env(tmp_path) -> dict[str, str]:
    """No config file, no LOCKGATE_URL: everything must come from the command line."""
    return clean_env(tmp_path / "no-config")


def test_dev_writes_a_private_config_file_with_its_url_and_key(dev) -> None:
    path = dev.config_home / "lockgate" / "config.json"
    assert json.loads(path.read_text()) == {"url": dev.url, "key": "k-cli", "writtenBy": "dev"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    dev.wait_for(re.escape(f"config in {path}"))


def test_endpoints_list_reads_the_config_file_and_prints_a_table(env) -> None:
    lines = ok(lockgate("endpoints", "list", env=env)).splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "TYPE", "STATE"]
    assert any(line.split()[:3] == ["echo", "echo", "QUEUE"] for line in lines[1:])


def created_id(result: subprocess.CompletedProcess) -> str:
    """The id of the endpoint a `create -o json` made (v2 generates it)."""
    return json.loads(ok(result))["id"]


def v1_record(dev: DevProcess, endpoint_id: str) -> dict:
    """The endpoint as `/v1/endpoints` shows it (lockgate's own fields and status)."""
    reply = requests.get(
        f"{dev.url}/v1/endpoints/{endpoint_id}",
        headers={"authorization": f"Bearer {dev.key}"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_endpoint_create_get_edit_list_delete_round_trip(env) -> None:
    made = lockgate("endpoints", "create", *ECHO_V2, "--name", "cli-rt", "--workers-max", "1",
                    "-o", "json", env=env)  # fmt: skip
    created = json.loads(ok(made))
    endpoint_id = created["id"]
    assert created["workers"] == {"min": 0, "max": 1, "idleTimeout": 10}  # v2's object
    assert created["type"] == "QUEUE" and created["args"] == ECHO_ARGS
    assert "phase" in created["status"]  # lockgate's, from /v1
    got = ok(lockgate("endpoints", "get", endpoint_id, env=env))
    assert got.splitlines()[0].split() == ["ID", "NAME", "TYPE", "STATE", "WORKERS", "READY",
                                           "QUEUED", "JOB", "API", "WHY"]  # fmt: skip
    row = got.splitlines()[1].split()
    assert row[:3] == [endpoint_id, "cli-rt", "QUEUE"] and row[4] == "0-1"
    assert row[-2].endswith(f"/v2/{endpoint_id}/") and row[-1] == "-"
    edited = json.loads(
        ok(lockgate("endpoints", "edit", endpoint_id, "--workers-max", "2", "--name", "rt",
                    "-o", "json", env=env))
    )  # fmt: skip
    assert (edited["workers"]["min"], edited["workers"]["max"], edited["name"]) == (0, 2, "rt")
    listed = json.loads(ok(lockgate("endpoints", "list", "-o", "json", env=env)))
    assert endpoint_id in {e["id"] for e in listed}
    ok(lockgate("endpoints", "delete", endpoint_id, env=env))
    listed = json.loads(ok(lockgate("endpoints", "list", "-o", "json", env=env)))
    assert endpoint_id not in {e["id"] for e in listed}
    assert "not found" in one_line_error(lockgate("endpoints", "get", endpoint_id, env=env))


def test_an_lb_endpoint_is_created_and_edited_with_its_own_flags(dev, env) -> None:
    flags = ["--type", "LB", "--scaler-type", "REQUEST_COUNT", "--scaler-value", "2",
             "--request-timeout-s", "90", "--lb-hold-s", "30"]  # fmt: skip
    made = lockgate("endpoints", "create", *ECHO_V2, "--name", "cli-lb", *flags, "-o", "json",
                    env=env)  # fmt: skip
    created = json.loads(ok(made))
    endpoint_id = created["id"]
    assert created["type"] == "LOAD_BALANCER" and created["timeout"] == 90_000
    assert created["scaling"] == {"type": "REQUEST_COUNT", "requestCount": 2}
    assert v1_record(dev, endpoint_id)["lbHoldS"] == 30  # lockgate's own, through /v1
    row = next(x for x in ok(lockgate("endpoints", "list", env=env)).splitlines()
               if x.startswith(f"{endpoint_id} "))  # fmt: skip
    assert f"/lb/{endpoint_id}" in row and "/v2/" not in row, row  # its LB URL, not a job API
    edited = json.loads(ok(lockgate("endpoints", "edit", endpoint_id, "--lb-hold-s", "5",
                                    "--scaler-value", "3", "-o", "json", env=env)))  # fmt: skip
    assert edited["scaling"] == {"type": "REQUEST_COUNT", "requestCount": 3}
    assert (v1_record(dev, endpoint_id)["lbHoldS"], edited["timeout"]) == (5, 90_000)
    ok(lockgate("endpoints", "delete", endpoint_id, env=env))
    refused = lockgate("endpoints", "create", *ECHO_V2, "--type", "LB", env=env)
    assert "scaling" in one_line_error(refused)


def test_a_problem_answer_is_one_line_in_v2s_words(env) -> None:
    unknown = lockgate("endpoints", "create", *ECHO_V2, "--set", "workersMax=2", env=env)
    assert one_line_error(unknown) == (
        "lockgate: workersMax: not a field of this request (HTTP 422)"
    )
    both = lockgate("endpoints", "create", *ECHO_V2, "--gpu", "ADA_24", env=env)
    assert one_line_error(both) == (
        "lockgate: gpu, cpu: set exactly one of them (a GPU or a CPU endpoint) (HTTP 400)"
    )
    chosen = lockgate("endpoints", "create", *ECHO_V2, "--id", "mine", env=env)
    assert "--id: v2 gives a new endpoint a generated id" in one_line_error(chosen)


def test_a_job_runs_and_its_status_carries_the_output(env) -> None:
    job = json.loads(ok(lockgate("jobs", "run", "echo", '{"n": 7}', "-o", "json", env=env)))
    assert job["status"] == "IN_QUEUE"
    status = json.loads(
        ok(lockgate("jobs", "status", "echo", job["id"], "--wait-ms", "30000", "-o", "json",
                    env=env))
    )  # fmt: skip
    assert status["status"] == "COMPLETED" and status["output"] == {"echo": {"n": 7}}
    listed = json.loads(ok(lockgate("jobs", "list", "echo", "-o", "json", env=env)))
    assert job["id"] in {item["id"] for item in listed["items"]}


def test_jobs_run_wait_prints_the_result_as_a_table_and_yaml_matches_json(env) -> None:
    row = ok(lockgate("jobs", "run", "echo", '{"w": 1}', "--wait", env=env)).splitlines()[1]
    assert row.split()[1] == "COMPLETED" and '{"echo":{"w":1}}' in row
    as_json = json.loads(ok(lockgate("endpoints", "get", "echo", "-o", "json", env=env)))
    as_yaml = yaml.safe_load(ok(lockgate("endpoints", "get", "echo", "-o", "yaml", env=env)))
    assert as_yaml["id"] == "echo"
    assert {k: v for k, v in as_yaml.items() if k != "status"} == {
        k: v for k, v in as_json.items() if k != "status"
    }


def test_jobs_stream_prints_each_chunk_then_ends(env) -> None:
    stream = ("--image", "python:3.12-slim", "--args", "python tests/workers/runpod_stream.py")
    endpoint = created_id(lockgate("endpoints", "create", *stream, "--cpu", "any", "-o", "json",
                                   env=env))  # fmt: skip
    try:
        job = json.loads(
            ok(lockgate("jobs", "run", endpoint, '{"n": 3, "gap": 0.2}', "-o", "json",
                        env=env))
        )  # fmt: skip
        out = ok(lockgate("jobs", "stream", endpoint, job["id"], env=env, timeout_s=90))
        chunks = [json.loads(line) for line in out.splitlines()]
        assert [c["text"] for c in chunks] == [["token-0"], ["token-1"], ["token-2"]]
    finally:
        ok(lockgate("endpoints", "delete", endpoint, env=env))


def test_jobs_cancel_cancels_a_queued_job(dev, env) -> None:
    endpoint = created_id(lockgate("endpoints", "create", *ECHO_V2, "--workers-max", "0",
                                   "-o", "json", env=env))  # fmt: skip
    try:
        job = json.loads(ok(lockgate("jobs", "run", endpoint, "-o", "json", env=env)))
        cancelled = ok(lockgate("jobs", "cancel", endpoint, job["id"], "-o", "json", env=env))
        assert json.loads(cancelled)["status"] == "CANCELLED"
    finally:
        ok(lockgate("endpoints", "delete", endpoint, env=env))


def test_options_are_accepted_before_or_after_the_action(dev, bare_env) -> None:
    auth = ("--url", dev.url, "--key", dev.key)
    after = json.loads(ok(lockgate("endpoints", "list", "-o", "json", *auth, env=bare_env)))
    before = json.loads(ok(lockgate("endpoints", *auth, "-o", "json", "list", env=bare_env)))
    assert "echo" in {e["id"] for e in after} and [e["id"] for e in after] == [
        e["id"] for e in before
    ]


def redis_of(dev: DevProcess) -> str:
    """The URL of dev mode's embedded Redis, its password included."""
    return dev.redis_url


def key_names(redis: str, env: dict[str, str]) -> list[str]:
    out = ok(lockgate("keys", "list", "--redis-url", redis, env=env))
    return [line.split()[1] for line in out.splitlines()]


def test_keys_list_takes_redis_url_after_the_action(dev, bare_env) -> None:
    assert "dev" in key_names(redis_of(dev), bare_env)


def test_keys_revoke_refuses_the_last_admin_key_in_redis(dev, bare_env) -> None:
    redis = redis_of(dev)
    line = one_line_error(lockgate("keys", "revoke", "dev", "--redis-url", redis, env=bare_env))
    assert "'dev' is the last admin key stored in Redis" in line and "--force" in line
    assert "dev" in key_names(redis, bare_env)


def test_keys_revoke_says_it_would_sign_the_cli_out_and_force_does_it(dev, env) -> None:
    redis = redis_of(dev)
    key = ok(lockgate("keys", "create", "cli-admin", "--scope", "admin", "--redis-url", redis,
                      env=env)).strip()  # fmt: skip
    signed_in = {**env, "LOCKGATE_API_KEY": key}
    try:  # dev's key is no longer the last admin one, but it is in the CLI's config file
        line = one_line_error(lockgate("keys", "revoke", "dev", "--redis-url", redis, env=env))
        config = dev.config_home / "lockgate" / "config.json"
        assert f"'dev' is the key this CLI signs in with ({config})" in line and "401" in line
        line = one_line_error(
            lockgate("keys", "revoke", "cli-admin", "--redis-url", redis, env=signed_in)
        )
        assert "signs in with (LOCKGATE_API_KEY)" in line and "--force" in line
        assert "echo" in ok(lockgate("endpoints", "list", env=signed_in))  # not revoked
        out = ok(lockgate("keys", "revoke", "cli-admin", "--force", "--redis-url", redis,
                          env=signed_in))  # fmt: skip
        assert out.startswith("revoked ")
        assert "401" in one_line_error(lockgate("endpoints", "list", env=signed_in))
    finally:
        lockgate("keys", "revoke", "cli-admin", "--force", "--redis-url", redis, env=env)
    assert key_names(redis, env).count("dev") == 1 and "cli-admin" not in key_names(redis, env)


def test_keys_create_with_an_expiry_lists_it_and_the_key_is_refused_once_it_passes(
    dev, bare_env
) -> None:
    redis = redis_of(dev)
    out = ok(lockgate("keys", "create", "cli-month", "--scope", "jobs", "--expires-in", "30d",
                      "--redis-url", redis, env=bare_env))  # fmt: skip
    assert out.strip().startswith("lg_")
    start = int(time.time())
    key = ok(lockgate("keys", "create", "cli-brief", "--scope", "admin", "--expires-in", "3s",
                      "--redis-url", redis, env=bare_env)).strip()  # fmt: skip
    try:
        lines = ok(lockgate("keys", "list", "--redis-url", redis, env=bare_env)).splitlines()
        month = next(line for line in lines if " cli-month " in line).split()[-1]
        days = (datetime.fromisoformat(month).timestamp() - start) / 86400
        assert 29.9 < days < 30.1, month
        assert next(line for line in lines if " dev " in line).endswith(" never")
        brief = next(line for line in lines if " cli-brief " in line).split()[-1]
        while time.time() < datetime.fromisoformat(brief).timestamp():
            time.sleep(0.2)
        line = one_line_error(
            lockgate("endpoints", "list", "--url", dev.url, "--key", key, env=bare_env)
        )
        assert f"API key expired at {brief}" in line and "401" in line
        lines = ok(lockgate("keys", "list", "--redis-url", redis, env=bare_env)).splitlines()
        assert next(line for line in lines if " cli-brief " in line).endswith(f"expired {brief}")
    finally:
        for name in ("cli-month", "cli-brief"):
            lockgate("keys", "revoke", name, "--redis-url", redis, env=bare_env)


# The CLI tells the truth (issue 50, items 1 and 4): the console's states, why a job waits.


def stderr_line_with(proc: subprocess.Popen, text: str, timeout_s: float) -> str:
    """The first line of `proc`'s stderr holding `text` (read in a thread: bounded)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    deadline, seen = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"no stderr line with {text!r} in {timeout_s} s: {seen}")


def waiting_run(endpoint_id: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "jobs", "run", endpoint_id, "{}", "--wait"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def v1_endpoint(dev: DevProcess, endpoint_id: str, **fields: object) -> None:
    body = {"id": endpoint_id, "templateId": "tests/handlers/import_error.py", **fields}
    made = requests.post(f"{dev.url}/v1/endpoints", json=body, headers=dev.headers(), timeout=30)
    assert made.status_code == 200, made.text


def test_a_crash_loop_reads_as_the_console_says_and_a_waiting_job_says_why(dev, env) -> None:
    v1_endpoint(dev, "cli-crash", workersMax=1, crashLoopThreshold=1)
    run = waiting_run("cli-crash", env)
    try:
        line = stderr_line_with(run, "workers crash at start (exit code 1", timeout_s=100)
        assert line.startswith("lockgate: job ") and "no worker starts until" in line, line
        assert run.poll() is None  # still waiting: the job is not lost, only explained
    finally:
        run.kill()
        run.wait(10)
    row = next(x for x in ok(lockgate("endpoints", "list", env=env)).splitlines()
               if x.startswith("cli-crash "))  # fmt: skip
    assert "Crash loop" in row and "Ready" not in row, row
    got = ok(lockgate("endpoints", "get", "cli-crash", env=env)).splitlines()[1]
    assert "Crash loop" in got and "exit code 1" in got, got
    requests.delete(f"{dev.url}/v1/endpoints/cli-crash", headers=dev.headers(), timeout=30)


def test_a_job_on_an_endpoint_with_max_workers_0_says_none_will_start(dev, env) -> None:
    v1_endpoint(dev, "cli-max0", workersMin=0, workersMax=0)
    run = waiting_run("cli-max0", env)
    try:
        line = stderr_line_with(run, "waits: max workers is 0: no worker will start", 60)
        assert "cold start" not in line
    finally:
        run.kill()
        run.wait(10)
    got = ok(lockgate("endpoints", "get", "cli-max0", env=env)).splitlines()[1]
    assert got.rstrip().endswith("max workers is 0: no worker will start"), got
    requests.delete(f"{dev.url}/v1/endpoints/cli-max0", headers=dev.headers(), timeout=30)


def test_a_runpod_workers_failure_reads_as_a_line_and_its_traceback_as_lines(dev, env) -> None:
    """Issue 50, item 3: the runpod SDK's error (a JSON string) is `ValueError: …` in the
    table, and its traceback real lines on stderr, not one string with `\\n` in it."""
    v1_endpoint(dev, "cli-fails", templateId=RUNPOD_ECHO, workersMax=1)
    try:
        ran = lockgate("jobs", "run", "cli-fails", '{"fail": "no such prompt"}', "--wait",
                       env=env, timeout_s=100)  # fmt: skip
        assert ran.returncode == 1, ran.stderr
        row = ran.stdout.splitlines()[1]
        assert "FAILED" in row and row.rstrip().endswith("ValueError: no such prompt"), row
        assert "error_type" not in ran.stdout and "\\n" not in ran.stdout
        said = ran.stderr.splitlines()  # after any note of why the job waited (a cold start)
        said = said[said.index("the worker's traceback:") :]
        assert said[1] == "  Traceback (most recent call last):", ran.stderr
        assert said[-1] == "  ValueError: no such prompt", ran.stderr
        listed = ok(lockgate("jobs", "list", "cli-fails", env=env))
        assert "ValueError: no such prompt" in listed and "error_type" not in listed
        as_json = json.loads(ok(lockgate("jobs", "list", "cli-fails", "-o", "json", env=env)))
        assert "error_traceback" in as_json["items"][0]["error"]  # -o json: the API's as is
    finally:
        requests.delete(f"{dev.url}/v1/endpoints/cli-fails", headers=dev.headers(), timeout=30)


# `lockgate keys` over HTTP (issue 50, item 7): the saved URL and key, as the other commands.


def test_keys_over_http_create_list_and_revoke_with_the_saved_url_and_key(dev, env) -> None:
    key = ok(lockgate("keys", "create", "http-bot", "--scope", "jobs", "--endpoint", "echo",
                      env=env)).strip()  # fmt: skip
    assert key.startswith("lg_")
    try:
        lines = ok(lockgate("keys", "list", env=env)).splitlines()
        assert lines[0].split() == ["ID", "NAME", "SCOPES", "ENDPOINTS", "EXPIRES"]
        row = next(line for line in lines if " http-bot " in line).split()
        assert row[2:] == ["jobs", "echo", "never"], row
        listed = json.loads(ok(lockgate("keys", "list", "-o", "json", env=env)))
        assert {"dev", "http-bot"} <= {k["name"] for k in listed}
        job = lockgate("jobs", "run", "echo", "{}", "--wait", "--key", key, env=env)
        assert ok(job)
        lost = ("keys", "create", "http-lost", "--scope", "jobs", "--endpoint", "nosuch")
        line = one_line_error(lockgate(*lost, env=env))
        assert "no endpoint 'nosuch'" in line and "(HTTP 400)" in line, line
        out = ok(lockgate("keys", "revoke", "http-bot", env=env))
        assert re.fullmatch(r"revoked [0-9a-f]{12}\n", out), out
        assert "401" in one_line_error(lockgate("jobs", "run", "echo", "{}", "--key", key, env=env))
    finally:
        lockgate("keys", "revoke", "http-bot", "--force", env=env)
    assert "http-bot" not in ok(lockgate("keys", "list", env=env))


def test_keys_over_http_will_not_sign_the_cli_out_without_force(dev, env) -> None:
    other = ok(lockgate("keys", "create", "http-admin", "--scope", "admin", env=env)).strip()
    try:  # 'dev' is not the last admin key now, but it is the one the config file holds
        line = one_line_error(lockgate("keys", "revoke", "dev", env=env))
        config = dev.config_home / "lockgate" / "config.json"
        assert f"'dev' is the key this CLI signs in with ({config})" in line, line
        assert "dev" in ok(lockgate("keys", "list", env=env))
    finally:
        lockgate("keys", "revoke", "http-admin", "--key", other, "--force", env=env)
    assert "http-admin" not in ok(lockgate("keys", "list", env=env))


def test_keys_without_a_reachable_server_say_so_in_one_line(bare_env) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(lockgate("keys", "list", "--url", url, env=bare_env))
    assert line.startswith(f"lockgate: cannot reach {url}"), line


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--expires-in", "30"], "--expires-in: a number and a unit s, m, h or d"),
        (["--expires-in", "2w"], "--expires-in: a number and a unit s, m, h or d"),
        (["--expires-at", "tomorrow"], "--expires-at: an RFC 3339 UTC time"),
        (["--expires-at", "2020-01-01T00:00:00Z"], "--expires-at: 2020-01-01T00:00:00Z is in"),
        (["--expires-in", "1d", "--expires-at", "2030-01-01T00:00:00Z"], "not both"),
    ],
)
def test_a_bad_expiry_is_one_line_naming_the_flag(dev, bare_env, flags, said) -> None:
    redis = redis_of(dev)
    args = ("keys", "create", "cli-bad-expiry", "--scope", "jobs", *flags, "--redis-url", redis)
    assert said in one_line_error(lockgate(*args, env=bare_env))
    assert "cli-bad-expiry" not in key_names(redis, bare_env)


def test_templates_list_prints_a_table(env) -> None:
    assert ok(lockgate("templates", "list", env=env)).split()[:2] == ["ID", "NAME"]


def shows_one_of(lines: queue.Queue[str], ids: list[str], shown: list[str]) -> bool:
    """Read `lines` into `shown` until one holds one of `ids` (True), or 5 s pass with none."""
    with contextlib.suppress(queue.Empty):
        while True:
            shown.append(lines.get(timeout=5))
            if any(x in shown[-1] for x in ids):
                return True
    return False


def test_logs_show_the_lines_of_a_job_and_follow_prints_new_ones(dev, env) -> None:
    job = json.loads(ok(lockgate("jobs", "run", "echo", '{"l": 1}', "--wait", "-o", "json",
                                 env=env)))  # fmt: skip
    out = ok(lockgate("logs", "echo", "--job", job["id"], env=env))
    assert job["id"] in out and "completed" in out
    follow = subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "logs", "echo", "-f", "--tail", "0"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in follow.stdout], daemon=True).start()
    try:
        # The tail opens at some point after the start: a job sent before it is not shown,
        # so send one job at a time until a job sent after it shows (bounded: 10 jobs).
        shown: list[str] = []
        later_ids: list[str] = []
        for _ in range(10):
            later = json.loads(ok(lockgate("jobs", "run", "echo", "{}", "--wait", "-o", "json",
                                           env=env)))  # fmt: skip
            later_ids.append(later["id"])
            if shows_one_of(lines, later_ids, shown):
                break
        assert shown and any(x in shown[-1] for x in later_ids), (shown, follow.poll())
        assert not any(job["id"] in line for line in shown)  # --tail 0: no backlog
    finally:
        follow.terminate()
        follow.wait(10)


# Rough edges (issue 50, item 6): each the expected behaviour or one line naming the fix.


def test_a_url_without_a_scheme_is_read_as_curl_reads_it(dev, bare_env) -> None:
    bare = dev.url.removeprefix("http://")
    out = ok(lockgate("endpoints", "list", "--url", bare, "--key", dev.key, env=bare_env))
    assert "echo" in out


def test_a_url_ending_in_the_api_path_is_understood_and_an_endpoints_url_names_the_fix(
    dev, bare_env
) -> None:
    for url in (f"{dev.url}/v2", f"{dev.url}/v2/", f"{dev.url}/v1"):
        out = ok(lockgate("endpoints", "list", "--url", url, "--key", dev.key, env=bare_env))
        assert "echo" in out, url
    result = lockgate("jobs", "list", "echo", "--url", f"{dev.url}/v2/echo", "--key", dev.key,
                      env=bare_env)  # fmt: skip
    line = one_line_error(result)
    assert result.returncode == 2
    assert f"use --url {dev.url} and name the endpoint (echo)" in line, line


def test_logs_into_a_reader_that_stops_exit_quietly(dev, env) -> None:
    follow = subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "logs", "echo", "-f", "--tail", "1"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ok(lockgate("jobs", "run", "echo", "{}", "--wait", env=env))  # a line to tail, at least
        assert follow.stdout.readline()  # `head -1` has its line, and goes
        follow.stdout.close()
        ok(lockgate("jobs", "run", "echo", "{}", "--wait", env=env))  # the next write: EPIPE
        assert follow.wait(30) == 0
        assert follow.stderr.read() == ""  # no BrokenPipe, no "please report it"
    finally:
        follow.kill()
        follow.wait(10)


def test_version_is_printed(bare_env) -> None:
    out = ok(lockgate("--version", env=bare_env))
    assert re.fullmatch(r"lockgate \S+\n", out) and "unknown" not in out


def test_completion_prints_a_bash_script_that_names_the_commands(bare_env, tmp_path) -> None:
    script = ok(lockgate("completion", "bash", env=bare_env))
    assert "endpoints" in script and "complete -o default -F _lockgate lockgate" in script
    path = tmp_path / "lockgate.bash"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_login_checks_the_key_and_saves_it_privately(dev, bare_env, tmp_path) -> None:
    wrong = one_line_error(lockgate("login", "--url", dev.url, "--key", "nope", env=bare_env))
    assert "401" in wrong
    path = tmp_path / "no-config" / "lockgate" / "config.json"
    assert not path.exists()
    ok(lockgate("login", "--url", dev.url, "--key", dev.key, env=bare_env))
    assert json.loads(path.read_text())["writtenBy"] == "login"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "echo" in ok(lockgate("endpoints", "list", env=bare_env))


# Errors: one line on stderr, a non-zero exit, what to do.


def test_an_unreachable_url_says_to_start_dev_or_set_the_url(bare_env) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(lockgate("endpoints", "list", "--url", url, env=bare_env))
    assert line.startswith(f"lockgate: cannot reach {url}") and "LOCKGATE_URL" in line


def test_a_wrong_key_says_how_to_give_one(dev, bare_env) -> None:
    line = one_line_error(
        lockgate("jobs", "list", "echo", "--url", dev.url, "--key", "wrong", env=bare_env)
    )
    assert "401" in line and "LOCKGATE_API_KEY" in line and "lockgate login" in line


def test_a_key_without_the_scope_is_told_so(dev, bare_env) -> None:
    redis = redis_of(dev)
    key = ok(lockgate("keys", "create", "cli-jobs", "--scope", "jobs", "--redis-url", redis,
                      env=bare_env)).strip()  # fmt: skip
    try:
        line = one_line_error(
            lockgate("endpoints", "list", "--url", dev.url, "--key", key, env=bare_env)
        )
        assert "401" in line and "may not use admin" in line and "--key" in line
    finally:
        ok(lockgate("keys", "revoke", "cli-jobs", "--redis-url", redis, env=bare_env))


def test_an_unknown_endpoint_is_one_line(env) -> None:
    assert "not found" in one_line_error(lockgate("jobs", "run", "no-such-ep", "{}", env=env))


def test_bad_job_input_is_one_line_with_an_example(env) -> None:
    assert "not JSON" in one_line_error(lockgate("jobs", "run", "echo", "{bad", env=env))


def test_an_unreachable_redis_for_keys_says_which_and_what_to_set(bare_env) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    line = one_line_error(lockgate("keys", "list", "--redis-url", url, env=bare_env))
    assert f"cannot reach Redis at {url}" in line and "--redis-url" in line


def test_dev_on_a_busy_port_names_the_port_and_the_setting(dev, tmp_path) -> None:
    env = clean_env(tmp_path / "config")
    result = lockgate("dev", ECHO, "--port", str(dev.port), "--data-dir", str(tmp_path / "d"),
                      env=env)  # fmt: skip
    line = one_line_error(result)
    assert f"port {dev.port} is in use" in line and "--port" in line and "LOCKGATE_PORT" in line


def test_dev_listens_on_lockgate_port_as_the_gateway_does(tmp_path) -> None:
    port = free_port()
    proc = DevProcess(ECHO, data_dir=tmp_path, port=port, env={"LOCKGATE_PORT": str(port)})
    proc.args = [ECHO, "--data-dir", str(tmp_path)]  # no --port: LOCKGATE_PORT alone
    with proc:
        proc.wait_for(rf"job API http://127\.0\.0\.1:{port}/v2/echo")


def test_an_unexpected_error_is_one_line_with_the_debug_hint(monkeypatch, capsys, tmp_path) -> None:
    from lockgate.commands import endpoints

    own_config(monkeypatch, tmp_path / "none.json", {})

    async def broken(args, api) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(endpoints, "list_endpoints", broken)
    monkeypatch.delenv("LOCKGATE_DEBUG", raising=False)
    assert cli.main(["endpoints", "list", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "lockgate: unexpected error: RuntimeError: boom second line "
        "(LOCKGATE_DEBUG=1 shows the traceback; please report it)"
    ]
    monkeypatch.setenv("LOCKGATE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["endpoints", "list", "--url", "http://127.0.0.1:9"])


# The pieces, directly.


def test_dev_mode_never_replaces_a_config_written_by_login(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LOCKGATE_CONFIG", str(tmp_path / "c.json"))
    assert clientconfig.save_for_dev("http://a", "k1") is not None
    assert clientconfig.load()["url"] == "http://a"
    clientconfig.save({"url": "http://cluster", "key": "k2", "writtenBy": "login"})
    assert clientconfig.save_for_dev("http://b", "k3") is None
    assert clientconfig.load()["url"] == "http://cluster"


@pytest.mark.parametrize(
    ("flags", "env", "saved", "expected"),
    [
        ((None, None), {}, {}, ("http://127.0.0.1:8080", None, "http://127.0.0.1:8080")),
        ((None, None), {}, {"url": "http://s", "key": "ks", "jobUrl": "http://j"},
         ("http://s", "ks", "http://j")),
        ((None, None), {"LOCKGATE_URL": "http://e", "LOCKGATE_API_KEY": "ke"},
         {"url": "http://s", "key": "ks", "jobUrl": "http://j"}, ("http://e", "ke", "http://e")),
        (("http://f", "kf"), {"LOCKGATE_URL": "http://e"}, {"url": "http://f", "key": "ks"},
         ("http://f", "kf", "http://f")),
    ],
)  # fmt: skip
def test_flags_win_over_the_environment_which_wins_over_the_file(
    monkeypatch, tmp_path, flags, env, saved, expected
) -> None:
    own_config(monkeypatch, tmp_path / "c.json", env)
    if saved:
        clientconfig.save(saved)
    management, jobs = clientconfig.target(*flags), clientconfig.target(*flags, jobs=True)
    assert (management.url, management.key, jobs.url) == expected


@pytest.mark.parametrize(
    "data",
    [
        {"a": "true", "b": "1.5", "c": "-x", "d": "", "e": None, "f": [], "g": {}, "h": "x: y"},
        {"nested": {"list": [1, {"k": "v"}, [2, 3]], "text": "é #not a comment"}},
        [{"id": "echo", "n": 1}, "plain", 2.5, False],
    ],
)
def test_yaml_output_reads_back_as_the_same_data(data) -> None:
    assert yaml.safe_load(to_yaml(data)) == data


def test_a_table_aligns_its_columns_and_shows_nothing_as_a_dash() -> None:
    assert table(["id", "workers"], [["echo", None], ["a-long-id", [1, 2]]]).splitlines() == [
        "ID         WORKERS",
        "echo       -",
        "a-long-id  1,2",
    ]


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("127.0.0.1:20080", "http://127.0.0.1:20080"),
        ("localhost:8080/", "http://localhost:8080/"),
        ("https://lg.example.com/v2", "https://lg.example.com"),
        ("https://lg.example.com/v1/", "https://lg.example.com"),
        ("https://proxy.example.com/lockgate/v2", "https://proxy.example.com/lockgate"),
        ("https://proxy.example.com/lockgate", "https://proxy.example.com/lockgate"),
        (" http://127.0.0.1:8080 ", "http://127.0.0.1:8080"),
    ],
)
def test_a_url_is_read_as_the_user_meant_it(given: str, meant: str) -> None:
    assert clientconfig.normalised(given) == meant


def test_an_endpoints_url_is_refused_naming_lockgates_url() -> None:
    with pytest.raises(clientconfig.BadUrl, match=r"use --url https://api\.x\.io and name the"):
        clientconfig.normalised("https://api.x.io/v2/abc123")
