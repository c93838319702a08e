"""The CRDs: checked-in files match the models; schemas are structural with enums and bounds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockgate.kube import crds
from lockgate.models import EndpointSpec, TemplateSpec
from lockgate.models.jobs import EXECUTION_TIMEOUT_MIN_MS, MAX_DURATION_MS

REPO = Path(__file__).resolve().parent.parent


def spec_schema(kind: crds.Kind) -> dict[str, Any]:
    version = crds.crd(kind)["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def walk(node: Any):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_checked_in_crd_is_up_to_date(kind: crds.Kind) -> None:
    path = REPO / "crds" / crds.file_name(kind)
    assert path.exists(), f"{path} is missing: run `make crds`"
    assert path.read_text() == crds.render(kind), f"{path} is stale: run `make crds`"


def value_validation(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Take a node's `anyOf` out, checking it is value validation as structural schemas
    allow: no types, descriptions or defaults inside, and only properties declared outside."""
    branches = node.pop("anyOf", [])
    for branch in branches:
        for inner in walk(branch):
            assert not {"type", "description", "default", "nullable"} & set(inner), inner
        assert set(branch.get("properties", {})) <= set(node["properties"]), branch
    return branches


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: crds.Kind) -> None:
    schema = crds.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for node in walk(schema):
        value_validation(node)
        if "properties" in node or "items" in node:
            assert "type" in node, node
        assert not {"$ref", "$defs", "allOf", "anyOf", "oneOf", "title"} & set(node), node


def test_endpoint_spec_has_every_field_of_the_creation_payload() -> None:
    assert set(spec_schema(crds.ENDPOINT)["properties"]) == set(EndpointSpec.model_fields)


def test_template_spec_has_every_template_field() -> None:
    assert set(spec_schema(crds.TEMPLATE)["properties"]) == set(TemplateSpec.model_fields)


def test_endpoint_schema_carries_enums_bounds_and_defaults() -> None:
    props = spec_schema(crds.ENDPOINT)["properties"]
    assert props["computeType"]["enum"] == ["GPU", "CPU"]
    assert props["scalerType"]["enum"] == ["QUEUE_DELAY", "REQUEST_COUNT"]
    timeout = props["executionTimeoutMs"]
    assert (timeout["minimum"], timeout["maximum"]) == (EXECUTION_TIMEOUT_MIN_MS, MAX_DURATION_MS)
    assert props["workersMin"]["minimum"] == 0
    assert props["workersMax"]["default"] == 3
    assert props["gpuTypeIds"] == {
        "type": "array",
        "description": props["gpuTypeIds"]["description"],
        "items": {"type": "string"},
    }


def test_template_schema_requires_an_image_and_checks_ports() -> None:
    schema = spec_schema(crds.TEMPLATE)
    assert schema["required"] == ["image"]
    assert "pattern" in schema["properties"]["ports"]["items"]
    assert schema["properties"]["env"]["additionalProperties"] == {"type": "string"}


def test_endpoint_has_a_status_subresource_whose_fields_are_declared() -> None:
    version = crds.crd(crds.ENDPOINT)["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"phase", "endpointId", "jobApiUrl", "workers", "conditions", "observedGeneration"} <= (
        set(status)
    )
    assert status["phase"]["enum"] == [
        "Pending", "Initializing", "Ready", "Degraded", "Failed", "CrashLoop"
    ]  # fmt: skip
    assert not any("default" in node for node in walk(status))


def test_endpoint_is_reachable_by_short_names_and_shows_phase_and_workers() -> None:
    names = crds.crd(crds.ENDPOINT)["spec"]["names"]
    assert names["shortNames"] == ["lgep", "lgendpoint"]
    assert names["categories"] == ["lockgate"]
    columns = crds.crd(crds.ENDPOINT)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "Type",
        "Phase",
        "Ready",
        "Desired",
        "Queue",
        "Template",
        "Age",
    ]


def test_crds_command_prints_both_crds(capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main(argparse.Namespace(out=None)) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["name"] for d in docs] == [
        "endpoints.lockgate.dev",
        "templates.lockgate.dev",
    ]


def test_crds_command_writes_one_file_per_crd(tmp_path: Path) -> None:
    crds.main(argparse.Namespace(out=str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "endpoints.lockgate.dev.yaml",
        "templates.lockgate.dev.yaml",
    ]


def test_template_schema_checks_the_worker_pod_fields() -> None:
    """Each pod field is typed to its end (a map's values too: nothing is pruned), and what
    the apiserver can check it does: patterns, enums and bounds."""
    props = spec_schema(crds.TEMPLATE)["properties"]
    secret_ref = props["secretEnv"]["additionalProperties"]
    assert (
        secret_ref["required"] == ["name", "key"] and "pattern" in secret_ref["properties"]["name"]
    )
    assert props["podSecurity"]["enum"] == ["restricted", "baseline"]
    assert props["runAsUser"]["minimum"] == 1 and props["runAsUser"]["default"] == 10001
    toleration = props["tolerations"]["items"]["properties"]
    assert toleration["effect"]["enum"] == ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]
    assert toleration["operator"]["enum"] == ["Exists", "Equal"]
    for name in ("nodeSelector", "podLabels"):
        assert "pattern" in props[name]["additionalProperties"], name
    for name in ("imagePullSecrets", "envFromSecrets"):
        assert "pattern" in props[name]["items"], name
    for name in ("runtimeClassName", "priorityClassName"):
        assert "pattern" in props[name], name
    assert props["memoryInGb"]["type"] == props["shmSizeInGb"]["type"] == "number"
