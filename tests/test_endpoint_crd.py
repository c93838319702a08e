"""The Endpoint CRD as the real kube-apiserver (envtest) enforces it, with the real operator.

Admission: names that are no endpoint id and GPU endpoints without GPUs are refused by the
API server itself. The scale subresource: `kubectl scale lgep/<id>` (what an HPA or KEDA
does through the same subresource) moves the workers within workersMin..workersMax, and
`.../scale` reports the worker pods' selector. The phase: Degraded while the scaler cannot
read the gateway's `/metrics`, Ready once it can.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from lockgate.kube.crds import GROUP, VERSION

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]

TOOLS = Path(os.environ.get("LOCKGATE_TOOLS_DIR") or Path.home() / ".cache" / "lockgate-tools")


def refusal(resources: Resources, name: str, **spec: object) -> dict:
    """Create an Endpoint the API server must refuse; its error body."""
    with pytest.raises(ApiException) as err:
        resources.endpoint(name, **spec)
    assert err.value.status == 422, err.value.body
    return json.loads(err.value.body)


# -- admission -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "ep.dotted",  # a valid Kubernetes name, but not a DNS label nor a label value
        "e" * 64,  # a DNS label has at most 63 characters
    ],
)
def test_a_name_that_is_no_endpoint_id_is_refused_by_the_api_server(
    resources: Resources, name: str
) -> None:
    body = refusal(resources, name, templateId="any")
    assert "metadata.name" in body["message"], body["message"]


@pytest.mark.parametrize("spec", [{"gpuCount": 0}, {"computeType": "GPU", "gpuCount": 0}])
def test_a_gpu_endpoint_without_gpus_is_refused_by_the_api_server(
    resources: Resources, spec: dict
) -> None:
    body = refusal(resources, "ep-no-gpu", templateId="any", **spec)
    assert "spec.gpuCount" in body["message"], body["message"]
    assert "greater than or equal to 1" in body["message"], body["message"]


def test_a_cpu_endpoint_may_have_no_gpus(resources: Resources) -> None:
    created = resources.endpoint("ep-cpu-only", templateId="any", computeType="CPU", gpuCount=0)
    assert created["spec"]["gpuCount"] == 0


def test_a_gpu_endpoint_without_gpu_count_gets_the_default_of_one(resources: Resources) -> None:
    created = resources.endpoint("ep-gpu-default", templateId="any")
    assert (created["spec"]["computeType"], created["spec"]["gpuCount"]) == ("GPU", 1)


def test_a_patch_to_gpu_without_gpus_is_refused_by_the_api_server(resources: Resources) -> None:
    resources.endpoint("ep-to-gpu", templateId="any", computeType="CPU", gpuCount=0)
    with pytest.raises(ApiException) as err:
        resources.patch("endpoints", "ep-to-gpu", {"spec": {"computeType": "GPU"}})
    assert err.value.status == 422 and "spec.gpuCount" in err.value.body


# -- the scale subresource -----------------------------------------------------------------


@pytest.fixture
def kubectl(request: pytest.FixtureRequest) -> list[str]:
    """`kubectl` (the pinned one from `make tools`, else PATH) on the test cluster."""
    binary = TOOLS / "bin" / "kubectl"
    found = str(binary) if os.access(binary, os.X_OK) else shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl missing: `make tools` installs it")
    kubeconfig = os.environ.get("LOCKGATE_E2E_KUBECONFIG") or str(
        request.getfixturevalue("envtest").kubeconfig
    )
    return [found, "--kubeconfig", kubeconfig]


def scale(kubectl: list[str], resources: Resources, name: str, replicas: int) -> None:
    command = [*kubectl, "-n", resources.namespace, "scale", f"lgep/{name}"]
    subprocess.run([*command, f"--replicas={replicas}"], check=True, timeout=60)


def workers_replicas(resources: Resources, name: str) -> int | None:
    deployment = resources.deployment(f"{name}-workers")
    return None if deployment is None else deployment.spec.replicas


def test_kubectl_scale_moves_the_workers_within_the_bounds(
    resources: Resources, kubectl: list[str]
) -> None:
    name = "ep-scaled"
    resources.template("scaled-tpl")
    resources.endpoint(name, templateId="scaled-tpl", workersMin=1, workersMax=3, idleTimeout=1)
    resources.wait_until(lambda: workers_replicas(resources, name) == 1, "the Deployment at 1")

    scale(kubectl, resources, name, 2)
    resources.wait_until(lambda: workers_replicas(resources, name) == 2, "scaled to 2")
    assert resources.get("endpoints", name)["spec"]["replicas"] == 2

    scale(kubectl, resources, name, 9)  # above workersMax
    resources.wait_until(lambda: workers_replicas(resources, name) == 3, "kept to workersMax 3")
    scale(kubectl, resources, name, 0)  # below workersMin
    resources.wait_until(lambda: workers_replicas(resources, name) == 1, "kept to workersMin 1")
    assert workers_replicas(resources, name) == 1


def test_the_scale_subresource_reports_replicas_and_the_worker_selector(
    resources: Resources,
) -> None:
    # An HPA or KEDA reads `.../scale` before it writes it: Kubernetes answers that GET
    # only while spec.replicas is set, so an Endpoint handed to one sets it (docs/scaling.md).
    name = "ep-selector"
    resources.template("selector-tpl")
    resources.endpoint(name, templateId="selector-tpl", workersMin=0, workersMax=4, replicas=2)
    resources.wait_until(lambda: resources.status(name).get("replicas") == 2, "status.replicas 2")

    got = resources.custom.get_namespaced_custom_object_scale(
        GROUP, VERSION, resources.namespace, "endpoints", name
    )
    selector = got["status"]["selector"]
    assert selector == f"app.kubernetes.io/component=worker,lockgate.dev/endpoint={name}"
    assert (got["spec"]["replicas"], got["status"]["replicas"]) == (2, 2)
    pods = resources.core.list_namespaced_pod(resources.namespace, label_selector=selector)
    assert len([p for p in pods.items if not p.metadata.deletion_timestamp]) == 2


def test_unsetting_replicas_hands_the_count_back_to_the_scaler(
    resources: Resources, kubectl: list[str], request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue("metrics_served")  # the scaler needs metrics to scale down
    name = "ep-handback"
    resources.template("handback-tpl")
    resources.endpoint(name, templateId="handback-tpl", workersMax=3, idleTimeout=1)
    resources.wait_until(lambda: workers_replicas(resources, name) == 0, "the Deployment at 0")
    scale(kubectl, resources, name, 2)
    resources.wait_until(lambda: workers_replicas(resources, name) == 2, "scaled to 2")

    resources.patch("endpoints", name, {"spec": {"replicas": None}})
    # Nothing is queued: the two workers (whose pods never run here) go once idle 1 s.
    resources.wait_until(
        lambda: workers_replicas(resources, name) == 0, "back to 0 by the scaler", timeout=40
    )


def test_an_hpa_scales_the_endpoint_through_its_scale_subresource(
    resources: Resources,
) -> None:
    # The controller-manager's HPA controller, with no metrics at all: a target above
    # maxReplicas is brought down to it, through GET and PUT of the Endpoint's `/scale`.
    name = "ep-hpa"
    resources.template("hpa-tpl")
    resources.endpoint(name, templateId="hpa-tpl", workersMin=0, workersMax=4, replicas=3)
    resources.wait_until(lambda: workers_replicas(resources, name) == 3, "the Deployment at 3")
    hpa = k8s.V1HorizontalPodAutoscaler(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1HorizontalPodAutoscalerSpec(
            scale_target_ref=k8s.V1CrossVersionObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind="Endpoint", name=name
            ),
            min_replicas=1,
            max_replicas=1,
            target_cpu_utilization_percentage=80,
        ),
    )
    autoscaling = k8s.AutoscalingV1Api(resources.custom.api_client)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(resources.namespace, hpa)
    try:
        resources.wait_until(
            lambda: resources.get("endpoints", name)["spec"].get("replicas") == 1,
            "the HPA to set spec.replicas 1",
            timeout=60,
        )
        resources.wait_until(lambda: workers_replicas(resources, name) == 1, "the Deployment at 1")
    finally:
        autoscaling.delete_namespaced_horizontal_pod_autoscaler(name, resources.namespace)


# -- the phase while metrics cannot be read ------------------------------------------------


def test_an_endpoint_is_degraded_while_metrics_cannot_be_read_and_ready_once_they_can(
    resources: Resources, request: pytest.FixtureRequest
) -> None:
    name = "ep-blind-phase"
    resources.template("blind-phase-tpl")
    resources.endpoint(name, templateId="blind-phase-tpl", workersMin=0)

    # Nothing serves /metrics where the test operator's scaler scrapes.
    status = resources.wait_until(
        lambda: (s := resources.status(name)).get("phase") == "Degraded" and s, "phase Degraded"
    )
    metrics = resources.condition(status, "MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("False", "GatewayUnreachable")
    ready = resources.condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Degraded")
    assert "held" in ready["message"]

    request.getfixturevalue("metrics_served")
    status = resources.wait_until(
        lambda: (s := resources.status(name)).get("phase") == "Ready" and s, "phase Ready"
    )
    assert resources.condition(status, "Ready")["status"] == "True"


# -- warm-up (issue 47, item 3; docs/warm-up.md) ---------------------------------------------


def test_a_warmup_is_kept_whole_and_one_of_the_other_kind_is_not_spec_valid(
    resources: Resources,
) -> None:
    inputs = [{"prompt": "hi", "nested": {"a": [1, {"b": None}]}}, {}]
    created = resources.endpoint("ep-warm", templateId="any", warmup={"inputs": inputs})
    assert created["spec"]["warmup"] == {"inputs": inputs}  # free JSON, not pruned
    lb = {"type": "LB", "scalerType": "REQUEST_COUNT"}
    request = {"path": "/warm", "body": ["any", {"json": 1}]}
    created = resources.endpoint("ep-warm-lb", templateId="any", warmup={"request": request}, **lb)
    assert created["spec"]["warmup"]["request"] == {**request, "method": "POST"}

    resources.endpoint("ep-warm-bad", templateId="any", warmup={"inputs": [{}]}, **lb)
    status = resources.wait_until(
        lambda: (s := resources.status("ep-warm-bad")).get("phase") == "Failed" and s,
        "phase Failed",
    )
    valid = resources.condition(status, "SpecValid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidSpec")
    assert valid["message"].startswith("spec.warmup: ") and "queue endpoints" in valid["message"]
