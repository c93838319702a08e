"""A password-protected container registry on the test node's bridge (issue 34).

Debian's ``docker-registry`` (the CNCF distribution registry) with htpasswd auth (a bcrypt
entry written by ``htpasswd -B``), over plain HTTP on the node's address, so that worker
pods pull from it only with the credential of an imagePullSecret; the node's containerd
is told that this registry speaks plain HTTP (:meth:`cluster.Cluster.trust_plain_http`).
Images are pushed from the archives ``hack/images.sh`` builds with ``skopeo copy``.

    registry = Registry(node)
    registry.start()
    ref = registry.push(archive, "lockgate/echo:1")   # "10.233.0.1:PORT/lockgate/echo:1"
    registry.stop()

The registry runs as one of the node's processes (its log beside theirs, stopped with the
node after a failed test) and keeps its data in the node's folder. Needs the Debian
packages ``docker-registry``, ``apache2-utils`` and ``skopeo`` (``make envtest``).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from cluster import NODE_IP, Cluster, ClusterError
from envtest import _free_ports

PROGRAMS = ("docker-registry", "htpasswd", "skopeo")
# skopeo (containers/image) keeps a blob cache here whatever else it is told.
CONTAINERS_DIR = Path("/var/lib/containers")


def missing_programs() -> list[str]:
    """The programs of this harness the machine lacks (empty when it has them all)."""
    return [f"`{p}`" for p in PROGRAMS if shutil.which(p) is None]


class Registry:
    """One registry on `NODE_IP`, a free port, with one user and a random password."""

    def __init__(self, node: Cluster, username: str = "lockgate-ci") -> None:
        self.node = node
        self.username = username
        self.password = secrets.token_urlsafe(18)
        self.host = ""  # address:port once started
        self.dir: Path | None = None

    def start(self) -> None:
        assert self.node.dir is not None
        (port,) = _free_ports(1)
        self.host = f"{NODE_IP}:{port}"
        self.dir = self.node.dir / "registry"
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        entry = subprocess.run(
            ["htpasswd", "-nbB", self.username, self.password],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        (self.dir / "htpasswd").write_text(entry)
        config = self.dir / "config.yml"
        config.write_text(
            f"""version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {self.dir / "data"}
http:
  addr: {self.host}
  secret: {secrets.token_hex(16)}
auth:
  htpasswd:
    realm: lockgate-test
    path: {self.dir / "htpasswd"}
"""
        )
        env = self.node.env
        exe = shutil.which("docker-registry") or "docker-registry"
        proc = env.spawn("docker-registry", "serve", str(config), exe=exe)
        env.wait_for("docker-registry", proc, lambda: self.anonymous_status() == 401)
        self.node.trust_plain_http(self.host)

    def anonymous_status(self) -> int:
        """The HTTP status of `GET /v2/` without credentials (0: no answer)."""
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return 0

    def push(self, archive: Path, name: str) -> str:
        """Copy a docker-archive into the registry as `name` (`repository:tag`); the image
        reference a Template names."""
        ref = f"{self.host}/{name}"
        made = not CONTAINERS_DIR.exists()
        try:
            proc = subprocess.run(
                ["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                 "--dest-creds", f"{self.username}:{self.password}",
                 f"docker-archive:{archive}", f"docker://{ref}"],
                capture_output=True, text=True, check=False, timeout=300,
            )  # fmt: skip
        finally:
            if made:
                shutil.rmtree(CONTAINERS_DIR, ignore_errors=True)
        if proc.returncode != 0:
            raise ClusterError(f"skopeo copy to {ref} failed: {proc.stderr.strip()}")
        return ref

    def stop(self) -> None:
        self.node.env.stop_process("docker-registry")
        if self.dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.dir)
