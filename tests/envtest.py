"""A real Kubernetes control plane on 127.0.0.1 for tests ("envtest").

Starts etcd and kube-apiserver (and, when asked, kube-controller-manager) from the binaries
that ``hack/envtest.sh`` builds once into ``$LOCKGATE_ENVTEST_DIR/bin`` (default
``~/.cache/lockgate-envtest/bin``). Every process runs in its own temporary directory, with
its output in a log file there, and is stopped and cleaned up by :meth:`EnvTest.stop`.

    with EnvTest() as env:
        api = kubernetes.client.CoreV1Api(env.api_client())
        ...

``python tests/envtest.py`` runs a self-check and prints ``envtest: OK``.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import ipaddress
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

CACHE_ENV = "LOCKGATE_ENVTEST_DIR"
KEEP_ENV = "LOCKGATE_ENVTEST_KEEP"  # set to 1 to keep the temp dir (logs, certs) after stop()
BINARIES = ("kube-apiserver", "kube-controller-manager", "etcd")
HOST = "127.0.0.1"
START_TIMEOUT = 60.0
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.0.0.0/24"
# As on OpenShift: setting an ownerReference with blockOwnerDeletion needs `update` on the
# owner's finalizers subresource, so the chart's RBAC is tested against it.
OWNER_REFERENCES = "OwnerReferencesPermissionEnforcement"


class EnvTestError(RuntimeError):
    """The control plane could not be started."""


def cache_dir() -> pathlib.Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "lockgate-envtest"


def binaries_dir() -> pathlib.Path | None:
    """The folder with kube-apiserver, kube-controller-manager and etcd, or None."""
    bin_dir = cache_dir() / "bin"
    for name in BINARIES:
        path = bin_dir / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            return None
    return bin_dir


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _tail(path: pathlib.Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvTestError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _write_certs(d: pathlib.Path, ips: tuple[str, ...]) -> None:
    """Self-signed CA, a serving cert for `ips` and localhost, an admin client cert
    (system:masters), a service-account key pair."""
    ec = EC_KEY
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
        "-subj", "/CN=lockgate-envtest-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
        cwd=d,
    )  # fmt: skip
    (d / "serving.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        f"subjectAltName={','.join(f'IP:{ip}' for ip in ips)},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        "DNS:kubernetes.default.svc.cluster.local\n"
    )
    _openssl(
        "req", "-new", *ec, "-keyout", "serving.key", "-out", "serving.csr",
        "-subj", "/CN=kube-apiserver", cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "serving.crt", "-days", "3650",
        "-extfile", "serving.ext", cwd=d,
    )  # fmt: skip
    sign_client_cert(d, "admin", "/O=system:masters/CN=lockgate-admin")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def sign_client_cert(d: pathlib.Path, name: str, subject: str) -> None:
    """`name.crt`/`name.key` in `d`: a client certificate for `subject`, signed by `d`'s CA."""
    (d / "client.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _openssl(
        "req", "-new", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", subject, cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "3650",
        "-extfile", "client.ext", cwd=d,
    )  # fmt: skip


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class EnvTest:
    """etcd + kube-apiserver (+ kube-controller-manager) on 127.0.0.1, in a temp dir.

    With `node=True` the apiserver serves a real node (tests/cluster.py): it listens on
    `host` (an address pods can reach), admits ServiceAccounts and keeps the `kubernetes`
    Service's endpoints, and reaches kubelets with the admin client certificate."""

    def __init__(
        self,
        bin_dir: pathlib.Path | None = None,
        *,
        host: str = HOST,
        service_cidr: str = SERVICE_CIDR,
        node: bool = False,
    ) -> None:
        self.bin_dir = bin_dir or binaries_dir()
        self.host = host
        self.service_cidr = service_cidr
        self.node = node
        self.dir: pathlib.Path | None = None
        self.server = ""
        self.token = ""
        self.ca_file: pathlib.Path | None = None
        self.kubeconfig: pathlib.Path | None = None
        self.etcd_url = ""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- public API ------------------------------------------------------------------------

    def start(self, *, controller_manager: bool = False) -> None:
        if self._procs:
            raise EnvTestError("already started")
        if self.bin_dir is None:
            raise EnvTestError(
                f"envtest binaries not found in {cache_dir() / 'bin'}: run `bash hack/envtest.sh`"
            )
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="lockgate-envtest-"))
        atexit.register(self.stop)
        try:
            first_service_ip = str(next(ipaddress.ip_network(self.service_cidr).hosts()))
            _write_certs(self.dir, tuple(dict.fromkeys((HOST, self.host, first_service_ip))))
            self.ca_file = self.dir / "ca.crt"
            self.token = secrets.token_urlsafe(32)
            (self.dir / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            if controller_manager:
                self.start_controller_manager()
        except BaseException:
            self.stop()
            raise

    def start_controller_manager(self) -> None:
        """Start kube-controller-manager (garbage collector, ReplicaSets, ...) if not running."""
        if "kube-controller-manager" in self._procs:
            return
        assert self.dir is not None and self.kubeconfig is not None
        (port,) = _free_ports(1)
        kubeconfig = str(self.kubeconfig)
        proc = self.spawn(
            "kube-controller-manager",
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={HOST}",
            f"--secure-port={port}",
            "--port=0",
            f"--cert-dir={self.dir / 'kcm-certs'}",
            "--leader-elect=false",
            "--controllers=*",
            f"--service-account-private-key-file={self.dir / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            "--cluster-name=lockgate-envtest",
        )
        self.wait_healthy("kube-controller-manager", proc, port)

    def wait_healthy(self, name: str, proc: subprocess.Popen[bytes], port: int) -> None:
        """Wait for a component's https://127.0.0.1:`port`/healthz (self-signed) to say ok."""
        url = f"https://{HOST}:{port}/healthz"
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed in --cert-dir
        self.wait_for(name, proc, lambda: _get(url, ctx) == "ok")

    def process(self, name: str) -> subprocess.Popen[bytes]:
        return self._procs[name]

    def stop_process(self, name: str) -> None:
        """Stop one process started by spawn() (SIGTERM, then SIGKILL), if it runs."""
        proc = self._procs.pop(name, None)
        if proc is not None:
            _terminate(proc)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        for name in reversed(list(self._procs)):  # the last started first
            self.stop_process(name)
        if self.dir is not None and not os.environ.get(KEEP_ENV):
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` authenticated as an admin (system:masters)."""
        import kubernetes.client

        cfg = kubernetes.client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return kubernetes.client.ApiClient(cfg)

    def log_file(self, name: str) -> pathlib.Path:
        assert self.dir is not None
        return self.dir / f"{name}.log"

    def __enter__(self) -> EnvTest:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------

    def spawn(self, name: str, *args: str, exe: str = "") -> subprocess.Popen[bytes]:
        """Start `name` (from the binaries folder, or `exe`) with its output in its log."""
        assert self.dir is not None and self.bin_dir is not None
        log = open(self.log_file(name), "ab")  # noqa: SIM115 - handed to the child
        in_main = threading.current_thread() is threading.main_thread()
        try:
            proc = subprocess.Popen(
                [exe or str(self.bin_dir / name), *args],
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Die with this process when it is the main thread that starts them, so a
                # killed test run leaves no control plane behind.
                preexec_fn=_die_with_parent if in_main else None,
            )
        finally:
            log.close()
        self._procs[name] = proc
        return proc

    def _start_etcd(self) -> None:
        assert self.dir is not None
        client, peer = _free_ports(2)
        self.etcd_url = f"http://{HOST}:{client}"
        proc = self.spawn(
            "etcd",
            "--name=envtest",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://{HOST}:{peer}",
            f"--initial-advertise-peer-urls=http://{HOST}:{peer}",
            f"--initial-cluster=envtest=http://{HOST}:{peer}",
            "--initial-cluster-state=new",
            "--log-level=warn",
        )
        url = f"{self.etcd_url}/health"
        self.wait_for("etcd", proc, lambda: '"true"' in _get(url))

    def _start_apiserver(self) -> None:
        assert self.dir is not None
        (port,) = _free_ports(1)
        d = self.dir
        node_args = (
            (
                "--endpoint-reconciler-type=lease",
                f"--enable-admission-plugins=ServiceAccount,{OWNER_REFERENCES}",
                "--kubelet-preferred-address-types=InternalIP",  # no DNS for node names
            )
            if self.node
            else (
                "--endpoint-reconciler-type=none",
                f"--enable-admission-plugins={OWNER_REFERENCES}",
                "--disable-admission-plugins=ServiceAccount",
            )
        )
        proc = self.spawn(
            "kube-apiserver",
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            f"--secure-port={port}",
            f"--cert-dir={d / 'apiserver-certs'}",
            f"--tls-cert-file={d / 'serving.crt'}",
            f"--tls-private-key-file={d / 'serving.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            *node_args,
            f"--kubelet-client-certificate={d / 'admin.crt'}",
            f"--kubelet-client-key={d / 'admin.key'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allow-privileged=true",
            "--profiling=false",
        )
        self.server = f"https://{self.host}:{port}"
        ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
        url = f"{self.server}/readyz"
        self.wait_for("kube-apiserver", proc, lambda: _get(url, ctx, self.token) == "ok")

    def wait_for(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        ready: Any,
        timeout: float = START_TIMEOUT,
    ) -> None:
        """Poll `ready()` until true; fail with `name`'s log if `proc` exits or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise EnvTestError(
                    f"{name} exited with code {proc.returncode}; {self._log_tail(name)}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise EnvTestError(
                    f"{name} not ready after {timeout:.0f} s; {self._log_tail(name)}"
                )
            time.sleep(0.25)

    def _log_tail(self, name: str) -> str:
        path = self.log_file(name)
        return f"last lines of {path} (set {KEEP_ENV}=1 to keep it):\n{_tail(path)}"

    def _write_kubeconfig(self) -> None:
        assert self.dir is not None and self.ca_file is not None
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "envtest",
                    "context": {"cluster": "envtest", "user": "admin", "namespace": "default"},
                }
            ],
            "current-context": "envtest",
            "preferences": {},
        }
        self.kubeconfig = self.dir / "kubeconfig"
        # JSON is YAML: every kubeconfig reader (client-go, kubernetes, kopf) takes it.
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)


def _get(url: str, ctx: ssl.SSLContext | None = None, token: str = "") -> str:
    """The body of a GET, or "" on any error."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
            return resp.read().decode(errors="replace").strip()
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return ""


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# -- self-check: python tests/envtest.py ---------------------------------------------------


def _wait_for(what: str, check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise EnvTestError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _check_configmap(client: Any) -> None:
    from kubernetes import client as k

    core = k.CoreV1Api(client)
    body = k.V1ConfigMap(metadata=k.V1ObjectMeta(name="envtest-check"), data={"hello": "world"})
    core.create_namespaced_config_map("default", body)
    got = core.read_namespaced_config_map("envtest-check", "default")
    assert got.data == {"hello": "world"}, got.data
    print("envtest: ConfigMap created and read back")


def _check_custom_object(client: Any) -> None:
    from kubernetes import client as k

    schema = k.V1JSONSchemaProps(
        type="object",
        properties={
            "spec": k.V1JSONSchemaProps(type="object", x_kubernetes_preserve_unknown_fields=True)
        },
    )
    crd = k.V1CustomResourceDefinition(
        metadata=k.V1ObjectMeta(name="widgets.envtest.lockgate.dev"),
        spec=k.V1CustomResourceDefinitionSpec(
            group="envtest.lockgate.dev",
            scope="Namespaced",
            names=k.V1CustomResourceDefinitionNames(
                plural="widgets", singular="widget", kind="Widget"
            ),
            versions=[
                k.V1CustomResourceDefinitionVersion(
                    name="v1", served=True, storage=True,
                    schema=k.V1CustomResourceValidation(open_apiv3_schema=schema),
                )
            ],
        ),
    )  # fmt: skip
    ext = k.ApiextensionsV1Api(client)
    ext.create_custom_resource_definition(crd)

    def established() -> bool:
        got = ext.read_custom_resource_definition("widgets.envtest.lockgate.dev")
        conds = (got.status and got.status.conditions) or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    _wait_for("the CRD to be established", established)
    custom = k.CustomObjectsApi(client)
    obj = {
        "apiVersion": "envtest.lockgate.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3, "tags": ["a", "b"]},
    }
    args = ("envtest.lockgate.dev", "v1", "default", "widgets")
    # Creating a custom object is what crashed with the vendored reflect2 1.0.1 under Go 1.19.
    _wait_for("the widgets API", lambda: _try(lambda: custom.list_namespaced_custom_object(*args)))
    custom.create_namespaced_custom_object(*args, obj)
    got = custom.get_namespaced_custom_object(*args, "w1")
    assert got["spec"] == {"size": 3, "tags": ["a", "b"]}, got
    print("envtest: CustomResourceDefinition and custom object created and read back")


def _check_garbage_collection(client: Any) -> None:
    from kubernetes import client as k

    core = k.CoreV1Api(client)
    owner = core.create_namespaced_config_map(
        "default", k.V1ConfigMap(metadata=k.V1ObjectMeta(name="envtest-owner"))
    )
    ref = k.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="envtest-owner", uid=owner.metadata.uid
    )
    meta = k.V1ObjectMeta(name="envtest-dependent", owner_references=[ref])
    dependent = k.V1ConfigMap(metadata=meta)
    core.create_namespaced_config_map("default", dependent)
    core.delete_namespaced_config_map("envtest-owner", "default")

    def collected() -> bool:
        return not _try(lambda: core.read_namespaced_config_map("envtest-dependent", "default"))

    _wait_for("garbage collection by kube-controller-manager", collected, timeout=90)
    print("envtest: kube-controller-manager garbage-collected a dependent object")


def _try(call: Any) -> bool:
    try:
        call()
    except Exception:
        return False
    return True


def main() -> None:
    t0 = time.monotonic()
    with EnvTest() as env:
        print(f"envtest: kube-apiserver ready at {env.server} in {time.monotonic() - t0:.1f} s")
        print(f"envtest: kubeconfig {env.kubeconfig}")
        t1 = time.monotonic()
        env.start_controller_manager()
        print(f"envtest: kube-controller-manager ready in {time.monotonic() - t1:.1f} s")
        with env.api_client() as client:
            _check_configmap(client)
            _check_custom_object(client)
            _check_garbage_collection(client)
    print(f"envtest: OK ({time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
