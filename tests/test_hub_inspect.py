"""`POST /v1/hub/inspect` (issue 48 item 5) over real HTTP on loopback, dev mode's app
(`tests/test_manage_api.py`'s `local_api`): a real git repository's hub.json read by a
shallow fetch, `.runpod/` over the root, and a clear 4xx for every bad URL, missing or
invalid hub.json; on a cluster only http(s) URLs are taken (`hubrepo.wanted`)."""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from lockgate.gateway.errors import BadRequest
from lockgate.manage import hubrepo
from lockgate.manage.hubrepo import wanted
from lockgate.models.gpupools import POOLS
from tests.gitrepo import commit, git, make_repo
from tests.hubrepos import HUB, hub_repo
from tests.test_manage_api import Api, local_api  # noqa: F401 - fixtures


async def inspect(api: Api, body: Any, key: str | None = None) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {key or api.key}"}
    data = body if isinstance(body, str) else json.dumps(body)
    async with api.http.post(f"{api.url}/v1/hub/inspect", data=data, headers=headers) as resp:
        return resp.status, await resp.json()


@pytest.mark.asyncio
async def test_a_repositorys_hub_json_is_read_with_what_the_form_needs(
    local_api: Api, tmp_path: Path
) -> None:
    repo = hub_repo(tmp_path / "repo")
    status, body = await inspect(local_api, {"url": f"file://{repo}"})
    assert status == 200, body
    assert body["path"] == ".runpod/hub.json"
    assert body["commit"] == git(repo, "rev-parse", "HEAD")
    assert body["hub"]["title"] == HUB["title"]
    assert [e["key"] for e in body["hub"]["config"]["env"]] == [
        "FIXED_VAR", "MODEL_NAME", "MAX_TOKENS", "QUANTIZE"]  # fmt: skip
    assert body["hub"]["config"]["env"][3]["input"]["advanced"] is True
    assert body["hub"]["config"]["presets"][0]["name"] == "Big model"
    assert body["endpointType"] == "QUEUE"
    assert (body["gpuPools"], body["gpuExcluded"]) == (["AMPERE_24"], ["NVIDIA GeForce RTX 3090"])
    assert body["env"] == {
        "FIXED_VAR": "always",
        "MODEL_NAME": "org/small",
        "MAX_TOKENS": "512",
        "QUANTIZE": "none",
    }


@pytest.mark.asyncio
async def test_runpod_folder_wins_over_the_root_and_a_ref_and_a_local_path_are_taken(
    local_api: Api, tmp_path: Path
) -> None:
    repo = hub_repo(tmp_path / "repo", {**HUB, "title": "at the root"}, where=".")
    status, body = await inspect(local_api, {"url": str(repo)})  # a plain path: dev mode
    assert status == 200, body
    assert body["url"] == f"file://{repo}"  # as an endpoint's source takes it
    assert (body["path"], body["hub"]["title"]) == ("hub.json", "at the root")
    git(repo, "checkout", "--quiet", "-b", "other")
    commit(repo, {".runpod/hub.json": json.dumps({**HUB, "title": "in .runpod"})}, "override")
    git(repo, "checkout", "--quiet", "main")
    status, body = await inspect(local_api, {"url": f"file://{repo}", "ref": "other"})
    assert status == 200, body
    assert (body["path"], body["hub"]["title"], body["ref"]) == (
        ".runpod/hub.json", "in .runpod", "other")  # fmt: skip


@pytest.mark.asyncio
async def test_a_repository_without_hub_json_or_with_an_invalid_one_is_a_422(
    local_api: Api, tmp_path: Path
) -> None:
    plain = make_repo(tmp_path / "plain", {"handler.py": "print('hi')\n"})
    status, body = await inspect(local_api, {"url": f"file://{plain}"})
    assert (status, body["reason"]) == (422, "no-hub-json"), body
    assert "not a ready-to-deploy repository" in body["error"]

    broken = make_repo(tmp_path / "broken", {".runpod/hub.json": "{not json"})
    status, body = await inspect(local_api, {"url": f"file://{broken}"})
    assert (status, body["reason"]) == (422, "invalid-hub-json"), body
    assert body["error"].startswith(".runpod/hub.json: not valid JSON at line 1")

    bad = {**HUB, "config": {**HUB["config"], "gpuCount": None}}
    invalid = hub_repo(tmp_path / "invalid", bad)
    status, body = await inspect(local_api, {"url": f"file://{invalid}"})
    assert (status, body["reason"]) == (422, "invalid-hub-json"), body
    assert "gpuCount is required when runsOn is GPU" in body["error"]


@pytest.mark.asyncio
async def test_an_unreachable_repository_or_ref_is_a_422(local_api: Api, tmp_path: Path) -> None:
    status, body = await inspect(local_api, {"url": f"file://{tmp_path}/nothing-here"})
    assert (status, body["reason"]) == (422, "unreachable"), body
    assert "cannot fetch its default branch: " in body["error"]
    assert body["error"].endswith("does not appear to be a git repository"), body
    repo = hub_repo(tmp_path / "repo")
    status, body = await inspect(local_api, {"url": f"file://{repo}", "ref": "no-such-branch"})
    assert (status, body["reason"]) == (422, "unreachable"), body
    assert "ref 'no-such-branch'" in body["error"]


@pytest.mark.asyncio
async def test_a_repository_or_hub_json_over_its_bound_is_a_422(
    local_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bounds made small (the app runs in this process): a commit larger on disk than
    FETCH_MAX_BYTES, a hub.json larger than HUB_MAX_BYTES."""
    repo = hub_repo(tmp_path / "repo")
    commit(repo, {"weights.bin": os.urandom(300_000).hex()}, "weights")  # incompressible
    monkeypatch.setattr(hubrepo, "FETCH_MAX_BYTES", 200_000)
    status, body = await inspect(local_api, {"url": f"file://{repo}"})
    assert (status, body["reason"]) == (422, "too-large"), body
    monkeypatch.undo()
    monkeypatch.setattr(hubrepo, "HUB_MAX_BYTES", 100)
    status, body = await inspect(local_api, {"url": f"file://{repo}"})
    assert (status, body["reason"]) == (422, "invalid-hub-json"), body
    assert re.fullmatch(
        r"\.runpod/hub\.json: \d+ bytes, over the 100 a hub\.json may have", body["error"]
    )


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({}, "url: required"),
        ({"url": ""}, "url: required"),
        ({"url": 7}, "url: required"),
        ({"url": "ftp://example.test/r.git"}, "url: 'ftp://example.test/r.git'"),
        ({"url": "https:///r.git"}, "names no host"),
        ({"url": "git@example.test:org/r.git"}, "give an http(s)://"),
        ({"url": "https://example.test/r.git", "ref": "a..b"}, "ref: "),
        ({"url": "https://example.test/r.git", "ref": "-x"}, "ref: "),
        ({"url": "https://example.test/r.git", "branch": "x"}, "branch: not a field"),
        ("[1, 2]", "body: expected a JSON object"),
        ("{not json", "body: expected a JSON object"),
    ],
)
@pytest.mark.asyncio
async def test_a_malformed_body_or_url_is_a_400_naming_the_field(
    local_api: Api, body: Any, names: str
) -> None:
    status, answer = await inspect(local_api, body)
    assert status == 400, answer
    assert names in answer["error"]


@pytest.mark.asyncio
async def test_only_admin_keys_may_make_the_server_fetch(local_api: Api, tmp_path: Path) -> None:
    status, _ = await inspect(local_api, {"url": f"file://{tmp_path}"}, key="lg_not_a_key")
    assert status == 401


def test_a_cluster_takes_http_urls_only() -> None:
    assert wanted({"url": "https://git.example.test/o/r.git"}, dev=False).url.startswith("https")
    assert wanted({"url": "http://git.example.test/o/r.git", "ref": "v1"}, dev=False).ref == "v1"
    for url in ("file:///srv/repo", "/srv/repo", "repo", "ssh://git.example.test/o/r.git"):
        with pytest.raises(BadRequest, match="give an https:// or http:// URL"):
            wanted({"url": url}, dev=False)
    assert wanted({"url": "file:///srv/repo"}, dev=True).url == "file:///srv/repo"
    assert wanted({"url": "/srv/repo"}, dev=True).url == "file:///srv/repo"


@pytest.mark.asyncio
async def test_a_listing_without_gpu_ids_may_run_on_any_pool(
    local_api: Api, tmp_path: Path
) -> None:
    config = {k: v for k, v in HUB["config"].items() if k != "gpuIds"}
    repo = hub_repo(tmp_path / "repo", {**HUB, "config": {**config, "endpointType": "LB"}})
    status, body = await inspect(local_api, {"url": f"file://{repo}"})
    assert status == 200, body
    assert (body["gpuPools"], body["gpuExcluded"]) == (list(POOLS), [])
    assert body["endpointType"] == "LB"


@pytest.mark.asyncio
async def test_a_server_without_git_says_so_with_a_501(
    local_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = hub_repo(tmp_path / "repo")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # the app runs in this process
    status, body = await inspect(local_api, {"url": f"file://{repo}"})
    assert status == 501, body
    assert "no `git` command" in body["error"]
