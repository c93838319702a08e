"""Pure: worker states from worker pods, as the kubelet and scheduler wrote them.

The gateway sees workers only once they poll (`idle`, `running`); why a queue waits with
no worker taking jobs is in the pods: `initializing` (scheduled or being scheduled,
pulling, starting, not ready yet), `throttled` (the scheduler found no node: no GPU of the
endpoint's types free) and `unhealthy` (crash loop, image pull errors, a container that
cannot be created). The worst cause becomes the Endpoint's `WorkersHealthy` condition,
in plain words with what to do; pods waiting for their `modelReferences` to download make
it `DownloadingModels`, a download that failed `ModelFetchFailed`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.kube.manifests.models import MODELS_CONTAINER
from lockgate.kube.manifests.names import WORKER_CONTAINER
from lockgate.kube.status import WORKERS_HEALTHY, Check
from lockgate.scaling.crashloop import Start
from lockgate.timestamps import epoch_ms

PULL_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CRASHES = {"CrashLoopBackOff", "RunContainerError"}
CONFIG_ERRORS = {"CreateContainerConfigError", "CreateContainerError"}
LAST_LINE_CHARS = 300

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodStates:
    """Counts of worker pods the gateway cannot see, and the condition naming the cause."""

    initializing: int = 0
    throttled: int = 0
    unhealthy: int = 0
    check: Check | None = None  # WorkersHealthy


@dataclass(frozen=True)
class Problem:
    """Why one pod is throttled or unhealthy; `rank` orders causes (worst first)."""

    state: str  # "throttled" or "unhealthy"
    reason: str
    message: str
    rank: int


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip()[:LAST_LINE_CHARS] if lines else ""


def _capacity(endpoint: Obj) -> str:
    if endpoint.get("computeType", "GPU") == "CPU":
        return f"{endpoint.get('vcpuCount') or 'the asked'} free vCPUs and the memory asked for"
    types = " or ".join(endpoint.get("gpuTypeIds") or []) or "any type"
    count = endpoint.get("gpuCount") or 1
    return f"GPU type {types} with {count} free GPU{'s' if count != 1 else ''}"


def unschedulable(pod: Obj, endpoint: Obj) -> Problem | None:
    """Throttled: the scheduler found no node for the pod."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            gpu = endpoint.get("computeType", "GPU") != "CPU"
            said = cond.get("message") or "no node fits"
            message = (
                f"Worker pods cannot be scheduled: no node has {_capacity(endpoint)} "
                f"(scheduler: {said!r}). Add such a node or "
                f"{'allow more GPU types' if gpu else 'ask for fewer vCPUs'}."
            )
            return Problem("throttled", "NoGpuCapacity" if gpu else "NoCpuCapacity", message, 2)
    return None


def pull_errors(pods: Iterable[Obj]) -> dict[str, str]:
    """What the registry answered, by image, for each container whose pull just failed
    (`ErrImagePull`): the kubelet soon replaces it with a bare `ImagePullBackOff` message,
    so the scaler keeps it to name the cause (a 401, a missing tag) while pulls back off."""
    found = {}
    for pod in pods:
        status = pod.get("status") or {}
        for each in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            waiting = (each.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "ErrImagePull" and waiting.get("message"):
                found[each.get("image", "")] = _last_line(waiting["message"])
    return found


def container_problem(status: Obj, image: str, last_pull_error: str = "") -> Problem | None:
    """The problem of one container status, if it has one; `last_pull_error` is the
    registry's last answer for its image (`pull_errors`), named while pulls back off."""
    waiting = (status.get("state") or {}).get("waiting") or {}
    reason, said = waiting.get("reason", ""), waiting.get("message", "")
    if reason in PULL_ERRORS:
        detail = said or "no detail"
        if reason != "ErrImagePull" and last_pull_error:
            detail += f"; last pull error: {last_pull_error}"
        message = (
            f"The worker image {image!r} cannot be pulled ({reason}: {detail}). "
            "Check the image name and tag in the Template, and the registry's pull secret."
        )
        return Problem("unhealthy", "ImagePullError", message, 0)
    last = (status.get("lastState") or {}).get("terminated") or {}
    if reason in CRASHES or (last and reason and status.get("restartCount", 0) > 0):
        code = last.get("exitCode", "?")
        line = _last_line(last.get("message", ""))
        output = f": last output {line!r}" if line else ""
        message = f"Workers exit at once (exit code {code}){output}. Fix the handler or image."
        return Problem("unhealthy", "CrashLoop", message, 1)
    if reason in CONFIG_ERRORS:
        message = f"Worker containers cannot be created ({reason}: {said}). Fix the Template."
        return Problem("unhealthy", "ContainerConfigError", message, 1)
    return None


def models_problem(status: Obj) -> Problem | None:
    """The `fetch-models` init container failed: the reference and the hub's answer (its
    termination message), while the kubelet retries it with a back-off."""
    state = status.get("state") or {}
    ended = state.get("terminated") or (status.get("lastState") or {}).get("terminated") or {}
    if not ended or ended.get("exitCode", 0) == 0 or "running" in state:
        return None
    said = _last_line(ended.get("message", "")) or f"exit code {ended.get('exitCode', '?')}"
    message = (
        f"Models cannot be fetched: {said}. Check modelReferences, the hub (HF_ENDPOINT) "
        "and, for a gated model, the Template's HF_TOKEN; the pods retry with a back-off."
    )
    return Problem("unhealthy", "ModelFetchFailed", message, 0)


def downloading(pod: Obj) -> bool:
    """Whether the pod's models are being fetched now (it waits initializing)."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == MODELS_CONTAINER and "running" in (status.get("state") or {}):
            return True
    return False


def _images(pod: Obj, kind: str) -> dict[str, str]:
    """Each container's image by name, of the pod spec's `kind` (containers or
    initContainers)."""
    return {c.get("name"): c.get("image", "") for c in (pod.get("spec") or {}).get(kind) or []}


def _init_problem(pod: Obj, last_pull_errors: Mapping[str, str]) -> Problem | None:
    images = _images(pod, "initContainers")
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_ERRORS:
            image = images.get(status.get("name")) or ""
            return container_problem(status, image, last_pull_errors.get(image, ""))
        if status.get("name") == MODELS_CONTAINER and (problem := models_problem(status)):
            return problem
    return None


def pod_problem(
    pod: Obj, endpoint: Obj, last_pull_errors: Mapping[str, str] | None = None
) -> Problem | None:
    """Why a worker pod cannot take jobs, if it is not just starting; `last_pull_errors`:
    the registry's last answers by image (`pull_errors`)."""
    last_pull_errors = last_pull_errors or {}
    if problem := unschedulable(pod, endpoint) or _init_problem(pod, last_pull_errors):
        return problem
    images = _images(pod, "containers")
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        image = images.get(status.get("name")) or status.get("image", "")
        if problem := container_problem(status, image, last_pull_errors.get(image, "")):
            return problem
    return None


def pod_starts(pods: Iterable[Obj], known: Collection[str]) -> dict[str, int]:
    """The pods not in `known`, by name, with when they were created (epoch ms): the start
    their cold-start time counts from (scheduling and image pull included)."""
    starts = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        name, created = meta.get("name"), meta.get("creationTimestamp")
        if name and name not in known and (ms := epoch_ms(created)) is not None:
            starts[name] = ms
    return starts


def pod_ready(pod: Obj) -> bool:
    """Whether the pod's Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_states(
    pods: Iterable[Obj],
    endpoint: Obj,
    routed: Collection[str] = (),
    last_pull_errors: Mapping[str, str] | None = None,
    marked: Collection[str] = (),
) -> PodStates:
    """Worker states of an endpoint's pods (those being deleted do not count). Ready pods
    are the gateway's idle/running; others are initializing unless a problem shows, but
    for `routed` ones (load-balancing workers the gateways poll: their health is theirs to
    count, `initializing` included). `last_pull_errors`: the registry's last answers by
    image (`pull_errors`), named while pulls back off. `marked`: pods of workers marked
    unhealthy (`JobStore.unhealthy_present`): /health counts them from the store, so they
    count for nothing here (a fitness check's exit would count them twice)."""
    counts = {"initializing": 0, "throttled": 0, "unhealthy": 0}
    problems: list[Problem] = []
    seen = fetching = 0
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or pod["metadata"]["name"] in marked:
            continue
        seen += 1
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        problem = pod_problem(pod, endpoint, last_pull_errors)
        if problem is not None:
            counts[problem.state] += 1
            problems.append(problem)
        elif not pod_ready(pod) and pod["metadata"]["name"] not in routed:
            counts["initializing"] += 1
            fetching += downloading(pod)
    models = (endpoint.get("modelReferences") or []) if fetching else []
    return PodStates(**counts, check=_check(problems, seen, models))


def _check(problems: Sequence[Problem], pods: int, downloading: Sequence[str] = ()) -> Check:
    if not pods:
        return Check(WORKERS_HEALTHY, True, "NoWorkers", "no worker pods now")
    if not problems and downloading:
        message = "worker pods wait initializing while their models download: "
        return Check(WORKERS_HEALTHY, True, "DownloadingModels", message + ", ".join(downloading))
    if not problems:
        return Check(WORKERS_HEALTHY, True, "WorkersStart", "worker pods schedule and start")
    worst = min(problems, key=lambda p: p.rank)
    return Check(WORKERS_HEALTHY, False, worst.reason, worst.message)


def _ended(pod: str, attempt: int, ended: Obj, at: int | None) -> Start:
    code = ended.get("exitCode")
    reason = ended.get("reason", "")
    line = _last_line(ended.get("message", "")) or (reason if reason == "OOMKilled" else "")
    return Start(f"{pod}#{attempt}", at or 0, False, code, line)


def worker_starts(pods: Iterable[Obj], live: Collection[str]) -> list[Start]:
    """The starts of the worker containers of `pods`, one per attempt (`{pod}#{restart}`):
    a running one whose worker is `live` (it made worker-API calls) started well; each
    that ended (the kubelet restarts it in place: `restartCount`; or the pod failed)
    failed, unless the same attempt was seen well before (`scaling.crashloop.counted`
    counts an attempt once). Attempts ended before the last one show only as the restart
    count: they are counted with the last one's exit code and line."""
    starts = []
    for pod in pods:
        name = pod["metadata"]["name"]
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != WORKER_CONTAINER:
                continue
            restarts = int(status.get("restartCount") or 0)
            state = status.get("state") or {}
            if (running := state.get("running")) is not None and name in live:
                starts.append(
                    Start(f"{name}#{restarts}", epoch_ms(running.get("startedAt")) or 0, True)
                )
            last = (status.get("lastState") or {}).get("terminated") or {}
            last_at = epoch_ms(last.get("finishedAt"))
            for attempt in range(restarts):  # the earliest ones first, just before the last
                at = None if last_at is None else last_at - (restarts - 1 - attempt)
                starts.append(_ended(name, attempt, last, at))
            if (ended := state.get("terminated")) is not None:
                starts.append(_ended(name, restarts, ended, epoch_ms(ended.get("finishedAt"))))
    return starts
