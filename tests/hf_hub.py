"""A real local HTTP server speaking the part of the Hugging Face Hub's API that
`huggingface_hub.snapshot_download` uses, for cached-model tests (`HF_ENDPOINT` points at
it): `GET /api/models/{repo}/revision/{rev}`, `GET /api/models/{repo}/tree/{sha}` and
`HEAD|GET /{repo}/resolve/{rev}/{file}`. `acme/tiny` is public; `acme/gated` and
`acme/locked` answer 401 unless the request carries `Bearer TOKEN`; `acme/slow`'s files
are held until `Hub.release` is set (a download in progress); anything else is 404.
`Hub.seen` counts the requests by (method, path)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SHA = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b'{"hidden_size": 8}\n'}
PUBLIC = {"acme/tiny", "acme/slow"}
SLOW = "acme/slow"  # its files are sent once `Hub.release` is set
GATED = {"acme/gated", "acme/locked"}
TOKEN = "hf_lockgate_test_token"


class Hub(BaseHTTPRequestHandler):
    """One request of `snapshot_download`'s, answered from `FILES`."""

    seen: Counter = Counter()
    release = threading.Event()

    def log_message(self, *args) -> None:
        pass

    def _readable(self, repo: str) -> bool | None:
        """True: served; False: gated without the token (401); None: unknown (404)."""
        if repo in PUBLIC:
            return True
        if repo in GATED:
            return self.headers.get("Authorization") == f"Bearer {TOKEN}"
        return None

    def _answer(self, body: bytes) -> None:
        path = self.path.split("?")[0]
        Hub.seen[(self.command, path)] += 1
        parts = path.strip("/").split("/")
        api = parts[:2] == ["api", "models"]
        repo = "/".join(parts[2:4] if api else parts[:2])
        readable = self._readable(repo)
        if readable is False:
            gated = {"X-Error-Code": "GatedRepo"}
            return self._send(
                401, f'{{"error": "Access to model {repo} is restricted"}}'.encode(), gated
            )
        if readable and api and parts[4:5] == ["tree"]:
            tree = [
                {"type": "file", "path": name, "size": len(content),
                 "oid": hashlib.sha1(content).hexdigest()}
                for name, content in FILES.items()
            ]  # fmt: skip
            return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
        if readable and api:
            data = json.dumps(
                {"id": repo, "sha": SHA, "siblings": [{"rfilename": name} for name in FILES]}
            ).encode()
            return self._send(200, data, {"Content-Type": "application/json"})
        if readable and len(parts) >= 5 and parts[2] == "resolve":
            content = FILES.get("/".join(parts[4:]))
            if content is not None and body and repo == SLOW:
                Hub.release.wait(300)
            if content is not None:
                etag = hashlib.sha256(content).hexdigest()
                headers = {"ETag": f'"{etag}"', "X-Repo-Commit": SHA}
                return self._send(200, content if body else b"", headers, len(content))
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


def file_path(repo: str, name: str) -> str:
    """The path `snapshot_download` GETs a file of `repo` at."""
    return f"/{repo}/resolve/{SHA}/{name}"


@contextmanager
def serving(host: str = "127.0.0.1") -> Iterator[str]:
    """The hub on `host` (a free port) while the block runs: its URL, for `HF_ENDPOINT`."""
    server = ThreadingHTTPServer((host, 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
