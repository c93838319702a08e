"""A git source for dev mode: `URL[@ref]` parsing, and checkouts of a real local repository
(cloned by the `git` CLI over a plain path and file://) at a branch, a tag and a commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.dev.gitsource import GitSourceError, checkout, shown_url, split_source
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


def test_a_new_commit_is_fetched_on_the_next_call_into_the_same_clone(repo, tmp_path):
    cache = tmp_path / "cache"
    before = checkout(str(repo), "main", cache)
    (before.path / "left-over.txt").write_text("x")  # an untracked file of a previous run
    commit(repo, {"a.txt": "4"}, "fourth")
    after = checkout(str(repo), "main", cache)
    assert after.path == before.path and after.message == "fourth"
    assert not (after.path / "left-over.txt").exists()


def test_a_missing_repository_or_ref_is_a_one_line_error(repo, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(GitSourceError, match=r"ref 'nope' is not a branch, tag or commit"):
        checkout(str(repo), "nope", cache)
    with pytest.raises(GitSourceError, match=r"git clone failed: .*does not exist") as err:
        checkout(str(tmp_path / "absent"), None, cache)
    assert "\n" not in str(err.value)
    with pytest.raises(GitSourceError, match="URL is empty"):
        checkout(" ", None, cache)
