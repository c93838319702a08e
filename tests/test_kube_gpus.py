"""GPU placement, pure: label presets and their gpuTypeId tables (kube.gpus), "this CUDA
or newer", one GPU type at a time with a fallback (kube.placement), and where worker pods
and the flashboot DaemonSet may go (kube.manifests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from lockgate.kube import placement
from lockgate.kube.gpus import GpuLabels, parse_cuda
from lockgate.kube.manifests.names import Owner
from lockgate.kube.manifests.workloads import flashboot_daemonset, worker_deployment
from lockgate.kube.placement import Choice, PodScheduling, on_fallback
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, TemplateSpec

OWNER = Owner(name="ep1", namespace="ml", uid="uid-1")
A100, L4, RTX = "NVIDIA A100 80GB PCIe", "NVIDIA L4", "NVIDIA GeForce RTX 4090"


def settings(**kw: Any) -> OperatorSettings:
    return OperatorSettings(gateway_url="http://gw:8080", **kw)


def terms(pod_spec: dict) -> list[dict[str, Any]]:
    """The required node selector terms as {key: (operator, values)} each."""
    node = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [
        {e["key"]: (e["operator"], e.get("values")) for e in t["matchExpressions"]}
        for t in node["nodeSelectorTerms"]
    ]


def worker_pod(spec: dict, s: OperatorSettings | None = None, **kw: Any) -> dict:
    dep = worker_deployment(
        OWNER, EndpointSpec(**spec), TemplateSpec(image="img:1"), "tpl", s or settings(),
        replicas=0, **kw,
    )  # fmt: skip
    return dep["spec"]["template"]


def flashboot_pod(spec: dict, s: OperatorSettings | None = None) -> dict:
    ds = flashboot_daemonset(
        OWNER, EndpointSpec(flashboot=True, **spec), TemplateSpec(image="img:1"), s or settings()
    )
    return ds["spec"]["template"]["spec"]


# -- presets and tables ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "label", "values"),
    [
        ("nvidia-gfd", "nvidia.com/gpu.product", ["NVIDIA-A100-80GB-PCIe", "NVIDIA-L4"]),
        ("gke", "cloud.google.com/gke-accelerator", ["nvidia-a100-80gb", "nvidia-l4"]),
        ("karpenter", "karpenter.k8s.aws/instance-gpu-name", ["a100", "l4"]),
    ],
)
def test_each_preset_names_gpu_types_with_its_own_label_and_values(
    preset: str, label: str, values: list[str]
) -> None:
    gpus = settings(gpu_labels=preset).gpu_labelling()
    assert gpus.type_label == label
    assert gpus.label_values([A100, L4]) == values


@pytest.mark.parametrize(
    ("preset", "gpu", "value"),
    [
        ("gke", "NVIDIA H100 80GB HBM3", "nvidia-h100-80gb"),
        ("gke", "Tesla T4", "nvidia-tesla-t4"),
        ("gke", "NVIDIA A100-SXM4-40GB", "nvidia-tesla-a100"),
        ("karpenter", "NVIDIA A10G", "a10g"),
        ("karpenter", "NVIDIA L40S", "l40s"),
        ("karpenter", "NVIDIA H100 80GB HBM3", "h100"),
        ("nvidia-gfd", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("nvidia-gfd", RTX, "NVIDIA-GeForce-RTX-4090"),
    ],
)
def test_runpod_gpu_type_ids_map_to_each_presets_values(preset: str, gpu: str, value: str) -> None:
    assert settings(gpu_labels=preset).gpu_labelling().label_values([gpu])[0] == value


def test_an_id_no_table_knows_is_used_as_written() -> None:
    assert settings(gpu_labels="gke").gpu_labelling().label_values(["nvidia-l4"]) == ["nvidia-l4"]


def test_the_admins_map_overrides_the_presets_table() -> None:
    s = settings(gpu_labels="karpenter", gpu_type_values={L4: ["l4", "l4-custom"]})
    assert s.gpu_labelling().label_values([L4, "NVIDIA A10G"]) == ["l4", "l4-custom", "a10g"]


def test_custom_preset_uses_the_given_label_and_map() -> None:
    s = settings(gpu_labels="custom", gpu_type_label="example.com/gpu", gpu_type_values={L4: ["x"]})
    gpus = s.gpu_labelling()
    assert (gpus.type_label, gpus.label_values([L4])) == ("example.com/gpu", ["x"])
    assert gpus.present == {"key": "example.com/gpu", "operator": "Exists"}
    assert gpus.cuda_labels is None


@pytest.mark.parametrize(
    ("kw", "complaint"),
    [
        ({"gpu_labels": "aks"}, "unknown GPU label preset 'aks'"),
        ({"gpu_labels": "custom"}, "custom GPU label preset needs gpu_type_label"),
    ],
)
def test_a_preset_that_cannot_work_stops_the_operator_with_a_message(kw: dict, complaint: str):
    with pytest.raises(ValidationError, match=complaint):
        settings(**kw)


def test_gpu_label_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_GPU_LABELS", "gke")
    monkeypatch.setenv("LOCKGATE_GPU_TYPE_VALUES", '{"NVIDIA L4": ["g2-l4"]}')
    monkeypatch.setenv("LOCKGATE_GPU_FALLBACK_S", "2.5")
    s = OperatorSettings()
    assert s.gpu_labelling().label_values([L4]) == ["g2-l4"]
    assert s.gpu_fallback_s == 2.5


# -- CUDA: this version or newer ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"), [("12.4", (12, 4)), ("12", (12, 0)), ("11.8.0", (11, 8)), ("x", None)]
)
def test_cuda_versions_are_parsed_as_major_and_minor(text: str, parsed: Any) -> None:
    assert parse_cuda(text) == parsed


def node_matches(term_list: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """Whether a node with `labels` satisfies any term (Kubernetes' own semantics)."""

    def ok(key: str, op: str, values: list[str] | None) -> bool:
        if op == "Exists":
            return key in labels
        if key not in labels:
            return False
        if op == "In":
            return labels[key] in (values or [])
        assert op == "Gt"
        return int(labels[key]) > int((values or ["0"])[0])

    return any(all(ok(k, *v) for k, v in t.items()) for t in term_list)


@pytest.mark.parametrize(
    ("node", "allowed"),
    [
        ("12.4", True),
        ("12.6", True),
        ("13.0", True),
        ("12.3", False),
        ("11.8", False),
    ],
)
def test_allowed_cuda_versions_mean_the_lowest_listed_or_newer(node: str, allowed: bool) -> None:
    spec = worker_pod({"allowedCudaVersions": ["12.6", "12.4"], "dataCenterIds": ["EU-RO-1"]})
    major, minor = node.split(".")
    labels = {
        "nvidia.com/cuda.runtime-version.major": major,
        "nvidia.com/cuda.runtime-version.minor": minor,
        "topology.kubernetes.io/zone": "EU-RO-1",
    }
    assert node_matches(terms(spec["spec"]), labels) is allowed
    assert not node_matches(terms(spec["spec"]), {**labels, "topology.kubernetes.io/zone": "x"})


def test_a_whole_cuda_major_needs_one_term() -> None:
    assert GpuLabels.resolve("nvidia-gfd").cuda_alternatives(["12.0"]) == [
        [{"key": "nvidia.com/cuda.runtime-version.major", "operator": "Gt", "values": ["11"]}]
    ]


def test_presets_without_a_cuda_label_ignore_allowed_cuda_versions() -> None:
    spec = worker_pod({"allowedCudaVersions": ["12.4"]}, settings(gpu_labels="gke"))["spec"]
    assert "affinity" not in spec


# -- workers: one GPU type at a time --------------------------------------------------------


def test_workers_require_only_the_first_gpu_type_without_preferences() -> None:
    pod = worker_pod({"gpuTypeIds": [A100, L4]}, settings(gpu_labels="gke"))
    node = pod["spec"]["affinity"]["nodeAffinity"]
    assert terms(pod["spec"]) == [
        {"cloud.google.com/gke-accelerator": ("In", ["nvidia-a100-80gb"])}
    ]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in node
    assert pod["metadata"]["annotations"]["lockgate.dev/gpu-type"] == A100


def test_workers_require_the_chosen_gpu_type() -> None:
    pod = worker_pod({"gpuTypeIds": [A100, L4]}, gpu_type=L4)
    assert terms(pod["spec"]) == [{"nvidia.com/gpu.product": ("In", ["NVIDIA-L4"])}]
    assert pod["metadata"]["annotations"]["lockgate.dev/gpu-type"] == L4


def test_a_chosen_type_no_longer_listed_falls_to_the_first() -> None:
    pod = worker_pod({"gpuTypeIds": [A100]}, gpu_type=L4)
    assert terms(pod["spec"]) == [{"nvidia.com/gpu.product": ("In", ["NVIDIA-A100-80GB-PCIe"])}]


# -- flashboot: only on nodes of the endpoint's GPU types -----------------------------------


def test_flashboot_lands_on_nodes_of_every_listed_type() -> None:
    pod = flashboot_pod({"gpuTypeIds": [A100, L4]}, settings(gpu_labels="karpenter"))
    assert terms(pod) == [{"karpenter.k8s.aws/instance-gpu-name": ("In", ["a100", "l4"])}]


@pytest.mark.parametrize(
    ("preset", "expression"),
    [
        ("nvidia-gfd", {"nvidia.com/gpu.present": ("In", ["true"])}),
        ("gke", {"cloud.google.com/gke-accelerator": ("Exists", None)}),
        ("karpenter", {"karpenter.k8s.aws/instance-gpu-name": ("Exists", None)}),
    ],
)
def test_flashboot_without_gpu_types_lands_only_on_gpu_nodes(preset: str, expression) -> None:
    assert terms(flashboot_pod({}, settings(gpu_labels=preset))) == [expression]


def test_gpu_present_label_is_configurable() -> None:
    pod = flashboot_pod({}, settings(gpu_present_label="example.com/gpu=yes"))
    assert terms(pod) == [{"example.com/gpu": ("In", ["yes"])}]


def test_cpu_flashboot_is_not_limited_to_gpu_nodes() -> None:
    assert "affinity" not in flashboot_pod({"computeType": "CPU"})


# -- the fallback decision ------------------------------------------------------------------

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TYPES = [A100, L4, RTX]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def decide(previous: Choice | None, pods: list[PodScheduling], now: float) -> Choice:
    return placement.choose(TYPES, previous, pods, now=at(now), fallback_s=60, retry_first_s=600)


def stuck(gpu: str, since: float) -> PodScheduling:
    return PodScheduling(gpu, at(since))


def test_a_new_endpoint_requires_its_first_type() -> None:
    assert decide(None, [], 0) == Choice(A100, at(0), placement.FIRST_CHOICE)


@pytest.mark.parametrize(
    ("pods", "now", "expected"),
    [
        ([], 59, A100),  # no pod waits: stay
        ([stuck(A100, 10)], 69, A100),  # Unschedulable 59 s < 60 s
        ([stuck(A100, 10)], 70, L4),  # 60 s: the next type
        ([PodScheduling(A100, None)], 1000, A100),  # scheduled pods: stay
        ([stuck(L4, 0)], 1000, A100),  # a pod of another type does not count
    ],
)
def test_pods_unschedulable_for_the_fallback_time_move_to_the_next_type(
    pods: list[PodScheduling], now: float, expected: str
) -> None:
    assert decide(Choice(A100, at(0)), pods, now).gpu_type == expected


def test_after_the_last_type_the_first_is_tried_again() -> None:
    choice = decide(Choice(RTX, at(0), placement.FELL_BACK), [stuck(RTX, 0)], 60)
    assert (choice.gpu_type, choice.reason) == (A100, placement.FELL_BACK)


def test_unschedulable_time_counts_from_the_choice_at_the_earliest() -> None:
    """A pod left Unschedulable from an earlier try of the same type starts anew."""
    assert decide(Choice(A100, at(1000)), [stuck(A100, 0)], 1059).gpu_type == A100
    assert decide(Choice(A100, at(1000)), [stuck(A100, 0)], 1060).gpu_type == L4


def test_a_fallback_retries_the_first_type_after_the_retry_interval() -> None:
    on_l4 = Choice(L4, at(0), placement.FELL_BACK)
    assert decide(on_l4, [PodScheduling(L4, None)], 599) == on_l4
    assert decide(on_l4, [PodScheduling(L4, None)], 600) == Choice(
        A100, at(600), placement.RETRY_FIRST
    )


def test_a_type_removed_from_the_list_restarts_at_the_first() -> None:
    gone = Choice("NVIDIA B200", at(0), placement.FELL_BACK)
    assert decide(gone, [], 5) == Choice(A100, at(5), placement.FIRST_CHOICE)


def test_the_choice_survives_a_restart_in_the_endpoints_annotations() -> None:
    choice = Choice(L4, at(30), placement.FELL_BACK)
    assert placement.from_annotations(choice.annotations()) == choice
    assert placement.from_annotations({}) is None
    assert "gpuTypeIds[1]" in choice.message(TYPES) and "Unschedulable" in choice.message(TYPES)


def test_a_pods_unschedulable_time_is_read_from_its_pod_scheduled_condition() -> None:
    pod = {
        "metadata": {"annotations": {"lockgate.dev/gpu-type": L4}},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2026-11-22T12:00:05Z",
                }
            ]
        },
    }
    assert placement.pod_scheduling(pod) == PodScheduling(L4, at(5))
    assert placement.pod_scheduling({"metadata": {}}) == PodScheduling("", None)


def test_an_endpoint_on_a_fallback_type_is_one_whose_resync_must_not_rest() -> None:
    """A reconcile retries the first type after a while (`choose`): the resync keeps its
    period for such an Endpoint even when it has no worker and no job."""
    types = ["NVIDIA L4", "NVIDIA A10"]
    first = Choice("NVIDIA L4", T0).annotations()
    second = Choice("NVIDIA A10", T0, "Unschedulable").annotations()
    assert on_fallback(types, second)
    assert not on_fallback(types, first)
    assert not on_fallback(types, None)  # no choice recorded yet
    assert not on_fallback(["NVIDIA A10"], second)  # one type: nothing to retry
