"""`lockgate dev --git` and `--test` end to end: a git repository made here (a handler on
the runpod SDK, requirements.txt, .runpod/hub.json and tests.json), run by a real
`lockgate dev` over file:// and a plain path, its tests run through the job API.

The repository's venv installs the runpod SDK from PyPI once per session (`venv_python`):
every repository below has the same requirements.txt, so every run reuses that venv."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import requests

from lockgate.apps.dev import source_of
from lockgate.dev.git_worker import git_worker
from lockgate.dev.gitsource import checkout, environment
from lockgate.models.hub import HubFileError
from tests.devproc import REPO, DevProcess
from tests.gitrepo import commit, git, make_repo
from tests.test_dev_canary import LB_HANDLER

# The first test waits for the session's venv (the runpod SDK and its dependencies from
# PyPI: a minute or two on a busy machine); the others take seconds.
pytestmark = pytest.mark.timeout(600)

REQUIREMENTS = f"runpod=={version('runpod')}\n"  # the SDK version this project tests with
HANDLER = """\
import os
import sys

import runpod

VERSION = "{version}"


def handler(job):
    data = job["input"]
    if data.get("fail"):
        raise ValueError("asked to fail")
    return {{
        "echo": data,
        "version": VERSION,
        "greeting": os.environ.get("GREETING"),
        "mode": os.environ.get("MODE"),
        "python": sys.executable,
    }}


runpod.serverless.start({{"handler": handler}})
"""
HUB = {
    "title": "Echo",
    "description": "Echoes its input",
    "type": "serverless",
    "category": "language",
    "config": {
        "runsOn": "CPU",
        "cpuFlavor": "cpu3c",
        "containerDiskInGb": 5,
        "env": [
            {"key": "MODE", "value": "fixed"},
            {
                "key": "GREETING",
                "input": {"type": "string", "name": "Greeting", "default": "hello"},
            },
        ],
    },
}


def repo_tests(*tests: dict) -> str:
    return json.dumps({"tests": list(tests)})


PASSING = {"name": "echo", "input": {"x": 1}, "timeout": 120_000}
FAILING = {"name": "fails", "input": {"fail": True}, "timeout": 120_000}


def worker_repo(path: Path, tests: str = repo_tests(PASSING), version: str = "one") -> Path:
    """A Hub-style repository: handler.py at the root, .runpod/hub.json and tests.json."""
    return make_repo(
        path,
        {
            "handler.py": HANDLER.format(version=version),
            "requirements.txt": REQUIREMENTS,
            ".runpod/hub.json": json.dumps(HUB),
            ".runpod/tests.json": tests,
        },
    )


@pytest.fixture(scope="session")
def git_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clones and venvs of this session's runs, shared by all of them."""
    return tmp_path_factory.mktemp("git-cache")


@pytest.fixture(scope="session")
def venv_python(git_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one venv, made before any `lockgate dev` needs it."""
    seed = worker_repo(tmp_path_factory.mktemp("seed") / "seed")
    return environment(checkout(str(seed), None, git_cache), git_cache)


def dev(source: str, cache: Path, data_dir: Path, *extra: str, env=None) -> DevProcess:
    return DevProcess(
        "--git", source, "--git-cache", str(cache), *extra, data_dir=data_dir, env=env
    )


def runsync(proc: DevProcess, data: dict) -> dict:
    r = requests.post(proc.job_url("runsync"), json={"input": data}, headers=proc.headers())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "COMPLETED", body
    return body["output"]


def finish(proc: DevProcess, timeout_s: float = 300) -> int:
    """Wait for a `--test` run to stop by itself; its exit code."""
    try:
        return proc.proc.wait(timeout_s)
    finally:
        proc.__exit__()


def test_dev_git_runs_a_file_urls_handler_in_the_repositorys_venv_with_hub_variables(
    tmp_path, git_cache, venv_python
):
    repo = worker_repo(tmp_path / "echo-worker")
    with dev(repo.as_uri(), git_cache, tmp_path / "data").start(timeout_s=120) as proc:
        assert proc.endpoint == "echo-worker"  # the repository's name
        out = runsync(proc, {"x": 1})
    assert out["echo"] == {"x": 1} and out["version"] == "one"
    assert out["python"] == str(venv_python)  # the repository's venv, not lockgate's
    assert (out["mode"], out["greeting"]) == ("fixed", "hello")  # hub.json: value, default


def test_dev_git_checks_out_a_tag_of_a_plain_path_and_an_exported_variable_wins(
    tmp_path, git_cache, venv_python
):
    repo = worker_repo(tmp_path / "tagged", version="one")
    git(repo, "tag", "v1")
    commit(repo, {"handler.py": HANDLER.format(version="two")}, "second version")
    proc = dev(f"{repo}@v1", git_cache, tmp_path / "data", env={"GREETING": "from the shell"})
    with proc.start(timeout_s=120):
        proc.wait_for(r"git: v1 is [0-9a-f]+ \(first\)")
        out = runsync(proc, {"x": 2})
    assert (out["version"], out["greeting"]) == ("one", "from the shell")


def test_dev_test_runs_tests_json_through_the_job_api_and_exits_0_when_all_pass(
    tmp_path, git_cache, venv_python
):
    repo = worker_repo(tmp_path / "passing")
    proc = dev(str(repo), git_cache, tmp_path / "data", "--test").start(timeout_s=120)
    assert finish(proc) == 0
    proc.wait_for(r"lockgate dev \| test 'echo' passed \(COMPLETED, [\d.]+ s\)$")
    proc.wait_for(r"lockgate dev \| tests: 1 passed, 0 failed \(of 1\)$")


def test_dev_test_names_a_failing_test_and_why_and_exits_1(tmp_path, git_cache, venv_python):
    repo = worker_repo(tmp_path / "failing", tests=repo_tests(PASSING, FAILING))
    proc = dev(repo.as_uri(), git_cache, tmp_path / "data", "--test").start(timeout_s=120)
    assert finish(proc) == 1
    proc.wait_for(r"test 'echo' passed")
    proc.wait_for(r"test 'fails' FAILED \(FAILED, [\d.]+ s\): ValueError: asked to fail$")
    proc.wait_for(r"tests: 1 passed, 1 failed \(of 2\): 'fails'$")


def test_dev_test_of_a_load_balancing_worker_sends_each_test_through_its_route(
    tmp_path, git_cache, venv_python
):
    """`--endpoint-type LB --test`: each test is an HTTP request through the endpoint's
    load-balancing route (its input the JSON body, to its `path`); 200 passes, any other
    status fails naming it and the body's start."""
    worker = LB_HANDLER.format(rev=1)
    tests = repo_tests(
        {"name": "check", "input": {"v": 1}, "path": "/check", "timeout": 60000},
        {"name": "missing", "input": {}, "method": "GET", "path": "/nope", "timeout": 60000},
    )
    files = {"handler.py": worker, "requirements.txt": REQUIREMENTS, ".runpod/tests.json": tests}
    repo = make_repo(tmp_path / "lb-worker", files)
    proc = dev(str(repo), git_cache, tmp_path / "data", "--endpoint-type", "LB", "--test")
    assert finish(proc.start(timeout_s=120)) == 1
    proc.wait_for(r"test 'check' passed \(HTTP 200, [\d.]+ s\)$")
    proc.wait_for(r"test 'missing' FAILED \(HTTP 404, [\d.]+ s\): \{\"rev\": 1\}$")
    proc.wait_for(r"tests: 1 passed, 1 failed \(of 2\): 'missing'$")


def test_a_dockerfiles_python_cmd_runs_when_there_is_no_handler_py(
    tmp_path, git_cache, venv_python
):
    """The Dockerfile copies src/ to /app and runs `python -u worker.py` there: dev mode
    runs the repository's src/worker.py."""
    dockerfile = (
        "FROM python:3.11-slim\nCOPY requirements.txt /requirements.txt\n"
        "RUN pip install --no-cache-dir -r /requirements.txt\nCOPY src/ /app/\nWORKDIR /app\n"
        'CMD ["python", "-u", "worker.py"]\n'
    )
    files = {
        "Dockerfile": dockerfile,
        "requirements.txt": REQUIREMENTS,
        "src/worker.py": HANDLER.format(version="docker"),
        ".runpod/tests.json": repo_tests(PASSING),
    }
    repo = make_repo(tmp_path / "docker-worker", files)
    proc = dev(str(repo), git_cache, tmp_path / "data", "--test").start(timeout_s=120)
    assert finish(proc) == 0
    line = proc.wait_for(r"lockgate dev \| worker: ")
    assert line.endswith("/src/worker.py (in " + line.rsplit("(in ", 1)[1])
    assert "-u" in line.split()


def lockgate_dev(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`lockgate dev` expected to stop at once (bad input), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "dev", *args, "--data-dir", str(tmp_path / "d")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_ref_the_repository_lacks_is_one_line_and_exit_1(tmp_path, git_cache):
    repo = make_repo(tmp_path / "small", {"handler.py": "print('hi')\n"})
    done = lockgate_dev("--git", f"{repo}@nope", "--git-cache", str(git_cache), tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"lockgate dev: git source {repo}: ref 'nope' is not a branch, tag or commit of the "
        "repository"
    )
    assert "Traceback" not in done.stderr


def test_a_missing_repository_and_a_missing_tests_json_are_one_line_each(tmp_path, git_cache):
    done = lockgate_dev(
        "--git", (tmp_path / "absent").as_uri(), "--git-cache", str(git_cache), tmp_path=tmp_path
    )
    assert done.returncode == 1 and "git clone failed" in done.stderr.strip().splitlines()[-1]
    handler = tmp_path / "here" / "handler.py"
    handler.parent.mkdir()
    handler.write_text("print('hi')\n")
    done = lockgate_dev(str(handler), "--test", tmp_path=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"lockgate dev: tests.json: none in {handler.parent} (nor in {handler.parent}/.runpod)"
    )


def test_the_venv_is_reused_while_the_requirements_are_the_same(tmp_path, git_cache, venv_python):
    other = worker_repo(tmp_path / "another-repo", version="other")
    (venv_python.parent.parent / "kept.txt").write_text("a rebuilt venv would lose this")
    again = environment(checkout(str(other), None, git_cache), git_cache)
    assert again == venv_python and (venv_python.parent.parent / "kept.txt").exists()


def test_a_presets_values_and_tests_json_env_reach_the_workers_and_a_missing_preset_is_one_line(
    tmp_path, git_cache, venv_python
):
    hub = {**HUB, "config": {**HUB["config"], "presets": [
        {"name": "Loud", "defaults": {"GREETING": "HELLO"}},
    ]}}  # fmt: skip
    tests = json.dumps({"tests": [PASSING], "config": {"env": [{"key": "MODE", "value": "test"}]}})
    repo = worker_repo(tmp_path / "presets", tests=tests)
    commit(repo, {".runpod/hub.json": json.dumps(hub)}, "a preset")
    worker = git_worker(str(repo), git_cache, preset="Loud", with_tests=True, environ={})
    assert dict(worker.launch.env) == {"GREETING": "HELLO", "MODE": "test"}
    assert worker.launch.command == (str(venv_python), str(worker.checkout.path / "handler.py"))
    assert worker.launch.cwd == str(worker.checkout.path)
    with pytest.raises(HubFileError, match=r"^hub.json: no preset 'Quiet' \(presets: 'Loud'\)$"):
        git_worker(str(repo), git_cache, preset="Quiet", environ={})


def test_a_repository_whose_hub_json_says_lb_makes_an_lb_endpoint_unless_a_flag_says(
    tmp_path, git_cache, venv_python
):
    hub = {**HUB, "config": {**HUB["config"], "endpointType": "LB"}}
    repo = worker_repo(tmp_path / "lb-worker")
    commit(repo, {".runpod/hub.json": json.dumps(hub)}, "an LB listing")
    flags = {"handler": None, "worker_command": None, "preset": None, "test": False}
    args = argparse.Namespace(**flags, git=str(repo), git_cache=str(git_cache), endpoint_type=None)
    source = source_of(args)
    assert args.endpoint_type == "LB" and source.endpoint_id == "lb-worker"
    assert list(source.launches) == [source.template_id]
    args = argparse.Namespace(
        **flags, git=str(repo), git_cache=str(git_cache), endpoint_type="QUEUE"
    )
    source_of(args)
    assert args.endpoint_type == "QUEUE"
