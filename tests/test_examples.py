"""The examples as a user meets them: each handler under `lockgate dev`, each manifest valid."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from lockgate.kube.crds import API_VERSION
from lockgate.models import EndpointSpec, TemplateSpec
from lockgate.models.resources import ENDPOINT_ID_PATTERN
from tests.devproc import REPO, DevProcess

EXAMPLES = REPO / "examples"
HANDLER_EXAMPLES = ("echo", "streaming", "pytorch", "openai")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests(example: str) -> dict[str, dict[str, Any]]:
    """The example's Kubernetes objects by kind (one Endpoint, one Template); `example` may
    be a subfolder such as "openai/vllm"."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((EXAMPLES / example).glob("*.yaml")):
        for doc in documents(path):
            assert doc["kind"] not in found, f"two {doc['kind']}s in {example}"
            found[doc["kind"]] = doc
    return found


def dev(example: str, tmp_path: Path, *extra: str) -> DevProcess:
    handler = str(EXAMPLES / example / "handler.py")
    return DevProcess(handler, "--api-key", "k-examples", *extra, data_dir=tmp_path)


def until_final(proc: DevProcess, job_id: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = requests.get(proc.job_url(f"status/{job_id}"), headers=proc.headers()).json()
        if body["status"] in FINAL:
            return body
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not final in {timeout_s} s")


# -- manifests ----------------------------------------------------------------------------


@pytest.mark.parametrize("example", HANDLER_EXAMPLES)
def test_example_has_a_handler_dockerfile_and_manifests(example: str) -> None:
    folder = EXAMPLES / example
    for name in ("handler.py", "Dockerfile", "endpoint.yaml", "template.yaml"):
        assert (folder / name).is_file(), f"{example}/{name} is missing"
    dockerfile = (folder / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{WORKER_IMAGE\}$", dockerfile, re.M)
    assert re.search(r'^CMD \["python", "-u", "/app/handler.py"\]$', dockerfile, re.M)
    copied = {
        word for line in re.findall(r"^COPY (.+)$", dockerfile, re.M) for word in line.split()
    }
    modules = {path.name for path in folder.glob("*.py")}
    assert modules <= copied, f"{example}/Dockerfile does not copy {modules - copied}"


@pytest.mark.parametrize("example", HANDLER_EXAMPLES)
def test_example_manifests_validate_against_the_models(example: str) -> None:
    objects = manifests(example)
    assert set(objects) == {"Endpoint", "Template"}
    endpoint, template = objects["Endpoint"], objects["Template"]
    for obj in (endpoint, template):
        assert obj["apiVersion"] == API_VERSION
        assert re.match(ENDPOINT_ID_PATTERN, obj["metadata"]["name"])
    spec = EndpointSpec.model_validate(endpoint["spec"])
    template_spec = TemplateSpec.model_validate(template["spec"])
    assert spec.templateId == template["metadata"]["name"]
    assert template_spec.command == ["python", "-u", "/app/handler.py"]


def test_gpu_example_asks_for_a_gpu_and_the_others_do_not() -> None:
    specs = {
        e: EndpointSpec.model_validate(manifests(e)["Endpoint"]["spec"]) for e in HANDLER_EXAMPLES
    }
    assert specs["pytorch"].computeType == "GPU" and specs["pytorch"].gpuTypeIds
    assert specs["echo"].computeType == specs["streaming"].computeType == "CPU"


def test_vllm_manifests_run_runpods_worker_image_on_a_gpu() -> None:
    objects = manifests("openai/vllm")
    spec = EndpointSpec.model_validate(objects["Endpoint"]["spec"])
    template = TemplateSpec.model_validate(objects["Template"]["spec"])
    assert spec.templateId == objects["Template"]["metadata"]["name"]
    assert re.match(ENDPOINT_ID_PATTERN, objects["Endpoint"]["metadata"]["name"])
    assert re.fullmatch(r"runpod/worker-v1-vllm:v\d+\.\d+\.\d+", template.image)  # pinned
    assert template.command == []  # the image's entrypoint starts vLLM, then the worker
    assert template.env["MODEL_NAME"] and int(template.env["MAX_MODEL_LEN"]) > 0
    assert spec.computeType == "GPU" and spec.gpuTypeIds and spec.gpuCount >= 1
    # One worker takes MAX_CONCURRENCY jobs: scale by that many requests per worker.
    assert spec.scalerType == "REQUEST_COUNT"
    assert spec.scalerValue == int(template.env["MAX_CONCURRENCY"])
    # A cold start downloads and loads a model: keep it loaded, let it start slowly.
    assert spec.idleTimeout >= 300 and int(template.env["VLLM_STARTUP_TIMEOUT"]) >= 1200
    assert template.containerDiskInGb >= 50 and template.podSecurity == "baseline"


def test_gitops_examples_install_the_chart_from_a_declared_source() -> None:
    argo = documents(EXAMPLES / "gitops" / "argocd-application.yaml")
    [app] = [d for d in argo if d["kind"] == "Application"]
    assert app["spec"]["source"]["path"] == "charts/lockgate"
    flux = {d["kind"]: d for d in documents(EXAMPLES / "gitops" / "flux-helmrelease.yaml")}
    source = flux["HelmRelease"]["spec"]["chart"]["spec"]["sourceRef"]
    assert source["kind"] in flux and flux[source["kind"]]["metadata"]["name"] == source["name"]
    assert flux["HelmRelease"]["spec"]["chart"]["spec"]["chart"] == "./charts/lockgate"


# -- handlers under lockgate dev ----------------------------------------------------------


def test_echo_returns_its_input(tmp_path: Path) -> None:
    with dev("echo", tmp_path) as proc:
        r = requests.post(proc.job_url("runsync"), json={"input": {"x": 1}}, headers=proc.headers())
        assert r.json()["status"] == "COMPLETED", r.text
        assert r.json()["output"] == {"echo": {"x": 1}}


def test_streaming_yields_text_generation_chunks_then_the_aggregate(tmp_path: Path) -> None:
    job_input = {"prompt": "Once upon a time", "max_tokens": 5, "delay_ms": 20}
    with dev("streaming", tmp_path) as proc:
        job = requests.post(proc.job_url("run"), json={"input": job_input}, headers=proc.headers())
        job_id = job.json()["id"]
        chunks, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            read = requests.get(proc.job_url(f"stream/{job_id}"), headers=proc.headers()).json()
            chunks += read["stream"]
            if read["status"] in FINAL and not read["stream"]:
                break
            time.sleep(0.05)
        final = until_final(proc, job_id)
    outputs = [chunk["output"] for chunk in chunks]
    assert [o["output_tokens"] for o in outputs] == [1, 2, 3, 4, 5]
    assert {o["input_tokens"] for o in outputs} == {4}
    assert all(isinstance(o["text"], list) and len(o["text"]) == 1 for o in outputs)
    assert final["status"] == "COMPLETED" and final["output"] == outputs


def test_openai_example_answers_openai_jobs_through_the_job_api(tmp_path: Path) -> None:
    """The job input the gateway's /openai route makes, sent as a plain job: the output is
    what `return_aggregate_stream` makes of one yield (a one-element list)."""
    chat = {"model": "lockgate-toy", "messages": [{"role": "user", "content": "Hi"}]}
    job_input = {"openai_route": "/v1/chat/completions", "openai_input": chat | {"max_tokens": 3}}
    with dev("openai", tmp_path) as proc:
        r = requests.post(
            proc.job_url("runsync"), json={"input": job_input}, headers=proc.headers()
        )
        models = requests.post(
            proc.job_url("runsync"),
            json={"input": {"openai_route": "/v1/models"}},
            headers=proc.headers(),
        )
    assert r.json()["status"] == "COMPLETED", r.text
    [completion] = r.json()["output"]
    assert completion["object"] == "chat.completion"
    assert completion["id"] == f"chatcmpl-{r.json()['id']}"
    assert len(completion["choices"][0]["message"]["content"].split()) <= 3
    assert models.json()["output"][0]["data"][0]["id"] == "lockgate-toy"


FALLBACK = "torch is not installed: running the pure-Python fallback"


def test_pytorch_model_computes_xor_on_whatever_it_has(tmp_path: Path) -> None:
    points = [[0, 0], [0, 1], [1, 0], [1, 1]]
    try:
        import torch  # noqa: F401
    except ImportError:
        has_torch = False
    else:
        has_torch = True
    with dev("pytorch", tmp_path) as proc:
        r = requests.post(
            proc.job_url("runsync"), json={"input": {"points": points}}, headers=proc.headers()
        )
        body = r.json()
        bad = requests.post(proc.job_url("runsync"), json={"input": {}}, headers=proc.headers())
        # The worker's lines reach us through `lockgate dev`'s stderr, copied every 20 ms
        # and read by a thread: the job's answer can come first (seen once in CI).
        deadline = time.monotonic() + 10
        while not has_torch and FALLBACK not in "\n".join(proc.lines):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        log = "\n".join(proc.lines)
    assert body["status"] == "COMPLETED", body
    output = body["output"]
    assert output["xor"] == [0, 1, 1, 0]
    assert output["scores"] == pytest.approx([0.0, 1.0, 1.0, 0.0], abs=1e-5)
    if not has_torch:
        assert output["backend"] == "python" and output["device"] == "cpu"
        assert FALLBACK in log
    else:
        assert output["backend"] == "torch" and output["device"] in {"cpu", "cuda"}
    assert bad.json()["status"] == "FAILED"
    assert "points" in bad.json()["error"]
