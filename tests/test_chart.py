"""The Helm chart without helm: values against the strict schema, every key documented,
templates referring only to values that exist, and CRDs in sync with the models."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lockgate.kube import crds

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "lockgate"
TEMPLATES = CHART / "templates"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)

# -- helpers ------------------------------------------------------------------------------


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of a values file over the chart's defaults (maps merge, the rest wins)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def errors(values: dict[str, Any]) -> list[str]:
    found = VALIDATOR.iter_errors(merged(DEFAULTS, values))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found]


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return resolve(SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[-1]])
    return node


def chart_keys(values: dict[str, Any], schema: dict[str, Any], path=()) -> Iterator[tuple]:
    """Paths of the chart's own keys: those the schema names as `properties`. Free-form
    Kubernetes objects (resources, affinity, …) pass through and are not walked."""
    props = resolve(schema).get("properties", {})
    for key, value in values.items():
        if key in props:
            yield (*path, key)
            if isinstance(value, dict):
                yield from chart_keys(value, props[key], (*path, key))


def schema_paths(schema: dict[str, Any], path=()) -> Iterator[tuple]:
    for key, sub in resolve(schema).get("properties", {}).items():
        if path == () or "properties" in resolve(schema):
            yield (*path, key)
        sub = resolve(sub)
        if sub.get("type") == "object" and "properties" in sub:
            yield from schema_paths(sub, (*path, key))


KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(\s|$)")


def documented_keys(text: str) -> dict[tuple, bool]:
    """Each block-style key of a values file, and whether a `# --` comment precedes it.
    Items of list defaults (ingress hosts) are example content, not keys."""
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    out: dict[tuple, bool] = {}
    in_list_at: int | None = None
    for number, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if in_list_at is not None and (
            indent > in_list_at or (indent == in_list_at and stripped.startswith("- "))
        ):
            continue
        in_list_at = None
        if stripped.startswith("- "):
            in_list_at = indent
            continue
        match = KEY_LINE.match(line)
        if not match:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(key for _, key in stack), match["key"])
        stack.append((indent, match["key"]))
        out[path] = _doc_comment_above(lines, number)
    return out


def _doc_comment_above(lines: list[str], number: int) -> bool:
    above = number - 1
    while above >= 0 and lines[above].lstrip().startswith("#"):
        if lines[above].lstrip().startswith("# -- "):
            return True
        above -= 1
    return False


def template_files() -> list[Path]:
    return sorted(p for p in TEMPLATES.rglob("*") if p.suffix in {".yaml", ".tpl", ".txt"})


def example_values() -> list[tuple[str, dict[str, Any]]]:
    """The chart's ci/ values files and the values inside the GitOps examples."""
    found = [(p.name, yaml.safe_load(p.read_text())) for p in sorted((CHART / "ci").glob("*"))]
    for path in sorted((REPO / "examples" / "gitops").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            values = _values_of(doc or {})
            if values is not None:
                found.append((f"{path.name}:{doc['kind']}", values))
    return found


def _values_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc.get("kind") == "HelmRelease":
        return doc["spec"].get("values", {})
    if doc.get("kind") == "Application":
        helm = doc["spec"]["source"].get("helm", {})
        if "valuesObject" in helm:
            return helm["valuesObject"]
        return yaml.safe_load(helm.get("values", "{}"))
    return None


# -- the schema ---------------------------------------------------------------------------


def test_schema_is_valid_draft_7() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def test_values_yaml_validates_against_the_schema() -> None:
    assert errors({}) == []


@pytest.mark.parametrize(("name", "values"), example_values(), ids=lambda v: str(v)[:40])
def test_example_values_validate_against_the_schema(name: str, values: dict[str, Any]) -> None:
    assert errors(values) == [], name


def test_there_are_example_values_for_external_redis_namespaces_and_gitops() -> None:
    names = {name for name, _ in example_values()}
    assert {"external-redis-values.yaml", "namespaced-values.yaml"} <= names
    assert any("HelmRelease" in n for n in names) and any("Application" in n for n in names)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"gateway": {"replicas": 2}}, "Additional properties"),
        ({"gateway": {"replicaCount": 0}}, "less than the minimum"),
        ({"redis": {"enabled": False}}, "is not valid under any"),
        ({"redis": {"appendfsync": "sometimes"}}, "is not one of"),
        ({"operator": {"namespaces": ["Team_A"]}}, "does not match"),
        ({"apiKeys": {"keys": [{"name": "a", "scopes": ["jobs"]}]}}, "is not valid under any"),
        ({"apiKeys": {"keys": [{"name": "a", "key": "k" * 20, "scopes": ["root"]}]}}, "one of"),
        ({"keda": {"scaledObjects": [{"endpoint": "echo"}]}}, "'namespace' is a required"),
        ({"externalRedis": {"url": "http://redis"}}, "does not match"),
    ],
)
def test_schema_refuses_what_cannot_work(values: dict[str, Any], complaint: str) -> None:
    found = errors(values)
    assert any(complaint in e for e in found), found


def test_external_redis_is_accepted_with_a_url_or_a_settings_secret() -> None:
    assert errors({"redis": {"enabled": False}, "externalRedis": {"url": "redis://r:6379/0"}}) == []
    assert errors({"redis": {"enabled": False}, "settings": {"existingSecret": "mine"}}) == []


def test_every_object_of_the_schema_is_closed() -> None:
    def walk(node: Any, where: str) -> Iterator[str]:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                yield where
            for key, value in node.items():
                yield from walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{where}[{i}]")

    open_objects = [w for w in walk(SCHEMA, "") if ".allOf" not in w]
    assert open_objects == []


def test_schema_and_values_yaml_name_the_same_keys() -> None:
    in_values = set(chart_keys(DEFAULTS, SCHEMA))
    assert set(schema_paths(SCHEMA)) == in_values


# -- documentation ------------------------------------------------------------------------


def test_every_key_of_values_yaml_is_documented() -> None:
    keys = documented_keys((CHART / "values.yaml").read_text())
    ours = list(chart_keys(DEFAULTS, SCHEMA))
    missing = [".".join(p) for p in ours if p not in keys]
    assert missing == [], "keys written in flow style cannot carry a comment"
    undocumented = [".".join(p) for p in ours if not keys[p]]
    assert undocumented == []


def test_chart_has_the_usual_layout() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["kubeVersion"]
    for name in ("_helpers.tpl", "NOTES.txt"):
        assert (TEMPLATES / name).exists()
    components = {p.parent.name for p in TEMPLATES.rglob("*.yaml")}
    assert {"operator", "gateway", "redis", "keda", "secrets", "crds"} <= components


# -- templates ----------------------------------------------------------------------------

VALUES_REF = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
OPENERS = re.compile(r"\{\{-?\s*(if|range|with|define)\b")
ENDS = re.compile(r"\{\{-?\s*end\s*-?\}\}")


def test_templates_refer_only_to_values_that_exist() -> None:
    unknown = []
    for path in template_files():
        for match in VALUES_REF.finditer(path.read_text()):
            node: Any = DEFAULTS
            for key in match[1].strip(".").split("."):
                if not isinstance(node, dict) or key not in node:
                    unknown.append(f"{path.relative_to(CHART)}: .Values{match[1]}")
                    break
                node = node[key]
    assert unknown == []


@pytest.mark.parametrize("path", template_files(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_template_blocks_are_balanced(path: Path) -> None:
    text = re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", path.read_text(), flags=re.S)
    assert len(OPENERS.findall(text)) == len(ENDS.findall(text))


# -- CRDs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_chart_crd_is_up_to_date(kind: crds.Kind) -> None:
    path = CHART / crds.CHART_CRD_DIR / crds.file_name(kind)
    assert path.exists(), f"{path} is missing: run `make crds`"
    assert path.read_text() == crds.render_chart(kind), f"{path} is stale: run `make crds`"


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_chart_crd_is_the_crds_folder_file_behind_crds_install(kind: crds.Kind) -> None:
    text = (CHART / crds.CHART_CRD_DIR / crds.file_name(kind)).read_text()
    assert text.startswith("{{- if .Values.crds.install }}\n")
    assert text.rstrip().endswith("{{- end }}")
    helm_free = "\n".join(line for line in text.splitlines() if "{{" not in line)
    rendered = yaml.safe_load(helm_free)  # as helm renders it with crds.keep=true
    annotations = rendered["metadata"].pop("annotations")
    assert annotations == {"helm.sh/resource-policy": "keep"}
    assert rendered == yaml.safe_load((REPO / "crds" / crds.file_name(kind)).read_text())


def test_every_chart_crd_is_generated_or_kopfs_peering() -> None:
    generated = {crds.file_name(kind) for kind in crds.KINDS}
    present = {p.name for p in (CHART / crds.CHART_CRD_DIR).iterdir()}
    assert present == generated | {"kopf-peerings.yaml"}


def test_crds_command_writes_the_chart_templates(tmp_path: Path) -> None:
    import argparse

    crds.main(argparse.Namespace(out=None, chart=str(tmp_path)))
    written = tmp_path / crds.CHART_CRD_DIR
    assert sorted(p.name for p in written.iterdir()) == sorted(
        crds.file_name(kind) for kind in crds.KINDS
    )
