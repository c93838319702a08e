"""A git server on the test node's bridge (issue 48): git's own `git http-backend` (the
smart HTTP protocol, as GitHub and Gitea serve it) behind a small threaded HTTP server, so
that a build pod clones `http://<node address>:<port>/<name>.git` and nothing leaves this
machine. It also serves gates: `GET /gates/<name>` answers 404 until the test opens the
gate, then 200 (a worker's job can wait on one without any timing in the test).

    server = GitServer(root, host=NODE_IP)
    server.start()
    repo = server.repository("worker", {"Dockerfile": "...", "handler.py": "..."})
    repo.commit({"handler.py": "..."}, "second")       # pushed: the server has it
    repo.url                                            # http://10.233.0.1:PORT/worker.git
    server.open_gate("release")                         # GET /gates/release -> 200
    server.stop()
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from envtest import _free_ports
from gitrepo import commit, git, make_repo

GATES = "/gates/"


@dataclass
class Repository:
    """A work tree whose commits are pushed to the bare repository the server serves."""

    work: Path
    url: str

    def commit(self, files: dict[str, str], message: str, branch: str = "main") -> str:
        """Commit `files` on `branch` (made from main when new), push it; the commit hash."""
        git(self.work, "checkout", "--quiet", "-B", branch, f"origin/{branch}")
        commit(self.work, files, message)
        git(self.work, "push", "--quiet", "origin", f"HEAD:refs/heads/{branch}")
        git(self.work, "fetch", "--quiet", "origin")
        return git(self.work, "rev-parse", "HEAD")

    def head(self, branch: str) -> str:
        """The commit `branch` is at on the server."""
        return git(self.work, "rev-parse", f"origin/{branch}")

    def branch(self, name: str, files: dict[str, str], message: str) -> str:
        """A new branch from main with `files` committed, pushed; its commit hash."""
        git(self.work, "checkout", "--quiet", "-B", name, "origin/main")
        commit(self.work, files, message)
        git(self.work, "push", "--quiet", "--force", "origin", f"HEAD:refs/heads/{name}")
        git(self.work, "fetch", "--quiet", "origin")
        return git(self.work, "rev-parse", "HEAD")


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request's body: Content-Length, or chunked (git sends large POSTs chunked)."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        data = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                handler.rfile.readline()
                return bytes(data)
            data += handler.rfile.read(size)
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _http_backend(
    request: BaseHTTPRequestHandler, repos: Path
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request through `git http-backend` (CGI): status, headers and body."""
    path, _, query = request.path.partition("?")
    body = _read_body(request) if request.command == "POST" else b""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(repos),
        "GIT_HTTP_EXPORT_ALL": "1",
        "REQUEST_METHOD": request.command,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_TYPE": request.headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_ADDR": request.client_address[0],
    }
    if encoding := request.headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = encoding
    if protocol := request.headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = protocol
    done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                          check=False, timeout=60)  # fmt: skip
    separator = b"\r\n\r\n" if b"\r\n\r\n" in done.stdout else b"\n\n"
    head, _, payload = done.stdout.partition(separator)
    status, headers = 200, []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            headers.append((name, value.strip()))
    return status, headers, payload


class GitServer:
    """`git http-backend` for the bare repositories under `root/repos`, on `host`."""

    def __init__(self, root: Path, host: str) -> None:
        self.root = root
        self.repos = root / "repos"
        self.host = host
        self.port = 0
        self.gates: set[str] = set()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.repos.mkdir(parents=True, exist_ok=True)
        (self.port,) = _free_ports(1)
        self._server = ThreadingHTTPServer((self.host, self.port), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        shutil.rmtree(self.root, ignore_errors=True)

    def open_gate(self, name: str) -> None:
        self.gates.add(name)

    def gate_url(self, name: str) -> str:
        return f"{self.base_url}{GATES}{name}"

    def repository(self, name: str, files: dict[str, str], message: str = "first") -> Repository:
        """A new repository `name` (branch main, `files` in its first commit), served at
        `<base_url>/<name>.git`."""
        bare = self.repos / f"{name}.git"
        subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(bare)],
                       check=True)  # fmt: skip
        work = make_repo(self.root / "work" / name, files, message)
        git(work, "remote", "add", "origin", str(bare))
        git(work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
        git(work, "fetch", "--quiet", "origin")
        return Repository(work, f"{self.base_url}/{name}.git")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the build's log says what the clone did

            def do_GET(self) -> None:
                if self.path.startswith(GATES):
                    opened = self.path[len(GATES) :] in server.gates
                    self.send_response(200 if opened else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._backend()

            def do_POST(self) -> None:
                self._backend()

            def _backend(self) -> None:
                status, headers, payload = _http_backend(self, server.repos)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
