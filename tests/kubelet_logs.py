"""A kubelet's container-log endpoint for envtest (which runs no kubelet): the test plays
the kubelet's log API as it plays its pod status. A Node object names this server as its
kubelet (`InternalIP` 127.0.0.1, `daemonEndpoints.kubeletEndpoint.Port`), a pod bound to
that Node has its `pods/log` served by the real kube-apiserver from here
(`GET /containerLogs/{namespace}/{pod}/{container}`), with the options the kubelet takes
(`timestamps`, `sinceSeconds`, `limitBytes`, `tailLines`). HTTPS with a self-signed
certificate: the envtest apiserver has no kubelet CA, so it does not verify one."""

from __future__ import annotations

import contextlib
import http.server
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException


class KubeletLogs:
    """Container logs by (namespace, pod, container): lines stamped when added."""

    def __init__(self, cert_dir: Path) -> None:
        self.lines: dict[tuple[str, str, str], list[tuple[float, str]]] = {}
        self.reads = 0
        self._lock = threading.Lock()
        key, cert = cert_dir / "kubelet.key", cert_dir / "kubelet.crt"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                body = owner.read(tuple(parts[1:]), parse_qs(url.query))  # type: ignore[arg-type]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, namespace: str, pod: str, container: str, *lines: str) -> None:
        """The container writes `lines` now."""
        with self._lock:
            kept = self.lines.setdefault((namespace, pod, container), [])
            kept += [(time.time(), line) for line in lines]

    def read(self, where: tuple[str, str, str], query: dict[str, list[str]]) -> bytes:
        """The log as the kubelet answers it."""
        with self._lock:
            self.reads += 1
            rows = list(self.lines.get(where, []))
        if since := query.get("sinceSeconds"):
            rows = [(t, line) for t, line in rows if t >= time.time() - int(since[0])]
        if tail := query.get("tailLines"):
            rows = rows[-int(tail[0]) :] if int(tail[0]) else []
        stamped = query.get("timestamps", ["false"])[0] == "true"
        text = "".join(
            (
                f"{datetime.fromtimestamp(t, UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')} "
                if stamped
                else ""
            )
            + line
            + "\n"
            for t, line in rows
        )
        body = text.encode()
        if limit := query.get("limitBytes"):
            body = body[: int(limit[0])]
        return body

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def kubelet_node(kube: k8s.ApiClient, name: str, cert_dir: Path) -> Iterator[KubeletLogs]:
    """A Node `name` whose kubelet's log API is a `KubeletLogs` (deleted after)."""
    logs = KubeletLogs(cert_dir)
    core = k8s.CoreV1Api(kube)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    core.create_node(node)
    status = {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": logs.port}},
    }
    core.patch_node_status(name, {"status": status})
    try:
        yield logs
    finally:
        with contextlib.suppress(ApiException):
            core.delete_node(name)
        logs.stop()


def bind(kube: k8s.ApiClient, namespace: str, pod: str, node: str) -> None:
    """Schedule the pod on the node, as the scheduler would (envtest runs none)."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    k8s.CoreV1Api(kube).create_namespaced_pod_binding(pod, namespace, body, _preload_content=False)
