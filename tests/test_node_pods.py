"""Complete worker pods on a real node (issue 12, item 7): the kubelet runs what the
operator builds, so each check below is the kubelet's and the kernel's, not ours.

- the default (restricted) securityContext runs an unchanged root-user RunPod image as
  uid 10001 — with runAsNonRoot the kubelet would refuse to start it as root;
- a Template's `secretEnv` reaches the worker from a Secret;
- /dev/shm is a memory tmpfs of `shmSizeInGb`, and the cgroup's memory limit is
  `memoryInGb`;
- `podSecurity: baseline` gives the same image its own (root) user back;
- the flashboot DaemonSet's helpers run as a non-root uid, `busybox true` inside the
  (root-user) worker image included.

The probe worker is tests/workers/runpod_probe.py in localhost/lockgate-test/runpod-worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from node_release import USER_NAMESPACE, Jobs, Release, endpoint_status, wait_until

pytest_plugins = ["node_fixtures"]
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

IMAGE = "localhost/lockgate-test/runpod-worker:dev"
GIB = 1024**3
SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "probe-token",
        "namespace": USER_NAMESPACE,
        "labels": {"lockgate.dev/worker-secret": "true"},  # workers may read it
    },
    "stringData": {"token": "hf_not_in_the_template"},
}


# The flashboot helpers, as hack/images.sh builds them (nothing can be pulled here).
HELPERS = (
    "operator.helperImages.busybox.repository=localhost/lockgate-test/busybox",
    "operator.helperImages.busybox.tag=static",
    "operator.helperImages.busybox.digest=",
    "operator.helperImages.pause.repository=localhost/lockgate-test/pause",
    "operator.helperImages.pause.tag=3.2",
    "operator.helperImages.pause.digest=",
)


@pytest.fixture(scope="module")
def release(node) -> Iterator[Release]:
    rel = Release(node)
    rel.install(*(arg for value in HELPERS for arg in ("--set", value)))
    yield rel
    rel.uninstall()


def probe_endpoint(release: Release, name: str, **template: Any) -> Jobs:
    """A Template running the probe worker with `template`'s fields, and its Endpoint."""
    spec = {"image": IMAGE, "command": ["python", "-u", "/app/runpod_probe.py"], **template}
    meta = {"name": name, "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template",
                    "metadata": meta, "spec": spec})  # fmt: skip
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                    "spec": {"templateId": name, "computeType": "CPU", "vcpuCount": 1,
                             "workersMin": 0, "workersMax": 1, "idleTimeout": 5}})  # fmt: skip
    wait_until(lambda: endpoint_status(release, name).get("phase") == "Ready", f"{name} Ready")
    return Jobs(release, name)


def probe(jobs: Jobs, var: str = "") -> dict[str, Any]:
    job = jobs.runsync({"input": {"var": var}}, wait_ms=90000)
    if job["status"] != "COMPLETED":
        job = jobs.final(job["id"], timeout=180)
    assert job["status"] == "COMPLETED", job
    return job["output"]


@pytest.fixture(scope="module")
def restricted(release: Release) -> dict[str, Any]:
    """What the probe saw in a pod built with the defaults and a few Template fields."""
    release.apply(SECRET)
    jobs = probe_endpoint(
        release,
        "probe",
        memoryInGb=1,
        shmSizeInGb=0.25,
        secretEnv={"HF_TOKEN": {"name": "probe-token", "key": "token"}},
    )
    return probe(jobs, "HF_TOKEN")


def test_a_root_image_runs_a_job_as_the_restricted_non_root_user(restricted) -> None:
    assert restricted["uid"] == 10001


def test_a_secret_env_variable_reaches_the_worker(release: Release, restricted) -> None:
    assert restricted["env"] == "hf_not_in_the_template"
    template = json.loads(release.node.kubectl(
        "-n", USER_NAMESPACE, "get", "templates.lockgate.dev", "probe", "-o", "json"))  # fmt: skip
    assert "hf_not_in_the_template" not in json.dumps(template)


def test_dev_shm_is_a_memory_tmpfs_of_the_given_size(restricted) -> None:
    assert restricted["shm"]["type"] == "tmpfs"
    assert restricted["shm"]["bytes"] == GIB // 4


def test_the_worker_memory_limit_is_memory_in_gb(restricted) -> None:
    assert int(restricted["memoryLimit"]) == GIB


def test_baseline_pod_security_runs_the_image_as_its_own_root_user(release: Release) -> None:
    jobs = probe_endpoint(release, "probe-root", podSecurity="baseline")
    assert probe(jobs)["uid"] == 0


def test_flashboot_pre_pulls_with_non_root_helpers(release: Release) -> None:
    meta = {"name": "probe-flash", "namespace": USER_NAMESPACE}
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Template", "metadata": meta,
                    "spec": {"image": IMAGE}})  # fmt: skip
    release.apply({"apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint", "metadata": meta,
                    "spec": {"templateId": "probe-flash", "computeType": "CPU", "vcpuCount": 1,
                             "flashboot": True, "workersMax": 0}})  # fmt: skip
    selector = "lockgate.dev/endpoint=probe-flash,app.kubernetes.io/component=flashboot"

    def running_pod() -> dict[str, Any] | None:
        pods = release.pods(selector, USER_NAMESPACE)
        return next((p for p in pods if p["status"].get("phase") == "Running"), None)

    try:
        pod = wait_until(running_pod, "the flashboot pod to run", timeout=180)
    except AssertionError:
        print(release.describe())
        raise
    inits = pod["status"]["initContainerStatuses"]
    assert [c["state"]["terminated"]["exitCode"] for c in inits] == [0, 0], inits
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert all(c["securityContext"]["runAsUser"] == 10001 for c in containers)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
