"""In-cluster builds through the real kube-apiserver (envtest) and the real operator
(issue 48, item 1): `POST /v2/serverless/{id}/builds` records a PENDING build and the
operator creates its Job in the builds namespace; the test plays the kubelet and the Job
controller (envtest has neither), setting the pod's and the Job's status by hand, and the
build's record follows: BUILDING with the commit, COMPLETED with the pushed digest,
FAILED with the builder's last line or the time limit; a cancel deletes the Job; deleting
the Endpoint deletes its build Jobs; a Job the API server refuses fails its build."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
import requests
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from redis.asyncio import Redis

from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube.crds import GROUP, VERSION
from lockgate.kube.manifests.build import TESTS_MARKER
from lockgate.kube.manifests.keys import SECRET_KEY
from lockgate.kube.manifests.names import secret_name
from lockgate.kube.settings import OperatorSettings
from lockgate.models.build import BuildStatus
from lockgate.models.crashloop import CrashLoop
from lockgate.store import JobStore, Registry, key_digest
from lockgate.store.builds import BuildStore
from lockgate.store.lb_workers import LbWorker, LbWorkers
from lockgate.workerenv import WORKER_DEFAULTS, worker_env, worker_id_env
from tests.conftest import make_settings, start_gateway, wait_until

if TYPE_CHECKING:
    from kube_fixtures import OperatorThread

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest]

ENDPOINTS_NS = "lockgate-builds-eps"
BUILDS_NS = "lockgate-builds-jobs"
ADMIN_KEY = "lg_admin_of_the_builds_test"
HASH = "4f1c2e9aa1b2c3d4e5f60718293a4b5c6d7e8f90"
DIGEST = "sha256:" + "cd" * 32
FAILED_LOG = (
    'STEP 2/2: RUN make\nmake: *** no rule\nError: building at STEP "RUN make": exit status 2\n'
)
CLONE_MESSAGE = f"{HASH}\n2026-12-06T10:01:00Z\nmain\nfaster handler\n"
SOURCE = {
    "git": {
        "url": "https://git.example.test/org/worker.git",
        "ref": "main",
        "trigger": "MANUAL",
        "buildTimeoutMin": 20,
    }
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def namespaces(kube: k8s.ApiClient) -> Iterator[None]:
    """The endpoints' namespace and the builds' (deleted after the module)."""
    core = k8s.CoreV1Api(kube)
    for ns in (ENDPOINTS_NS, BUILDS_NS):
        with contextlib.suppress(ApiException):
            core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    yield
    for ns in (ENDPOINTS_NS, BUILDS_NS):
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns)


@pytest.fixture
def builds_operator(start_builds_operator: Callable[[str], str]) -> str:
    """An operator with builds on, its Jobs in BUILDS_NS (its management API's URL)."""
    return start_builds_operator(BUILDS_NS)


@pytest.fixture
def operators() -> dict[str, OperatorThread]:
    """The operators `start_builds_operator` started, by their management API's URL."""
    return {}


@pytest.fixture
def start_builds_operator(
    operators: dict[str, OperatorThread],
    kube: k8s.ApiClient,
    redis_server: EmbeddedRedis,
    start_operator: Callable[[OperatorSettings], OperatorThread],
    tmp_path,
    namespaces: None,
) -> Callable[[str], str]:
    """A Template, and a function starting an operator with builds on whose Jobs go into
    the namespace given (its management API's URL)."""
    custom = k8s.CustomObjectsApi(kube)
    template = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Template",
        "metadata": {"name": "built-tpl"},
        "spec": {"image": "example.test/base:1"},
    }
    with contextlib.suppress(ApiException):
        custom.create_namespaced_custom_object(GROUP, VERSION, ENDPOINTS_NS, "templates", template)
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(
        f'[{{"name": "admin", "sha256": "{key_digest(ADMIN_KEY)}", "scopes": ["admin"]}}]'
    )

    def start(builds_namespace: str, gateway_url: str = "http://gateway.lockgate-test:8080") -> str:
        port = free_port()
        settings = OperatorSettings(
            redis_url=redis_server.url,
            namespaces=[ENDPOINTS_NS, BUILDS_NS],
            gateway_url=gateway_url,
            manage_host="127.0.0.1",
            manage_port=port,
            liveness_port=0,
            resync_s=1.0,
            resync_rest_s=1.0,
            scale_interval_s=0,
            keys_file=str(keys_file),
            builds_registry="registry.example.test:5000/builds",
            builds_namespace=builds_namespace,
            builds_push_secret="push-creds",
            builder_image="registry.example.test/builder:1",
        )
        url = f"http://127.0.0.1:{port}"
        operators[url] = start_operator(settings)
        return url

    return start


class Builds:
    """The v2 builds routes and the objects of one endpoint's builds."""

    def __init__(self, kube: k8s.ApiClient, url: str, endpoint_id: str) -> None:
        self.url, self.id = url, endpoint_id
        self.core, self.batch = k8s.CoreV1Api(kube), k8s.BatchV1Api(kube)
        self.custom = k8s.CustomObjectsApi(kube)
        self.headers = {"Authorization": f"Bearer {ADMIN_KEY}"}

    def create_endpoint(self, **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Endpoint",
            "metadata": {"name": self.id},
            "spec": {"templateId": "built-tpl", "computeType": "CPU", "source": SOURCE, **spec},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, ENDPOINTS_NS, "endpoints", body)

    def call(self, method: str, path: str = "", **kwargs) -> requests.Response:
        url = f"{self.url}/v2/serverless/{self.id}/builds{path}"
        return requests.request(method, url, headers=self.headers, timeout=30, **kwargs)

    def get(self, build_id: str) -> dict:
        answer = self.call("GET", f"/{build_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def wait_status(self, build_id: str, status: str, timeout: float) -> None:
        """Wait until the build is `status`; on timeout, fail with its record and its
        system log (what the operator said), not only the wait's name."""
        try:
            wait_until(lambda: self.get(build_id)["status"] == status, status, timeout)
        except AssertionError as err:
            log = self.call("GET", f"/{build_id}/logs", params={"source": "system", "tail": 50})
            raise AssertionError(f"{err}\nbuild: {self.get(build_id)}\nlog:\n{log.text}") from None

    def job(self, build_id: str) -> k8s.V1Job | None:
        name = "build-" + build_id.removeprefix("build_")
        try:
            return self.batch.read_namespaced_job(name, BUILDS_NS)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def pod(self, build_id: str, job: k8s.V1Job) -> str:
        """The build's pod, made by envtest's Job controller from the Job's template (no
        kubelet runs it: its status is set by hand). A pod made by the test instead would
        match the Job's selector, be adopted, and be deleted as a surplus one."""

        def made() -> str | None:
            pods = self.core.list_namespaced_pod(
                BUILDS_NS, label_selector=f"lockgate.dev/build={build_id}"
            ).items
            return pods[0].metadata.name if len(pods) == 1 else None

        return wait_until(made, f"the Job controller's pod of {job.metadata.name}", 30)

    def pod_status(
        self, name: str, clone: dict, build: dict | None = None, push: dict | None = None
    ) -> None:
        """The pod's status as the kubelet writes it: the init containers `clone` and
        `build`, then the container `push` (kube/manifests/build.py)."""

        def container(name: str, state: dict) -> dict:
            ready = name == "push"
            return {"name": name, "state": state, "ready": ready, "restartCount": 0,
                    "image": "b", "imageID": ""}  # fmt: skip

        inits = [container("clone", clone)]
        if build is not None:
            inits.append(container("build", build))
        status: dict = {"phase": "Running", "initContainerStatuses": inits}
        if push is not None:
            status["containerStatuses"] = [container("push", push)]
        self.core.patch_namespaced_pod_status(name, BUILDS_NS, {"status": status})

    def job_status(self, job: k8s.V1Job, status: dict) -> None:
        self.batch.patch_namespaced_job_status(job.metadata.name, BUILDS_NS, {"status": status})


def _cloned() -> dict:
    return {
        "terminated": {
            "exitCode": 0,
            "startedAt": _now(),
            "finishedAt": _now(),
            "message": CLONE_MESSAGE,
        }
    }


def _built() -> dict:
    """The build container's end when `buildah bud` succeeded (no message)."""
    return {"terminated": {"exitCode": 0, "startedAt": _now(), "finishedAt": _now()}}


def _condition(kind: str, reason: str = "") -> dict:
    return {
        "type": kind,
        "status": "True",
        "reason": reason or None,
        "lastProbeTime": _now(),
        "lastTransitionTime": _now(),
    }


def test_a_build_runs_as_a_job_and_its_record_follows(
    kube: k8s.ApiClient, builds_operator: str
) -> None:
    builds = Builds(kube, builds_operator, "ep-built")
    builds.create_endpoint()

    answer = builds.call("POST", json={"ref": "main"})
    assert answer.status_code == 201, answer.text
    build = answer.json()
    assert build["status"] == "PENDING"
    job = wait_until(lambda: builds.job(build["id"]), "the build Job created", 30)
    assert job.metadata.labels["lockgate.dev/build"] == build["id"]
    assert job.metadata.labels["lockgate.dev/endpoint"] == "ep-built"
    assert (job.spec.backoff_limit, job.spec.active_deadline_seconds) == (0, 20 * 60)
    [_, builder], [pusher] = (
        job.spec.template.spec.init_containers,
        job.spec.template.spec.containers,
    )
    assert (builder.name, pusher.name) == ("build", "push")
    assert builder.image == pusher.image == "registry.example.test/builder:1"
    assert builder.security_context.privileged is pusher.security_context.privileged is False

    # the clone has run, the build runs: BUILDING with the commit
    pod = builds.pod(build["id"], job)
    builds.pod_status(pod, _cloned(), {"running": {"startedAt": _now()}})
    builds.job_status(job, {"active": 1, "startTime": _now()})
    builds.wait_status(build["id"], "BUILDING", 30)
    seen = builds.get(build["id"])
    assert (seen["commitHash"], seen["branch"], seen["commitMessage"]) == (
        HASH[:7],
        "main",
        "faster handler",
    )
    assert seen["startedAt"] is not None and seen["completedAt"] is None

    # built, the push container running: UPLOADING, with the image's name
    builds.pod_status(pod, _cloned(), _built(), {"running": {"startedAt": _now()}})
    builds.wait_status(build["id"], "UPLOADING", 30)
    image = f"registry.example.test:5000/builds/ep-built:{build['id'][6:]}"
    assert builds.get(build["id"])["imageName"] == image

    # pushed: COMPLETED with the digest
    pushed = {
        "terminated": {"exitCode": 0, "message": DIGEST, "startedAt": _now(), "finishedAt": _now()}
    }
    builds.pod_status(pod, _cloned(), _built(), pushed)
    builds.job_status(
        job,
        {
            "active": 0,
            "succeeded": 1,
            "completionTime": _now(),
            "conditions": [_condition("Complete")],
        },
    )
    builds.wait_status(build["id"], "COMPLETED", 30)
    done = builds.get(build["id"])
    assert done["imageDigest"] == DIGEST
    assert done["imageName"] == f"registry.example.test:5000/builds/ep-built:{build['id'][6:]}"
    assert done["completedAt"] is not None and done["error"] is None
    # the record's steps in the build's log, in order, each once
    log = builds.call("GET", f"/{build['id']}/logs", params={"source": "system", "tail": 100})
    states = ("BUILDING", "UPLOADING", "COMPLETED")
    said = [s for line in log.text.splitlines() for s in states if f'"build {s}' in line]
    assert said == list(states), log.text
    assert f"build UPLOADING: pushing {image}" in log.text

    # another build past its time limit: FAILED, saying so
    late = builds.call("POST").json()
    late_job = wait_until(lambda: builds.job(late["id"]), "the second Job", 30)
    builds.job_status(
        late_job, {"failed": 1, "conditions": [_condition("Failed", "DeadlineExceeded")]}
    )
    builds.wait_status(late["id"], "FAILED", 30)
    assert builds.get(late["id"])["error"] == "build time limit: 20 min"

    # a cancelled build's Job is deleted
    third = builds.call("POST").json()
    wait_until(lambda: builds.job(third["id"]), "the third Job", 30)
    answer = builds.call("POST", f"/{third['id']}/cancel")
    assert answer.status_code == 200 and answer.json()["status"] == "CANCELLED"
    wait_until(lambda: builds.job(third["id"]) is None, "the cancelled build's Job gone", 30)

    # the Endpoint deleted: its build Jobs go too (another namespace: no owner reference)
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-built"
    )
    wait_until(
        lambda: builds.job(build["id"]) is None and builds.job(late["id"]) is None,
        "the build Jobs deleted with the Endpoint",
        30,
    )


def test_an_endpoint_created_through_the_api_with_a_source_builds_at_once(
    kube: k8s.ApiClient, builds_operator: str
) -> None:
    """RunPod builds at once when an endpoint is created from a repository: the management
    API's create (of a cluster with `builds.registry`) records the first build (`CREATE`)
    and the operator creates its Job; with `trigger: MANUAL` nothing builds by itself."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    released = {"git": {**SOURCE["git"], "trigger": "RELEASE"}}
    for endpoint_id, source in (("ep-created", released), ("ep-manual", SOURCE)):
        body = {"id": endpoint_id, "templateId": "built-tpl", "computeType": "CPU",
                "source": source}  # fmt: skip
        answer = requests.post(f"{builds_operator}/v1/endpoints", json=body, headers=headers,
                               timeout=30)  # fmt: skip
        assert answer.status_code == 200, answer.text
    created, manual = (Builds(kube, builds_operator, i) for i in ("ep-created", "ep-manual"))
    [build] = created.call("GET").json()["builds"]
    assert (build["reason"], build["ref"]) == ("CREATE", ""), build
    job = wait_until(lambda: created.job(build["id"]), "the first build's Job created", 30)
    assert job.metadata.labels["lockgate.dev/endpoint"] == "ep-created"
    assert manual.call("GET").json()["builds"] == []
    for endpoint_id in ("ep-created", "ep-manual"):
        created.custom.delete_namespaced_custom_object(
            GROUP, VERSION, ENDPOINTS_NS, "endpoints", endpoint_id
        )
    wait_until(lambda: created.job(build["id"]) is None, "the Job deleted with the Endpoint", 30)


def test_a_failed_build_says_the_builders_last_line(
    kube: k8s.ApiClient, builds_operator: str
) -> None:
    builds = Builds(kube, builds_operator, "ep-broken")
    builds.create_endpoint()
    build = builds.call("POST").json()
    job = wait_until(lambda: builds.job(build["id"]), "the build Job created", 30)
    pod = builds.pod(build["id"], job)
    failed = {
        "terminated": {
            "exitCode": 1,
            "startedAt": _now(),
            "finishedAt": _now(),
            "message": FAILED_LOG,
        }
    }
    builds.pod_status(pod, _cloned(), failed)
    builds.job_status(
        job, {"failed": 1, "conditions": [_condition("Failed", "BackoffLimitExceeded")]}
    )
    builds.wait_status(build["id"], "FAILED", 30)
    seen = builds.get(build["id"])
    assert seen["error"] == 'build failed: Error: building at STEP "RUN make": exit status 2'
    assert seen["commitHash"] == HASH[:7]
    # the build's log (an ended build's stream ends): lockgate's steps, the Job named
    log = builds.call("GET", f"/{build['id']}/logs", params={"source": "system", "tail": 100})
    assert log.status_code == 200, log.text
    assert f"build Job {job.metadata.name} created in namespace {BUILDS_NS}" in log.text
    assert "build FAILED: build failed: Error: building at STEP" in log.text
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-broken"
    )
    wait_until(lambda: builds.job(build["id"]) is None, "the build Job deleted", 30)


def test_a_job_the_api_server_refuses_fails_its_build_saying_why(
    kube: k8s.ApiClient, start_builds_operator: Callable[[str], str]
) -> None:
    """The builds namespace missing (not created as docs/builds.md asks): the build ends
    FAILED with the API server's answer instead of waiting PENDING for ever; the endpoint
    itself is reconciled as ever (Ready)."""
    builds = Builds(kube, start_builds_operator("lockgate-builds-nowhere"), "ep-nowhere")
    builds.create_endpoint()
    build = builds.call("POST").json()
    builds.wait_status(build["id"], "FAILED", 30)
    error = builds.get(build["id"])["error"]
    assert error.startswith("the build Job was refused:") and "lockgate-builds-nowhere" in error

    def phase() -> str:
        body = builds.custom.get_namespaced_custom_object(
            GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-nowhere"
        )
        return (body.get("status") or {}).get("phase", "")

    wait_until(lambda: phase() == "Ready", "the endpoint Ready", 30)
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-nowhere"
    )


# -- a completed build is a release and what the workers run (issue 48, items 3-4) ----------


def _complete(builds: Builds, build_id: str, digest: str, clone: dict | None = None) -> None:
    """Play the kubelet and the Job controller: the build's pod pushed `digest` (its clone
    ended as `clone` says, by default `_cloned()`)."""
    job = wait_until(lambda: builds.job(build_id), "the build Job created", 30)
    pod = builds.pod(build_id, job)
    pushed = {
        "terminated": {"exitCode": 0, "message": digest, "startedAt": _now(), "finishedAt": _now()}
    }
    builds.pod_status(pod, clone or _cloned(), _built(), pushed)
    done = {"active": 0, "succeeded": 1, "completionTime": _now()}
    builds.job_status(job, {**done, "conditions": [_condition("Complete")]})


def _worker_image(builds: Builds) -> str:
    apps = k8s.AppsV1Api(builds.core.api_client)
    try:
        deployment = apps.read_namespaced_deployment(f"{builds.id}-workers", ENDPOINTS_NS)
    except ApiException:
        return ""
    return deployment.spec.template.spec.containers[0].image


def _releases(builds: Builds) -> list[dict]:
    url = f"{builds.url}/v2/serverless/{builds.id}/releases"
    answer = requests.get(url, headers=builds.headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["releases"]


def _reconciled_after_now(builds: Builds, idle_timeout: int) -> None:
    """A marker: change a setting that is no release and wait until the operator's status
    shows that generation, so a reconcile has run since (and seen what came before)."""
    body = builds.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ENDPOINTS_NS,
        "endpoints",
        builds.id,
        {"spec": {"idleTimeout": idle_timeout}},
    )
    generation = body["metadata"]["generation"]

    def observed() -> bool:
        obj = builds.custom.get_namespaced_custom_object(
            GROUP, VERSION, ENDPOINTS_NS, "endpoints", builds.id
        )
        return (obj.get("status") or {}).get("observedGeneration", 0) >= generation

    wait_until(observed, "the operator's reconcile of the marker", 30)


def test_a_completed_build_is_a_git_build_release_the_workers_run_and_roll_back_from(
    kube: k8s.ApiClient, builds_operator: str, redis_server: EmbeddedRedis
) -> None:
    """The worker Deployment runs the template's image until a build completes, then the
    build's `imageName@imageDigest` (a `GIT_BUILD` release with its `buildId`); a failed
    and a TEST_FAILED build change nothing; a rollback to a build's release switches the
    Deployment to that digest with no new Job; one to the first release goes back to the
    template's image."""
    builds = Builds(kube, builds_operator, "ep-rolled")
    builds.create_endpoint()
    wait_until(lambda: _worker_image(builds) == "example.test/base:1", "the template's image", 30)
    [first] = wait_until(lambda: _releases(builds), "the first release", 30)
    assert (first["source"], first["buildId"]) == ("MANUAL", None)
    repository = "registry.example.test:5000/builds/ep-rolled"

    one = builds.call("POST").json()
    _complete(builds, one["id"], DIGEST)
    image_one = f"{repository}:{one['id'][6:]}@{DIGEST}"
    wait_until(lambda: _worker_image(builds) == image_one, "the first build's digest", 30)
    wait_until(lambda: _releases(builds)[0]["buildId"] == one["id"], "its release", 30)
    newest = _releases(builds)[0]
    assert newest["source"] == "GIT_BUILD"
    assert newest["diff"] == [
        {"field": "build", "old": None,
         "new": {"buildId": one["id"], "image": image_one}},
    ]  # fmt: skip

    # a failed build and a TEST_FAILED one (as a tester would end it) change nothing
    failed = builds.call("POST").json()
    job = wait_until(lambda: builds.job(failed["id"]), "the failing build's Job", 30)
    builds.job_status(job, {"failed": 1, "conditions": [_condition("Failed", "DeadlineExceeded")]})
    builds.wait_status(failed["id"], "FAILED", 30)
    tested = builds.call("POST").json()
    wait_until(lambda: builds.job(tested["id"]), "the tested build's Job", 30)

    async def fail_its_test() -> None:
        redis = Redis.from_url(redis_server.url)
        store = BuildStore(redis)
        other = "sha256:" + "ef" * 32
        await store.change("ep-rolled", tested["id"], BuildStatus.TESTING,
                           imageName=f"{repository}:t", imageDigest=other)  # fmt: skip
        await store.change("ep-rolled", tested["id"], BuildStatus.TEST_FAILED, error="t failed")
        await redis.aclose()

    asyncio.run(fail_its_test())
    _reconciled_after_now(builds, 61)
    assert _worker_image(builds) == image_one
    assert _releases(builds)[0]["id"] == newest["id"]

    two = builds.call("POST").json()
    digest_two = "sha256:" + "ab" * 32
    _complete(builds, two["id"], digest_two)
    image_two = f"{repository}:{two['id'][6:]}@{digest_two}"
    wait_until(lambda: _worker_image(builds) == image_two, "the second build's digest", 30)
    wait_until(lambda: _releases(builds)[0]["buildId"] == two["id"], "its release", 30)

    # rollback to the first build's release: its digest at once, no new build
    builds_before = len(builds.call("GET").json()["builds"])
    release_one = next(r for r in _releases(builds) if r["buildId"] == one["id"])
    url = f"{builds.url}/v2/serverless/{builds.id}/releases/{release_one['id']}/rollback"
    answer = requests.post(url, headers=builds.headers, timeout=30)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["source"], answer.json()["buildId"]) == ("GIT_BUILD", one["id"])
    wait_until(lambda: _worker_image(builds) == image_one, "the first build's digest again", 30)
    # the operator's reconciles since do not take the second build again
    _reconciled_after_now(builds, 62)
    assert _worker_image(builds) == image_one
    assert len(builds.call("GET").json()["builds"]) == builds_before

    # rollback to the first release (no build then): the template's image, MANUAL
    url = f"{builds.url}/v2/serverless/{builds.id}/releases/{first['id']}/rollback"
    answer = requests.post(url, headers=builds.headers, timeout=30)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["source"], answer.json()["buildId"]) == ("MANUAL", None)
    wait_until(lambda: _worker_image(builds) == "example.test/base:1", "the template again", 30)
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-rolled"
    )


# -- tested before it takes traffic: the canary (issue 48, item 3) -----------------------------

TESTS_JSON = {
    "tests": [{"name": "basic", "input": {"prompt": "hi"}, "timeout": 60000}],
    "config": {"env": [{"key": "MODEL", "value": "tiny"}]},
}


def _cloned_with_tests(tests: dict) -> dict:
    """The clone's end as `kube/manifests/build.py`'s CLONE_SCRIPT writes it when the
    repository has a tests.json: the commit lines, the marker, the file gzip+base64."""
    packed = base64.b64encode(gzip.compress(json.dumps(tests).encode())).decode()
    message = f"{CLONE_MESSAGE.rstrip()}\n{TESTS_MARKER}\n{packed}\n"
    ended = _cloned()
    ended["terminated"]["message"] = message
    return ended


def _endpoint(builds: Builds, name: str) -> dict | None:
    try:
        return builds.custom.get_namespaced_custom_object(
            GROUP, VERSION, ENDPOINTS_NS, "endpoints", name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _deployment_image(builds: Builds, endpoint_id: str) -> str:
    apps = k8s.AppsV1Api(builds.core.api_client)
    try:
        deployment = apps.read_namespaced_deployment(f"{endpoint_id}-workers", ENDPOINTS_NS)
    except ApiException:
        return ""
    return deployment.spec.template.spec.containers[0].image


def _log_says(builds: Builds, build_id: str, text: str) -> None:
    """Wait until the build's live log (an SSE stream, open while the build runs) has a
    line holding `text`."""
    url = f"{builds.url}/v2/serverless/{builds.id}/builds/{build_id}/logs"
    with requests.get(url, headers=builds.headers, stream=True, timeout=(5, 30)) as answer:
        assert answer.status_code == 200, answer.text
        for line in answer.iter_lines(decode_unicode=True):
            if text in line:
                return
    raise AssertionError(f"the build's log ended without {text!r}")


def _play_the_canary_worker(redis_url: str, canary: str, error: str | None) -> dict:
    """Take the test's job from the canary's queue and finish it, with the store's own
    worker-side functions (what the gateway's worker API calls); the job's input."""

    async def work() -> dict:
        redis = Redis.from_url(redis_url)
        jobs = JobStore(redis)
        try:
            async with asyncio.timeout(30):
                while True:
                    taken, _ = await jobs.take(canary, "canary-worker-1", 1, 60_000)
                    if taken:
                        break
                    await asyncio.sleep(0.2)
            [job] = taken
            output = None if error else b'{"text": "hello"}'
            await jobs.finish(canary, "canary-worker-1", job.id, output=output, error=error)
            return json.loads(job.input)
        finally:
            await redis.aclose()

    return asyncio.run(work())


HANDLER = """
import os

import runpod


def handler(job):
    if os.environ.get("BROKEN"):
        raise ValueError("revision 2 is broken")
    return {"text": "hello " + job["input"]["prompt"]}


runpod.serverless.start({"handler": handler})
"""


class ThreadGateway:
    """A real gateway (`lockgate gateway`'s app) on the operator's Redis, in a thread of
    its own: the canary's worker API."""

    def __init__(self, redis_url: str) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        started = start_gateway(make_settings(redis_url, port))
        self.runner = asyncio.run_coroutine_threadsafe(started, self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def gateway(redis_server: EmbeddedRedis) -> Iterator[ThreadGateway]:
    running = ThreadGateway(redis_server.url)
    yield running
    running.stop()


@contextlib.contextmanager
def sdk_worker(
    builds: Builds, gateway: ThreadGateway, canary: str, tmp_path, *, broken: bool = False
) -> Iterator[None]:
    """The canary's worker: the runpod SDK running `HANDLER` in a process of its own, with
    the environment the operator gives the canary's pods (`workerenv`), its worker key
    read from the canary's worker-key Secret, and the real gateway's URL (no kubelet runs
    the canary's pod)."""

    def key() -> str | None:
        try:
            secret = builds.core.read_namespaced_secret(secret_name(canary), ENDPOINTS_NS)
        except ApiException:
            return None
        return base64.b64decode(secret.data[SECRET_KEY]).decode()

    worker_key = wait_until(key, "the canary's worker key", 30)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
    env |= WORKER_DEFAULTS | worker_env(gateway.url, canary, worker_key)
    env |= worker_id_env(f"{canary}-worker-1")
    if broken:
        env["BROKEN"] = "1"
    script = tmp_path / "handler.py"
    script.write_text(HANDLER)
    out = (tmp_path / f"{canary}.log").open("w")
    process = subprocess.Popen([sys.executable, str(script)], env=env, stdout=out, stderr=out)
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        out.close()


def test_a_build_with_tests_is_tested_on_a_canary_before_it_takes_traffic(
    kube: k8s.ApiClient,
    builds_operator: str,
    redis_server: EmbeddedRedis,
    gateway: ThreadGateway,
    tmp_path,
) -> None:
    """A completed build whose clone handed over a tests.json is TESTING on a canary: a
    hidden Endpoint of its own (owned by the endpoint, one worker, the build's digest,
    its settings), never listed. Its worker (the runpod SDK against a real gateway)
    completes the test's job → COMPLETED and the endpoint's workers roll to the digest;
    its handler raises → TEST_FAILED naming the test and the exception; a canary that
    crash-loops → TEST_FAILED at once. The endpoint stays on the first build; the canary
    is deleted each time."""
    builds = Builds(kube, builds_operator, "ep-tested")
    builds.create_endpoint()
    wait_until(lambda: _worker_image(builds) == "example.test/base:1", "the template's image", 30)
    parent_uid = _endpoint(builds, "ep-tested")["metadata"]["uid"]
    repository = "registry.example.test:5000/builds/ep-tested"

    one = builds.call("POST").json()
    _complete(builds, one["id"], DIGEST, _cloned_with_tests(TESTS_JSON))
    builds.wait_status(one["id"], "TESTING", 30)
    image_one = f"{repository}:{one['id'][6:]}@{DIGEST}"
    assert builds.get(one["id"])["imageDigest"] == DIGEST
    canary = "canary-" + one["id"].removeprefix("build_")
    body = wait_until(lambda: _endpoint(builds, canary), "the canary Endpoint", 30)
    meta, spec = body["metadata"], body["spec"]
    assert meta["labels"] == {"lockgate.dev/canary-of": "ep-tested"}
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Endpoint", "ep-tested", parent_uid)
    running = json.loads(meta["annotations"]["lockgate.dev/build"])
    assert (running["buildId"], running["image"]) == (one["id"], image_one)
    assert (spec["workersMin"], spec["workersMax"], spec["crashLoopThreshold"]) == (1, 1, 1)
    # tests.json's config.env: a Template of its own (test_config_env_… below)
    assert spec["templateId"] == canary and "warmup" not in spec
    assert spec["source"]["git"]["trigger"] == "MANUAL"
    # the operator reconciles it as any endpoint: its workers run the build's digest
    wait_until(lambda: _deployment_image(builds, canary) == image_one, "the canary's digest", 30)
    assert _worker_image(builds) == "example.test/base:1"  # the endpoint: not yet
    # hidden from the management list
    listed = requests.get(f"{builds.url}/v2/serverless", headers=builds.headers, timeout=30)
    assert listed.status_code == 200, listed.text
    ids = {e["id"] for e in listed.json()["endpoints"]}
    assert "ep-tested" in ids and canary not in ids
    # nor read, changed or deleted by its id: it is the operator's
    for method, body in (("GET", None), ("PATCH", {"name": "mine"}), ("DELETE", None)):
        answer = requests.request(method, f"{builds.url}/v2/serverless/{canary}", json=body,
                                  headers=builds.headers, timeout=30)  # fmt: skip
        assert answer.status_code == 404, (method, answer.text)
    assert _endpoint(builds, canary) is not None

    # the canary's worker (the runpod SDK) takes the test's job and completes it
    with sdk_worker(builds, gateway, canary, tmp_path):
        builds.wait_status(one["id"], "COMPLETED", 60)
    wait_until(lambda: _worker_image(builds) == image_one, "the tested build's digest", 30)
    wait_until(lambda: _endpoint(builds, canary) is None, "the canary deleted", 30)
    log = builds.call("GET", f"/{one['id']}/logs", params={"source": "system", "tail": 100})
    assert "test 'basic' passed (COMPLETED" in log.text, log.text
    assert f"testing on a canary worker ({canary}" in log.text

    # a second build whose test's job fails: TEST_FAILED naming it, nothing rolls
    two = builds.call("POST").json()
    digest_two = "sha256:" + "ab" * 32
    _complete(builds, two["id"], digest_two, _cloned_with_tests(TESTS_JSON))
    builds.wait_status(two["id"], "TESTING", 30)
    canary_two = "canary-" + two["id"].removeprefix("build_")
    wait_until(lambda: _endpoint(builds, canary_two), "the second canary", 30)
    with sdk_worker(builds, gateway, canary_two, tmp_path, broken=True):
        builds.wait_status(two["id"], "TEST_FAILED", 60)
    failed = builds.get(two["id"])
    assert failed["error"] == "test 'basic' failed: job FAILED: ValueError: revision 2 is broken"
    wait_until(lambda: _endpoint(builds, canary_two) is None, "the second canary deleted", 30)
    _reconciled_after_now(builds, 63)
    assert _worker_image(builds) == image_one

    # a third build whose canary worker crashes at start: TEST_FAILED at once, saying so
    three = builds.call("POST").json()
    _complete(builds, three["id"], "sha256:" + "ef" * 32, _cloned_with_tests(TESTS_JSON))
    canary_three = "canary-" + three["id"].removeprefix("build_")
    wait_until(lambda: _endpoint(builds, canary_three), "the third canary", 30)
    line = "ModuleNotFoundError: No module named 'torch'"

    def crashed() -> bool:  # written again should a registration of the operator race it
        _crash_loop(redis_server.url, canary_three, line)
        return builds.get(three["id"])["status"] == "TEST_FAILED"

    wait_until(crashed, "TEST_FAILED", 30)
    assert builds.get(three["id"])["error"] == (
        "test 'basic' failed: the canary worker did not start: workers crash at start "
        "(exit code 1: ModuleNotFoundError: No module named 'torch')"
    )
    wait_until(lambda: _endpoint(builds, canary_three) is None, "the third canary deleted", 30)
    assert _worker_image(builds) == image_one
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-tested"
    )


# A load-balancing canary's worker: its own HTTP server on `PORT` (/ping 200); every POST
# answered 200 with what it got, or 500 with BROKEN set.
LB_WORKER = """import json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Worker(BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer(200 if self.path == "/ping" else 404, {})

    def do_POST(self):
        got = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or "null")
        if os.environ.get("BROKEN"):
            self.answer(500, {"error": "revision 2 is broken"})
        else:
            self.answer(200, {"path": self.path, "got": got})

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Worker).serve_forever()
"""
LB_TESTS_JSON = {"tests": [{"name": "check", "input": {"prompt": "hi"}, "path": "/check",
                            "timeout": 60000}]}  # fmt: skip


@contextlib.contextmanager
def lb_worker(redis_url: str, canary: str, tmp_path, *, broken: bool = False) -> Iterator[None]:
    """The load-balancing canary's worker: `LB_WORKER` in a process of its own on a free
    loopback port, routed as the scaler routes a running pod (its `lbw` record: the
    envtest operator runs no scaler and no kubelet); the gateway polls its health and
    proxies the test's request to it."""
    port = free_port()
    script = tmp_path / "lb_worker.py"
    script.write_text(LB_WORKER)
    env = {**os.environ, "PORT": str(port)} | ({"BROKEN": "1"} if broken else {})
    process = subprocess.Popen([sys.executable, str(script)], env=env)
    address = f"127.0.0.1:{port}"

    async def route() -> None:
        redis = Redis.from_url(redis_url)
        try:
            await LbWorkers(redis).register(
                canary, f"{canary}-worker-1", LbWorker(address, address)
            )
        finally:
            await redis.aclose()

    try:
        asyncio.run(route())
        yield
    finally:
        process.terminate()
        process.wait(10)


def test_a_load_balancing_build_is_tested_through_its_canarys_route(
    kube: k8s.ApiClient,
    start_builds_operator: Callable[..., str],
    redis_server: EmbeddedRedis,
    gateway: ThreadGateway,
    tmp_path,
) -> None:
    """A load-balancing endpoint's build: its test is an HTTP request from the operator
    through the gateway's load-balancing route of the canary (`gateway_url`), its input
    the JSON body, to its `path`. An answer 200 → COMPLETED and the endpoint's workers
    roll to the digest; a 500 → TEST_FAILED naming the test, the status and the body's
    start, the endpoint on the first build. The canary and its key are gone each time."""
    builds = Builds(kube, start_builds_operator(BUILDS_NS, gateway.url), "ep-lb-tested")
    builds.create_endpoint(type="LB", scalerType="REQUEST_COUNT", workersMin=0)
    repository = "registry.example.test:5000/builds/ep-lb-tested"

    def canary_keys() -> list[str]:
        async def names() -> list[str]:
            redis = Redis.from_url(redis_server.url)
            try:
                return [r["name"] for r in (await Registry(redis).list_keys()).values()]
            finally:
                await redis.aclose()

        return [n for n in asyncio.run(names()) if n.startswith("canary:")]

    one = builds.call("POST").json()
    _complete(builds, one["id"], DIGEST, _cloned_with_tests(LB_TESTS_JSON))
    canary = "canary-" + one["id"].removeprefix("build_")
    wait_until(lambda: _endpoint(builds, canary), "the canary Endpoint", 60)
    assert builds.get(one["id"])["status"] == "TESTING"
    assert _endpoint(builds, canary)["spec"]["type"] == "LB"
    with lb_worker(redis_server.url, canary, tmp_path):
        builds.wait_status(one["id"], "COMPLETED", 60)
    image_one = f"{repository}:{one['id'][6:]}@{DIGEST}"
    wait_until(lambda: _worker_image(builds) == image_one, "the tested build's digest", 60)
    wait_until(lambda: _endpoint(builds, canary) is None, "the canary deleted", 60)
    log = builds.call("GET", f"/{one['id']}/logs", params={"source": "system", "tail": 100})
    assert "test 'check' passed (HTTP 200" in log.text, log.text
    assert canary_keys() == []

    two = builds.call("POST").json()
    _complete(builds, two["id"], "sha256:" + "ab" * 32, _cloned_with_tests(LB_TESTS_JSON))
    canary_two = "canary-" + two["id"].removeprefix("build_")
    wait_until(lambda: _endpoint(builds, canary_two), "the second canary", 60)
    with lb_worker(redis_server.url, canary_two, tmp_path, broken=True):
        builds.wait_status(two["id"], "TEST_FAILED", 60)
    failed = builds.get(two["id"])
    reason = 'the load-balancing route answered HTTP 500: {"error": "revision 2 is broken"}'
    assert failed["failedTest"] == {"name": "check", "reason": reason}, failed
    assert failed["error"] == f"test 'check' failed: {reason}", failed
    wait_until(lambda: _endpoint(builds, canary_two) is None, "the second canary deleted", 60)
    assert canary_keys() == []
    _reconciled_after_now(builds, 63)
    assert _worker_image(builds) == image_one
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-lb-tested"
    )


def _crash_loop(redis_url: str, canary: str, line: str) -> None:
    """Play the scaler's crash-loop detection (`scaling.crashloop`, which the envtest
    operator runs without: no kubelet starts a worker): the canary's registry entry, once
    there, records its first failed start, as the scaler writes it."""

    async def record() -> None:
        redis = Redis.from_url(redis_url)
        registry = Registry(redis)
        try:
            entry = await registry.get_endpoint(canary)
            if entry is not None and entry.crashLoop is None:
                since = int(time.time() * 1000)
                loop = CrashLoop(failedStarts=1, exitCode=1, lastLine=line, since=since)
                await registry.put_endpoint(canary, entry.model_copy(update={"crashLoop": loop}))
        finally:
            await redis.aclose()

    asyncio.run(record())


def test_an_operator_restarted_mid_test_tests_again_and_a_cancel_removes_the_canary(
    kube: k8s.ApiClient,
    start_builds_operator: Callable[[str], str],
    operators: dict[str, OperatorThread],
    redis_server: EmbeddedRedis,
) -> None:
    """The operator stopped while a build is TESTING leaves its canary (which holds the
    build and its tests); the next operator runs the tests again on it (its Template, gone
    meanwhile, made again), and the build ends COMPLETED. A build cancelled while TESTING
    is CANCELLED, its canary deleted."""
    first = start_builds_operator(BUILDS_NS)
    builds = Builds(kube, first, "ep-resumed")
    builds.create_endpoint()
    one = builds.call("POST").json()
    _complete(builds, one["id"], DIGEST, _cloned_with_tests(TESTS_JSON))
    canary = "canary-" + one["id"].removeprefix("build_")
    wait_until(lambda: _endpoint(builds, canary), "the canary Endpoint", 30)
    builds.wait_status(one["id"], "TESTING", 30)

    wait_until(lambda: _template(builds, canary), "the canary's Template", 30)
    operators[first].stop()  # as a restart: its tests stop, its canary stays
    assert _endpoint(builds, canary) is not None
    # as an operator stopped between the canary and its Template: made again on resume
    builds.custom.delete_namespaced_custom_object(GROUP, VERSION, ENDPOINTS_NS, "templates", canary)
    builds.url = start_builds_operator(BUILDS_NS)
    assert builds.get(one["id"])["status"] == "TESTING"

    # (the earlier run's job purged first: only the new one is taken)
    _log_says(builds, one["id"], "the operator restarted while testing: the tests run again on")
    assert _template(builds, canary)["spec"]["env"]["MODEL"] == "tiny"
    assert _play_the_canary_worker(redis_server.url, canary, None) == {"prompt": "hi"}
    builds.wait_status(one["id"], "COMPLETED", 30)
    wait_until(lambda: _endpoint(builds, canary) is None, "the canary deleted", 30)

    # cancelled while TESTING: CANCELLED, the canary deleted, nothing rolls
    two = builds.call("POST").json()
    _complete(builds, two["id"], "sha256:" + "ab" * 32, _cloned_with_tests(TESTS_JSON))
    canary_two = "canary-" + two["id"].removeprefix("build_")
    wait_until(lambda: _endpoint(builds, canary_two), "the second canary", 30)
    answer = builds.call("POST", f"/{two['id']}/cancel")
    assert answer.status_code == 200 and answer.json()["status"] == "CANCELLED", answer.text
    wait_until(lambda: _endpoint(builds, canary_two) is None, "the second canary deleted", 30)
    assert _template(builds, canary) is None and _template(builds, canary_two) is None
    image_one = f"registry.example.test:5000/builds/ep-resumed:{one['id'][6:]}@{DIGEST}"
    wait_until(lambda: _worker_image(builds) == image_one, "the first build's digest", 30)
    assert builds.get(two["id"])["status"] == "CANCELLED"
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-resumed"
    )


def _template(builds: Builds, name: str) -> dict | None:
    try:
        return builds.custom.get_namespaced_custom_object(
            GROUP, VERSION, ENDPOINTS_NS, "templates", name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _worker_env(builds: Builds, endpoint_id: str) -> dict[str, str]:
    """The worker container's plain variables of an endpoint's Deployment ({}: none yet)."""
    apps = k8s.AppsV1Api(builds.core.api_client)
    try:
        deployment = apps.read_namespaced_deployment(f"{endpoint_id}-workers", ENDPOINTS_NS)
    except ApiException:
        return {}
    env = deployment.spec.template.spec.containers[0].env or []
    return {e.name: e.value for e in env if e.value is not None}


def test_config_env_reaches_the_canarys_workers_through_a_template_of_its_own(
    kube: k8s.ApiClient, builds_operator: str, redis_server: EmbeddedRedis
) -> None:
    """tests.json's `config.env` on a cluster: the canary runs a Template of its own
    (`canary-…`, the endpoint's with that env over its env, owned by the canary Endpoint),
    so its Deployment's container has those variables over the template's while the
    endpoint's workers keep theirs. No management list or by-id route shows that
    Template; it is deleted with the canary. A tests.json without `config.env` makes no
    Template: the canary runs the endpoint's."""
    template = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Template",
        "metadata": {"name": "env-tpl"},
        "spec": {"image": "example.test/base:1", "env": {"MODEL": "base", "KEEP": "yes"}},
    }
    with contextlib.suppress(ApiException):
        k8s.CustomObjectsApi(kube).create_namespaced_custom_object(
            GROUP, VERSION, ENDPOINTS_NS, "templates", template
        )
    builds = Builds(kube, builds_operator, "ep-env")
    builds.create_endpoint(templateId="env-tpl")
    wait_until(lambda: _worker_env(builds, "ep-env").get("MODEL") == "base", "its workers", 30)

    one = builds.call("POST").json()
    _complete(builds, one["id"], DIGEST, _cloned_with_tests(TESTS_JSON))
    canary = "canary-" + one["id"].removeprefix("build_")
    body = wait_until(lambda: _endpoint(builds, canary), "the canary Endpoint", 30)
    assert body["spec"]["templateId"] == canary
    own = wait_until(lambda: _template(builds, canary), "the canary's Template", 30)
    assert own["metadata"]["labels"] == {"lockgate.dev/canary-of": "ep-env"}
    [owner] = own["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Endpoint", canary, body["metadata"]["uid"],
    )  # fmt: skip
    assert own["spec"]["env"] == {"MODEL": "tiny", "KEEP": "yes"}
    # the canary's worker container: tests.json's MODEL over the template's, KEEP kept
    wait_until(lambda: _worker_env(builds, canary).get("MODEL") == "tiny", "the canary's env", 30)
    assert _worker_env(builds, canary)["KEEP"] == "yes"
    assert _worker_env(builds, "ep-env")["MODEL"] == "base"  # the endpoint's: its own
    # hidden from every template list and by-id route of the management API
    for path in ("/v1/templates", "/v2/templates"):
        listed = requests.get(f"{builds.url}{path}", headers=builds.headers, timeout=30)
        assert listed.status_code == 200 and "env-tpl" in listed.text, listed.text
        assert canary not in listed.text
        for method, sent in (("GET", None), ("PATCH", {"env": {"X": "1"}}), ("DELETE", None)):
            answer = requests.request(method, f"{builds.url}{path}/{canary}", json=sent,
                                      headers=builds.headers, timeout=30)  # fmt: skip
            assert answer.status_code == 404, (path, method, answer.text)
    assert _template(builds, canary)["spec"]["env"]["MODEL"] == "tiny"

    assert _play_the_canary_worker(redis_server.url, canary, None) == {"prompt": "hi"}
    builds.wait_status(one["id"], "COMPLETED", 30)
    wait_until(lambda: _endpoint(builds, canary) is None, "the canary deleted", 30)
    wait_until(lambda: _template(builds, canary) is None, "the canary's Template deleted", 30)

    # no config.env: the endpoint's Template, nothing made; gone after a failed test too
    two = builds.call("POST").json()
    plain = {"tests": TESTS_JSON["tests"]}
    _complete(builds, two["id"], "sha256:" + "ab" * 32, _cloned_with_tests(plain))
    canary_two = "canary-" + two["id"].removeprefix("build_")
    body = wait_until(lambda: _endpoint(builds, canary_two), "the second canary", 30)
    assert body["spec"]["templateId"] == "env-tpl"
    assert _template(builds, canary_two) is None
    _play_the_canary_worker(redis_server.url, canary_two, "boom")
    builds.wait_status(two["id"], "TEST_FAILED", 30)
    wait_until(lambda: _endpoint(builds, canary_two) is None, "the second canary deleted", 30)
    assert _template(builds, canary_two) is None
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-env"
    )


# -- live builder logs (issue 48: the builder's lines while it runs, each once) ---------------


def _container_lines(redis_url: str, endpoint_id: str, build_id: str) -> list[str]:
    """The builder's lines in the build's log as the operator wrote them (Redis)."""

    async def read() -> list[str]:
        redis = Redis.from_url(redis_url)
        try:
            rows = await BuildStore(redis).log_lines_of(endpoint_id, build_id)
        finally:
            await redis.aclose()
        return [text for _, source, text in rows if source == "container"]

    return asyncio.run(read())


def test_the_builders_lines_reach_the_build_log_while_it_runs_each_once(
    kube: k8s.ApiClient,
    start_builds_operator: Callable[[str], str],
    operators: dict[str, OperatorThread],
    redis_server: EmbeddedRedis,
    tmp_path,
) -> None:
    """The build pod bound to a Node whose kubelet log API the test serves
    (tests/kubelet_logs.py, through the real kube-apiserver's `pods/log`): the clone's and
    the build's lines are in the build's log while it is BUILDING (its Job not ended);
    lines written later follow, each once however many looks pass; the operator
    restarted meanwhile takes up where it was (a line written while it was down, once,
    none again); the push's lines come after `build UPLOADING`, before `build COMPLETED`."""
    from kubelet_logs import bind, kubelet_node

    url = start_builds_operator(BUILDS_NS)
    builds = Builds(kube, url, "ep-live")
    builds.create_endpoint()
    build = builds.call("POST").json()
    job = wait_until(lambda: builds.job(build["id"]), "the build Job created", 30)
    pod = builds.pod(build["id"], job)
    lines = lambda: _container_lines(redis_server.url, "ep-live", build["id"])  # noqa: E731
    with kubelet_node(kube, "build-node", tmp_path) as kubelet:
        bind(kube, BUILDS_NS, pod, "build-node")
        kubelet.add(BUILDS_NS, pod, "clone", "HEAD is now at 4f1c2e9 faster handler")
        kubelet.add(BUILDS_NS, pod, "build", "STEP 1/3: FROM base", "STEP 2/3: COPY . /app")
        builds.pod_status(pod, _cloned(), {"running": {"startedAt": _now()}})
        builds.job_status(job, {"active": 1, "startTime": _now()})
        first = ["HEAD is now at 4f1c2e9 faster handler", "STEP 1/3: FROM base",
                 "STEP 2/3: COPY . /app"]  # fmt: skip
        wait_until(lambda: lines() == first, "the builder's first lines in the build's log", 30)
        assert builds.get(build["id"])["status"] == "BUILDING"  # live: the Job runs on

        # more lines: appended after the others; later looks take none twice
        kubelet.add(BUILDS_NS, pod, "build", "STEP 3/3: RUN pip install -r requirements.txt")
        wait_until(lambda: len(lines()) == 4, "the next line", 30)
        reads = kubelet.reads
        wait_until(lambda: kubelet.reads >= reads + 3, "three more looks at the log", 30)
        assert lines() == [*first, "STEP 3/3: RUN pip install -r requirements.txt"]

        # the operator restarted: a line written meanwhile once, nothing again
        operators[url].stop()
        kubelet.add(BUILDS_NS, pod, "build", "Successfully installed runpod")
        builds.url = start_builds_operator(BUILDS_NS)
        wait_until(lambda: len(lines()) == 5, "the line written while it was down", 30)
        reads = kubelet.reads
        wait_until(lambda: kubelet.reads >= reads + 3, "three looks by the new operator", 30)
        assert lines()[3:] == [
            "STEP 3/3: RUN pip install -r requirements.txt", "Successfully installed runpod"
        ]  # fmt: skip

        # the build ends, the push runs and ends: its lines after UPLOADING, once
        kubelet.add(BUILDS_NS, pod, "build", "COMMIT registry.example.test:5000/builds/ep-live")
        image = f"registry.example.test:5000/builds/ep-live:{build['id'][6:]}"
        kubelet.add(BUILDS_NS, pod, "push", f"pushing {image}", f"pushed {image}@{DIGEST}")
        pushed = {"terminated": {"exitCode": 0, "message": DIGEST, "startedAt": _now(),
                                 "finishedAt": _now()}}  # fmt: skip
        builds.pod_status(pod, _cloned(), _built(), pushed)
        done = {"active": 0, "succeeded": 1, "completionTime": _now()}
        builds.job_status(job, {**done, "conditions": [_condition("Complete")]})
        builds.wait_status(build["id"], "COMPLETED", 30)
        assert lines()[5:] == [
            "COMMIT registry.example.test:5000/builds/ep-live",
            f"pushing {image}",
            f"pushed {image}@{DIGEST}",
        ]
        log = builds.call("GET", f"/{build['id']}/logs", params={"tail": 100})
        said = [json.loads(x[5:])["line"] for x in log.text.splitlines() if x.startswith("data:")]
        at = said.index
        assert at("STEP 1/3: FROM base") < at("Successfully installed runpod")
        assert at("Successfully installed runpod") < at(f"build UPLOADING: pushing {image}")
        assert at(f"build UPLOADING: pushing {image}") < at(f"pushing {image}")
        assert at(f"pushed {image}@{DIGEST}") < at(f"build COMPLETED: {image}@{DIGEST}")
        assert len(said) == len(set(said)), said  # no line twice
    builds.custom.delete_namespaced_custom_object(
        GROUP, VERSION, ENDPOINTS_NS, "endpoints", "ep-live"
    )
