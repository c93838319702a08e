"""How a repository's tests.json reaches the operator on a cluster (issue 48, item 3): the
build Job's clone script (kube/manifests/build.py CLONE_SCRIPT), run here for real with
`sh`, git, gzip and base64 against a local repository, appends the file gzip+base64 to its
termination message after the commit lines, bounded; the operator's reading of that
message (kube/buildjobs.py) gives the commit and the file back. A file too large fails
the clone naming the limit."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from lockgate.kube.buildjobs import (
    clone_tests,
    commit_fields,
    failure,
    handed_tests,
    progress,
    untested_line,
)
from lockgate.kube.manifests.build import CLONE_SCRIPT, TESTS_MARKER, TESTS_MAX, build_job
from lockgate.models.build import BuildStatus, new_build
from tests.gitrepo import git, make_repo
from tests.test_build_job import DIGEST, OWNER, SETTINGS, SOURCE

TESTS = {"tests": [{"name": "basic", "input": {"prompt": "hello"}, "timeout": 30000}]}


def clone(repo: Path, tmp_path: Path) -> tuple[int, str, str]:
    """Run the Job's clone container's script with its env (the URL: the local repository);
    its exit code, termination message and stderr."""
    container, _build = build_job(OWNER, new_build(), SOURCE, SETTINGS)["spec"]["template"]["spec"][
        "initContainers"
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    message = tmp_path / "termination-log"
    work = tmp_path / "work"
    work.mkdir()
    env |= {
        "GIT_URL": f"file://{repo}",
        "GIT_REF": "",
        "SRC": str(work / "src"),
        "CREDS": str(work / "no-creds"),
        "HOME": str(work),
        "TERMINATION_LOG": str(message),
        "PATH": os.environ["PATH"],
    }
    done = subprocess.run(
        ["sh", "-c", CLONE_SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, message.read_text() if message.exists() else "", done.stderr


def test_the_clone_hands_runpods_tests_json_to_the_operator(tmp_path: Path) -> None:
    files = {"handler.py": "", ".runpod/tests.json": json.dumps(TESTS), "tests.json": "{}"}
    repo = make_repo(tmp_path / "repo", files, "with tests")
    code, message, stderr = clone(repo, tmp_path)
    assert code == 0, stderr
    assert TESTS_MARKER in message and len(message.encode()) <= 4096
    fields = commit_fields(message)
    assert fields["commit"] == git(repo, "rev-parse", "HEAD")
    assert (fields["branch"], fields["commitMessage"]) == ("main", "with tests")
    assert json.loads(handed_tests(message) or "") == TESTS  # .runpod/ over the root's
    # the build completes with its digest as before; the operator reads the tests from it
    cloned = {"name": "clone", "state": {"terminated": {"exitCode": 0, "message": message}}}
    built = {"name": "build", "state": {"terminated": {"exitCode": 0, "message": ""}}}
    pushed = {"name": "push", "state": {"terminated": {"exitCode": 0, "message": DIGEST}}}
    pod = {"status": {"initContainerStatuses": [cloned, built], "containerStatuses": [pushed]}}
    job = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    step = progress(job, pod, image_name="r/ep:x", timeout_min=25)
    assert step is not None and step.status == BuildStatus.COMPLETED
    assert step.fields["commitMessage"] == "with tests"
    assert json.loads(clone_tests(pod) or "") == TESTS
    assert untested_line(clone_tests(pod) or "").startswith("tests.json: 1 test(s), not run")


def test_a_repository_without_tests_hands_the_commit_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"handler.py": ""}, "no tests")
    code, message, stderr = clone(repo, tmp_path)
    assert code == 0, stderr
    assert TESTS_MARKER not in message and handed_tests(message) is None
    assert commit_fields(message)["commitMessage"] == "no tests"


def test_a_tests_json_too_large_fails_the_clone_naming_the_limit(tmp_path: Path) -> None:
    # random-looking inputs do not compress: well past the limit once gzip+base64
    big = {"tests": [{"name": f"t{i}", "input": {"x": os.urandom(64).hex()}} for i in range(60)]}
    repo = make_repo(tmp_path / "repo", {"tests.json": json.dumps(big)}, "big tests")
    code, message, stderr = clone(repo, tmp_path)
    assert code == 1
    why = failure({"state": {"terminated": {"exitCode": 1, "message": message}}}, "clone")
    assert why.startswith("clone failed: tests.json is too large to reach the operator: ")
    assert f"at most {TESTS_MAX}" in why and "4096 bytes" in why
    assert "too large" in stderr


def test_a_message_cut_short_or_changed_gives_no_tests() -> None:
    assert handed_tests(f"{'a' * 40}\n2026-12-06T10:01:00Z\nmain\nx\n{TESTS_MARKER}\n!!!\n") is None
    assert untested_line("{").startswith("tests.json: unusable (")
