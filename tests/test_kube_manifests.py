"""Manifest builders: every Endpoint and Template setting leaves a visible mark."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.kube.manifests.keys import worker_key_secret
from lockgate.kube.manifests.merge import hash_of, updated, with_hash
from lockgate.kube.manifests.names import SERVING_CONDITION, Owner
from lockgate.kube.manifests.scheduling import node_label_value
from lockgate.kube.manifests.security import HELPER_UID
from lockgate.kube.manifests.workloads import (
    flashboot_daemonset,
    worker_deployment,
    worker_pod_template,
)
from lockgate.kube.registry_record import registry_entry, scaled_externally
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, TemplateSpec, podfields
from lockgate.models.templates import new_template

OWNER = Owner(name="ep1", namespace="ml", uid="uid-1")
SETTINGS = OperatorSettings(gateway_url="http://gw:8080", base_url="https://jobs.example")


def deployment(spec: dict | None = None, template: dict | None = None, **kw: Any) -> dict:
    return worker_deployment(
        OWNER,
        EndpointSpec(**(spec or {})),
        TemplateSpec(**{"image": "img:1", **(template or {})}),
        "tpl",
        kw.pop("settings", SETTINGS),
        replicas=kw.pop("replicas", 0),
        **kw,
    )


def pod(spec: dict | None = None, template: dict | None = None) -> dict:
    return deployment(spec, template)["spec"]["template"]["spec"]


def worker(spec: dict | None = None, template: dict | None = None) -> dict:
    return pod(spec, template)["containers"][0]


def env(spec: dict | None = None, template: dict | None = None) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in worker(spec, template)["env"]}


def required(pod_spec: dict) -> dict[str, list[str]]:
    node = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = node["nodeSelectorTerms"][0]["matchExpressions"]
    return {e["key"]: e["values"] for e in exprs}


def preferred(pod_spec: dict) -> list[tuple[int, str]]:
    prefs = pod_spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    return [(p["weight"], p["preference"]["matchExpressions"][0]["values"][0]) for p in prefs]


# -- Endpoint settings ---------------------------------------------------------------------


def test_name_is_shown_as_the_display_name_annotation() -> None:
    meta = deployment({"name": "My echo"})["metadata"]
    assert meta["annotations"]["lockgate.dev/display-name"] == "My echo"


def test_gpu_endpoint_requests_gpu_count_and_tolerates_gpu_nodes() -> None:
    spec = pod({"computeType": "GPU", "gpuCount": 2})
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert env({"computeType": "GPU", "gpuCount": 2})["RUNPOD_GPU_COUNT"] == "2"


def test_cpu_endpoint_has_no_gpu_and_vcpu_count_as_request_and_limit() -> None:
    spec = pod({"computeType": "CPU", "vcpuCount": 8})
    res = spec["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "8" and res["limits"]["cpu"] == "8"
    assert "nvidia.com/gpu" not in res["limits"]
    assert "tolerations" not in spec
    assert env({"computeType": "CPU", "vcpuCount": 8})["RUNPOD_CPU_COUNT"] == "8"


def test_the_pod_host_name_is_the_pod_name_as_runpod_pod_hostname() -> None:
    assert env()["RUNPOD_POD_HOSTNAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_cpu_request_ratio_packs_cpu_workers_keeping_their_limit() -> None:
    settings = SETTINGS.model_copy(update={"cpu_request_ratio": 0.1})
    spec = {"computeType": "CPU", "vcpuCount": 2}
    [container] = deployment(spec, settings=settings)["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == "200m"
    assert container["resources"]["limits"]["cpu"] == "2"


def test_gpu_endpoint_requests_vcpu_count_without_a_cpu_limit() -> None:
    res = worker({"vcpuCount": 6})["resources"]
    assert res["requests"]["cpu"] == "6"
    assert "cpu" not in res["limits"]


def test_gpu_types_are_required_one_at_a_time_first_listed_first() -> None:
    ids = ["NVIDIA GeForce RTX 4090", "NVIDIA A100 80GB PCIe", "NVIDIA L4"]
    spec = pod({"gpuTypeIds": ids})
    assert required(spec)["nvidia.com/gpu.product"] == ["NVIDIA-GeForce-RTX-4090"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["nodeAffinity"]


def test_gpu_type_label_key_is_configurable() -> None:
    settings = OperatorSettings(gpu_type_label="example.com/gpu")
    spec = deployment({"gpuTypeIds": ["A", "B"]}, settings=settings)["spec"]["template"]["spec"]
    assert required(spec) == {"example.com/gpu": ["A"]}


def test_cuda_versions_and_data_centers_constrain_nodes() -> None:
    spec = pod({"allowedCudaVersions": ["12.4", "12.6"], "dataCenterIds": ["EU-RO-1"]})
    node = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in node["nodeSelectorTerms"]:  # "12.4 or newer": alternatives, each in the zone
        exprs = {e["key"]: e["values"] for e in term["matchExpressions"]}
        assert exprs["topology.kubernetes.io/zone"] == ["EU-RO-1"]
        assert "nvidia.com/cuda.runtime-version.major" in exprs


def test_cpu_flavors_constrain_nodes_of_cpu_endpoints() -> None:
    spec = pod({"computeType": "CPU", "cpuFlavorIds": ["cpu3c", "cpu5c"], "gpuTypeIds": ["X"]})
    assert required(spec) == {"lockgate.dev/cpu-flavor": ["cpu3c", "cpu5c"]}
    assert [v for _, v in preferred(spec)] == ["cpu3c", "cpu5c"]


def test_unconstrained_endpoint_has_no_affinity() -> None:
    assert "affinity" not in pod()


def test_template_id_is_recorded_on_deployment_and_pods() -> None:
    dep = deployment()
    assert dep["metadata"]["annotations"]["lockgate.dev/template"] == "tpl"
    assert dep["spec"]["template"]["metadata"]["annotations"]["lockgate.dev/template"] == "tpl"


def test_execution_timeout_sets_a_grace_period_that_lets_a_job_finish() -> None:
    assert pod({"executionTimeoutMs": 60_000})["terminationGracePeriodSeconds"] == 75
    assert pod({"executionTimeoutMs": 5_000})["terminationGracePeriodSeconds"] == 20


def test_grace_period_is_capped_at_the_cluster_autoscalers_600_s_by_default() -> None:
    """cluster-autoscaler gives a pod it scales down at most --max-graceful-termination-sec
    (600 s by default): a longer grace period would only mislead."""
    assert pod({"executionTimeoutMs": 86_400_000})["terminationGracePeriodSeconds"] == 600
    raised = SETTINGS.model_copy(update={"termination_grace_cap_s": 3600})
    long = deployment({"executionTimeoutMs": 86_400_000}, settings=raised)
    assert long["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 3600


def test_flashboot_uses_pre_pulled_images() -> None:
    assert worker({"flashboot": True})["imagePullPolicy"] == "IfNotPresent"
    assert "imagePullPolicy" not in worker({"flashboot": False})


@pytest.mark.parametrize(
    ("field", "value", "annotation", "shown"),
    [
        ("idleTimeout", 42, "idle-timeout-s", "42"),
        ("scalerType", "REQUEST_COUNT", "scaler-type", "REQUEST_COUNT"),
        ("scalerValue", 9, "scaler-value", "9"),
        ("workersMin", 1, "workers-min", "1"),
        ("workersMax", 7, "workers-max", "7"),
        ("executionTimeoutMs", 90_000, "execution-timeout-ms", "90000"),
        ("flashboot", True, "flashboot", "true"),
        ("lbWebSocketMaxS", 600, "lb-websocket-max-s", "600"),
        ("onWorkerLost", "fail", "on-worker-lost", "fail"),
        ("requeueMaxRunS", 600, "requeue-max-run-s", "600"),
        ("startupTimeout", 30, "startup-timeout-s", "30"),
    ],
)
def test_scaling_settings_are_annotated_on_the_deployment(
    field: str, value: Any, annotation: str, shown: str
) -> None:
    meta = deployment({"workersMax": 10, field: value})["metadata"]
    assert meta["annotations"][f"lockgate.dev/{annotation}"] == shown


def test_scaling_settings_do_not_touch_the_pod_template() -> None:
    a = deployment({"idleTimeout": 1, "scalerValue": 2, "workersMax": 3, "name": "a"})
    b = deployment({"idleTimeout": 9, "scalerValue": 8, "workersMax": 7, "name": "b"})
    assert a["spec"]["template"] == b["spec"]["template"]


def test_workers_min_is_the_replica_count_at_creation() -> None:
    assert deployment({"workersMin": 2}, replicas=2)["spec"]["replicas"] == 2


def test_registry_entry_holds_every_setting_and_the_key_digest() -> None:
    spec = EndpointSpec(executionTimeoutMs=30_000, workersMax=4)
    entry = registry_entry(
        OWNER, spec, key_digest="abc", job_api_url="https://jobs.example/v2/ep1/"
    )
    assert (entry.id, entry.namespace, entry.uid) == ("ep1", "ml", "uid-1")
    assert entry.executionTimeoutMs == 30_000 and entry.spec().workersMax == 4
    assert entry.workerKeyDigest == "abc"
    assert set(EndpointSpec.model_fields) <= set(entry.stored())
    assert "scaler" not in entry.stored()  # the operator's own scaler sets the count


@pytest.mark.parametrize(
    ("annotations", "external"),
    [
        (None, False),
        ({}, False),
        ({"lockgate.dev/scaler": "external"}, True),
        ({"lockgate.dev/scaler": " External "}, True),
        ({"lockgate.dev/scaler": "builtin"}, False),
        ({"lockgate.dev/scaler": ""}, False),
        ({"scaler": "external"}, False),
    ],
)
def test_scaler_annotation_hands_the_count_to_another_scaler(annotations, external) -> None:
    assert scaled_externally(annotations) is external


def test_registry_entry_says_when_another_scaler_owns_the_count() -> None:
    entry = registry_entry(
        OWNER, EndpointSpec(), key_digest="abc", job_api_url="u", external_scaler=True
    )
    assert entry.scaler == "external"


# -- Template settings ---------------------------------------------------------------------


def test_image_command_and_args_come_from_the_template() -> None:
    c = worker(template={"image": "repo/app:2", "command": ["python"], "args": ["-u", "h.py"]})
    assert (c["image"], c["command"], c["args"]) == ("repo/app:2", ["python"], ["-u", "h.py"])


def test_template_env_follows_the_worker_contract_which_it_cannot_override() -> None:
    variables = env(template={"env": {"MODEL": "x", "RUNPOD_ENDPOINT_ID": "evil"}})
    assert variables["MODEL"] == "x"
    assert variables["RUNPOD_ENDPOINT_ID"] == "ep1"
    names = [e["name"] for e in worker(template={"env": {"MODEL": "x"}})["env"]]
    assert names.index("MODEL") > names.index("RUNPOD_WEBHOOK_GET_JOB")


def test_worker_contract_env_points_at_the_gateway_with_the_pod_name_as_worker_id() -> None:
    variables = env()
    assert variables["RUNPOD_WEBHOOK_GET_JOB"].startswith("http://gw:8080/v2/ep1/job-take/$ID")
    assert variables["RUNPOD_POD_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert variables["LOCKGATE_WORKER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    key_ref = {"secretKeyRef": {"name": "ep1-worker-key", "key": "RUNPOD_AI_API_KEY"}}
    assert variables["RUNPOD_AI_API_KEY"] == key_ref
    assert variables["LOCKGATE_WORKER_KEY"] == key_ref


def test_ports_become_named_tcp_container_ports() -> None:
    ports = worker(template={"ports": ["8000/http", "22/tcp"]})["ports"]
    assert ports == [
        {"name": "http-8000", "containerPort": 8000, "protocol": "TCP"},
        {"name": "tcp-22", "containerPort": 22, "protocol": "TCP"},
    ]


def test_container_disk_is_requested_and_limited_as_ephemeral_storage() -> None:
    res = worker(template={"containerDiskInGb": 50})["resources"]
    assert res["requests"]["ephemeral-storage"] == res["limits"]["ephemeral-storage"] == "50Gi"


def test_image_pull_secret_is_referenced_by_the_pods() -> None:
    assert pod(template={"imagePullSecret": "regcred"})["imagePullSecrets"] == [{"name": "regcred"}]


def test_a_registry_credential_of_the_api_becomes_the_pods_image_pull_secret() -> None:
    # /v1/containerregistryauth names its Secret by the credential's id, and a template's
    # containerRegistryAuthId is its imagePullSecret (models.templates)
    template = new_template({"name": "t", "imageName": "r.example:5000/w:1",
                             "containerRegistryAuthId": "abc123defg"})  # fmt: skip
    spec = worker_pod_template(OWNER, EndpointSpec(), template, "tpl", SETTINGS)
    assert spec["spec"]["imagePullSecrets"] == [{"name": "abc123defg"}]


def test_a_network_volume_is_mounted_at_runpod_volume_in_every_worker() -> None:
    spec = pod({"networkVolumeId": "vol1234567"})
    [volume] = [v for v in spec["volumes"] if v["name"] == "runpod-volume"]
    assert volume == {"name": "runpod-volume", "persistentVolumeClaim": {"claimName": "vol1234567"}}
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "runpod-volume"]
    assert mount == {"name": "runpod-volume", "mountPath": "/runpod-volume"}
    assert env({"networkVolumeId": "vol1234567"})["RUNPOD_VOLUME_PATH"] == "/runpod-volume"
    assert spec["securityContext"]["fsGroup"] == 10001  # the worker may write the volume


def test_without_a_network_volume_nothing_is_mounted_at_runpod_volume() -> None:
    spec = pod()
    assert not [v for v in spec["volumes"] if v["name"] == "runpod-volume"]
    assert "RUNPOD_VOLUME_PATH" not in env()


def test_model_url_is_fetched_once_per_node_into_a_cache_mounted_read_only() -> None:
    url = "https://models.example/llama/model.gguf?download=1"
    spec = pod(template={"modelUrl": url})
    [volume] = [v for v in spec["volumes"] if v["name"] == "model-cache"]
    assert volume["hostPath"]["path"].startswith("/var/lib/lockgate/models/")
    (fetch,) = spec["initContainers"]
    assert {"name": "MODEL_URL", "value": url} in fetch["env"]
    assert "flock" in fetch["command"][-1]
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "model-cache"]
    assert mount == {"name": "model-cache", "mountPath": "/lockgate/model", "readOnly": True}
    assert env(template={"modelUrl": url})["LOCKGATE_MODEL_PATH"] == "/lockgate/model/model.gguf"


def test_same_model_url_shares_one_node_folder_across_endpoints() -> None:
    url = "https://models.example/m.bin"
    a = pod(template={"modelUrl": url})["volumes"][-1]
    b = pod({"gpuCount": 4}, {"modelUrl": url})["volumes"][-1]
    assert a == b


def test_model_references_are_fetched_by_an_init_container_into_the_nodes_cache() -> None:
    refs = ["org/model", "org/other:abc123"]
    spec = pod({"modelReferences": refs})
    (fetch,) = spec["initContainers"]
    assert fetch["name"] == "fetch-models"
    assert fetch["image"] == SETTINGS.models_image
    assert fetch["command"] == ["lockgate", "fetch-models", "--root", "/runpod-volume", *refs]
    [volume] = [v for v in spec["volumes"] if v["name"] == "models-cache"]
    assert volume["hostPath"] == {
        "path": "/var/lib/lockgate/models/huggingface-cache",
        "type": "DirectoryOrCreate",
    }
    cache = "/runpod-volume/huggingface-cache"
    assert fetch["volumeMounts"] == [
        {"name": "models-cache", "mountPath": cache, "readOnly": False}
    ]
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "models-cache"]
    assert mount == {"name": "models-cache", "mountPath": cache, "readOnly": True}
    seen = env({"modelReferences": refs})
    assert seen["HF_HUB_CACHE"] == f"{cache}/hub" and seen["HF_HUB_OFFLINE"] == "1"
    assert seen["HF_HOME"] == cache
    fetch_env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert "HF_HUB_OFFLINE" not in fetch_env and fetch_env["HF_HUB_CACHE"] == f"{cache}/hub"
    assert fetch["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_model_references_go_into_the_network_volume_as_the_workers_user() -> None:
    spec = pod({"modelReferences": ["org/model"], "networkVolumeId": "vol1234567"})
    (fetch,) = spec["initContainers"]
    assert fetch["volumeMounts"] == [{"name": "runpod-volume", "mountPath": "/runpod-volume"}]
    assert not [v for v in spec["volumes"] if v["name"] == "models-cache"]
    assert restricted_violations(spec) == []  # no hostPath, no root


def test_the_model_download_gets_the_mirror_and_a_gated_models_token() -> None:
    settings = SETTINGS.model_copy(update={"models_env": {"HF_ENDPOINT": "http://hub:8000"}})
    secret = {"HF_TOKEN": {"name": "hf", "key": "token"}}
    dep = deployment(
        {"modelReferences": ["org/gated"]},
        {"secretEnv": secret, "envFromSecrets": ["more"]},
        settings=settings,
    )
    (fetch,) = dep["spec"]["template"]["spec"]["initContainers"]
    fetch_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in fetch["env"]}
    assert fetch_env["HF_ENDPOINT"] == "http://hub:8000"
    assert fetch_env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert fetch["envFrom"] == [{"secretRef": {"name": "more"}}]
    plain = pod({"modelReferences": ["org/gated"]}, {"env": {"HF_TOKEN": "hf_x"}})
    (fetch,) = plain["initContainers"]
    assert {"name": "HF_TOKEN", "value": "hf_x"} in fetch["env"]


def test_flashboot_fills_the_nodes_model_cache_but_not_a_network_volume() -> None:
    template = TemplateSpec(image="img:1")
    on_node = EndpointSpec(flashboot=True, modelReferences=["org/model"])
    ds = flashboot_daemonset(OWNER, on_node, template, SETTINGS)["spec"]["template"]
    assert [c["name"] for c in ds["spec"]["initContainers"]][-1] == "fetch-models"
    volume = on_node.model_copy(update={"networkVolumeId": "vol1234567"})
    ds = flashboot_daemonset(OWNER, volume, template, SETTINGS)["spec"]["template"]
    assert "fetch-models" not in [c["name"] for c in ds["spec"]["initContainers"]]


# -- the other objects ---------------------------------------------------------------------


def test_every_object_is_owned_by_the_endpoint_and_labelled() -> None:
    spec, template = EndpointSpec(flashboot=True), TemplateSpec(image="img:1")
    objects = [
        deployment(),
        worker_key_secret(OWNER, "k"),
        flashboot_daemonset(OWNER, spec, template, SETTINGS),
    ]
    for obj in objects:
        meta = obj["metadata"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "lockgate.dev/v1alpha1",
                "kind": "Endpoint",
                "name": "ep1",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app.kubernetes.io/instance"] == "ep1"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "lockgate-operator"
        assert meta["namespace"] == "ml"


def test_worker_key_secret_holds_the_key() -> None:
    secret = worker_key_secret(OWNER, "lgw_secret")
    assert secret["metadata"]["name"] == "ep1-worker-key"
    assert secret["stringData"] == {"RUNPOD_AI_API_KEY": "lgw_secret"}


def test_flashboot_daemonset_pulls_the_worker_image_where_workers_may_run() -> None:
    spec = EndpointSpec(flashboot=True, gpuTypeIds=["NVIDIA L4"])
    template = TemplateSpec(image="repo/app:3", imagePullSecret="regcred", modelUrl="https://m/x")
    ds = flashboot_daemonset(OWNER, spec, template, SETTINGS)
    pod_spec = ds["spec"]["template"]["spec"]
    pull = next(c for c in pod_spec["initContainers"] if c["name"] == "pull-worker-image")
    assert pull["image"] == "repo/app:3"
    assert required(pod_spec) == {"nvidia.com/gpu.product": ["NVIDIA-L4"]}
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert any(c["name"] == "fetch-model" for c in pod_spec["initContainers"])
    assert "nvidia.com/gpu" not in str(pod_spec["containers"])  # holds no GPU


def test_new_worker_key_rolls_the_workers() -> None:
    a = deployment(key_revision="aaa")["spec"]["template"]
    b = deployment(key_revision="bbb")["spec"]["template"]
    assert a != b


# -- updates -------------------------------------------------------------------------------


def test_update_keeps_the_scalers_replicas_and_other_tools_annotations() -> None:
    desired = with_hash(deployment(replicas=0))
    existing = with_hash(deployment({"name": "old"}, replicas=0))
    existing["metadata"]["resourceVersion"] = "7"
    existing["spec"]["replicas"] = 4
    existing["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
    restarted = {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
    existing["spec"]["template"]["metadata"]["annotations"].update(restarted)

    out = updated(existing, desired)
    assert out["spec"]["replicas"] == 4
    assert out["metadata"]["resourceVersion"] == "7"
    assert out["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert out["metadata"]["annotations"]["lockgate.dev/display-name"] == ""
    assert out["spec"]["template"]["metadata"]["annotations"][
        "kubectl.kubernetes.io/restartedAt"
    ] == ("2026-01-01T00:00:00Z")


def test_content_hash_changes_with_the_template_only() -> None:
    same = hash_of(with_hash(deployment()))
    assert same == hash_of(with_hash(deployment()))
    changed = with_hash(deployment(template={"image": "img:2"}))
    assert hash_of(changed) != same


def test_gpu_names_become_node_label_values() -> None:
    assert node_label_value(" NVIDIA GeForce RTX 4090 ") == "NVIDIA-GeForce-RTX-4090"
    assert node_label_value("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"


# -- completeness: a field without a visible effect (or without a row here) fails ----------

# field -> (settings without it, settings with a non-default value of it)
ENDPOINT_FIELDS: dict[str, tuple[dict, dict]] = {
    "name": ({}, {"name": "Demo"}),
    "type": ({"scalerType": "REQUEST_COUNT"}, {"type": "LB", "scalerType": "REQUEST_COUNT"}),
    "requestTimeoutS": ({}, {"requestTimeoutS": 60}),
    "lbHoldS": ({}, {"lbHoldS": 30}),
    "lbWebSocketMaxS": ({}, {"lbWebSocketMaxS": 600}),
    "modelReferences": ({}, {"modelReferences": ["org/model"]}),
    "computeType": ({}, {"computeType": "CPU"}),
    "gpuTypeIds": ({}, {"gpuTypeIds": ["NVIDIA L4"]}),
    "gpuCount": ({}, {"gpuCount": 2}),
    "cpuFlavorIds": ({"computeType": "CPU"}, {"computeType": "CPU", "cpuFlavorIds": ["cpu3c"]}),
    "vcpuCount": ({}, {"vcpuCount": 8}),
    "allowedCudaVersions": ({}, {"allowedCudaVersions": ["12.4"]}),
    "dataCenterIds": ({}, {"dataCenterIds": ["EU-RO-1"]}),
    "templateId": ({"templateId": "tpl"}, {"templateId": "tpl-2"}),
    "networkVolumeId": ({}, {"networkVolumeId": "vol1234567"}),
    "executionTimeoutMs": ({}, {"executionTimeoutMs": 3_600_000}),
    "flashboot": ({}, {"flashboot": True}),
    "idleTimeout": ({}, {"idleTimeout": 60}),
    "scalerType": ({}, {"scalerType": "REQUEST_COUNT"}),
    "scalerValue": ({}, {"scalerValue": 9}),
    "workersMin": ({}, {"workersMin": 2}),
    "workersMax": ({}, {"workersMax": 9}),
    "replicas": ({"workersMax": 5}, {"workersMax": 5, "replicas": 2}),
    "onWorkerLost": ({}, {"onWorkerLost": "fail"}),
    "requeueMaxRunS": ({}, {"requeueMaxRunS": 600}),
    "startupTimeout": ({}, {"startupTimeout": 30}),
    "crashLoopThreshold": ({}, {"crashLoopThreshold": 2}),
    "lbResumeWindowS": ({}, {"lbResumeWindowS": 300}),
    "warmup": ({}, {"warmup": {"inputs": [{"prompt": "hi"}]}}),
}
TEMPLATE_FIELDS: dict[str, Any] = {
    "image": "img:2",
    "command": ["serve"],
    "args": ["--fast"],
    "env": {"MODEL": "tiny"},
    "ports": ["8000/http"],
    "containerDiskInGb": 50,
    "modelUrl": "https://models.example.test/tiny.bin",
    "imagePullSecret": "regcred",
    "imagePullSecrets": ["regcred-2"],
    "memoryInGb": 12,
    "shmSizeInGb": 3,
    "podSecurity": "baseline",
    "runAsUser": 1000,
    "secretEnv": {"HF_TOKEN": {"name": "hf", "key": "token"}},
    "envFromSecrets": ["model-settings"],
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
    "nodeSelector": {"pool": "ml"},
    "runtimeClassName": "nvidia",
    "priorityClassName": "inference",
    "podLabels": {"team": "ml"},
    "podAnnotations": {"example.com/owner": "ml"},
}


def rendered(spec: dict, template: dict | None = None) -> list[dict]:
    """The workloads the operator writes for an Endpoint, as `reconcile.apply_workloads`
    renders them: the Deployment (`initial_workers` at creation), and the flashboot
    DaemonSet when on."""
    s = EndpointSpec(**spec)
    t = TemplateSpec(**{"image": "img:1", **(template or {})})
    deployment = worker_deployment(OWNER, s, t, s.templateId, SETTINGS, replicas=s.initial_workers)
    daemonsets = [flashboot_daemonset(OWNER, s, t, SETTINGS)] if s.flashboot else []
    return [deployment, *daemonsets]


# RunPod's template fields that are kept and shown (the API's records, the console), with
# no effect on the workloads (docs/endpoint-reference.md, "Templates").
TEMPLATE_SHOWN_ONLY: dict[str, Any] = {
    "name": "My worker",
    "readme": "# notes",
    "volumeInGb": 20,
    "volumeMountPath": "/data",
    "isServerless": True,
    "category": "CPU",
}


# Endpoint fields kept and shown with no effect on the workloads yet. A field leaves this
# list when the operator gives it an effect (modelReferences did: an init container).
ENDPOINT_NOT_ON_A_CLUSTER_YET: dict[str, object] = {
    # the in-cluster build Job of a later session gives it one (docs/builds.md)
    "source": {"git": {"url": "https://git.example.test/org/repo.git"}},
    # its effect is the batch pool's own Endpoint and Deployment (kube/batch_pool.py,
    # tests/test_batch_pool_cluster.py), not the endpoint's workloads
    "batchWorkersMax": 4,
}


def test_every_payload_and_template_field_has_a_row_here() -> None:
    fields = set(ENDPOINT_FIELDS) | set(ENDPOINT_NOT_ON_A_CLUSTER_YET)
    assert fields == set(EndpointSpec.model_fields)
    assert set(TEMPLATE_FIELDS) | set(TEMPLATE_SHOWN_ONLY) == set(TemplateSpec.model_fields)


@pytest.mark.parametrize("field", sorted(TEMPLATE_SHOWN_ONLY))
def test_runpods_shown_only_template_fields_leave_the_workloads_alone(field: str) -> None:
    assert rendered({}) == rendered({}, {field: TEMPLATE_SHOWN_ONLY[field]})


@pytest.mark.parametrize("field", sorted(ENDPOINT_FIELDS))
def test_every_endpoint_field_changes_the_generated_objects(field: str) -> None:
    without, with_it = ENDPOINT_FIELDS[field]
    assert rendered(without) != rendered(with_it)


@pytest.mark.parametrize("field", sorted(TEMPLATE_FIELDS))
def test_every_template_field_changes_the_generated_objects(field: str) -> None:
    assert rendered({}) != rendered({}, {field: TEMPLATE_FIELDS[field]})


def test_worker_pods_are_ready_only_while_the_scaler_keeps_them_in_service() -> None:
    gates = pod()["readinessGates"]
    assert gates == [{"conditionType": SERVING_CONDITION}]
    without_scaler = SETTINGS.model_copy(update={"scale_interval_s": 0})
    spec = deployment(settings=without_scaler)["spec"]["template"]["spec"]
    assert "readinessGates" not in spec, "no scaler: nothing would ever open the gate"


def test_runpod_fitness_checks_are_off_unless_the_template_turns_them_on() -> None:
    """runpod >= 1.8 exits when it cannot reach 8.8.8.8: a cluster without egress."""
    assert env()["RUNPOD_SKIP_AUTO_SYSTEM_CHECKS"] == "true"
    on = env(template={"env": {"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "false"}})
    assert on["RUNPOD_SKIP_AUTO_SYSTEM_CHECKS"] == "false"


# -- complete worker pods (issue 12, item 7) ------------------------------------------------

# Volume types Pod Security `restricted` allows (kubernetes.io/docs/concepts/security/
# pod-security-standards, "Volume Types").
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral"}
RESTRICTED_VOLUMES |= {"persistentVolumeClaim", "projected", "secret"}


def restricted_violations(pod_spec: dict) -> list[str]:
    """What Pod Security `restricted` (v1.20+ rules) would refuse in a pod spec."""
    out = []
    pod_ctx = pod_spec.get("securityContext", {})
    for volume in pod_spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {volume['name']}: {kinds}")
    containers = pod_spec["containers"] + pod_spec.get("initContainers", [])
    for c in containers:
        ctx = c.get("securityContext", {})
        name = c["name"]
        if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation")
        if ctx.get("capabilities", {}).get("drop") != ["ALL"]:
            out.append(f"{name}: capabilities")
        seccomp = ctx.get("seccompProfile", pod_ctx.get("seccompProfile", {}))
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccomp")
        if ctx.get("privileged"):
            out.append(f"{name}: privileged")
    return out


@pytest.mark.parametrize("spec", [{}, {"computeType": "CPU"}, {"gpuCount": 4, "flashboot": True}])
def test_worker_pods_pass_pod_security_restricted_by_default(spec: dict) -> None:
    pod_spec = pod(spec)
    assert restricted_violations(pod_spec) == []
    assert pod_spec["securityContext"]["runAsUser"] == 10001
    assert pod_spec["securityContext"]["runAsNonRoot"] is True


def test_run_as_user_sets_the_workers_uid() -> None:
    ctx = pod(template={"runAsUser": 1000})["securityContext"]
    assert ctx["runAsUser"] == ctx["runAsGroup"] == ctx["fsGroup"] == 1000


def test_baseline_pod_security_keeps_the_images_own_user() -> None:
    pod_spec = pod(template={"podSecurity": "baseline"})
    assert pod_spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    ctx = pod_spec["containers"][0]["securityContext"]
    assert "runAsNonRoot" not in ctx and ctx["privileged"] is False


def test_a_model_url_needs_a_privileged_namespace_only_for_its_host_path() -> None:
    """The model cache is a node folder (hostPath, root-owned): the fetch runs as root but
    with no capability and no privilege escalation; the worker stays restricted."""
    pod_spec = pod(template={"modelUrl": "https://models.example.test/m.bin"})
    violations = restricted_violations(pod_spec)
    assert "volume model-cache: {'hostPath'}" in violations
    assert set(violations) <= {
        "volume model-cache: {'hostPath'}",
        "fetch-model: runAsNonRoot",
        "fetch-model: runAsUser 0",
    }, violations


def test_model_references_need_a_privileged_namespace_only_for_the_nodes_cache() -> None:
    pod_spec = pod({"modelReferences": ["org/model"]})
    assert set(restricted_violations(pod_spec)) == {
        "volume models-cache: {'hostPath'}",
        "fetch-models: runAsNonRoot",
        "fetch-models: runAsUser 0",
    }


def test_memory_is_requested_and_limited_from_memory_in_gb() -> None:
    res = worker(template={"memoryInGb": 0.5})["resources"]
    assert res["requests"]["memory"] == res["limits"]["memory"] == "512Mi"


@pytest.mark.parametrize(
    ("spec", "memory"),
    [
        ({"computeType": "CPU", "vcpuCount": 1}, "2048Mi"),
        ({"computeType": "CPU", "vcpuCount": 8}, "16384Mi"),
        ({"gpuCount": 1, "vcpuCount": 4}, "16384Mi"),
        ({"gpuCount": 4, "vcpuCount": 8}, "65536Mi"),
        ({"gpuCount": 1, "vcpuCount": 16}, "32768Mi"),
        ({"computeType": "CPU", "vcpuCount": 2}, "4096Mi"),
    ],
)
def test_default_memory_fits_the_vcpu_and_gpu_count(spec: dict, memory: str) -> None:
    res = worker(spec)["resources"]
    assert res["requests"]["memory"] == res["limits"]["memory"] == memory


def test_dev_shm_is_a_sized_memory_backed_empty_dir() -> None:
    pod_spec = pod({"computeType": "CPU", "vcpuCount": 2}, {"shmSizeInGb": 1.5})
    [shm] = [v for v in pod_spec["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "1536Mi"}
    mounts = pod_spec["containers"][0]["volumeMounts"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in mounts


def test_dev_shm_defaults_to_half_the_memory() -> None:
    [shm] = [v for v in pod({"gpuCount": 2}, {})["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"]["sizeLimit"] == "16384Mi"


def test_secret_env_becomes_secret_key_refs_and_never_plain_values() -> None:
    ref = {"name": "hf", "key": "token"}
    container = worker(template={"secretEnv": {"HF_TOKEN": ref}, "envFromSecrets": ["s3"]})
    [var] = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
    assert var == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]


APPARMOR = "container.apparmor.security.beta.kubernetes.io/"
WORKER = {podfields.WORKER_SECRET_LABEL: "true"}


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        (WORKER, None),
        ({**WORKER, "app.kubernetes.io/name": "mine"}, None),
        (None, "not found"),
        ({}, "not marked for workers: label it lockgate.dev/worker-secret=true"),
        ({podfields.WORKER_SECRET_LABEL: "yes"}, "not marked for workers"),
        ({**WORKER, "app.kubernetes.io/part-of": "lockgate"}, "lockgate's own"),
    ],
)
def test_workers_get_only_secrets_labelled_for_them_and_never_lockgates(
    labels: dict | None, says: str | None
) -> None:
    problem = podfields.worker_secret_problem("s3", labels)
    assert problem is None if says is None else says in problem


@pytest.mark.parametrize(
    ("name", "reserved", "refused"),
    [
        ("ep1-worker-key", (), True),
        ("lockgate-settings", ("lockgate-settings", "lockgate-client-key"), True),
        ("lockgate-settings", (), False),  # unknown by name: refused by its label instead
        ("hf-token", ("lockgate-settings",), False),
    ],
)
def test_lockgates_own_secrets_are_known_by_name(name: str, reserved: tuple, refused: bool) -> None:
    assert (podfields.lockgate_secret_problem(name, reserved) is not None) == refused


def test_a_template_names_the_secrets_it_hands_workers_and_where() -> None:
    template = TemplateSpec(
        image="img:1",
        secretEnv={"A": {"name": "s3", "key": "a"}, "B": {"name": "hf", "key": "t"}},
        envFromSecrets=["s3", "db"],
    )
    assert template.worker_secrets() == ["db", "hf", "s3"]
    assert template.secret_uses("s3") == ["secretEnv.A", "envFromSecrets"]


@pytest.mark.parametrize("profile", ["runtime/default", "localhost/my-profile"])
def test_an_apparmor_profile_that_keeps_the_pod_confined_reaches_the_pod(profile: str) -> None:
    template = {"podAnnotations": {f"{APPARMOR}worker": profile}}
    annotations = deployment({}, template)["spec"]["template"]["metadata"]["annotations"]
    assert annotations[f"{APPARMOR}worker"] == profile


def test_secret_env_cannot_replace_the_worker_contract() -> None:
    ref = {"name": "mine", "key": "k"}
    values = env(template={"secretEnv": {"RUNPOD_ENDPOINT_ID": ref}})
    assert values["RUNPOD_ENDPOINT_ID"] == "ep1"


@pytest.mark.parametrize(
    ("template", "complaint"),
    [
        ({"env": {"A": "1"}, "secretEnv": {"A": {"name": "s", "key": "k"}}}, "both env"),
        ({"secretEnv": {"1 BAD": {"name": "s", "key": "k"}}}, "environment variable"),
        ({"secretEnv": {"A": {"name": "Not_A_Name", "key": "k"}}}, "pattern"),
        ({"envFromSecrets": ["UPPER"]}, "pattern"),
        ({"imagePullSecrets": ["a b"]}, "pattern"),
        ({"nodeSelector": {"pool": "not valid"}}, "pattern"),
        ({"nodeSelector": {"-bad": "x"}}, "not a valid key"),
        ({"podLabels": {"lockgate.dev/endpoint": "x"}}, "operator only"),
        ({"podAnnotations": {"lockgate.dev/template": "x"}}, "operator only"),
        ({"podAnnotations": {f"{APPARMOR}worker": "unconfined"}}, "AppArmor must stay"),
        ({"envFromSecrets": ["ep1-worker-key"]}, "lockgate's own"),
        ({"secretEnv": {"KEY": {"name": "other-worker-key", "key": "k"}}}, "lockgate's own"),
        ({"podAnnotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}, "seccomp"),
        ({"podAnnotations": {"container.seccomp.security.alpha.kubernetes.io/w": "x"}}, "seccomp"),
        ({"podAnnotations": {"security.alpha.kubernetes.io/unsafe-sysctls": "a=1"}}, "sysctl"),
        ({"podLabels": {"a": "x" * 64}}, "at most 63"),
        ({"runtimeClassName": "Nvidia"}, "pattern"),
        ({"priorityClassName": "high priority"}, "pattern"),
        ({"tolerations": [{"operator": "Exists", "value": "x"}]}, "takes no value"),
        ({"tolerations": [{"value": "x"}]}, "without a key"),
        ({"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "NoSchedule"),
        ({"memoryInGb": -1}, "greater than or equal"),
        ({"runAsUser": 0}, "greater than or equal to 1"),
        ({"podSecurity": "privileged"}, "restricted"),
    ],
)
def test_template_pod_fields_are_refused_with_a_clear_error(template: dict, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        TemplateSpec(image="img:1", **template)


def test_template_tolerations_are_added_to_the_gpu_taints() -> None:
    extra = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    tol = pod({"gpuCount": 1}, {"tolerations": [extra, {"operator": "Exists"}]})["tolerations"]
    assert tol == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        extra,
        {"operator": "Exists"},
    ]


def test_node_selector_runtime_and_priority_class_reach_the_pod() -> None:
    template = {
        "nodeSelector": {"cloud.example.com/pool": "gpu-a"},
        "runtimeClassName": "nvidia",
        "priorityClassName": "inference",
    }
    pod_spec = pod({}, template)
    assert pod_spec["nodeSelector"] == {"cloud.example.com/pool": "gpu-a"}
    assert pod_spec["runtimeClassName"] == "nvidia"
    assert pod_spec["priorityClassName"] == "inference"


def test_image_pull_secrets_keep_the_single_field_and_add_the_list() -> None:
    template = {"imagePullSecret": "a", "imagePullSecrets": ["b", "a", "c"]}
    assert pod({}, template)["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    assert "imagePullSecrets" not in pod()


def test_pod_labels_and_annotations_are_added_but_ours_win() -> None:
    template = {
        "podLabels": {"team": "ml", "app.kubernetes.io/component": "mine"},
        "podAnnotations": {"example.com/owner": "ml"},
    }
    meta = deployment({}, template)["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "ml"
    assert meta["labels"]["app.kubernetes.io/component"] == "worker", "the selector stays"
    assert meta["annotations"]["example.com/owner"] == "ml"
    assert meta["annotations"]["lockgate.dev/template"] == "tpl"


# -- flashboot helpers (issue 12, item 11) -------------------------------------------------


def flashboot(template: dict | None = None, settings: OperatorSettings = SETTINGS) -> dict:
    t = TemplateSpec(**{"image": "img:1", **(template or {})})
    ds = flashboot_daemonset(OWNER, EndpointSpec(flashboot=True), t, settings)
    return ds["spec"]["template"]["spec"]


def test_flashboot_pods_pass_pod_security_restricted() -> None:
    pod_spec = flashboot()
    assert restricted_violations(pod_spec) == []
    for c in pod_spec["initContainers"] + pod_spec["containers"]:
        assert c["securityContext"]["runAsUser"] == HELPER_UID


def test_flashboot_uses_the_helper_images_and_their_pull_secrets() -> None:
    settings = SETTINGS.model_copy(
        update={
            "flashboot_helper_image": "mirror/busybox:1@sha256:" + "b" * 64,
            "pause_image": "mirror/pause:3",
            "helper_image_pull_secrets": ["mirror-cred"],
        }
    )
    pod_spec = flashboot({"imagePullSecret": "regcred"}, settings)
    assert pod_spec["initContainers"][0]["image"] == "mirror/busybox:1@sha256:" + "b" * 64
    assert pod_spec["containers"][0]["image"] == "mirror/pause:3"
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror-cred"}]


def test_helper_pull_secrets_reach_workers_only_when_they_fetch_a_model() -> None:
    settings = SETTINGS.model_copy(update={"helper_image_pull_secrets": ["mirror-cred"]})
    url = {"modelUrl": "https://models.example.test/m.bin"}
    fetching = deployment({}, url, settings=settings)["spec"]["template"]["spec"]
    assert fetching["imagePullSecrets"] == [{"name": "mirror-cred"}]
    plain = deployment({}, {}, settings=settings)["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in plain


def test_helper_pull_secrets_setting_reads_a_comma_separated_list(monkeypatch) -> None:
    monkeypatch.setenv("LOCKGATE_HELPER_IMAGE_PULL_SECRETS", "a, b,")
    assert OperatorSettings().helper_image_pull_secrets == ["a", "b"]


def test_a_pod_annotation_removed_from_the_template_leaves_the_pods() -> None:
    before = deployment({}, {"podAnnotations": {"example.com/a": "1", "example.com/b": "2"}})
    before["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "t"
    after = updated(before, deployment({}, {"podAnnotations": {"example.com/b": "2"}}))
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    assert "example.com/a" not in annotations and annotations["example.com/b"] == "2"
    assert annotations["kubectl.kubernetes.io/restartedAt"] == "t", "other tools' stay"
