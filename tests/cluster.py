"""A real one-node Kubernetes on this machine for tests: kubelet, containerd, pods.

On top of envtest's control plane (etcd, kube-apiserver, kube-controller-manager) it starts
kube-scheduler, containerd (Debian's), a kubelet, kube-proxy and a small DNS server, on a
bridge of its own (``lgbr0``, 10.233.0.1/24) that has no route out: a pod reaches the node's
address, other pods and Service IPs (10.234.0.0/24), and nothing else. Images are imported
from the archives ``hack/images.sh`` builds (``tests/images.py``); nothing is pulled, but
from a registry a test runs on the bridge itself (``tests/registry.py``, plain HTTP once
:meth:`Cluster.trust_plain_http` names it).

    with Cluster() as cluster:
        subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig, "get", "nodes"])

Everything it starts or writes is undone by :meth:`Cluster.stop`, even after a failed test:
processes (by PID, and every process left in the pods' cgroups), mounts under its folder,
the bridge and its routing rule, kube-proxy's iptables rules, the files the kubelet and
containerd write outside their folders, and the host sysctls the kubelet and kube-proxy
change. A run killed outright is cleaned up by the next start (the state file names what
it left). ``python tests/cluster.py`` starts one, runs a pod and prints ``cluster: OK``.
Needs root, containerd, runc, the CNI plugins and iptables (Debian packages), and the
binaries of ``hack/envtest.sh``.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import signal
import socketserver
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from envtest import EnvTest, EnvTestError, _free_ports, binaries_dir, sign_client_cert

BRIDGE = "lgbr0"
NODE_IP = "10.233.0.1"
POD_CIDR = "10.233.0.0/24"
SERVICE_CIDR = "10.234.0.0/24"
ROUTE_TABLE = "233"  # the bridge's own routing table: its subnet, else unreachable
NODE_NAME = "lockgate-node"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/lockgate-test/pause:3.2"
STATE_FILE = pathlib.Path("/run/lockgate-cluster.json")  # what a killed run left behind
# One node per host (one bridge, one state file): a second test run waits for the first.
LOCK_FILE = pathlib.Path("/run/lockgate-cluster.lock")
READY_TIMEOUT = 120.0
# Host sysctls the kubelet (overcommit, panics) and kube-proxy (route_localnet) set.
SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "net/ipv4/conf/all/route_localnet",
)
# Folders the 1.20 kubelet and containerd write to whatever their configured roots are.
OUTSIDE = (
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/kubelet",
    "/run/containerd",
    "/var/run/netns",
    "/var/lib/cni",
)
CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")
HOST_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "runc", "iptables", "ip", "ctr")
CNI_DIR = pathlib.Path("/usr/lib/cni")


class ClusterError(EnvTestError):
    """The node could not be started."""


def missing_parts() -> list[str]:
    """What this machine lacks to run a node (empty when it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    bin_dir = binaries_dir()
    node_bins = ("kubelet", "kube-scheduler", "kube-proxy", "kubectl", "pause")
    if bin_dir is None or not all((bin_dir / b).is_file() for b in node_bins):
        missing.append("the Kubernetes node binaries (make envtest)")
    missing += [f"`{p}`" for p in HOST_PROGRAMS if shutil.which(p) is None]
    if not (CNI_DIR / "bridge").is_file():
        missing.append("the CNI plugins (containernetworking-plugins)")
    return missing


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _sysctl_path(name: str) -> pathlib.Path:
    return pathlib.Path("/proc/sys") / name


def _exited(pid: int) -> bool:
    """True when `pid` is gone or a zombie (orphans are reaped late here: notes)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _kill_all(pids: set[int], timeout: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(not _exited(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _pids_mentioning(text: str) -> set[int]:
    """Processes whose command line contains `text` (containerd shims name the socket)."""
    found = set()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (entry / "cmdline").read_bytes():
                found.add(int(entry.name))
    found.discard(os.getpid())
    return found


def _cgroup_dirs() -> list[pathlib.Path]:
    """Every cgroup folder of the pods (`kubepods` in each hierarchy), deepest first."""
    dirs = []
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / "kubepods"
        if top.is_dir():
            dirs += [pathlib.Path(d) for d, _, _ in os.walk(top)]
    return sorted(dirs, key=lambda d: len(d.parts), reverse=True)


def _cgroup_pids() -> set[int]:
    pids = set()
    for d in _cgroup_dirs():
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
    return pids


def _unmount_under(root: str) -> None:
    """Unmount everything mounted at or below `root`, deepest first."""
    for _ in range(5):
        mounts = [
            line.split()[4]
            for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4] == root or line.split()[4].startswith(root.rstrip("/") + "/")
        ]
        if not mounts:
            return
        for point in sorted(mounts, key=len, reverse=True):
            _run("umount", "-l", point, check=False)


class DnsServer:
    """Cluster DNS on the node address: `<service>.<namespace>.svc.<domain>` → the Service's
    ClusterIP (a headless Service: its ready endpoints' addresses), and
    `<hostname>.<headless service>.<namespace>.svc.<domain>` → that pod's address (a
    StatefulSet's pod names), looked up in the apiserver; every other name is NXDOMAIN
    (pods have no upstream)."""

    def __init__(self, api_get: Any, host: str, port: int = 53) -> None:
        self.api_get = api_get
        self.host, self.port = host, port
        self._server: socketserver.ThreadingUDPServer | None = None

    def start(self) -> None:
        handler = self._handler()
        self._server = socketserver.ThreadingUDPServer((self.host, self.port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def addresses(self, name: str) -> list[str]:
        labels = name.rstrip(".").lower().split(".")
        suffix = ["svc", *CLUSTER_DOMAIN.split(".")]
        if len(labels) == 3 + len(suffix) and labels[3:] == suffix:
            return self.pod_addresses(*labels[:3])
        if len(labels) != 2 + len(suffix) or labels[2:] != suffix:
            return []
        service, namespace = labels[:2]
        svc = self.api_get(f"/api/v1/namespaces/{namespace}/services/{service}")
        ip = (svc or {}).get("spec", {}).get("clusterIP")
        if ip and ip != "None":
            return [ip]
        if svc:
            eps = self.api_get(f"/api/v1/namespaces/{namespace}/endpoints/{service}") or {}
            return [a["ip"] for s in eps.get("subsets") or [] for a in s.get("addresses") or []]
        return []

    def pod_addresses(self, hostname: str, service: str, namespace: str) -> list[str]:
        """The address of the pod `hostname` among a headless Service's endpoints (ready
        or not: the Service may publish both)."""
        eps = self.api_get(f"/api/v1/namespaces/{namespace}/endpoints/{service}") or {}
        return [
            a["ip"]
            for s in eps.get("subsets") or []
            for a in (s.get("addresses") or []) + (s.get("notReadyAddresses") or [])
            if a.get("hostname") == hostname
        ]

    def _handler(self) -> type[socketserver.BaseRequestHandler]:
        from dnslib import QTYPE, RCODE, RR, A, DNSRecord

        dns = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                try:
                    query = DNSRecord.parse(data)
                except Exception:
                    return
                reply = query.reply()
                name = str(query.q.qname)
                ips = dns.addresses(name)
                if not ips:
                    reply.header.rcode = RCODE.NXDOMAIN
                elif query.q.qtype in (QTYPE.A, QTYPE.ANY):
                    for ip in ips:
                        reply.add_answer(RR(name, QTYPE.A, rdata=A(ip), ttl=5))
                sock.sendto(reply.pack(), self.client_address)

        return Handler


class Cluster:
    """One real node: envtest's control plane + scheduler, containerd, kubelet, kube-proxy,
    DNS, on the bridge `lgbr0`. `kubeconfig` is an admin kubeconfig (path)."""

    def __init__(self) -> None:
        self.env = EnvTest(host=NODE_IP, service_cidr=SERVICE_CIDR, node=True)
        self.dir: pathlib.Path | None = None
        self.kubeconfig = ""
        self.socket = ""
        self.timings: dict[str, float] = {}
        self._dns: DnsServer | None = None
        self._sysctls: dict[str, str] = {}
        self._absent: list[str] = []
        self._chains: set[str] = set()
        self._lock: Any = None

    # -- public API ------------------------------------------------------------------------

    def start(self) -> None:
        if missing := missing_parts():
            raise ClusterError("cannot run a node here: missing " + ", ".join(missing))
        self._take_host_lock()
        clean_stale()
        t0 = time.monotonic()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="lockgate-cluster-"))
        self._sysctls = {n: _sysctl_path(n).read_text().strip() for n in SYSCTLS}
        self._absent = [p for p in OUTSIDE if not os.path.lexists(p)]
        self._chains = kube_chains()
        self._save_state()
        atexit.register(self.stop)
        try:
            self._make_bridge()
            self.env.start(controller_manager=True)
            self.kubeconfig = str(self.env.kubeconfig)
            self._start_scheduler()
            self._dns = DnsServer(self.api_get, NODE_IP)
            self._dns.start()
            self._start_containerd()
            self._import_images()
            self._start_kubelet()
            self._start_kube_proxy()
            self._wait_ready()
            self._restore_sysctls()
        except BaseException:
            self.stop()
            raise
        self.timings["node Ready"] = time.monotonic() - t0

    def stop(self) -> None:
        """Stop everything and undo every change to the host (idempotent)."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self.dir is None:
            self._release_host_lock()
            return
        for name in ("kube-proxy", "kubelet"):
            self.env.stop_process(name)
        self._kill_pods()
        self.env.stop_process("containerd")
        _kill_all(_pids_mentioning(str(self.dir)))
        if self._dns is not None:
            self._dns.stop()
        self.env.stop_process("kube-scheduler")
        self._clean_kube_proxy_rules()
        self.env.stop()
        keep = bool(os.environ.get("LOCKGATE_ENVTEST_KEEP"))
        cleanup_host(str(self.dir), self._absent, self._sysctls, self._chains, keep=keep)
        STATE_FILE.unlink(missing_ok=True)
        self.dir = None
        self._release_host_lock()

    def _take_host_lock(self) -> None:
        """Wait (up to 40 min) while another process runs a node on this host."""
        self._lock = LOCK_FILE.open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            print(f"cluster: another node runs on this host; waiting for {LOCK_FILE}", flush=True)
        deadline = time.monotonic() + 2400
        while time.monotonic() < deadline:
            time.sleep(2)
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
        self._lock.close()
        self._lock = None
        raise ClusterError(f"another node kept {LOCK_FILE} for 40 min")

    def _release_host_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing drops the flock
            self._lock = None

    def api_get(self, path: str) -> dict[str, Any] | None:
        """GET an apiserver path as the admin; None on 404 or any error."""
        req = urllib.request.Request(self.env.server + path)
        req.add_header("Authorization", f"Bearer {self.env.token}")
        ctx = ssl.create_default_context(cafile=str(self.env.ca_file))
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                return json.load(resp)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> str:
        """Run kubectl (the cluster's, 1.20) with the admin kubeconfig; its stdout."""
        assert self.env.bin_dir is not None
        proc = subprocess.run(
            [str(self.env.bin_dir / "kubectl"), "--kubeconfig", self.kubeconfig, *args],
            capture_output=True, text=True, check=False, timeout=timeout, input=input,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def log_file(self, name: str) -> pathlib.Path:
        return self.env.log_file(name)

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's processes (`containerd://<id>` as a pod status names it)."""
        self._ctr("tasks", "kill", "--signal", "SIGKILL", container_id.rpartition("/")[2])

    def tag_image(self, source: str, target: str) -> None:
        """Give an imported image a second name (a new tag a `helm upgrade` can roll to)."""
        self._ctr("images", "tag", "--force", source, target)

    def remove_image(self, name: str) -> None:
        """Forget an imported image: a pod naming it then has the kubelet pull it, which
        fails (nothing can be pulled here). Running containers of it go on."""
        self._ctr("images", "rm", name)

    def trust_plain_http(self, host: str) -> None:
        """Let the node pull from the registry at `host` (`address:port`) over plain HTTP
        (a test registry on the node's bridge): containerd reads `<host>/hosts.toml` in its
        CRI registry `config_path` at each pull. Credentials still come from the pod's
        imagePullSecrets."""
        url = f"http://{host}"
        hosts = f'server = "{url}"\n[host."{url}"]\n  capabilities = ["pull", "resolve"]\n'
        self._write(f"containerd/certs.d/{host}/hosts.toml", hosts)

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- start -----------------------------------------------------------------------------

    def _save_state(self) -> None:
        state = {"dir": str(self.dir), "absent": self._absent, "sysctls": self._sysctls,
                 "chains": sorted(self._chains)}  # fmt: skip
        STATE_FILE.write_text(json.dumps(state))

    def _make_bridge(self) -> None:
        """The bridge pods attach to. Forwarding on it alone (Service traffic between pods
        is routed by the node), and a routing rule that lets nothing arriving on it leave
        by any other interface: no route out."""
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for key, value in (("forwarding", "1"), ("send_redirects", "0")):
            _sysctl_path(f"net/ipv4/conf/{BRIDGE}/{key}").write_text(value)
        _run("ip", "route", "add", POD_CIDR, "dev", BRIDGE, "table", ROUTE_TABLE)
        _run("ip", "route", "add", "unreachable", "default", "table", ROUTE_TABLE)
        _run("ip", "rule", "add", "iif", BRIDGE, "lookup", ROUTE_TABLE, "priority", "233")
        # The node itself reaches Service IPs from its bridge address (kube-proxy DNATs them).
        _run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE, "src", NODE_IP)

    def _write(self, name: str, text: str) -> pathlib.Path:
        assert self.dir is not None
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _start_scheduler(self) -> None:
        (port,) = _free_ports(1)
        proc = self.env.spawn(
            "kube-scheduler",
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--port=0",
            "--leader-elect=false",
        )
        self.env.wait_healthy("kube-scheduler", proc, port)

    def _start_containerd(self) -> None:
        assert self.dir is not None
        d = self.dir / "containerd"
        self.socket = str(d / "containerd.sock")
        cni = {
            "cniVersion": "0.4.0",
            "name": "lockgate",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.dir / "cni" / "ipam"),
                        "ranges": [[{"subnet": POD_CIDR, "rangeStart": "10.233.0.10",
                                     "gateway": NODE_IP}]],
                        # Service IPs only: a pod has no default route.
                        "routes": [{"dst": SERVICE_CIDR, "gw": NODE_IP}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }  # fmt: skip
        self._write("cni/net.d/10-lockgate.conflist", json.dumps(cni, indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{d / "root"}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{d / "ttrpc.sock"}"
[debug]
  address = "{d / "debug.sock"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # This VM withholds CAP_SYS_RESOURCE: a sandbox's oom_score_adj of -998 is refused.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [{cri}.cni]
    bin_dir = "{CNI_DIR}"
    conf_dir = "{self.dir / "cni" / "net.d"}"
  # Per-registry settings, read at each pull: `trust_plain_http` writes them.
  [{cri}.registry]
    config_path = "{d / "certs.d"}"
"""
        path = self._write("containerd/config.toml", config)
        proc = self.env.spawn("containerd", "--config", str(path), exe=shutil.which("containerd"))
        self.env.wait_for("containerd", proc, lambda: self._ctr("version", check=False) == 0)

    def _ctr(self, *args: str, check: bool = True) -> int:
        proc = _run("ctr", "-a", self.socket, "-n", "k8s.io", *args, check=check)
        return proc.returncode

    def _import_images(self) -> None:
        from images import import_all

        t0 = time.monotonic()
        import_all(self.socket)
        self.timings["images imported"] = time.monotonic() - t0

    def _start_kubelet(self) -> None:
        assert self.dir is not None and self.env.dir is not None
        cert_dir = self.env.dir
        sign_client_cert(cert_dir, "node", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
        kubeconfig = self._node_kubeconfig("kubelet", cert_dir / "node.crt", cert_dir / "node.key")
        resolv = self._write("kubelet/resolv.conf", "")  # pods get no upstream DNS
        (port, healthz) = _free_ports(2)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(cert_dir / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [NODE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv),
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "makeIPTablesUtilChains": False,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "4s",
            # A memory-backed emptyDir's tmpfs gets its sizeLimit as size (the default from
            # 1.22 on; alpha, so off, in 1.20): worker pods' /dev/shm (tests/test_node_pods.py).
            "featureGates": {"SizeMemoryBackedVolumes": True},
        }
        path = self._write("kubelet/config.json", json.dumps(config, indent=2))
        proc = self.env.spawn(
            "kubelet",
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.socket}",
            f"--root-dir={self.dir / 'kubelet' / 'root'}",
            f"--cert-dir={self.dir / 'kubelet' / 'pki'}",
            f"--node-ip={NODE_IP}",
            f"--hostname-override={NODE_NAME}",
            "--v=1",
        )
        url = f"http://127.0.0.1:{healthz}/healthz"
        self.env.wait_for("kubelet", proc, lambda: _get_text(url) == "ok")

    def _node_kubeconfig(self, name: str, cert: pathlib.Path, key: pathlib.Path) -> str:
        assert self.env.ca_file is not None
        cluster = {"server": self.env.server, "certificate-authority": str(self.env.ca_file)}
        user = {"client-certificate": str(cert), "client-key": str(key)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        return str(self._write(f"{name}/kubeconfig", json.dumps(config)))

    def _start_kube_proxy(self) -> None:
        (healthz, metrics) = _free_ports(2)
        proc = self.env.spawn(
            "kube-proxy",
            f"--kubeconfig={self.kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            f"--bind-address={NODE_IP}",
            f"--cluster-cidr={POD_CIDR}",
            "--proxy-mode=iptables",
            # Leave the host's conntrack table settings and this process's OOM score alone.
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--oom-score-adj=0",
            f"--healthz-bind-address=127.0.0.1:{healthz}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            "--iptables-sync-period=30s",
            "--iptables-min-sync-period=0s",
        )
        url = f"http://127.0.0.1:{healthz}/healthz"
        self.env.wait_for("kube-proxy", proc, lambda: '"lastUpdated"' in _get_text(url))

    def _wait_ready(self) -> None:
        def ready() -> bool:
            node = self.api_get(f"/api/v1/nodes/{NODE_NAME}") or {}
            conditions = node.get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        proc = self.env.process("kubelet")
        self.env.wait_for("kubelet", proc, ready, timeout=READY_TIMEOUT)

    def _restore_sysctls(self) -> None:
        for name, value in self._sysctls.items():
            with contextlib.suppress(OSError):
                _sysctl_path(name).write_text(value)

    # -- stop ------------------------------------------------------------------------------

    def _kill_pods(self) -> None:
        """SIGKILL every process in the pods' cgroups (containers and sandboxes)."""
        for _ in range(3):
            pids = _cgroup_pids()
            if not pids:
                break
            _kill_all(pids)

    def _clean_kube_proxy_rules(self) -> None:
        assert self.env.bin_dir is not None
        with contextlib.suppress(Exception):
            subprocess.run(
                [str(self.env.bin_dir / "kube-proxy"), "--cleanup"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip


def _get_text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.read().decode(errors="replace").strip()
    except (OSError, urllib.error.URLError):
        return ""


IPTABLES_TABLES = ("filter", "nat", "mangle")


def kube_chains() -> set[str]:
    """`table/chain` of every KUBE-* iptables chain (kube-proxy's)."""
    chains = set()
    for table in IPTABLES_TABLES:
        for line in _run("iptables", "-t", table, "-S", check=False).stdout.splitlines():
            if line.startswith("-N KUBE-"):
                chains.add(f"{table}/{line.split()[1]}")
    return chains


def remove_kube_chains(keep: set[str]) -> None:
    """Delete the KUBE-* chains not in `keep` (and the rules jumping to them): what
    `kube-proxy --cleanup` leaves behind."""
    for table in IPTABLES_TABLES:
        gone = {c.split("/", 1)[1] for c in kube_chains() - keep if c.startswith(f"{table}/")}
        if not gone:
            continue
        for line in _run("iptables", "-t", table, "-S", check=False).stdout.splitlines():
            words = line.split()
            if words[0] == "-A" and "-j" in words and words[words.index("-j") + 1] in gone:
                _run("iptables", "-t", table, "-D", *words[1:], check=False)
        for chain in gone:
            _run("iptables", "-t", table, "-F", chain, check=False)
        for chain in gone:
            _run("iptables", "-t", table, "-X", chain, check=False)


def cleanup_host(
    root: str,
    absent: list[str],
    sysctls: dict[str, str],
    chains: set[str] | None = None,
    *,
    keep: bool = False,
) -> None:
    """Undo what a node changed on the host: mounts under `root`, the pods' cgroups, the
    bridge, its rule and routes, kube-proxy's iptables chains (all but `chains`), the
    folders in `absent` (created by the kubelet and containerd), the sysctls; `root`
    itself unless `keep`."""
    _kill_all(_cgroup_pids() | _pids_mentioning(root))
    _unmount_under(root)
    for netns in pathlib.Path("/var/run/netns").glob("cni-*"):
        _run("umount", "-l", str(netns), check=False)
        netns.unlink(missing_ok=True)
    for d in _cgroup_dirs():
        with contextlib.suppress(OSError):
            d.rmdir()
    _run("ip", "rule", "del", "iif", BRIDGE, "lookup", ROUTE_TABLE, "priority", "233", check=False)
    _run("ip", "route", "flush", "table", ROUTE_TABLE, check=False)
    _run("ip", "link", "del", BRIDGE, check=False)
    remove_kube_chains(chains or set())
    for path in absent:
        _unmount_under(path)
        shutil.rmtree(path, ignore_errors=True)
    for name, value in sysctls.items():
        with contextlib.suppress(OSError):
            _sysctl_path(name).write_text(value)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


def clean_stale() -> None:
    """Clean up after a run that was killed before its stop() ran."""
    try:
        state = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        state = None
    if state is None and not pathlib.Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    state = state or {"dir": "/nonexistent-lockgate-cluster", "absent": [], "sysctls": {}}
    _kill_all(_pids_mentioning(state["dir"]))
    cleanup_host(state["dir"], state["absent"], state["sysctls"], set(state.get("chains", [])))
    STATE_FILE.unlink(missing_ok=True)


# -- self-check: python tests/cluster.py ---------------------------------------------------


def main() -> None:
    t0 = time.monotonic()
    with Cluster() as cluster:
        print(f"cluster: node Ready in {cluster.timings['node Ready']:.1f} s ({cluster.timings})")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "check", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
            },
        }
        path = cluster._write("check-pod.json", json.dumps(pod))
        cluster.kubectl("apply", "-f", str(path))
        cluster.kubectl("wait", "--for=condition=Ready", "pod/check", "--timeout=60s")
        print(cluster.kubectl("get", "pods", "-o", "wide"))
    print(f"cluster: OK ({time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
