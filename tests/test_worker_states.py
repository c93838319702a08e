"""The pure decisions behind `/health`'s worker states: pods (kube.podstates) and dev-mode
processes (dev.workers.worker_states), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.dev.workers import QUICK_EXIT_S, Crash, crash_backoff_s, worker_states
from lockgate.kube.podstates import pod_states, pull_errors

GPU = {"computeType": "GPU", "gpuTypeIds": ["NVIDIA L4", "NVIDIA A10"], "gpuCount": 1}
CPU = {"computeType": "CPU", "vcpuCount": 8}


def pod(status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": "worker", "image": "repo/img:1"}]}
    return {"metadata": {"name": "p", **meta}, "spec": spec, "status": status or {}}


def waiting(reason: str, **extra: Any) -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": "m"}}
    return {"containerStatuses": [{"name": "worker", "state": state, **extra}]}


READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
UNSCHEDULABLE = {
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
}


@pytest.mark.parametrize(
    ("pods", "endpoint", "counts", "reason"),
    [
        ([], GPU, (0, 0, 0), "NoWorkers"),
        ([pod(READY)], GPU, (0, 0, 0), "WorkersStart"),
        ([pod({"phase": "Pending"})], GPU, (1, 0, 0), "WorkersStart"),
        ([pod(UNSCHEDULABLE)], GPU, (0, 1, 0), "NoGpuCapacity"),
        ([pod(UNSCHEDULABLE)], CPU, (0, 1, 0), "NoCpuCapacity"),
        ([pod(waiting("ErrImagePull"))], GPU, (0, 0, 1), "ImagePullError"),
        ([pod(waiting("CrashLoopBackOff", restartCount=2))], GPU, (0, 0, 1), "CrashLoop"),
        ([pod(waiting("CreateContainerConfigError"))], GPU, (0, 0, 1), "ContainerConfigError"),
        ([pod(waiting("ErrImagePull"), deletionTimestamp="2026-01-01T00:00:00Z")], GPU,
         (0, 0, 0), "NoWorkers"),
        ([pod(UNSCHEDULABLE), pod(waiting("CrashLoopBackOff"))], GPU, (0, 1, 1), "CrashLoop"),
    ],
)  # fmt: skip
def test_pod_states(pods: list, endpoint: dict, counts: tuple, reason: str) -> None:
    states = pod_states(pods, endpoint)
    assert (states.initializing, states.throttled, states.unhealthy) == counts
    assert states.check is not None and states.check.reason == reason
    assert states.check.ok is (reason in ("NoWorkers", "WorkersStart"))


def test_unschedulable_message_names_the_gpu_types_and_what_to_do() -> None:
    check = pod_states([pod(UNSCHEDULABLE)], {**GPU, "gpuCount": 2}).check
    assert check is not None
    assert "no node has GPU type NVIDIA L4 or NVIDIA A10 with 2 free GPUs" in check.message
    assert check.message.endswith("Add such a node or allow more GPU types.")


UNAUTHORIZED = (
    'failed to pull and unpack image "repo/img:1": failed to resolve reference '
    '"repo/img:1": pulling from host r.test:5000 failed with status code [manifests 1]: '
    "401 Unauthorized"
)


def pulling(reason: str, message: str) -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": message}}
    return {"containerStatuses": [{"name": "worker", "image": "repo/img:1", "state": state}]}


def test_the_registrys_answer_is_kept_and_named_while_pulls_back_off() -> None:
    """The kubelet says why a pull failed only in `ErrImagePull`; `ImagePullBackOff`,
    most of the time after, says "Back-off pulling image": the kept answer names the 401."""
    failed = [pod(pulling("ErrImagePull", UNAUTHORIZED))]
    kept = pull_errors(failed)
    assert kept == {"repo/img:1": UNAUTHORIZED}
    check = pod_states(failed, GPU, (), kept).check
    assert check is not None and check.message.count("401 Unauthorized") == 1  # said once
    backing_off = [pod(pulling("ImagePullBackOff", 'Back-off pulling image "repo/img:1"'))]
    assert pull_errors(backing_off) == {}
    check = pod_states(backing_off, GPU, (), kept).check
    assert check is not None and check.reason == "ImagePullError"
    assert (
        '(ImagePullBackOff: Back-off pulling image "repo/img:1"; last pull error: '
        f"{UNAUTHORIZED})" in check.message
    )
    other = pod_states(backing_off, GPU, (), {"other/img:2": "404"}).check
    assert other is not None and "last pull error" not in other.message


def fetching(state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A pod in its `fetch-models` init container (an endpoint's modelReferences)."""
    fetch = {"name": "fetch-models", "state": state, **extra}
    return {"phase": "Pending", "initContainerStatuses": [fetch]}


MODELS = {**GPU, "modelReferences": ["acme/tiny", "acme/other:v1"]}
HUB_404 = "modelReferences: acme/tiny: 404 Client Error. Repository Not Found for url: …"


def test_pods_downloading_their_models_are_initializing_and_say_so() -> None:
    states = pod_states([pod(fetching({"running": {}})), pod({"phase": "Pending"})], MODELS)
    assert (states.initializing, states.unhealthy) == (2, 0)
    assert states.check is not None and states.check.ok is True
    assert states.check.reason == "DownloadingModels"
    assert states.check.message.endswith("download: acme/tiny, acme/other:v1")


@pytest.mark.parametrize(
    "status",
    [
        fetching({"terminated": {"exitCode": 1, "message": HUB_404}}),
        fetching(
            {"waiting": {"reason": "CrashLoopBackOff"}},
            lastState={"terminated": {"exitCode": 1, "message": f"fetching…\n{HUB_404}\n"}},
            restartCount=2,
        ),
    ],
)
def test_a_failed_model_download_is_unhealthy_and_names_the_hubs_answer(status: dict) -> None:
    states = pod_states([pod(status)], MODELS)
    assert (states.initializing, states.unhealthy) == (0, 1)
    check = states.check
    assert check is not None and check.ok is False and check.reason == "ModelFetchFailed"
    assert f"Models cannot be fetched: {HUB_404}." in check.message


def test_a_retried_download_that_runs_again_is_downloading_not_failed() -> None:
    status = fetching({"running": {}}, lastState={"terminated": {"exitCode": 1}}, restartCount=1)
    check = pod_states([pod(status)], MODELS).check
    assert check is not None and check.reason == "DownloadingModels"


def test_the_model_images_pull_error_is_named() -> None:
    status = fetching({"waiting": {"reason": "ImagePullBackOff", "message": "401"}})
    spec = {"initContainers": [{"name": "fetch-models", "image": "lockgate:1"}], "containers": []}
    check = pod_states([{"metadata": {"name": "p"}, "spec": spec, "status": status}], MODELS).check
    assert check is not None and check.reason == "ImagePullError"
    assert "'lockgate:1' cannot be pulled (ImagePullBackOff: 401)" in check.message


@pytest.mark.parametrize(
    ("starting", "crash_ages", "wanted", "expected"),
    [
        (1, [], 1, (1, 0, "")),
        (1, [5.0], 1, (1, 0, "")),  # one quick exit is not a loop yet
        (1, [5.0, 2.0], 1, (0, 1, "CrashLoop")),
        (0, [90.0, 70.0], 1, (0, 0, "")),  # old crashes are forgiven
        (2, [9.0, 6.0, 3.0], 2, (0, 2, "CrashLoop")),
    ],
)
def test_dev_worker_states(starting: int, crash_ages: list, wanted: int, expected: tuple) -> None:
    now = 1000.0
    crashes = [Crash(1, now - age, "Traceback: boom") for age in crash_ages]
    states = worker_states(starting, crashes, now, wanted)
    assert (states.initializing, states.unhealthy, states.reason) == expected
    if states.reason:
        assert "exit code 1" in states.message and "Traceback: boom" in states.message


def test_a_crash_loop_slowed_by_the_back_off_stays_one() -> None:
    """Crashes 10, 20, 40, 80 s apart (the back-off doubling): between the last two, a
    fixed 60 s window held one crash and the endpoint read as healthy."""
    ended = [0.0, 11.0, 32.0, 73.0]  # each start after its delay, exiting 1 s later
    crashes = [Crash(1, t, "RuntimeError: broken") for t in ended]
    now, until = 140.0, 73.0 + 80.0  # the next start is allowed at 153 s
    backoff_s = crash_backoff_s(crashes, until, now)
    assert backoff_s == 80.0
    assert worker_states(0, crashes, now, 1, backoff_s).reason == "CrashLoop"
    assert worker_states(0, crashes, now, 1).reason == ""  # the fixed window alone
    # a worker started at 153 s and still up past QUICK_EXIT_S: the loop is over
    later = until + QUICK_EXIT_S + 1
    assert crash_backoff_s(crashes, until, later) == 0.0
    assert worker_states(1, crashes, later, 1, 0.0).reason == ""


def test_a_marked_workers_pod_counts_for_nothing_here_as_health_counts_it_from_the_store():
    crashing = pod(waiting("CrashLoopBackOff", restartCount=1), name="sick")
    states = pod_states([crashing, pod({"phase": "Pending"})], GPU, marked={"sick"})
    assert (states.initializing, states.throttled, states.unhealthy) == (1, 0, 0)
