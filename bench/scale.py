"""`make bench-scale`: the operator at N Endpoints (issue 32), measured the same way each run.

For each N, and each checkout given with `--code`, on a control plane of its own: envtest's
etcd, kube-apiserver and kube-controller-manager (no kubelet: worker pods stay Pending), an
embedded Redis, and that checkout's `lockgate gateway` and `lockgate operator` (with the
management API, `--manage-port`) as subprocesses; N Endpoints at `workersMin` 0 on one
shared Template, default settings (resync 10 s, scaler tick 1 s). It measures

1. create -> all Ready (`status.phase`);
2. all idle, over `--window` s: the operator's CPU (/proc), Redis commands/s (INFO), the
   operator's API requests/s and failing ones per minute (the API server's audit log,
   which records the requests of the operator's own user and no one else's);
3. one job to one idle endpoint at zero -> its Deployment's `spec.replicas` >= 1: p50/p95
   over `--trials` endpoints, one at a time (each queue purged after its trial);
4. one job to every endpoint at zero at once -> first / all Deployments >= 1, and the
   operator's API calls (audit log) until the last is scaled and in `--tail` s after, by verb
   and kind, per scaled endpoint;
5. `GET /v1/endpoints?limit=50` and unpaged, and the gateway's `/metrics`: p50 and size;

and prints one markdown table on stdout (progress goes to stderr). Every wait is bounded:
a step that runs out of time reads "none within T s" and the run goes on.

    python -m bench.scale [--n 100 300 1000] [--window 60] [--code PATH ...]

`--code PATH` (repeatable) runs the gateway and operator of another checkout (its
`operator/` on their PYTHONPATH, its `crds/`), so figures before and after a change come
from one run; the harness itself (envtest, Redis, the measurements) is this checkout's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.procs import children, cpu_seconds
from bench.report import machine
from envtest import EnvTest, binaries_dir
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.store import key_digest

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "bench-scale"
TEMPLATE = "shared"
GROUP = "lockgate.dev"
OPERATOR_USER = "lockgate-operator"  # its own token, so the audit log holds its calls alone
# Only the operator's requests, once each, when they complete (a watch: when it ends).
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    users: [{OPERATOR_USER}]
  - level: None
"""
START_TIMEOUT_S = 60.0  # a gateway or operator not serving after this failed to start
HTTP_TIMEOUT_S = 60.0  # one request to the gateway or the management API
POLL_S = 0.1
CREATE_THREADS = 8  # Endpoints created at once
SUBMIT_THREADS = 16  # jobs submitted at once in step 4
TRIAL_GAP_S = 1.0  # between two single-job trials: the endpoints go back to quiet


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"bench-scale | {message}", file=sys.stderr, flush=True)


class StepTimeout(Exception):
    """A wait ran out of time."""


# -- formatting ----------------------------------------------------------------------------


def secs(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def ms(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def size(count: int) -> str:
    return f"{count / 1000:.1f} kB" if count < 1_000_000 else f"{count / 1e6:.2f} MB"


def rate(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def none_within(timeout_s: float, detail: str = "") -> str:
    return f"none within {timeout_s:g} s" + (f" ({detail})" if detail else "")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1): a value that was measured."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# -- the code under test -------------------------------------------------------------------


@dataclass(frozen=True)
class Code:
    """A checkout whose gateway, operator and CRDs are measured."""

    path: Path
    label: str

    @classmethod
    def at(cls, path: Path) -> Code:
        path = path.resolve()
        if not (path / "operator" / "lockgate").is_dir() or not (path / "crds").is_dir():
            raise SystemExit(f"--code {path}: no operator/lockgate or crds/ there")
        rev = subprocess.run(
            ["git", "-C", str(path), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        return cls(path, rev or path.name)

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment without LOCKGATE_* settings, the checkout's code on
        PYTHONPATH, and `extra`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        return env | {"PYTHONPATH": str(self.path / "operator")} | extra

    def check(self) -> None:
        """Fail unless a subprocess imports lockgate from this checkout."""
        where = subprocess.run(
            [sys.executable, "-c", "import lockgate.cli; print(lockgate.cli.__file__)"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(self.path)):
            raise SystemExit(f"--code {self.path}: subprocesses import lockgate from {where}")


# -- the control plane ---------------------------------------------------------------------


class AuditedEnvTest(EnvTest):
    """envtest whose API server also knows the operator's own user and writes an audit log
    of that user's requests (and no one else's: not the controller manager's, nor ours)."""

    def __init__(self) -> None:
        super().__init__()
        self.operator_token = secrets.token_urlsafe(32)

    @property
    def audit_log(self) -> Path:
        assert self.dir is not None
        return self.dir / "audit.log"

    def spawn(self, name: str, *args: str, exe: str = "") -> subprocess.Popen[bytes]:
        if name == "kube-apiserver":
            assert self.dir is not None
            with open(self.dir / "tokens.csv", "a") as tokens:
                user = OPERATOR_USER
                tokens.write(f'{self.operator_token},{user},{user},"system:masters"\n')
            policy = self.dir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            args = (*args, f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}")
        return super().spawn(name, *args, exe=exe)

    def operator_kubeconfig(self) -> Path:
        """A kubeconfig for the operator's user."""
        assert self.dir is not None and self.kubeconfig is not None
        config = json.loads(self.kubeconfig.read_text())
        config["users"][0]["user"]["token"] = self.operator_token
        path = self.dir / "operator.kubeconfig"
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    def admin_client(self) -> k8s.ApiClient:
        """An admin client with a connection per thread that uses it (creators, watches)."""
        cfg = k8s.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.connection_pool_maxsize = CREATE_THREADS + 8
        return k8s.ApiClient(cfg)


@dataclass(frozen=True)
class ApiCall:
    """One request of the operator's, from the audit log."""

    verb: str
    resource: str
    code: int

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> ApiCall:
        ref = event.get("objectRef") or {}
        resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        verb = event.get("verb", "?") + (" (dry run)" * ("dryRun=" in event.get("requestURI", "")))
        return cls(verb, resource or event.get("requestURI", "?"), code)


def audited_calls(path: Path, start: int, end: int) -> list[ApiCall]:
    """The calls the audit log recorded between two of its sizes (whole lines only)."""
    with open(path, "rb") as f:
        f.seek(start)
        chunk = f.read(end - start)
    lines = chunk.split(b"\n")
    if start and lines:
        with open(path, "rb") as f:
            f.seek(start - 1)
            if f.read(1) != b"\n":  # begins in a line written before the window
                lines = lines[1:]
    return [ApiCall.of(json.loads(line)) for line in lines[:-1] if line.strip()]


def file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def install_crds(api: k8s.ApiClient, code: Code) -> str:
    """The checkout's CRDs, the namespace and the shared Template, once the API serves
    them; the CRDs' version (`v1alpha1`), as that checkout has it."""
    ext = k8s.ApiextensionsV1Api(api)
    versions = set()
    for path in sorted((code.path / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        versions |= {v["name"] for v in crd["spec"]["versions"] if v.get("storage")}
        ext.create_custom_resource_definition(crd)
    (version,) = versions
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    custom = k8s.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/{version}", "kind": "Template"}
    body |= {"metadata": {"name": TEMPLATE}, "spec": {"image": "example.test/echo:1"}}

    def create_template() -> bool:
        try:
            custom.create_namespaced_custom_object(GROUP, version, NAMESPACE, "templates", body)
        except k8s.ApiException as err:
            if err.status == 404:  # the kind is not served yet
                return False
            raise
        return True

    wait_for("the CRDs to be served", create_template, START_TIMEOUT_S)
    return version


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise StepTimeout(f"{what}: not within {timeout_s:g} s")
        time.sleep(POLL_S)


class Watcher:
    """One kind's objects in the namespace, kept by a list and watch in a thread: a value
    per object name and when that value last changed (time.monotonic(), as events came)."""

    def __init__(
        self, api: k8s.ApiClient, api_version: str, plural: str, value: Callable[[dict], Any]
    ) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.args = (*api_version.split("/"), NAMESPACE, plural)
        self.value = value
        self.values: dict[str, Any] = {}
        self.changed: dict[str, float] = {}
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self.listed = threading.Event()  # the first list is in: changes from here are seen
        self.thread = threading.Thread(target=self._run, name=f"watch-{plural}", daemon=True)
        self.thread.start()

    def _see(self, obj: dict) -> None:
        name, value = obj["metadata"]["name"], self.value(obj)
        with self.cond:
            if self.values.get(name, self) != value:
                self.values[name] = value
                self.changed[name] = time.monotonic()
                self.cond.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.custom.list_namespaced_custom_object(*self.args)
                for obj in listing["items"]:
                    self._see(obj)
                self.listed.set()
                version = listing["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    stream = k8s_watch.Watch()
                    for event in stream.stream(
                        self.custom.list_namespaced_custom_object,
                        *self.args,
                        resource_version=version,
                        timeout_seconds=10,
                    ):
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._see(event["object"])
                    version = stream.resource_version or version
            except Exception:  # an expired version (410) or a lost connection: list again
                self._stop.wait(0.5)

    def wait(self, ready: Callable[[Mapping[str, Any]], bool], timeout_s: float) -> bool:
        """Wait until `ready(values)`; False when `timeout_s` passes first."""
        with self.cond:
            return self.cond.wait_for(lambda: ready(self.values), timeout_s)

    def snapshot(self) -> tuple[dict[str, Any], dict[str, float]]:
        with self.cond:
            return dict(self.values), dict(self.changed)

    def stop(self) -> None:
        self._stop.set()


# -- the processes -------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_process(
    name: str, argv: list[str], env: Mapping[str, str], logs: Path
) -> subprocess.Popen[bytes]:
    """A subprocess in its own session, output to `logs/name.log`, killed if we die."""
    with open(logs / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its process group, SIGKILL after 15 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children."""
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in children(pid))


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Stack:
    """Everything one run measures, started; `close` stops it all."""

    n: int
    code: Code
    timeout_s: float
    version: str  # the CRDs'
    env: AuditedEnvTest
    api: k8s.ApiClient
    redis: EmbeddedRedis
    keys: Keys
    gateway: subprocess.Popen[bytes]
    gateway_url: str
    operator: subprocess.Popen[bytes]
    manage_url: str
    endpoints: Watcher
    deployments: Watcher
    http: urllib3.PoolManager = field(
        default_factory=lambda: urllib3.PoolManager(
            maxsize=SUBMIT_THREADS, timeout=urllib3.Timeout(total=HTTP_TIMEOUT_S)
        )
    )

    @property
    def logs(self) -> Path:
        assert self.env.dir is not None
        return self.env.dir

    def names(self) -> list[str]:
        return [f"ep-{i:04d}" for i in range(self.n)]

    def alive(self) -> None:
        """Raise, with the log's last lines, if the gateway or operator has exited."""
        for name, proc in (("operator", self.operator), ("gateway", self.gateway)):
            if proc.poll() is not None:
                tail = log_tail(self.logs / f"{name}.log")
                raise RuntimeError(f"the {name} exited ({proc.returncode}):\n{tail}")

    def get(self, url: str, key: str = "") -> tuple[int, bytes]:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        resp = self.http.request("GET", url, headers=headers, retries=False)
        return resp.status, resp.data

    def post(self, url: str, body: dict | None = None) -> tuple[int, bytes]:
        headers = {"authorization": f"Bearer {self.keys.client}"}
        headers["content-type"] = "application/json"
        data = json.dumps(body or {}).encode()
        resp = self.http.request("POST", url, body=data, headers=headers, retries=False)
        return resp.status, resp.data


def _serving(url: str, key: str = "") -> Callable[[], bool]:
    """A check that `url` answers 200 to a GET (with `key`, if any)."""
    headers = {"authorization": f"Bearer {key}"} if key else {}

    def ready() -> bool:
        try:
            resp = urllib3.request("GET", url, headers=headers, retries=False, timeout=2)
        except urllib3.exceptions.HTTPError:
            return False
        return resp.status == 200

    return ready


def _wait_serving(
    what: str, proc: subprocess.Popen[bytes], checks: Sequence[Callable[[], bool]], log_file: Path
) -> None:
    """Until every check passes; fails with the log's last lines if `proc` exits first."""

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the {what} exited ({proc.returncode}):\n{log_tail(log_file)}")
        return all(check() for check in checks)

    wait_for(f"the {what}", up, START_TIMEOUT_S)


@dataclass(frozen=True)
class Keys:
    """A client key (scope jobs) and an admin key, in a key file the gateway and the
    management API both read: the same in any checkout, where Redis's key records may not be."""

    client: str
    admin: str
    file: Path

    @classmethod
    def write(cls, folder: Path) -> Keys:
        client, admin = f"lg_{secrets.token_hex(16)}", f"lga_{secrets.token_hex(16)}"
        entries = [
            {"name": "bench", "sha256": key_digest(client), "scopes": ["jobs"]},
            {"name": "bench-admin", "sha256": key_digest(admin), "scopes": ["admin"]},
        ]
        (folder / "keys.json").write_text(json.dumps(entries))
        return cls(client, admin, folder / "keys.json")


LOCKGATE = [sys.executable, "-m", "lockgate.cli"]


def start_gateway(
    code: Code, store: EmbeddedRedis, keys: Keys, logs: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """`lockgate gateway` of `code`, serving: the process and its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = code.env(
        LOCKGATE_REDIS_URL=store.url,
        LOCKGATE_KEYS_FILE=str(keys.file),
        LOCKGATE_RATE_LIMITED="false",  # step 4 sends N jobs at once with one key
    )
    argv = [*LOCKGATE, "gateway", "--host", "127.0.0.1", "--port", str(port)]
    proc = start_process("gateway", argv, env, logs)
    try:
        _wait_serving("gateway", proc, [_serving(f"{url}/metrics")], logs / "gateway.log")
    except BaseException:
        stop_process(proc)
        raise
    return proc, url


def start_operator(
    code: Code, env: AuditedEnvTest, store: EmbeddedRedis, gateway_url: str, keys: Keys
) -> tuple[subprocess.Popen[bytes], str]:
    """`lockgate operator --manage-port` of `code` as its own user, default settings,
    scraping the gateway, serving: the process and the management API's URL."""
    assert env.dir is not None
    manage_port, liveness_port = free_port(), free_port()
    settings = code.env(
        KUBECONFIG=str(env.operator_kubeconfig()),
        LOCKGATE_REDIS_URL=store.url,
        LOCKGATE_METRICS_URL=f"{gateway_url}/metrics",
        LOCKGATE_GATEWAY_URL=gateway_url,
        LOCKGATE_BASE_URL=gateway_url,
        LOCKGATE_MANAGE_HOST="127.0.0.1",
        LOCKGATE_LIVENESS_PORT=str(liveness_port),
        LOCKGATE_KEYS_FILE=str(keys.file),
    )
    argv = [*LOCKGATE, "operator", "--namespace", NAMESPACE, "--manage-port", str(manage_port)]
    proc = start_process("operator", argv, settings, env.dir)
    manage_url = f"http://127.0.0.1:{manage_port}"
    ready = [
        _serving(f"http://127.0.0.1:{liveness_port}/healthz"),
        _serving(f"{manage_url}/v1/endpoints?limit=1", keys.admin),
    ]
    try:
        _wait_serving("operator", proc, ready, env.dir / "operator.log")
    except BaseException:
        stop_process(proc)
        raise
    return proc, manage_url


@contextlib.contextmanager
def stack(code: Code, n: int, timeout_s: float) -> Iterator[Stack]:
    """envtest (with the controller manager), Redis, the gateway and the operator of `code`,
    the CRDs, namespace and Template; everything stopped on the way out, however it ends."""
    with contextlib.ExitStack() as cleanup:
        env = AuditedEnvTest()
        cleanup.callback(env.stop)
        env.start(controller_manager=True)
        assert env.dir is not None
        api = env.admin_client()
        cleanup.callback(api.close)
        version = install_crds(api, code)
        store = EmbeddedRedis(env.dir / "redis", appendonly=False)
        cleanup.callback(store.stop)
        store.start()
        keys = Keys.write(env.dir)
        gateway, gateway_url = start_gateway(code, store, keys, env.dir)
        cleanup.callback(stop_process, gateway)
        operator, manage_url = start_operator(code, env, store, gateway_url, keys)
        cleanup.callback(stop_process, operator)
        endpoints = Watcher(
            api, f"{GROUP}/{version}", "endpoints", lambda o: (o.get("status") or {}).get("phase")
        )
        cleanup.callback(endpoints.stop)
        deployments = Watcher(
            api, "apps/v1", "deployments", lambda o: (o.get("spec") or {}).get("replicas", 1) >= 1
        )
        cleanup.callback(deployments.stop)
        for watcher in (endpoints, deployments):
            if not watcher.listed.wait(START_TIMEOUT_S):
                raise StepTimeout(f"no list of {watcher.args[-1]} in {START_TIMEOUT_S:g} s")
        yield Stack(
            n, code, timeout_s, version, env, api, store, keys,
            gateway, gateway_url, operator, manage_url, endpoints, deployments,
        )  # fmt: skip


# -- the steps -----------------------------------------------------------------------------

# The table's rows, in the order.
READY = "create → all Ready (s)"
OPERATOR_CPU = "steady, all idle: operator CPU (s/min)"
REDIS_RATE = "steady: Redis commands/s"
API_RATE = "steady: operator → apiserver requests/s"
API_FAILING = "steady: operator → apiserver failing requests/min"
OTHER_CPU = "steady: gateway / Redis CPU (s/min)"
ONE_JOB = "one job to an idle endpoint at zero → Deployment ≥ 1: p50 / p95 (s)"
EVERY_JOB = "one job to each endpoint: first / all Deployments ≥ 1 (s)"
BURST_CALLS = "one job to each endpoint: API calls per scaled endpoint, to the last / +tail"
METRICS = "gateway `/metrics` size / scrape p50"
PAGE = "`GET /v1/endpoints?limit=50` p50 / size"
UNPAGED = "`GET /v1/endpoints` (unpaged) p50 / size"
ROWS = (
    READY,
    OPERATOR_CPU,
    REDIS_RATE,
    API_RATE,
    API_FAILING,
    OTHER_CPU,
    ONE_JOB,
    EVERY_JOB,
    BURST_CALLS,
    METRICS,
    PAGE,
    UNPAGED,
)


@dataclass
class Result:
    """One run's cells by row, and lines worth printing under the table."""

    cells: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def create_endpoints(s: Stack, result: Result) -> None:
    """Step 1: N Endpoints at once, then until every one is Ready."""
    custom = k8s.CustomObjectsApi(s.api)

    def create(name: str) -> None:
        spec = {"templateId": TEMPLATE, "name": name, "workersMin": 0, "gpuTypeIds": ["NVIDIA L4"]}
        body = {"apiVersion": f"{GROUP}/{s.version}", "kind": "Endpoint"}
        body |= {"metadata": {"name": name}, "spec": spec}
        custom.create_namespaced_custom_object(GROUP, s.version, NAMESPACE, "endpoints", body)

    names = s.names()
    t0 = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(create, names))
    result.notes.append(f"{s.n} Endpoints created in {secs(time.monotonic() - t0)} s")
    log(f"{s.n} Endpoints created; waiting for Ready")

    def all_ready(values: Mapping[str, Any]) -> bool:
        return all(values.get(name) == "Ready" for name in names)

    done = s.endpoints.wait(all_ready, s.timeout_s)
    values, changed = s.endpoints.snapshot()
    if done:
        result.cells[READY] = secs(max(changed[name] for name in names) - t0)
    else:
        phases = Counter(values.get(name) or "no phase" for name in names)
        seen = ", ".join(f"{count} {phase}" for phase, count in phases.most_common())
        result.cells[READY] = none_within(s.timeout_s, seen)


def steady(s: Stack, result: Result, settle_s: float, window_s: float) -> None:
    """Step 2: what all-idle endpoints cost over `window_s`, `settle_s` after step 1."""
    log(f"settling {settle_s:g} s, then measuring {window_s:g} s of all idle")
    time.sleep(settle_s)
    s.alive()
    info = redis.Redis.from_url(s.redis.url)
    assert s.redis.process is not None

    def redis_counts() -> tuple[int, float]:
        stats, cpu = info.info("stats"), info.info("cpu")
        return stats["total_commands_processed"], cpu["used_cpu_sys"] + cpu["used_cpu_user"]

    ops0, redis_cpu0 = redis_counts()
    cmd0 = {k: v["calls"] for k, v in info.info("commandstats").items()}
    op_cpu0, gw_cpu0 = tree_cpu(s.operator.pid), tree_cpu(s.gateway.pid)
    audit0, t0 = file_size(s.env.audit_log), time.monotonic()
    time.sleep(window_s)
    audit1, elapsed = file_size(s.env.audit_log), time.monotonic() - t0
    op_cpu, gw_cpu = tree_cpu(s.operator.pid) - op_cpu0, tree_cpu(s.gateway.pid) - gw_cpu0
    ops1, redis_cpu1 = redis_counts()
    cmd1 = {k: v["calls"] for k, v in info.info("commandstats").items()}
    info.close()
    top = sorted(((cmd1[k] - cmd0.get(k, 0), k) for k in cmd1), reverse=True)[:10]
    result.notes.append(
        "redis commands in the window: "
        + ", ".join(f"{n / elapsed:,.0f}/s {k.removeprefix('cmdstat_')}" for n, k in top if n)
    )
    s.alive()
    per_min = 60 / elapsed
    calls = audited_calls(s.env.audit_log, audit0, audit1)
    failing = [c for c in calls if c.code >= 400]
    share = op_cpu / elapsed * 100
    result.cells[OPERATOR_CPU] = f"{op_cpu * per_min:.1f} ({share:.1f}% of a core)"
    result.cells[REDIS_RATE] = f"{(ops1 - ops0) / elapsed:,.0f}"
    result.cells[API_RATE] = rate(len(calls) / elapsed)
    result.cells[API_FAILING] = f"{len(failing) * per_min:,.0f}"
    result.cells[OTHER_CPU] = f"{gw_cpu * per_min:.1f} / {(redis_cpu1 - redis_cpu0) * per_min:.1f}"
    result.notes.append(f"operator calls in {elapsed:.0f} s: {kinds(calls)}")
    if failing:
        result.notes.append(f"failing calls: {kinds(failing, with_code=True)}")


def by_verb(calls: Sequence[ApiCall]) -> str:
    """'1000 patch, 12 list, ...': the calls by verb alone, the most frequent first."""
    counts = Counter(c.verb for c in calls)
    return ", ".join(f"{count} {verb}" for verb, count in counts.most_common()) or "none"


def kinds(calls: Sequence[ApiCall], *, with_code: bool = False, top: int = 8) -> str:
    """'120 get endpoints, 60 patch endpoints/status, ...', the most frequent first."""
    counts = Counter(
        f"{c.code} {c.verb} {c.resource}" if with_code else f"{c.verb} {c.resource}" for c in calls
    )
    shown = [f"{count} {kind}" for kind, count in counts.most_common(top)]
    more = len(counts) - top
    return ", ".join(shown + ([f"{more} other kinds"] if more > 0 else [])) or "none"


def timed_gets(s: Stack, url: str, key: str, rounds: int) -> tuple[float, int] | None:
    """p50 seconds and body size of `rounds` GETs of `url` after one warm-up; None when
    the step's time runs out before any was timed."""
    deadline = time.monotonic() + s.timeout_s
    times, body_size = [], 0
    for i in range(rounds + 1):
        if time.monotonic() > deadline:
            break
        t0 = time.perf_counter()
        status, body = s.get(url, key)
        if status != 200:
            raise RuntimeError(f"GET {url}: {status} {body[:200]!r}")
        if i:
            times.append(time.perf_counter() - t0)
        body_size = len(body)
    return (statistics.median(times), body_size) if times else None


def reads(s: Stack, result: Result, rounds: int) -> None:
    """Step 5: the gateway's /metrics, and the management API's list, paged and unpaged."""
    base = f"{s.manage_url}/v1/endpoints"
    for row, url, key, form in (
        (METRICS, f"{s.gateway_url}/metrics", "", "{size} / {p50}"),
        (PAGE, f"{base}?limit=50", s.keys.admin, "{p50} / {size}"),
        (UNPAGED, base, s.keys.admin, "{p50} / {size}"),
    ):
        got = timed_gets(s, url, key, rounds)
        result.cells[row] = (
            form.format(p50=ms(got[0]), size=size(got[1])) if got else none_within(s.timeout_s)
        )


def at_zero(s: Stack) -> list[str]:
    """Endpoints whose Deployment is at 0 replicas."""
    values, _ = s.deployments.snapshot()
    return [name for name in s.names() if values.get(f"{name}-workers") is False]


def submit(s: Stack, name: str) -> None:
    status, body = s.post(f"{s.gateway_url}/v2/{name}/run", {"input": {"bench": True}})
    if status != 200:
        raise RuntimeError(f"POST /v2/{name}/run: {status} {body[:200]!r}")


def purge(s: Stack, name: str) -> None:
    status, body = s.post(f"{s.gateway_url}/v2/{name}/purge-queue")
    if status != 200:
        raise RuntimeError(f"POST /v2/{name}/purge-queue: {status} {body[:200]!r}")


def one_job(s: Stack, result: Result, trials: int, trial_timeout_s: float) -> None:
    """Step 3: a job to one endpoint at zero at a time -> its Deployment >= 1."""
    chosen = random.Random(s.n).sample(at_zero(s), min(trials, s.n))
    times: list[float] = []
    missed = 0
    for name in chosen:
        deployment = f"{name}-workers"
        t0 = time.monotonic()
        submit(s, name)
        up = s.deployments.wait(lambda v, d=deployment: v.get(d) is True, trial_timeout_s)
        if up:
            times.append(s.deployments.snapshot()[1][deployment] - t0)
        else:
            missed += 1
        purge(s, name)
        s.alive()
        if missed >= 2:  # the others would run out of time too: the step stays bounded
            break
        time.sleep(TRIAL_GAP_S)
    tried = len(times) + missed
    log(f"{tried} single-job trials, {missed} without a scale-up within {trial_timeout_s:g} s")
    if not times:
        result.cells[ONE_JOB] = none_within(trial_timeout_s, f"{tried} tried")
        return
    measured = times + [math.inf] * missed  # a trial out of time: later than any other

    def shown(value: float) -> str:
        return secs(value) if math.isfinite(value) else f"> {trial_timeout_s:g}"

    p50, p95 = percentile(measured, 0.5), percentile(measured, 0.95)
    result.cells[ONE_JOB] = f"{shown(p50)} / {shown(p95)}"
    if missed:
        result.notes.append(f"one job: {missed} of {tried} trials saw no scale-up in time")


def every_job(s: Stack, result: Result, tail_s: float) -> None:
    """Step 4: once the Deployments are back at zero, a job to every endpoint at once; the
    operator's API calls (the audit log) until the last Deployment is scaled, and in the
    `tail_s` after it, by verb and by kind."""
    names = s.names()
    back = s.deployments.wait(
        lambda v: all(v.get(f"{n}-workers") is False for n in names), s.timeout_s
    )
    targets = at_zero(s)
    if not back:
        result.notes.append(
            f"each endpoint: {len(targets)} of {s.n} Deployments back at 0 within "
            f"{s.timeout_s:g} s; the jobs went to those"
        )
    log(f"a job to each of {len(targets)} endpoints at zero, at once")
    deployments = [f"{name}-workers" for name in targets]
    audit0, t0 = file_size(s.env.audit_log), time.monotonic()
    with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
        list(pool.map(lambda name: submit(s, name), targets))
    result.notes.append(
        f"each endpoint: {len(targets)} jobs submitted in {ms(time.monotonic() - t0)}"
    )
    done = s.deployments.wait(lambda v: all(v.get(d) is True for d in deployments), s.timeout_s)
    audit1 = file_size(s.env.audit_log)
    values, changed = s.deployments.snapshot()
    up = [changed[d] - t0 for d in deployments if values.get(d) is True and changed[d] >= t0]
    first = secs(min(up)) if up else "none"
    every = secs(max(up)) if done else none_within(s.timeout_s, f"{len(up)} of {len(targets)}")
    result.cells[EVERY_JOB] = f"{first} / {every}"
    time.sleep(tail_s)  # what the wake-up still writes after its last scale (reports, resyncs)
    burst = audited_calls(s.env.audit_log, audit0, audit1)
    after = audited_calls(s.env.audit_log, audit1, file_size(s.env.audit_log))
    scaled = max(len(up), 1)
    result.cells[BURST_CALLS] = (
        f"{len(burst) / scaled:.2f} / {(len(burst) + len(after)) / scaled:.2f}"
    )
    result.notes.append(
        f"each endpoint: {len(up)} scaled; operator calls to the last scale: {len(burst)} "
        f"({by_verb(burst)}): {kinds(burst, top=12)}"
    )
    result.notes.append(
        f"each endpoint: operator calls in the {tail_s:g} s after: {len(after)} "
        f"({by_verb(after)}): {kinds(after, top=12)}"
    )


def measure(code: Code, n: int, opts: argparse.Namespace, result: Result) -> None:
    """One run: a fresh control plane, Redis, gateway and operator; the five steps, their
    figures into `result` as they come."""
    with stack(code, n, opts.timeout) as s:
        log(f"N={n} {code.label}: control plane, Redis, gateway and operator up ({s.logs})")
        steps: list[tuple[str, Callable[[], None]]] = [
            ("create -> Ready", lambda: create_endpoints(s, result)),
            ("steady window", lambda: steady(s, result, opts.settle, opts.window)),
            ("reads", lambda: reads(s, result, opts.rounds)),
            ("one job", lambda: one_job(s, result, opts.trials, opts.trial_timeout)),
            ("a job to each", lambda: every_job(s, result, opts.tail)),
        ]
        for what, step in steps:
            log(f"N={n} {code.label}: {what}")
            try:
                step()
            except Exception as err:  # the run goes on to the next step
                log(f"N={n} {code.label}: {what} failed: {err}")
                result.notes.append(f"{what} failed: {str(err).splitlines()[0]}")
                if s.operator.poll() is not None or s.gateway.poll() is not None:
                    break


# -- the table -----------------------------------------------------------------------------


def markdown(results: Mapping[tuple[int, Code], Result], codes: Sequence[Code]) -> str:
    """The figures as a markdown table (a column per N, and per checkout when several),
    then each run's notes."""
    runs = list(results)
    head = [f"N={n}" + (f" ({code.label})" if len(codes) > 1 else "") for n, code in runs]
    lines = ["| figure | " + " | ".join(head) + " |", "|---" * (len(runs) + 1) + "|"]
    for row in ROWS:
        cells = [results[run].cells.get(row, "—") for run in runs]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    for (n, code), result in results.items():
        lines += [f"- N={n} ({code.label}): {note}" for note in result.notes]
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 300, 1000], help="Endpoints")
    parser.add_argument("--window", type=float, default=60.0, help="s of all idle measured")
    parser.add_argument(
        "--settle", type=float, default=75.0,
        help="s after Ready, before it: past the first rest resync, when a new Endpoint's "
        "status takes its Deployment's Available condition",
    )  # fmt: skip
    parser.add_argument("--trials", type=int, default=10, help="single-job trials (step 3)")
    parser.add_argument("--trial-timeout", type=float, default=30.0, help="s per trial")
    parser.add_argument("--timeout", type=float, default=300.0, help="s per other step")
    parser.add_argument("--rounds", type=int, default=10, help="GETs per p50 (step 5)")
    parser.add_argument(
        "--tail", type=float, default=10.0,
        help="s after step 4's last scale whose operator calls are counted too (a resync period)",
    )  # fmt: skip
    parser.add_argument(
        "--code",
        type=Path,
        action="append",
        help="a checkout whose gateway, operator and CRDs run (repeatable; default: this one)",
    )
    opts = parser.parse_args(argv)
    if binaries_dir() is None:
        sys.exit("envtest binaries missing: make envtest")
    codes = [Code.at(path) for path in opts.code or [REPO]]
    for code in codes:
        code.check()
    # The same clean-up as Ctrl-C, also where SIGINT came ignored (a background job).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    results: dict[tuple[int, Code], Result] = {}
    # Side by side: before and after at one N run close in time, on the same machine load.
    runs = [(n, code) for n in opts.n for code in codes]
    try:
        for i, (n, code) in enumerate(runs):
            log(f"N={n} {code.label} ({code.path}): starting, run {i + 1} of {len(runs)}")
            result = results[n, code] = Result()
            try:
                measure(code, n, opts, result)
            except Exception as err:
                log(f"N={n} {code.label}: the run failed: {err}")
                result.notes.append(f"failed: {str(err).splitlines()[0]}")
            if i + 1 < len(runs):  # the figures so far, while the next run goes
                print(markdown({(n, code): results[n, code]}, codes), file=sys.stderr)
    except KeyboardInterrupt:
        log("interrupted: the figures measured so far")
        if results:
            results[next(reversed(results))].notes.append("interrupted")
    if results:
        print(markdown(results, codes))
        print(f"\n{machine()}")


if __name__ == "__main__":
    main()
