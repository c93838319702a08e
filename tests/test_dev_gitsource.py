"""A git source for dev mode: `URL[@ref]` parsing, and checkouts of a real repository made
here (cloned by the `git` CLI over a plain path, file:// and HTTP on loopback) at a branch,
a tag and a commit; its handler and what its venv installs."""

from __future__ import annotations

import functools
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lockgate.dev.gitsource import (
    EnvironmentFailed,
    GitSourceError,
    checkout,
    entrypoint,
    environment,
    requirements_of,
    shown_url,
    split_source,
)
from tests.gitrepo import commit, git, make_repo


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://git.example/org/repo", ("https://git.example/org/repo", None)),
        ("https://git.example/org/repo@main", ("https://git.example/org/repo", "main")),
        ("https://user@git.example/org/repo", ("https://user@git.example/org/repo", None)),
        ("https://u:t@git.example/o/r@v1.2", ("https://u:t@git.example/o/r", "v1.2")),
        ("git@git.example:org/repo", ("git@git.example:org/repo", None)),
        ("git@git.example:org/repo@v1", ("git@git.example:org/repo", "v1")),
        ("/srv/repo@feature/x", ("/srv/repo", "feature/x")),
        ("file:///srv/repo@0a1b2c3", ("file:///srv/repo", "0a1b2c3")),
        ("./repo", ("./repo", None)),
        ("repo@", ("repo@", None)),
    ],
)  # fmt: skip
def test_a_source_splits_into_url_and_ref_at_the_last_at_outside_the_url(text, expected):
    assert split_source(text) == expected


def test_an_error_message_never_shows_a_token_in_the_url():
    assert shown_url("https://user:tok3n@git.example/o/r") == "https://git.example/o/r"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: 'first' (tagged v1) then 'second'; feature/x: 'third'."""
    src = make_repo(tmp_path / "src", {"a.txt": "1"}, "first")
    git(src, "tag", "v1")
    commit(src, {"a.txt": "2"}, "second\n\nwith a body")
    git(src, "checkout", "--quiet", "-b", "feature/x")
    commit(src, {"a.txt": "3"}, "third")
    git(src, "checkout", "--quiet", "main")
    return src


def test_without_a_ref_the_remotes_head_is_checked_out(repo: Path, tmp_path: Path):
    got = checkout(str(repo), None, tmp_path / "cache")
    assert (got.ref, got.branch) == ("main", "main")
    assert got.commit == git(repo, "rev-parse", "main") and got.commit.startswith(got.short)
    assert got.message == "second\n\nwith a body"
    assert got.date.tzinfo is not None
    assert (got.path / "a.txt").read_text() == "2"


def test_a_branch_a_tag_and_a_commit_are_each_checked_out_over_file_urls(repo, tmp_path):
    cache = tmp_path / "cache"
    url = repo.as_uri()
    assert (checkout(url, "feature/x", cache).path / "a.txt").read_text() == "3"
    tag = checkout(url, "v1", cache)
    assert (tag.message, tag.branch, (tag.path / "a.txt").read_text()) == ("first", None, "1")
    first = git(repo, "rev-parse", "v1")
    assert checkout(url, first[:8], cache).commit == first


def test_a_new_commit_is_fetched_on_the_next_call_into_a_work_tree_of_its_own(repo, tmp_path):
    cache = tmp_path / "cache"
    before = checkout(str(repo), "main", cache)
    commit(repo, {"a.txt": "4"}, "fourth")
    after = checkout(str(repo), "main", cache)
    assert after.message == "fourth" and (after.path / "a.txt").read_text() == "4"
    assert after.path != before.path and (before.path / "a.txt").read_text() == "2"


def test_a_commits_work_tree_gets_its_tracked_files_back(repo, tmp_path):
    cache = tmp_path / "cache"
    first = checkout(str(repo), "main", cache)
    (first.path / "a.txt").write_text("edited by a run")
    again = checkout(str(repo), "main", cache)
    assert again.path == first.path and (again.path / "a.txt").read_text() == "2"


def test_a_missing_repository_or_ref_is_a_one_line_error(repo, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(GitSourceError, match=r"ref 'nope' is not a branch, tag or commit"):
        checkout(str(repo), "nope", cache)
    with pytest.raises(GitSourceError, match=r"git clone failed: .*does not exist") as err:
        checkout(str(tmp_path / "absent"), None, cache)
    assert "\n" not in str(err.value)
    with pytest.raises(GitSourceError, match="URL is empty"):
        checkout(" ", None, cache)


def checked_out(tmp_path: Path, files: dict[str, str]):
    return checkout(str(make_repo(tmp_path / "w", files)), None, tmp_path / "cache")


def test_the_handler_is_dot_runpods_handler_py_first_then_the_roots(tmp_path):
    co = checked_out(tmp_path, {"handler.py": "", ".runpod/handler.py": "", "Dockerfile": ""})
    assert entrypoint(co) == [str(co.path / ".runpod" / "handler.py")]


def test_without_handler_py_the_dockerfiles_python_cmd_runs_the_copied_script(tmp_path):
    dockerfile = 'FROM python:3.11\nWORKDIR /app\nCOPY src .\nCMD ["python3", "-u", "rp.py", "--x"]'
    co = checked_out(tmp_path, {"Dockerfile": dockerfile, "src/rp.py": ""})
    assert entrypoint(co) == ["-u", str(co.path / "src" / "rp.py"), "--x"]


@pytest.mark.parametrize(
    ("dockerfile", "error"),
    [
        ('FROM x\nCMD ["/start.sh"]', r"Dockerfile's CMD /start.sh is not a Python"),
        ('FROM x\nCMD ["python", "-m", "worker"]', r"CMD python -m worker runs no script file$"),
        ('FROM x\nCMD ["python", "/x.py"]', r"runs /x.py, which no COPY or ADD brings"),
    ],
)  # fmt: skip
def test_a_dockerfile_command_that_cannot_run_here_is_one_line(tmp_path, dockerfile, error):
    co = checked_out(tmp_path, {"Dockerfile": dockerfile})
    with pytest.raises(GitSourceError, match=error):
        entrypoint(co)


def test_without_requirements_txt_the_dockerfiles_pip_lines_are_installed(tmp_path):
    dockerfile = (
        "FROM x\nCOPY builder/req.txt /req.txt\n"
        "RUN pip install --no-cache-dir runpod~=1.7 && pip install -r /req.txt --target /opt\n"
    )
    co = checked_out(tmp_path, {"Dockerfile": dockerfile, "builder/req.txt": "six\n"})
    wanted = requirements_of(co)
    assert wanted.args == ("runpod~=1.7", "-r", str(co.path / "builder" / "req.txt"))
    assert wanted.origin == "the Dockerfile's pip install lines" and b"six" in wanted.content
    with_file = checked_out(tmp_path / "b", {"Dockerfile": dockerfile, "requirements.txt": "x\n"})
    assert requirements_of(with_file).origin == "requirements.txt"


def test_a_pip_requirements_file_no_copy_brings_is_one_line(tmp_path):
    co = checked_out(tmp_path, {"Dockerfile": "FROM x\nRUN pip install -r /nowhere.txt\n"})
    with pytest.raises(GitSourceError, match=r"pip install -r /nowhere.txt: no COPY or ADD brings"):
        requirements_of(co)


def test_a_failed_install_is_one_line_with_pips_last_lines_and_leaves_no_venv(tmp_path):
    co = checked_out(tmp_path, {"requirements.txt": "not a requirement !!\n", "handler.py": ""})
    with pytest.raises(EnvironmentFailed) as err:
        environment(co, tmp_path / "cache")
    message = str(err.value)
    assert message.startswith("pip install of requirements.txt failed (exit 1): ")
    assert "Invalid requirement" in message and "\n" not in message
    assert [p.name for p in (tmp_path / "cache" / "venvs").iterdir() if p.is_dir()] == []


@pytest.fixture
def http_repo(repo: Path, tmp_path: Path):
    """`repo` as a bare repository served over HTTP on loopback (git's "dumb" protocol:
    plain files after `git update-server-info`)."""
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(repo), str(served / "repo.git")], check=True
    )
    git(served / "repo.git", "update-server-info")
    handler = functools.partial(QuietHandler, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/repo.git"
    server.shutdown()
    server.server_close()
    thread.join()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no access lines in the test's output
        pass


def test_an_http_url_is_cloned_at_a_tag(http_repo: str, repo: Path, tmp_path: Path):
    got = checkout(f"{http_repo}", "v1", tmp_path / "cache")
    assert got.commit == git(repo, "rev-parse", "v1") and (got.path / "a.txt").read_text() == "1"
    assert checkout(http_repo, None, tmp_path / "cache").message.startswith("second")
