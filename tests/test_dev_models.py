"""Cached models in dev mode (issue 34 item 5): an endpoint's `modelReferences` fetched once
with `huggingface_hub` from a real local HTTP server speaking the Hub's download API (via
`HF_ENDPOINT`), before a real `lockgate dev`'s workers start; a worker reads the file with
`huggingface_hub` offline. A missing (404) or gated (401) repository fails the endpoint,
naming it and the hub's answer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from lockgate.models import EndpointSpec
from lockgate.models.endpoint import model_reference_problem
from tests.conftest import wait_until
from tests.devproc import REPO, DevProcess
from tests.hf_hub import FILES, SHA, TOKEN, Hub, file_path, serving


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    with serving() as url:
        yield url


@pytest.fixture(scope="module")
def dev(hub: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    env = {"HF_ENDPOINT": hub, "HF_HUB_DISABLE_XET": "1", "HF_TOKEN": ""}
    with DevProcess(str(REPO / "tests/handlers/sync_echo.py"), data_dir=data, env=env) as dp:
        yield dp


def create(dev: DevProcess, **fields) -> dict:
    body = {"templateId": str(REPO / "tests/handlers/hf_model_read.py"), **fields}
    answer = requests.post(f"{dev.url}/v1/endpoints", json=body, headers=dev.headers())
    assert answer.status_code == 200, answer.text
    return answer.json()


def read_model(dev: DevProcess, endpoint_id: str, repo: str) -> dict:
    """A job reading the model's config.json with huggingface_hub in the worker: COMPLETED."""
    job = requests.post(
        f"{dev.url}/v2/{endpoint_id}/runsync",
        json={"input": {"repo": repo, "file": "config.json"}},
        headers=dev.headers(),
        timeout=90,
    ).json()
    assert job["status"] == "COMPLETED", job
    return job


def record(dev: DevProcess, endpoint_id: str) -> dict:
    return requests.get(f"{dev.url}/v1/endpoints/{endpoint_id}", headers=dev.headers()).json()


def test_a_model_is_fetched_once_for_two_workers_which_read_it_offline(dev: DevProcess) -> None:
    ep = create(dev, name="tiny", modelReferences=["acme/tiny"], workersMin=2, workersMax=2)

    def cached() -> bool:
        conditions = {c["type"]: c for c in record(dev, ep["id"])["status"]["conditions"]}
        return conditions.get("ModelsCached", {}).get("status") == "True"

    wait_until(cached, "ModelsCached True", timeout=60)
    job = read_model(dev, ep["id"], "acme/tiny")
    assert job["output"]["text"] == FILES["config.json"].decode()
    assert f"models--acme--tiny/snapshots/{SHA}/config.json" in job["output"]["path"]
    assert "/huggingface-cache/hub/" in job["output"]["path"]
    assert Hub.seen[("GET", "/api/models/acme/tiny/revision/main")] == 1  # not per worker
    assert Hub.seen[("GET", file_path("acme/tiny", "config.json"))] == 1


@pytest.mark.parametrize(("reference", "code"), [("acme/missing:v1", "404"), ("acme/gated", "401")])
def test_a_missing_or_gated_repository_fails_the_endpoint_naming_it_and_no_worker_starts(
    dev: DevProcess, reference: str, code: str
) -> None:
    ep = create(dev, name="gone", modelReferences=[reference], workersMin=1)

    def failed() -> dict | None:
        status = record(dev, ep["id"])["status"]
        return status if status["phase"] == "Failed" else None

    status = wait_until(failed, "phase Failed", timeout=60)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ModelFetchFailed"
    assert reference in ready["message"] and code in ready["message"]
    assert status["workers"]["desired"] == 0


def test_a_gated_model_is_fetched_with_the_templates_hf_token(dev: DevProcess) -> None:
    """The token comes from the endpoint's template env (`HF_TOKEN`), not the process."""
    template = requests.post(
        f"{dev.url}/v1/templates",
        json={
            "name": "gated-reader",
            "imageName": "local/reader:1",
            "dockerStartCmd": ["python", str(REPO / "tests/handlers/hf_model_read.py")],
            "env": {"HF_TOKEN": TOKEN},
        },
        headers=dev.headers(),
    )
    assert template.status_code == 200, template.text
    ep = create(dev, name="gated", templateId=template.json()["id"],
                modelReferences=["acme/gated"])  # fmt: skip
    job = read_model(dev, ep["id"], "acme/gated")
    assert "models--acme--gated/snapshots/" in job["output"]["path"]


def fetch_models(hub: str, root: str, *references: str) -> subprocess.CompletedProcess:
    """The real `lockgate fetch-models` (the worker pods' init container) as a process."""
    env = {**os.environ, "HF_ENDPOINT": hub, "HF_HUB_DISABLE_XET": "1", "HF_TOKEN": ""}
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "fetch-models", "--root", root, *references],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_fetch_models_fills_the_cache_and_keeps_what_it_has(hub: str, tmp_path: Path) -> None:
    done = fetch_models(hub, str(tmp_path), "acme/tiny")
    assert done.returncode == 0, done.stderr
    snapshot = tmp_path / f"huggingface-cache/hub/models--acme--tiny/snapshots/{SHA}"
    assert (snapshot / "config.json").read_bytes() == FILES["config.json"]
    assert f"cached acme/tiny at {snapshot}" in done.stdout
    before = Hub.seen[("GET", file_path("acme/tiny", "config.json"))]
    again = fetch_models(hub, str(tmp_path), "acme/tiny")
    assert again.returncode == 0, again.stderr
    assert Hub.seen[("GET", file_path("acme/tiny", "config.json"))] == before  # kept


def test_fetch_models_fails_in_one_line_naming_the_reference(hub: str, tmp_path: Path) -> None:
    failed = fetch_models(hub, str(tmp_path), "acme/tiny", "acme/missing:v2")
    assert failed.returncode == 1
    [line] = failed.stderr.strip().splitlines()
    assert line.startswith("lockgate: modelReferences: acme/missing:v2: ") and "404" in line


def test_fetch_models_writes_nothing_outside_its_root(hub: str, tmp_path: Path) -> None:
    """A revision that climbs out of the cache (validated by an older lockgate, or applied
    before the CRD knew better) is refused before anything is fetched."""
    root = tmp_path / "root"
    reference = "acme/tiny:../../../../../outside/x"  # refs/ then 5 '..': tmp_path
    failed = fetch_models(hub, str(root), reference)
    assert failed.returncode == 1
    [line] = failed.stderr.strip().splitlines()
    assert line.startswith(f"lockgate: modelReferences: {reference}: ") and "outside" in line
    assert not (tmp_path / "outside").exists()


REPO_IDS = [
    "acme/tiny", "Org_1/Model.v2", "a/b", "_a/b_", "-acme/tiny", "acme/tiny-", ".a/b",
    "acme/ti--ny", "acme/ti..ny", "acme/tiny.git", "acme/" + "x" * 96, "acme/" + "x" * 97,
]  # fmt: skip


@pytest.mark.parametrize("repo", REPO_IDS)
def test_repository_ids_are_checked_as_huggingface_hub_checks_them(repo: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
        hub_accepts = True
    except HFValidationError:
        hub_accepts = False
    assert (model_reference_problem(repo) is None) == hub_accepts


@pytest.mark.parametrize(
    ("revision", "accepted"),
    [
        ("main", True), ("v1.0", True), ("refs/pr/1", True), (SHA, True),
        ("../../../../outside/x", False), ("/etc", False), ("a//b", False), ("a/", False),
        (".hidden", False), ("a/.b", False), ("x.lock", False), ("x.", False),
        ("a\\b", False), ("a\nb", False), ("a b", False), ("main\n", False),
    ],
)  # fmt: skip
def test_revisions_follow_git_ref_rules(revision: str, accepted: bool) -> None:
    assert (model_reference_problem(f"acme/tiny:{revision}") is None) == accepted
    if not accepted:
        with pytest.raises(ValueError, match="modelReferences"):
            EndpointSpec(modelReferences=[f"acme/tiny:{revision}"])
