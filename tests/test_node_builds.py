"""Builds from a git repository on a real node (issue 48, docs/builds.md), in one module
(one chart install, one node shared with the other node tests), as a user drives them:

- the harness serves a git repository over HTTP on the node's bridge (`git http-backend`,
  tests/gitserver.py) and runs Debian's `docker-registry` with a password there
  (tests/registry.py); the chart builds with `builds.registry` pointing at it, the push
  credential a Secret in the builds namespace, the builder image of `make cluster-images`;
- an endpoint created with a git `source` builds at once (its first build, reason
  `CREATE`: the clone, `buildah bud` of a Dockerfile FROM the echo example's image,
  pushed), and its workers run the pushed digest: the
  Deployment's image is `<registry>/builds/<endpoint>:<tag>@sha256:…` and a job answers
  from the handler of the commit;
- a Dockerfile that fails to build is FAILED with buildah's error line;
- a second commit, its build started by the push webhook (a GitHub push, signed; the same
  payload with a wrong signature is a 401), rolls the workers while a job runs on the old
  one: the job completes there (no job cut); a rollback to the first `GIT_BUILD` release
  runs its digest again with no new build Job;
- a commit whose `.runpod/tests.json` fails is TEST_FAILED on its canary (an Endpoint of
  its own running the new digest), naming the test and its job's error: the endpoint's
  workers stay on the first build's digest and answer jobs, and the canary is deleted;
- a builder image that cannot be pulled fails its build at once, not at its time limit;
- a build past its time limit (`buildTimeoutMin: 1`, the smallest there is; started with
  the module, so its minute passes while the other tests run) is FAILED saying so;
- `helm uninstall` (its hook runs `uninstall-cleanup --builds`) stops a running build:
  no build Job or pod is left, and the pod's storage (the builder's layer store, an
  emptyDir) is gone from the node.

The tests run in file order and share what they made (`made`). The timings of each step
are printed at the end of the module (run with `-s` to see them).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import requests

from cluster import NODE_IP, Cluster
from gitserver import GitServer, Repository
from images import archives
from lockgate.kube.manifests.names import deployment_name
from node_release import (
    REQUIRE_ENV,
    USER_NAMESPACE,
    Jobs,
    Release,
    manage_values,
    wait_until,
    worker_pods,
)
from registry import Registry, missing_programs

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ADMIN_KEY = "lg_node_builds_admin_" + "k" * 24
BUILDS_NAMESPACE = "lockgate-builds"
PUSH_SECRET = "builds-push"
ECHO_IMAGE = "registry.example.com/lockgate-echo:0.1.0"  # the FROM of the built worker
BUSYBOX_IMAGE = "localhost/lockgate-test/busybox:static"  # the FROM of the quick failures
BUILDER_IMAGE = "registry.example.com/lockgate/builder:0.1.0"
CPU = {"computeType": "CPU", "vcpuCount": 1}
BUILD_TIMEOUT_S = 420  # a build of the worker, cold, on a loaded 2-core CI machine
TIMINGS: dict[str, float] = {}

# The handler of the built worker: answers its version; `{"gate": URL}` holds the job
# until the test's server opens that gate (a job that outlasts a roll, with no sleep).
HANDLER = """import asyncio
import urllib.request

import lockgate.worker

VERSION = "{version}"


def opened(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


async def handler(job):
    if "fail" in job["input"]:  # what a failing tests.json test asks
        raise ValueError(job["input"]["fail"])
    gate = job["input"].get("gate")
    while gate and not await asyncio.to_thread(opened, gate):
        await asyncio.sleep(0.5)
    return {{"version": VERSION, "input": job["input"]}}


if __name__ == "__main__":
    lockgate.worker.start({{"handler": handler}})
"""


def dockerfile(base: str, *steps: str) -> str:
    return "\n".join([f"FROM {base}", *steps, ""])


def timed(name: str, t0: float) -> float:
    TIMINGS[name] = round(time.monotonic() - t0, 1)
    return TIMINGS[name]


class Manage:
    """The management API (`/v1`, `/v2`, the hook) through its Service, with the admin key."""

    def __init__(self, release: Release) -> None:
        self.url = release.service_url(f"{release.name}-manage")
        self.node = release.node
        self.http = requests.Session()
        self.http.headers["authorization"] = f"Bearer {ADMIN_KEY}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        resp = self.http.request(method, f"{self.url}{path}", json=body, timeout=30)
        return resp.status_code, resp.json() if resp.content else None

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, answer = self.call(method, path, body)
        assert got == status, (method, path, got, answer)
        return answer

    def build(self, endpoint: str, build_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/v2/serverless/{endpoint}/builds/{build_id}")

    def first_build(self, endpoint: str) -> dict[str, Any]:
        """The build the endpoint's create started by itself (its only one so far)."""
        [build] = self.ok("GET", f"/v2/serverless/{endpoint}/builds")["builds"]
        assert build["reason"] == "CREATE", build
        return build

    def start_build(self, endpoint: str, ref: str | None = None) -> dict[str, Any]:
        body = {"ref": ref} if ref else None
        return self.ok("POST", f"/v2/serverless/{endpoint}/builds", body, status=201)

    def ended(self, endpoint: str, build_id: str, timeout: float = BUILD_TIMEOUT_S) -> dict:
        live = ("PENDING", "BUILDING", "UPLOADING", "TESTING")
        return wait_until(
            lambda: (b := self.build(endpoint, build_id))["status"] not in live and b,
            f"build {build_id} to end", timeout, every=1,
        )  # fmt: skip

    def log_lines(self, endpoint: str, build_id: str) -> list[str]:
        """The build's log (the SSE stream, which ends once the build has and is drained)."""
        resp = self.http.get(
            f"{self.url}/v2/serverless/{endpoint}/builds/{build_id}/logs", timeout=60
        )
        assert resp.status_code == 200, resp.text
        return [
            json.loads(line[5:])["line"]
            for line in resp.text.splitlines()
            if line.startswith("data:")
        ]

    def follow_log(self, endpoint: str, build_id: str) -> tuple[list[tuple[str, str]], str]:
        """The build's log read live, as a client follows it (the SSE stream, open until the
        build has ended and its log is drained): its events (source, line), and the build's
        status asked right after the first builder (`container`) line came."""
        url = f"{self.url}/v2/serverless/{endpoint}/builds/{build_id}/logs"
        events: list[tuple[str, str]] = []
        status_then = ""
        with self.http.get(url, stream=True, timeout=(30, BUILD_TIMEOUT_S)) as resp:
            assert resp.status_code == 200, resp.text
            for raw in resp.iter_lines(decode_unicode=True):
                if not raw or not raw.startswith("data:"):
                    continue
                event = json.loads(raw[5:])
                events.append((event["source"], event["line"]))
                if event["source"] == "container" and not status_then:
                    status_then = self.build(endpoint, build_id)["status"]
        return events, status_then

    def releases(self, endpoint: str) -> dict[str, Any]:
        return self.ok("GET", f"/v2/serverless/{endpoint}/releases")


@pytest.fixture(scope="module")
def registry(node: Cluster) -> Iterator[Registry]:
    if missing := missing_programs():
        message = "no test registry here: missing " + ", ".join(missing) + " (make envtest)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    if BUILDER_IMAGE not in archives():
        pytest.fail(f"{BUILDER_IMAGE} is not built: run make cluster-images", pytrace=False)
    reg = Registry(node)
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def git_server(node: Cluster) -> Iterator[GitServer]:
    assert node.dir is not None
    server = GitServer(node.dir / "git", host=NODE_IP)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bases(registry: Registry) -> dict[str, str]:
    """The images the Dockerfiles start FROM, in the test registry (the builder pulls them
    from there: it cannot see the node's containerd)."""
    t0 = time.monotonic()
    found = archives()
    pushed = {
        "echo": registry.push(found[ECHO_IMAGE], "base/echo:0.1.0"),
        "busybox": registry.push(found[BUSYBOX_IMAGE], "base/busybox:static"),
    }
    timed("base images pushed to the registry (skopeo)", t0)
    return pushed


@pytest.fixture(scope="module")
def repo(git_server: GitServer, bases: dict[str, str]) -> Repository:
    """The worker's repository: main builds the echo image plus HANDLER; `broken` fails
    at a COPY; `slow` sleeps in a RUN past any time limit."""
    worker = dockerfile(bases["echo"], "COPY handler.py /app/handler.py")
    made = git_server.repository(
        "worker", {"Dockerfile": worker, "handler.py": HANDLER.format(version="first")},
        "the first handler",
    )  # fmt: skip
    made.branch(
        "broken",
        {"Dockerfile": dockerfile(bases["busybox"], "COPY missing.txt /missing.txt")},
        "a COPY of a file that is not there",
    )
    made.branch(
        "slow",
        {"Dockerfile": dockerfile(bases["busybox"], 'RUN ["/bin/busybox", "sleep", "900"]')},
        "a step that outlasts the time limit",
    )
    return made


@pytest.fixture(scope="module")
def release(node: Cluster, registry: Registry) -> Iterator[Release]:
    """The chart building into the test registry: the builds namespace and its push
    Secret made first (as docs/builds.md asks the user to)."""
    node.kubectl("create", "namespace", BUILDS_NAMESPACE)
    node.kubectl(
        "label", "namespace", BUILDS_NAMESPACE, "pod-security.kubernetes.io/enforce=privileged"
    )
    node.kubectl(
        "-n", BUILDS_NAMESPACE, "create", "secret", "docker-registry", PUSH_SECRET,
        f"--docker-server={registry.host}", f"--docker-username={registry.username}",
        f"--docker-password={registry.password}",
    )  # fmt: skip
    rel = Release(node)
    t0 = time.monotonic()
    rel.install(
        *manage_values(ADMIN_KEY),
        "--set", f"builds.registry={registry.host}/builds",
        "--set", f"builds.namespace={BUILDS_NAMESPACE}",
        "--set", f"builds.pushSecret={PUSH_SECRET}",
        "--set", "builds.insecureRegistry=true",
    )  # fmt: skip
    timed("helm install", t0)
    yield rel
    rel.uninstall()


@pytest.fixture(scope="module")
def manage(release: Release) -> Manage:
    return Manage(release)


@pytest.fixture(scope="module")
def made(manage: Manage, registry: Registry, repo: Repository) -> Iterator[dict[str, Any]]:
    """The credential the workers pull the built image with, the template, and two
    endpoints: `worker` (main) and `limits` (one minute per build). Each builds at once
    when created (`CREATE`): the worker's first build is the first test's, and the
    time-limit build's minute passes while the worker builds."""
    auth = manage.ok("POST", "/v1/containerregistryauth", {
        "name": "builds registry", "username": registry.username,
        "password": registry.password, "registry": registry.host,
    }, status=201)  # fmt: skip
    template = manage.ok("POST", "/v1/templates", {
        "name": "built worker", "imageName": ECHO_IMAGE, "containerRegistryAuthId": auth["id"],
    })  # fmt: skip
    source = {"url": repo.url, "ref": "main", "trigger": "PUSH"}
    worker = manage.ok("POST", "/v1/endpoints", {
        "templateId": template["id"], "name": "built", **CPU, "workersMin": 0, "workersMax": 1,
        "idleTimeout": 60, "source": {"git": source},
    })  # fmt: skip
    limits = manage.ok("POST", "/v1/endpoints", {
        "templateId": template["id"], "name": "limits", **CPU, "workersMin": 0,
        "workersMax": 1, "source": {"git": {**source, "ref": "slow", "buildTimeoutMin": 1}},
    })  # fmt: skip
    slow = manage.first_build(limits["id"])
    ids = {
        "worker": worker["id"],
        "limits": limits["id"],
        "slow": slow["id"],
        "registry": registry.host,
    }
    yield ids
    for name, seconds in manage_node_timings(manage).items():
        print(f"test_node_builds timing: node {name}: {seconds:.1f} s")
    for name, seconds in TIMINGS.items():
        print(f"test_node_builds timing: {name}: {seconds} s")


def manage_node_timings(manage: Manage) -> dict[str, float]:
    """The shared node's start-up timings (paid by the first node module of the run)."""
    return dict(manage.node.timings)


def build_jobs(release: Release) -> list[dict[str, Any]]:
    out = release.node.kubectl("-n", BUILDS_NAMESPACE, "get", "jobs", "-o", "json")
    return json.loads(out)["items"]


def build_pods(release: Release, build_id: str = "") -> list[dict[str, Any]]:
    selector = f"lockgate.dev/build={build_id}" if build_id else "lockgate.dev/build"
    return release.pods(selector, BUILDS_NAMESPACE)


def worker_image(release: Release, endpoint: str) -> str:
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "deployment", deployment_name(endpoint), "-o", "json"
    )
    return json.loads(out)["spec"]["template"]["spec"]["containers"][0]["image"]


def build_running(release: Release, build_id: str) -> bool:
    """The build pod's `build` container (the second init container) runs: the clone is done."""
    return any(
        c.get("name") == "build" and "running" in (c.get("state") or {})
        for pod in build_pods(release, build_id)
        for c in pod.get("status", {}).get("initContainerStatuses") or []
    )


def container_log(release: Release, build_id: str, container: str) -> str:
    """What the kubelet has of one container of the build's pod (`kubectl logs`), without
    its last newline."""
    [pod] = build_pods(release, build_id)
    out = release.node.kubectl(
        "-n", BUILDS_NAMESPACE, "logs", pod["metadata"]["name"], "-c", container
    )  # fmt: skip
    return out.removesuffix("\n")


def seconds_between(start: str, end: str) -> float:
    """Seconds from one RFC 3339 time of a build record to another."""
    parse = lambda ts: datetime.fromisoformat(ts.replace("Z", "+00:00"))  # noqa: E731
    return round((parse(end) - parse(start)).total_seconds(), 1)


def running_on(release: Release, endpoint: str, image: str) -> bool:
    """A worker pod of the endpoint on `image` still has a running container."""
    return any(
        pod["spec"]["containers"][0]["image"] == image
        and any("running" in (c.get("state") or {})
                for c in pod.get("status", {}).get("containerStatuses") or [])
        for pod in worker_pods(release, endpoint, live=False)
    )  # fmt: skip


def push_seconds(release: Release, build_id: str) -> float | None:
    """Seconds from the push container's `pushing …` line to its last (kubectl logs
    --timestamps)."""
    [pod] = build_pods(release, build_id)
    out = release.node.kubectl(
        "-n", BUILDS_NAMESPACE, "logs", pod["metadata"]["name"], "-c", "push", "--timestamps",
        check=False,
    )  # fmt: skip
    stamps = [line.split(" ", 1) for line in out.splitlines() if " " in line]
    start = next((ts for ts, text in stamps if text.startswith("pushing ")), None)
    if start is None or not stamps:
        return None

    def parse(ts: str) -> datetime:
        return datetime.fromisoformat(ts[:26].rstrip("Z") + "+00:00")

    return round((parse(stamps[-1][0]) - parse(start)).total_seconds(), 1)


def test_a_git_source_builds_pushes_and_its_workers_run_the_digest(
    release: Release, manage: Manage, made: dict[str, Any], repo: Repository
) -> None:
    endpoint = made["worker"]
    build = manage.first_build(endpoint)  # started by the create (`made`), just before
    # the log followed live, as the console does: the builder's lines come while it runs
    events, status_then = manage.follow_log(endpoint, build["id"])
    done = manage.ended(endpoint, build["id"])
    TIMINGS["first build: created -> COMPLETED (clone, pull FROM, build, push)"] = seconds_between(
        done["createdAt"], done["completedAt"]
    )
    assert done["status"] == "COMPLETED", (done, manage.log_lines(endpoint, build["id"]))
    assert done["commitMessage"] == "the first handler" and done["branch"] == "main", done
    assert done["commit"] == repo.head("main"), done
    assert done["imageName"].startswith(f"{made['registry']}/builds/{endpoint}:"), done
    digest = done["imageDigest"]
    assert digest.startswith("sha256:"), done
    if (seconds := push_seconds(release, build["id"])) is not None:
        TIMINGS["first build: buildah push (pushing … -> pushed)"] = seconds
    log = manage.log_lines(endpoint, build["id"])
    assert any(line.startswith("HEAD is now at") for line in log), log
    assert any(line.startswith("pushed ") and digest in line for line in log), log
    # live: the first builder line reached the stream before the build ended, and the
    # builder's lines are before the step that follows them: BUILDING's (clone, buildah
    # bud), then `build UPLOADING`, the push's, then `build COMPLETED`
    assert status_then in ("BUILDING", "UPLOADING"), (status_then, events)
    at = events.index
    image = done["imageName"]
    uploading = ("system", f"build UPLOADING: pushing {image}")
    first_step = next(e for e in events if e[0] == "container" and e[1].startswith("STEP 1/"))
    head = next(e for e in events if e[0] == "container" and e[1].startswith("HEAD is now at"))
    assert at(head) < at(first_step) < at(uploading), events
    assert at(uploading) < at(("container", f"pushing {image}")), events
    assert at(("container", f"pushed {image}@{digest}")) < at(
        ("system", f"build COMPLETED: {image}@{digest}")
    ), events
    # each of the builder's lines once, none lost: the containers' logs as the kubelet has
    # them (kubectl's text mode reads a lone CR as a newline: compared as text, so)
    builder = "\n".join(line for source, line in events if source == "container")
    logs = [container_log(release, build["id"], c) for c in ("clone", "build", "push")]
    kubelet = "\n".join(text for text in logs if text)
    unify = lambda text: text.replace("\r\n", "\n").replace("\r", "\n")  # noqa: E731
    assert unify(builder) == unify(kubelet), (builder, kubelet)

    t1 = time.monotonic()
    wanted = f"{done['imageName']}@{digest}"
    wait_until(lambda: worker_image(release, endpoint) == wanted, "the Deployment on the digest",
               120, every=1)  # fmt: skip
    timed("first build: COMPLETED -> Deployment on the digest", t1)
    jobs = Jobs(release, endpoint, ADMIN_KEY)
    t2 = time.monotonic()
    job = jobs.runsync({"input": {"hello": "built"}}, wait_ms=60000)
    if job["status"] not in ("COMPLETED", "FAILED"):
        job = jobs.final(job["id"], timeout=240)
    timed("first job on the built image (a worker pod from zero, pulling the digest)", t2)
    assert job["status"] == "COMPLETED", job
    assert job["output"] == {"version": "first", "input": {"hello": "built"}}, job
    [pod] = [p for p in worker_pods(release, endpoint)]
    assert pod["spec"]["containers"][0]["image"] == wanted
    releases = manage.releases(endpoint)["releases"]
    assert releases[0]["source"] == "GIT_BUILD" and releases[0]["buildId"] == build["id"]
    made.update(first_build=build["id"], first_image=wanted, first_release=releases[0]["id"])


def test_a_dockerfile_that_fails_to_build_is_failed_with_the_builders_line(
    release: Release, manage: Manage, made: dict[str, Any]
) -> None:
    endpoint = made["worker"]
    t0 = time.monotonic()
    build = manage.start_build(endpoint, ref="broken")
    failed = manage.ended(endpoint, build["id"])
    timed("failing build: asked -> FAILED", t0)
    assert failed["status"] == "FAILED", failed
    assert failed["error"].startswith("build failed: ") and "missing.txt" in failed["error"]
    log = manage.log_lines(endpoint, build["id"])
    builder_line = failed["error"].removeprefix("build failed: ")
    assert builder_line in log, (builder_line, log)  # the line is buildah's own
    # nothing changed for the workers: still the first build's digest
    assert worker_image(release, endpoint) == made["first_image"]


def hook(
    manage: Manage, endpoint: str, secret: str, body: bytes, *, wrong: bool = False
) -> requests.Response:
    """A GitHub push hook of `body`, signed with `secret` (`wrong`: its last digit changed)."""
    mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if wrong:
        mac = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    headers = {"X-GitHub-Event": "push", "Content-Type": "application/json",
               "X-Hub-Signature-256": f"sha256={mac}"}  # fmt: skip
    return requests.post(f"{manage.url}/v1/hooks/git/{endpoint}", data=body, headers=headers,
                         timeout=30)  # fmt: skip


def test_a_pushed_commit_builds_and_rolls_with_no_job_cut_and_rollback_runs_the_first_digest(
    release: Release, manage: Manage, made: dict[str, Any], repo: Repository,
    git_server: GitServer,
) -> None:  # fmt: skip
    endpoint = made["worker"]
    jobs = Jobs(release, endpoint, ADMIN_KEY)
    # a job held on the first build's worker until the roll is over
    held = jobs.run({"input": {"gate": git_server.gate_url("roll")}})
    wait_until(lambda: jobs.status(held)["status"] == "IN_PROGRESS", "the held job runs", 120)

    secret = manage.ok("POST", f"/v2/serverless/{endpoint}/builds/webhook", status=201)["secret"]
    commit = repo.commit({"handler.py": HANDLER.format(version="second")}, "the second handler")
    body = json.dumps({"ref": "refs/heads/main", "after": commit, "before": "0" * 39 + "1",
                       "repository": {"default_branch": "main"}}).encode()  # fmt: skip
    refused = hook(manage, endpoint, secret, body, wrong=True)
    assert refused.status_code == 401, refused.text
    t0 = time.monotonic()
    started = hook(manage, endpoint, secret, body)
    assert started.status_code == 202, started.text
    build = started.json()["build"]
    assert build["reason"] == "PUSH", build
    done = manage.ended(endpoint, build["id"])
    timed("second build (code change, the registry cache): hook -> COMPLETED", t0)
    assert done["status"] == "COMPLETED" and done["commit"] == commit, done
    second = f"{done['imageName']}@{done['imageDigest']}"
    assert second != made["first_image"]
    t1 = time.monotonic()
    wait_until(lambda: worker_image(release, endpoint) == second, "the roll to the second",
               120, every=1)  # fmt: skip
    timed("second build: COMPLETED -> Deployment on its digest", t1)
    assert jobs.status(held)["status"] == "IN_PROGRESS"  # its old worker goes on
    fresh = jobs.runsync({"input": {"after": "roll"}}, wait_ms=60000)
    if fresh["status"] not in ("COMPLETED", "FAILED"):
        fresh = jobs.final(fresh["id"], timeout=240)
    timed("second build: first job on its new worker", t1)
    assert fresh["output"]["version"] == "second", fresh
    git_server.open_gate("roll")
    finished = jobs.final(held, timeout=120)
    assert finished["status"] == "COMPLETED", finished  # not cut by the roll
    assert finished["output"]["version"] == "first", finished

    jobs_before = {j["metadata"]["name"] for j in build_jobs(release)}
    t2 = time.monotonic()
    back = manage.ok(
        "POST",
        f"/v2/serverless/{endpoint}/releases/{made['first_release']}/rollback",
        status=201,
    )
    assert back["source"] == "GIT_BUILD" and back["buildId"] == made["first_build"], back
    wait_until(lambda: worker_image(release, endpoint) == made["first_image"],
               "the Deployment back on the first digest", 120, every=1)  # fmt: skip
    timed("rollback: POST -> Deployment on the first digest", t2)
    # the second build's idle worker is replaced at once: gone before a job is sent (until
    # its container stops it still takes jobs)
    wait_until(lambda: not running_on(release, endpoint, second), "the second's worker gone",
               120, every=1)  # fmt: skip
    timed("rollback: POST -> no worker left on the second digest", t2)
    job = jobs.runsync({"input": {"after": "rollback"}}, wait_ms=60000)
    if job["status"] not in ("COMPLETED", "FAILED"):
        job = jobs.final(job["id"], timeout=240)
    timed("rollback: POST -> a job answered by the first build", t2)
    assert job["output"]["version"] == "first", job
    assert {j["metadata"]["name"] for j in build_jobs(release)} == jobs_before  # no rebuild


def canaries(release: Release, endpoint: str) -> list[str]:
    """The canary Endpoints of `endpoint`'s builds (kubectl sees them; the API hides them)."""
    out = release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "endpoints.lockgate.dev", "-o", "json",
        "-l", f"lockgate.dev/canary-of={endpoint}",
    )  # fmt: skip
    return [e["metadata"]["name"] for e in json.loads(out)["items"]]


def test_a_failing_tests_json_is_test_failed_and_the_first_release_keeps_serving(
    release: Release, manage: Manage, made: dict[str, Any], repo: Repository
) -> None:
    """A branch whose `.runpod/tests.json` test fails (its input makes the handler raise):
    the build is pushed, TESTING on a canary Endpoint (one worker pod on the new digest),
    then TEST_FAILED naming the test and the job's error. The endpoint's workers never
    leave the first build's digest, a job still completes there, and the canary is gone.
    (A branch of its own: main stays without tests for the tests after this one.)"""
    endpoint = made["worker"]
    assert "first_image" in made, "the first build's test failed"
    tests = {"tests": [{"name": "refuses", "input": {"fail": "tests.json caught this build"},
                        "timeout": 180_000}]}  # fmt: skip
    repo.branch("tested", {
        "handler.py": HANDLER.format(version="tested"),
        ".runpod/tests.json": json.dumps(tests),
    }, "a handler its tests.json fails")  # fmt: skip
    t0 = time.monotonic()
    build = manage.start_build(endpoint, ref="tested")
    wait_until(lambda: manage.build(endpoint, build["id"])["status"] == "TESTING", "TESTING",
               BUILD_TIMEOUT_S, every=1)  # fmt: skip
    timed("tested build: asked -> TESTING (build, push)", t0)
    t1 = time.monotonic()

    def canary_made() -> list[str] | bool:
        """The canary; or, when the build's test ended between two looks (1.5 s in session
        34's CI), its log saying it tested on a canary, deleted since; else a failure
        naming what the build is and says."""
        if made_now := canaries(release, endpoint):
            return made_now
        record = manage.build(endpoint, build["id"])
        if record["status"] == "TESTING":
            return []
        lines = manage.log_lines(endpoint, build["id"])
        tested = any(line.startswith("testing on a canary worker") for line in lines)
        deleted = any(line.startswith("canary ") and line.endswith(" deleted") for line in lines)
        assert tested and deleted, (record, lines)
        return True

    try:
        wait_until(canary_made, "the canary Endpoint", 120, every=1)
    except AssertionError as err:
        raise AssertionError((str(err), manage.log_lines(endpoint, build["id"]))) from err
    failed = manage.ended(endpoint, build["id"], timeout=300)
    timed("tested build: TESTING -> TEST_FAILED (canary pod from zero, the test's job)", t1)
    reason = "job FAILED: ValueError: tests.json caught this build"
    assert failed["status"] == "TEST_FAILED", (failed, manage.log_lines(endpoint, build["id"]))
    assert failed["error"] == f"test 'refuses' failed: {reason}", failed
    assert failed["failedTest"] == {"name": "refuses", "reason": reason}, failed
    assert failed["imageDigest"], failed  # built and pushed: only its tests failed
    log = manage.log_lines(endpoint, build["id"])
    assert any(line.startswith("testing on a canary worker (canary-") for line in log), log
    wait_until(lambda: not canaries(release, endpoint), "the canary deleted", 120, every=1)
    # the endpoint stayed on the first build: its Deployment, its release, its answers
    assert worker_image(release, endpoint) == made["first_image"]
    newest = manage.releases(endpoint)["releases"][0]
    assert newest["buildId"] == made["first_build"], newest
    jobs = Jobs(release, endpoint, ADMIN_KEY)
    job = jobs.runsync({"input": {"after": "test failed"}}, wait_ms=60000)
    if job["status"] not in ("COMPLETED", "FAILED"):
        job = jobs.final(job["id"], timeout=240)
    assert job["status"] == "COMPLETED", job
    assert job["output"]["version"] == "first", job
    assert not any(
        pod["spec"]["containers"][0]["image"] != made["first_image"]
        for pod in worker_pods(release, endpoint)
    )


def test_a_builder_image_that_cannot_be_pulled_fails_the_build_at_once(
    release: Release, manage: Manage, made: dict[str, Any]
) -> None:
    """Not after the build's time limit: the pod's ErrImagePull or ImagePullBackOff. The
    builder image is removed from the node's containerd (no other module uses it), so the
    kubelet must pull it, which fails. A build that never ends is started first, with the
    image still there, for the uninstall test."""
    running = manage.start_build(made["worker"], ref="slow")  # its time limit: 60 min
    # its build container started (BUILDING comes with the clone: the image is needed again)
    wait_until(lambda: build_running(release, running["id"]), "the never-ending build under way",
               120, every=1)  # fmt: skip
    made["running"] = running["id"]
    release.node.remove_image(BUILDER_IMAGE)
    t0 = time.monotonic()
    build = manage.start_build(made["worker"])
    failed = manage.ended(made["worker"], build["id"], timeout=120)
    timed("unpullable builder image: asked -> FAILED", t0)
    assert failed["status"] == "FAILED", failed
    assert f"the builder image {BUILDER_IMAGE} could not be pulled (" in failed["error"], failed
    wait_until(lambda: not [j for j in build_jobs(release) if j["metadata"]["labels"].get(
        "lockgate.dev/build") == build["id"]], "its Job deleted", 60, 1)  # fmt: skip
    try:  # then the garbage collector deletes the pod, and the kubelet lets it go
        wait_until(lambda: not build_pods(release, build["id"]), "its pod deleted", 180, 1)
    except AssertionError as err:
        raise AssertionError((str(err), build_pods(release, build["id"]))) from err
    assert worker_image(release, made["worker"]) == made["first_image"]  # nothing changed


def test_a_build_past_its_time_limit_is_failed(
    release: Release, manage: Manage, made: dict[str, Any]
) -> None:
    limits = made["limits"]
    failed = manage.ended(limits, made["slow"], timeout=240)
    TIMINGS["time-limit build (buildTimeoutMin 1): started -> FAILED (the record's times)"] = (
        seconds_between(failed["startedAt"], failed["completedAt"])
    )
    assert failed["status"] == "FAILED", failed
    assert failed["error"] == "build time limit: 1 min", failed
    # The Job controller's DeadlineExceeded, or (when the operator judged the deadline
    # first, DEADLINE_GRACE_S after it: a loaded controller-manager) the Job deleted
    jobs = [j for j in build_jobs(release) if j["metadata"]["labels"].get(
        "lockgate.dev/build") == made["slow"]]  # fmt: skip
    for job in jobs:
        assert job["metadata"].get("deletionTimestamp") or any(
            c["reason"] == "DeadlineExceeded" for c in job["status"].get("conditions") or []
        ), job
    wait_until(lambda: not any(p["status"].get("phase") == "Running"
                               for p in build_pods(release, made["slow"])),
               "the slow build's pod stopped", 60, every=1)  # fmt: skip


def test_uninstall_leaves_no_build_job_or_cache(
    release: Release, manage: Manage, made: dict[str, Any]
) -> None:
    """A build under way at `helm uninstall` (the previous test's): the hook deletes its
    Job, the pod goes, and with it the builder's storage (an emptyDir under the kubelet's
    pod folder)."""
    assert "running" in made, "the previous test failed"
    assert manage.build(made["worker"], made["running"])["status"] == "BUILDING"
    uids = [p["metadata"]["uid"] for p in build_pods(release)]
    assert uids
    assert release.node.dir is not None
    pods_dir = release.node.dir / "kubelet" / "root" / "pods"
    assert any((pods_dir / uid).exists() for uid in uids)
    t0 = time.monotonic()
    release.uninstall()
    timed("helm uninstall --wait (the hook deleting the build Jobs)", t0)
    assert build_jobs(release) == []
    wait_until(lambda: not build_pods(release), "no build pod left", 120, every=1)
    wait_until(lambda: not any((pods_dir / uid).exists() for uid in uids),
               "the build pods' storage gone from the node", 120, every=1)  # fmt: skip
