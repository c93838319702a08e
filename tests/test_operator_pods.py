"""Worker pod fields of a Template through the real kube-apiserver (envtest) and the real
operator: the CRD keeps every field (nothing pruned), refuses bad values at admission, and
the operator writes them into the worker Deployment (issue 12, item 7)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]

POD_FIELDS = {
    "memoryInGb": 3,
    "shmSizeInGb": 1,
    "runAsUser": 2000,
    "secretEnv": {"HF_TOKEN": {"name": "hf", "key": "token"}},
    "envFromSecrets": ["model-settings"],
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    ],
    "nodeSelector": {"pool": "ml"},
    "runtimeClassName": "nvidia",
    "priorityClassName": "inference",
    "imagePullSecret": "regcred",
    "imagePullSecrets": ["mirror"],
    "podLabels": {"team": "ml"},
    "podAnnotations": {"example.com/owner": "ml"},
}


def test_template_pod_fields_reach_the_worker_deployment(resources: Resources) -> None:
    for secret in ("hf", "model-settings"):  # workers may read only Secrets labelled so
        resources.secret(secret, {"lockgate.dev/worker-secret": "true"}, token="t")
    resources.template("pods-tpl", **POD_FIELDS)
    resources.endpoint("ep-pods", templateId="pods-tpl", computeType="CPU", vcpuCount=1)
    deployment = resources.wait_until(lambda: resources.deployment("ep-pods-workers"), "it")
    meta, pod = deployment.spec.template.metadata, deployment.spec.template.spec
    [container] = pod.containers
    assert container.resources.limits["memory"] == container.resources.requests["memory"]
    assert container.resources.limits["memory"] == "3Gi"  # the apiserver's canonical form
    [token] = [e for e in container.env if e.name == "HF_TOKEN"]
    assert (token.value, token.value_from.secret_key_ref.name) == (None, "hf")
    assert container.env_from[0].secret_ref.name == "model-settings"
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    assert pod.security_context.run_as_user == 2000 and pod.security_context.run_as_non_root
    assert pod.security_context.seccomp_profile.type == "RuntimeDefault"
    [shm] = [v for v in pod.volumes if v.name == "shm"]
    assert (shm.empty_dir.medium, shm.empty_dir.size_limit) == ("Memory", "1Gi")
    assert [(t.key, t.value) for t in pod.tolerations] == [("dedicated", "ml")]
    assert pod.node_selector == {"pool": "ml"}
    assert (pod.runtime_class_name, pod.priority_class_name) == ("nvidia", "inference")
    assert [s.name for s in pod.image_pull_secrets] == ["regcred", "mirror"]
    assert meta.labels["team"] == "ml" and meta.annotations["example.com/owner"] == "ml"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("runtimeClassName", "Not_A_Class"),
        ("podSecurity", "privileged"),
        ("runAsUser", 0),
        ("tolerations", [{"key": "a", "effect": "Sometimes"}]),
        ("secretEnv", {"TOKEN": {"name": "hf"}}),
        ("podLabels", {"team": "not a label value"}),
        ("memoryInGb", -1),
    ],
)
def test_api_server_refuses_bad_pod_fields(resources: Resources, field: str, value) -> None:
    with pytest.raises(ApiException) as err:
        resources.template(f"bad-{field.lower()}", **{field: value})
    assert err.value.status == 422 and field in err.value.body


def test_a_reserved_pod_label_is_reported_on_the_endpoint(resources: Resources) -> None:
    """The 1.20 apiserver cannot check map keys; the operator refuses them, saying why."""
    resources.template("reserved-tpl", podLabels={"lockgate.dev/endpoint": "other"})
    resources.endpoint("ep-reserved", templateId="reserved-tpl", computeType="CPU")

    def invalid():
        found = [c for c in resources.status("ep-reserved").get("conditions", [])
                 if c["type"] == "TemplateFound" and c["status"] == "False"]  # fmt: skip
        return found and found[0]

    condition = resources.wait_until(invalid, "TemplateFound False")
    assert condition["reason"] == "TemplateInvalid"
    assert "lockgate.dev/" in condition["message"] and "podLabels" in condition["message"]
    assert resources.deployment("ep-reserved-workers") is None
