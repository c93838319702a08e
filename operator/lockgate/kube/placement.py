"""Pure: which one of an Endpoint's `gpuTypeIds` its workers are required to run on now.

RunPod's promise is "the first is tried first, then the next if unavailable". Preferred
node affinity does not keep it: cluster autoscalers (cluster-autoscaler, Karpenter, GKE
node auto-provisioning) ignore preferences, so they may add a node of any listed type, or
none. So workers *require* one type at a time:
- a new Endpoint (or one whose list no longer holds the type in use) starts on the first;
- when a worker pod of the type in use has been Unschedulable (its `PodScheduled`
  condition) for `fallback_s`, the next type is required (after the last: the first);
- after `retry_first_s` on any other type, the first is tried again; if it is still
  unavailable, its pods turn Unschedulable and the fallback moves on once more (a
  Deployment keeps the old workers serving until the new ones are Ready).

The choice is kept in the Endpoint's annotations (`lockgate.dev/gpu-type`, `-since`,
`-reason`), so an operator restart resumes where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lockgate.timestamps import parse_time

GPU_TYPE_ANNOTATION = "lockgate.dev/gpu-type"  # on the Endpoint and on its worker pods
SINCE_ANNOTATION = "lockgate.dev/gpu-type-since"
REASON_ANNOTATION = "lockgate.dev/gpu-type-reason"
CONDITION = "GPUTypeSelected"

FIRST_CHOICE = "FirstChoice"  # the first of gpuTypeIds, as listed
FELL_BACK = "Unschedulable"  # pods could not be placed on the previous type: the next one
RETRY_FIRST = "RetryingFirst"  # a while on a fallback: is the first available again?
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True, slots=True)
class Choice:
    """The GPU type workers are required to use, since when, and why."""

    gpu_type: str
    since: datetime
    reason: str = FIRST_CHOICE

    def annotations(self) -> dict[str, str]:
        return {
            GPU_TYPE_ANNOTATION: self.gpu_type,
            SINCE_ANNOTATION: self.since.strftime(TIME_FORMAT),
            REASON_ANNOTATION: self.reason,
        }

    def message(self, gpu_type_ids: Sequence[str]) -> str:
        """One line for the Endpoint's condition and Event."""
        position = f"gpuTypeIds[{list(gpu_type_ids).index(self.gpu_type)}]"
        why = {
            FIRST_CHOICE: "the first listed type",
            FELL_BACK: "worker pods stayed Unschedulable on the previous type",
            RETRY_FIRST: "retrying the first listed type after a while on a fallback",
        }.get(self.reason, self.reason)
        since = self.since.strftime(TIME_FORMAT)
        return f"workers require {self.gpu_type!r} ({position}) since {since}: {why}"


@dataclass(frozen=True, slots=True)
class PodScheduling:
    """What the decision needs of one worker pod."""

    gpu_type: str  # the type its template required ("" when unknown)
    unschedulable_since: datetime | None  # PodScheduled False, reason Unschedulable


def from_annotations(annotations: Mapping[str, str] | None) -> Choice | None:
    """The choice an Endpoint's annotations record; None when they record none."""
    ann = annotations or {}
    since = parse_time(ann.get(SINCE_ANNOTATION))
    gpu_type = ann.get(GPU_TYPE_ANNOTATION)
    if not gpu_type or since is None:
        return None
    return Choice(gpu_type, since, ann.get(REASON_ANNOTATION) or FIRST_CHOICE)


def pod_scheduling(pod: Mapping[str, Any]) -> PodScheduling:
    """A pod (as the API returns it) reduced to its GPU type and Unschedulable time."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    since = None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == (
            "PodScheduled", "False", "Unschedulable",
        ):  # fmt: skip
            since = parse_time(cond.get("lastTransitionTime"))
    return PodScheduling(annotations.get(GPU_TYPE_ANNOTATION, ""), since)


def choose(
    gpu_type_ids: Sequence[str],
    previous: Choice | None,
    pods: Iterable[PodScheduling],
    *,
    now: datetime,
    fallback_s: float,
    retry_first_s: float,
) -> Choice:
    """The type to require now (see the module docstring); `gpu_type_ids` is not empty."""
    types = list(dict.fromkeys(gpu_type_ids))
    if previous is None or previous.gpu_type not in types:
        return Choice(types[0], now, FIRST_CHOICE)
    index = types.index(previous.gpu_type)
    if _stuck(previous, pods, now, fallback_s) and len(types) > 1:
        return Choice(types[(index + 1) % len(types)], now, FELL_BACK)
    if index > 0 and (now - previous.since).total_seconds() >= retry_first_s:
        return Choice(types[0], now, RETRY_FIRST)
    return previous


def on_fallback(gpu_type_ids: Sequence[str], annotations: Mapping[str, str] | None) -> bool:
    """Whether the workers require a type other than the first listed: a reconcile may
    then retry the first (`choose`), so the Endpoint's resync must not rest."""
    choice = from_annotations(annotations)
    types = list(dict.fromkeys(gpu_type_ids))
    return choice is not None and len(types) > 1 and choice.gpu_type != types[0]


def _stuck(
    current: Choice, pods: Iterable[PodScheduling], now: datetime, fallback_s: float
) -> bool:
    """Some pod of the current type has been Unschedulable `fallback_s`, counted from the
    choice at the earliest (a pod left from an earlier try of the same type starts anew)."""
    for pod in pods:
        if pod.gpu_type == current.gpu_type and pod.unschedulable_since is not None:
            start = max(pod.unschedulable_since, current.since)
            if (now - start).total_seconds() >= fallback_s:
                return True
    return False
