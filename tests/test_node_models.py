"""Cached models on a real node (issue 34 item 5): an Endpoint's `modelReferences` are
downloaded by its worker pods' `fetch-models` init container (the control-plane image,
`lockgate fetch-models`, huggingface_hub) from a local HTTP server speaking the Hugging
Face download API (tests/hf_hub.py, on the node's bridge address, given as `HF_ENDPOINT`
through the chart's `operator.models.env`), into the node's cache (a hostPath folder under
`operator.scheduling.modelCachePath`, here a test folder).

- While a file is held by the hub, both worker pods wait initializing and the Endpoint's
  `WorkersHealthy` condition says `DownloadingModels` naming the references.
- Then each file is fetched once for the node (two pods), a gated model with the token of
  a Secret the Template names (`secretEnv.HF_TOKEN`), and both workers read the files
  with `huggingface_hub` offline (`HF_HUB_OFFLINE=1`) at
  /runpod-volume/huggingface-cache/hub/models--{org}--{name}/snapshots/{commit}/.
- Without the token, the gated model's 401 is named in `ModelFetchFailed`, `/health`
  counts the pod unhealthy, and no worker starts.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import NODE_IP
from hf_hub import FILES, SHA, TOKEN, Hub, file_path, serving
from node_release import (
    USER_NAMESPACE,
    Jobs,
    Release,
    endpoint_status,
    running,
    wait_until,
    worker_pods,
)

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

MODELS = ["acme/tiny", "acme/gated", "acme/slow"]
# The worker: lockgate's runtime and huggingface_hub, both in the control-plane image.
HANDLER = """
import os, time
from huggingface_hub import hf_hub_download
import lockgate.worker

def handler(job):
    time.sleep(job["input"].get("sleep", 0))
    path = hf_hub_download(job["input"]["repo"], job["input"]["file"])
    with open(path) as f:
        text = f.read()
    return {"text": text, "path": path, "offline": os.environ.get("HF_HUB_OFFLINE"),
            "worker": os.environ.get("RUNPOD_POD_ID")}

lockgate.worker.start({"handler": handler})
"""


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    """The hub on the node's bridge address, which pods reach."""
    Hub.release.clear()
    with serving(NODE_IP) as url:
        yield url
    Hub.release.set()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The node's model cache folder (`operator.scheduling.modelCachePath`), removed after."""
    folder = tmp_path_factory.mktemp("node-models")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def release(node, hub: str, cache: Path) -> Iterator[Release]:
    rel = Release(node)
    env = {"HF_ENDPOINT": hub, "HF_HUB_DISABLE_XET": "1"}
    rel.install(
        "--set", f"operator.scheduling.modelCachePath={cache}",
        "--set-json", f"operator.models.env={json.dumps(env)}",
    )  # fmt: skip
    yield rel
    rel.uninstall()


def control_plane_image(release: Release) -> str:
    deployment = release.get("deployment", f"{release.name}-operator")
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def apply(release: Release, kind: str, name: str, spec: dict[str, Any]) -> None:
    meta = {"name": name, "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": kind, "metadata": meta,
                   "spec": spec})  # fmt: skip


def reader_template(release: Release, name: str, *, token: bool) -> None:
    spec: dict[str, Any] = {
        "image": control_plane_image(release),
        "command": ["python", "-u", "-c", HANDLER],
    }
    if token:
        spec["secretEnv"] = {"HF_TOKEN": {"name": "hf-token", "key": "token"}}
    apply(release, "Template", name, spec)


def endpoint(release: Release, name: str, template: str, models: list[str], workers: int) -> None:
    apply(release, "Endpoint", name, {
        "templateId": template, "computeType": "CPU", "vcpuCount": 1, "modelReferences": models,
        "workersMin": workers, "workersMax": workers, "idleTimeout": 5,
    })  # fmt: skip


def workers_healthy(release: Release, name: str) -> dict[str, Any]:
    conditions = endpoint_status(release, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "WorkersHealthy"), {})


def initializing(pod: dict[str, Any]) -> bool:
    """The pod waits in its init container (the worker has not started)."""
    statuses = pod.get("status", {}).get("initContainerStatuses") or []
    main = pod.get("status", {}).get("containerStatuses") or []
    fetching = any(s["name"] == "fetch-models" and "running" in s["state"] for s in statuses)
    return fetching and not any("running" in (s.get("state") or {}) for s in main)


@pytest.fixture(scope="module")
def models(release: Release) -> str:
    """The Endpoint with two workers and three models; its Template reads the token."""
    release.node.kubectl("-n", USER_NAMESPACE, "create", "secret", "generic", "hf-token",
                         f"--from-literal=token={TOKEN}")  # fmt: skip
    release.node.kubectl("-n", USER_NAMESPACE, "label", "secret", "hf-token",
                         "lockgate.dev/worker-secret=true")  # fmt: skip
    reader_template(release, "reader", token=True)
    endpoint(release, "models", "reader", MODELS, workers=2)
    return "models"


def test_pods_wait_initializing_while_the_models_download(release: Release, models: str) -> None:
    def both_waiting() -> bool:
        pods = worker_pods(release, models)
        return len(pods) == 2 and all(initializing(p) for p in pods)

    wait_until(both_waiting, "two worker pods in fetch-models", timeout=180)
    condition = wait_until(
        lambda: (c := workers_healthy(release, models)).get("reason") == "DownloadingModels" and c,
        "WorkersHealthy DownloadingModels",
        timeout=60,
    )
    assert condition["status"] == "True"
    assert condition["message"].endswith("download: " + ", ".join(MODELS))
    assert Jobs(release, models).health()["workers"]["initializing"] == 2


def test_each_file_is_fetched_once_for_the_node_and_read_offline_by_both_workers(
    release: Release, models: str
) -> None:
    Hub.release.set()
    wait_until(lambda: sum(map(running, worker_pods(release, models))) == 2, "2 workers", 180)
    jobs = Jobs(release, models)
    # two jobs at once, each holding its worker for a while: one per worker
    ids = {repo: jobs.run({"input": {"repo": repo, "file": "config.json", "sleep": 3}})
           for repo in ("acme/gated", "acme/slow")}  # fmt: skip
    workers = set()
    for repo, job_id in ids.items():
        job = jobs.final(job_id)
        assert job["status"] == "COMPLETED", job
        out = job["output"]
        assert out["text"] == FILES["config.json"].decode() and out["offline"] == "1"
        folder = repo.replace("/", "--")
        assert out["path"] == (
            f"/runpod-volume/huggingface-cache/hub/models--{folder}/snapshots/{SHA}/config.json"
        )
        workers.add(out["worker"])
    assert len(workers) == 2, workers
    for repo in MODELS:  # two pods, one node: one download of each file
        assert Hub.seen[("GET", file_path(repo, "config.json"))] == 1, repo


def test_a_gated_model_without_its_token_fails_naming_the_hubs_401(release: Release) -> None:
    reader_template(release, "no-token", token=False)
    # a model not on the node yet: for one in its cache, huggingface_hub falls back to it
    endpoint(release, "gated", "no-token", ["acme/locked"], workers=1)
    condition = wait_until(
        lambda: (c := workers_healthy(release, "gated")).get("reason") == "ModelFetchFailed" and c,
        "WorkersHealthy ModelFetchFailed",
        timeout=180,
    )
    assert condition["status"] == "False"
    assert "acme/locked" in condition["message"] and "401" in condition["message"]
    # /health's worker states are the scaler's report (its next tick after the pod's failure),
    # not the Endpoint's condition: wait for it rather than read it at once.
    wait_until(
        lambda: Jobs(release, "gated").health()["workers"]["unhealthy"] == 1,
        "/health to count the worker unhealthy",
        60,
    )
    [pod] = worker_pods(release, "gated")
    assert not any(
        "running" in (s.get("state") or {}) for s in pod["status"].get("containerStatuses") or []
    )
