"""Cached models in dev mode (issue 34 item 5): an endpoint's `modelReferences` fetched once
with `huggingface_hub` from a real local HTTP server speaking the Hub's download API (via
`HF_ENDPOINT`), before a real `lockgate dev`'s workers start; a worker reads the file with
`huggingface_hub` offline. A missing (404) or gated (401) repository fails the endpoint,
naming it and the hub's answer."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.conftest import wait_until
from tests.devproc import REPO, DevProcess

SHA = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b'{"hidden_size": 8}\n'}
REPOS = {"acme/tiny"}


class Hub(BaseHTTPRequestHandler):
    """`GET /api/models/{repo}/revision/{rev}`, `GET /api/models/{repo}/tree/{sha}` and
    `HEAD|GET /{repo}/resolve/{rev}/{file}`: what `snapshot_download` asks."""

    seen: Counter = Counter()

    def log_message(self, *args) -> None:
        pass

    def _answer(self, body: bytes) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        Hub.seen[(self.command, self.path.split("?")[0])] += 1
        if (
            parts[:2] == ["api", "models"]
            and parts[4:5] == ["tree"]
            and "/".join(parts[2:4]) in REPOS
        ):
            tree = [
                {"type": "file", "path": name, "size": len(content),
                 "oid": hashlib.sha1(content).hexdigest()}
                for name, content in FILES.items()
            ]  # fmt: skip
            return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
        if parts[:2] == ["api", "models"] and "/".join(parts[2:4]) in REPOS:
            data = json.dumps(
                {"id": "/".join(parts[2:4]), "sha": SHA,
                 "siblings": [{"rfilename": name} for name in FILES]}
            ).encode()  # fmt: skip
            return self._send(200, data, {"Content-Type": "application/json"})
        if len(parts) >= 5 and parts[2] == "resolve" and "/".join(parts[:2]) in REPOS:
            content = FILES.get("/".join(parts[4:]))
            if content is not None:
                etag = hashlib.sha256(content).hexdigest()
                headers = {"ETag": f'"{etag}"', "X-Repo-Commit": SHA}
                return self._send(200, content if body else b"", headers, len(content))
        if self.path.startswith("/api/models/acme/gated/"):
            gated = {"X-Error-Code": "GatedRepo"}
            return self._send(401, b'{"error": "Access to model acme/gated is restricted"}', gated)
        self._send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})

    def _send(self, code: int, data: bytes, headers: dict, length: int | None = None) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


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


def record(dev: DevProcess, endpoint_id: str) -> dict:
    return requests.get(f"{dev.url}/v1/endpoints/{endpoint_id}", headers=dev.headers()).json()


def test_a_model_is_fetched_once_for_two_workers_which_read_it_offline(dev: DevProcess) -> None:
    ep = create(dev, name="tiny", modelReferences=["acme/tiny"], workersMin=2, workersMax=2)

    def cached() -> bool:
        conditions = {c["type"]: c for c in record(dev, ep["id"])["status"]["conditions"]}
        return conditions.get("ModelsCached", {}).get("status") == "True"

    wait_until(cached, "ModelsCached True", timeout=60)
    job = requests.post(
        f"{dev.url}/v2/{ep['id']}/runsync",
        json={"input": {"repo": "acme/tiny", "file": "config.json"}},
        headers=dev.headers(),
        timeout=60,
    ).json()
    assert job["status"] == "COMPLETED", job
    assert job["output"]["text"] == FILES["config.json"].decode()
    assert f"models--acme--tiny/snapshots/{SHA}/config.json" in job["output"]["path"]
    assert "/huggingface-cache/hub/" in job["output"]["path"]
    assert Hub.seen[("GET", "/api/models/acme/tiny/revision/main")] == 1  # not per worker
    assert Hub.seen[("GET", f"/acme/tiny/resolve/{SHA}/config.json")] == 1


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
