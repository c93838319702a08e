"""The Helm chart: values against the strict schema, every key documented, templates
referring only to values that exist, CRDs in sync with the models; then rendered by real
helm (`helm template`), linted (`helm lint --strict`) and the objects validated strictly
against the Kubernetes API schemas of the versions the chart supports."""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from lockgate.gateway.keyfile import parse_key_file
from lockgate.kube import crds
from lockgate.kube.reconcile import OWNED_OBJECTS
from lockgate.kube.settings import OperatorSettings
from lockgate.settings import Prices

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "lockgate"
TEMPLATES = CHART / "templates"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

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


# Values files the docs point to (docs/install.md): rendered, linted and validated like ci/'s.
EXAMPLE_VALUES = sorted((REPO / "examples" / "values").glob("*.yaml"))


def example_values() -> list[tuple[str, dict[str, Any]]]:
    """The chart's ci/ values files, examples/values/ and the values inside the GitOps
    examples."""
    files = [*sorted((CHART / "ci").glob("*")), *EXAMPLE_VALUES]
    found = [(p.name, yaml.safe_load(p.read_text())) for p in files]
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
        ({"operator": {"replicaCount": 0}}, "less than the minimum"),
        ({"operator": {"replicas": 2}}, "Additional properties"),
        ({"redis": {"enabled": False}}, "is not valid under any"),
        ({"redis": {"appendfsync": "sometimes"}}, "is not one of"),
        ({"operator": {"namespaces": ["Team_A"]}}, "does not match"),
        ({"apiKeys": {"keys": [{"name": "a", "scopes": ["jobs"]}]}}, "'sha256' is a required"),
        ({"apiKeys": {"keys": [{"name": "a", "sha256": "a" * 64, "scopes": ["root"]}]}}, "one of"),
        ({"apiKeys": {"keys": [{"name": "a b", "sha256": "a" * 64, "scopes": ["jobs"]}]}}, "match"),
        ({"keda": {"scaledObjects": [{"endpoint": "echo"}]}}, "'namespace' is a required"),
        ({"externalRedis": {"url": "http://redis"}}, "does not match"),
        ({"metrics": {"token": {"value": "two words"}}}, "does not match"),
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


# Kept on uninstall (crds.keep) and never pruned by Argo CD.
CRD_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false",
    "helm.sh/resource-policy": "keep",
}


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_chart_crd_is_the_crds_folder_file_behind_crds_install(kind: crds.Kind) -> None:
    text = (CHART / crds.CHART_CRD_DIR / crds.file_name(kind)).read_text()
    assert text.startswith(crds.CHART_OPEN % kind.crd_name)
    assert text.rstrip().endswith("{{- end }}")
    helm_free = "\n".join(line for line in text.splitlines() if "{{" not in line)
    rendered = yaml.safe_load(helm_free)  # as helm renders it with crds.keep=true
    annotations = rendered["metadata"].pop("annotations")
    assert annotations == CRD_ANNOTATIONS
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


# -- rendered by real helm (`make tools` installs the pinned helm) ------------------------

TOOLS_DIR = os.environ.get("LOCKGATE_TOOLS_DIR") or Path.home() / ".cache" / "lockgate-tools"
TOOLS_BIN = Path(TOOLS_DIR) / "bin"  # hack/tools.sh installs helm there
RELEASE = ("lockgate", "--namespace", "lockgate")
NOTES_PROBE = "templates/zz-notes-for-tests.yaml"


def find_helm() -> str | None:
    """helm from `make tools` (the version these tests are written against), else the
    first on PATH."""
    pinned = TOOLS_BIN / "helm"
    return str(pinned) if os.access(pinned, os.X_OK) else shutil.which("helm")


def required_tool(found: str | None, missing: str) -> str:
    """`found`; without it the test skips saying `missing`, or fails under
    LOCKGATE_REQUIRE_CLUSTER=1."""
    if found is None:
        if os.environ.get("LOCKGATE_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"{missing} (LOCKGATE_REQUIRE_CLUSTER=1)", pytrace=False)
        pytest.skip(missing)
    return found


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary; without one the test skips, or fails under LOCKGATE_REQUIRE_CLUSTER=1."""
    return required_tool(find_helm(), "helm missing: `make tools` installs it")


def notes_chart(root: Path) -> Path:
    """A copy of the chart with one more template printing NOTES.txt as an object:
    `helm template` renders NOTES.txt but never prints it."""
    chart = root / CHART.name
    shutil.copytree(CHART, chart)
    probe = '{{ include (print $.Template.BasePath "/NOTES.txt") . | toJson }}'
    (chart / NOTES_PROBE).write_text(f"kind: RenderedNotes\nnotes: {probe}\n")
    return chart


@pytest.fixture(scope="module")
def render_chart(helm: str, tmp_path_factory: pytest.TempPathFactory):
    """A function running `helm template` on the chart with extra values (and, optionally,
    the Kubernetes version and extra API versions helm's Capabilities report); it returns
    the objects, or the rendered NOTES.txt with `notes=True`. Values: a dict, or a file."""
    out = tmp_path_factory.mktemp("render")
    with_notes = notes_chart(out)

    def render(
        values: dict[str, Any] | Path | None = None,
        *,
        notes: bool = False,
        kube_version: str | None = None,
        api_versions: Sequence[str] = (),
        namespace: str | None = None,
    ) -> Any:
        args = [helm, "template", *RELEASE]
        args += ["--namespace", namespace] if namespace else []
        args += [str(with_notes), "--show-only", NOTES_PROBE] if notes else [str(CHART)]
        args += ["--kube-version", kube_version] if kube_version else []
        for api_version in api_versions:
            args += ["--api-versions", api_version]
        if isinstance(values, Path):
            args += ["--values", str(values)]
        elif values is not None:
            digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()
            path = out / f"values-{digest[:16]}.yaml"
            path.write_text(yaml.safe_dump(values))
            args += ["--values", str(path)]
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode:
            raise RenderError(done.stderr.strip())
        docs = [d for d in yaml.load_all(done.stdout, Loader=LOADER) if d]
        return docs[0]["notes"] if notes else docs

    return render


# The APIs of the Prometheus Operator and KEDA, which `helm template` does not report.
SERVED = ("monitoring.coreos.com/v1", "keda.sh/v1alpha1")


class RenderError(Exception):
    """The chart did not render."""


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize(("processes", "env"), [(None, "1"), (2, "2"), ("auto", "auto")])
def test_gateway_processes_reach_the_gateway(render_chart, processes, env: str) -> None:
    values = {} if processes is None else {"gateway": {"processes": processes}}
    gateway = by_kind(render_chart(values), "Deployment")["lockgate-gateway"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert env_of(container)["LOCKGATE_GATEWAY_PROCESSES"] == env


def test_gateway_processes_refuse_what_the_gateway_would(render_chart) -> None:
    with pytest.raises(RenderError, match="processes"):
        render_chart({"gateway": {"processes": "many"}})


@pytest.mark.parametrize(
    ("name", "values"), [("values.yaml", {}), *example_values()], ids=lambda v: str(v)[:40]
)
def test_chart_renders_with_every_values_file(render_chart, name: str, values: dict) -> None:
    docs = render_chart(values)
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "lockgate", doc["metadata"]


def test_default_install_has_every_component(render_chart) -> None:
    docs = render_chart()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {
        ("CustomResourceDefinition", "endpoints.lockgate.dev"),
        ("CustomResourceDefinition", "templates.lockgate.dev"),
        ("Deployment", "lockgate-gateway"),
        ("Service", "lockgate-gateway"),
        ("PodDisruptionBudget", "lockgate-gateway"),
        ("Deployment", "lockgate-operator"),
        ("Deployment", "lockgate-manage"),
        ("Service", "lockgate-manage"),
        ("StatefulSet", "lockgate-redis"),
        ("ClusterRole", "lockgate-lockgate-operator"),
        ("Role", "lockgate-operator-leader-election"),
        ("Role", "lockgate-manage"),
        ("Secret", "lockgate-settings"),
        ("Secret", "lockgate-api-keys"),
    } <= kinds
    assert not {"Ingress", "ServiceMonitor", "ScaledObject"} & {k for k, _ in kinds}
    installed = [d for d in docs if "helm.sh/hook" not in d["metadata"].get("annotations", {})]
    roles = sorted(d["metadata"]["name"] for d in installed if d["kind"] == "Role")
    assert roles == ["lockgate-manage", "lockgate-operator-leader-election"], "hooks have their own"


def test_gateway_and_operator_share_settings_and_find_each_other(render_chart) -> None:
    deployments = by_kind(render_chart(), "Deployment")
    gateway = env_of(deployments["lockgate-gateway"]["spec"]["template"]["spec"]["containers"][0])
    operator = env_of(deployments["lockgate-operator"]["spec"]["template"]["spec"]["containers"][0])
    internal = "http://lockgate-gateway.lockgate.svc.cluster.local:8080"
    # Workers get the worker API's port (gateway.workerPort); the scaler reads the job API's.
    assert operator["LOCKGATE_GATEWAY_URL"] == internal.replace(":8080", ":8081")
    assert operator["LOCKGATE_METRICS_URL"] == f"{internal}/metrics"
    assert gateway["LOCKGATE_HOST"] == "0.0.0.0"
    assert gateway["LOCKGATE_REDIS_URL"] == operator["LOCKGATE_REDIS_URL"]
    assert gateway["LOCKGATE_KEYS_FILE"] == "/etc/lockgate/keys/keys.json"
    assert deployments["lockgate-gateway"]["spec"]["replicas"] >= 1


def test_chart_redis_is_append_only_with_a_password_in_the_redis_url(render_chart) -> None:
    docs = render_chart()
    config = by_kind(docs, "ConfigMap")["lockgate-redis"]["data"]["redis.conf"]
    assert "appendonly yes" in config and "appendfsync everysec" in config
    secret = by_kind(docs, "Secret")["lockgate-settings"]["data"]
    url = base64.b64decode(secret["LOCKGATE_REDIS_URL"]).decode()
    password = base64.b64decode(secret["REDIS_PASSWORD"]).decode()
    assert url == f"redis://:{password}@lockgate-redis.lockgate.svc.cluster.local:6379/0"
    assert len(password) == 32
    statefulset = by_kind(docs, "StatefulSet")["lockgate-redis"]
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


def test_external_redis_replaces_the_statefulset(render_chart) -> None:
    url = "rediss://:pw@redis.example.internal:6380/0"
    docs = render_chart({"redis": {"enabled": False}, "externalRedis": {"url": url}})
    assert not by_kind(docs, "StatefulSet")
    secret = by_kind(docs, "Secret")["lockgate-settings"]["data"]
    assert base64.b64decode(secret["LOCKGATE_REDIS_URL"]).decode() == url


def test_redis_off_without_a_url_fails_with_a_message(render_chart) -> None:
    with pytest.raises(RenderError, match=r"externalRedis\.url"):
        render_chart({"redis": {"enabled": False}})


def test_generated_client_key_is_in_clear_apart_and_by_digest_in_the_keys_file(
    render_chart,
) -> None:
    secrets = by_kind(render_chart(), "Secret")
    [entry] = json.loads(base64.b64decode(secrets["lockgate-api-keys"]["data"]["keys.json"]))
    key = base64.b64decode(secrets["lockgate-client-key"]["data"]["key"]).decode()
    assert key.startswith("lg_") and len(key) >= 40
    assert entry == {
        "name": "client",
        "sha256": hashlib.sha256(key.encode()).hexdigest(),
        "scopes": ["jobs"],
    }


@pytest.mark.parametrize(
    "values",
    [{}, {"apiKeys": {"keys": [{"name": "ci", "sha256": "a" * 64, "scopes": ["jobs"]}]}}],
    ids=["generated", "listed"],
)
def test_keys_file_is_one_the_gateway_accepts(render_chart, values: dict) -> None:
    raw = base64.b64decode(
        by_kind(render_chart(values), "Secret")["lockgate-api-keys"]["data"]["keys.json"]
    )
    assert parse_key_file(raw)


def test_keys_file_takes_digests_only() -> None:
    plaintext = {"name": "ci", "key": "lg_" + "x" * 40, "scopes": ["jobs"]}
    assert errors({"apiKeys": {"keys": [plaintext]}})


@pytest.mark.parametrize("name", ["lockgate-gateway", "lockgate-manage"])
def test_the_gateway_and_the_management_api_read_the_mounted_keys_file(render_chart, name) -> None:
    pod = by_kind(render_chart(), "Deployment")[name]["spec"]["template"]["spec"]
    path = env_of(pod["containers"][0])["LOCKGATE_KEYS_FILE"]
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "api-keys"]
    assert path.startswith(mount["mountPath"] + "/")
    assert any(v["name"] == "api-keys" for v in pod["volumes"])


def test_existing_secrets_replace_the_charts_own(render_chart) -> None:
    values = {"settings": {"existingSecret": "mine"}, "apiKeys": {"existingSecret": "keys"}}
    docs = render_chart(values)
    assert not by_kind(docs, "Secret")
    gateway = by_kind(docs, "Deployment")["lockgate-gateway"]["spec"]["template"]["spec"]
    assert env_of(gateway["containers"][0])["LOCKGATE_REDIS_URL"]["secretKeyRef"]["name"] == "mine"
    assert gateway["volumes"][0]["secret"]["secretName"] == "keys"


def rules_of(role: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            out.setdefault(resource, set()).update(rule["verbs"])
    return out


def test_cluster_wide_rbac_grants_only_the_verbs_the_operator_uses(render_chart) -> None:
    rules = rules_of(by_kind(render_chart(), "ClusterRole")["lockgate-lockgate-operator"])
    assert rules == {
        "customresourcedefinitions": {"list", "watch"},
        "namespaces": {"list", "watch"},
        "endpoints": {"get", "list", "watch", "patch", "create"},  # create: batch pools
        "endpoints/status": {"patch"},
        "endpoints/finalizers": {"update"},
        "templates": {"get", "list", "watch", "patch"},
        "deployments": {"get", "list", "watch", "create", "update"},
        "deployments/scale": {"patch"},
        "daemonsets": {"get", "create", "update", "delete"},
        "networkpolicies": {"get", "create", "update", "delete"},  # LB endpoints' workers
        "secrets": {"get", "create", "update"},  # get: a worker Secret's labels
        "pods": {"list", "watch", "patch", "delete"},
        "pods/status": {"patch"},
        "pods/log": {"get"},  # a worker past its startupTimeout: its last line
        "events": {"create"},
    }


def test_the_operator_may_apply_and_delete_each_optional_owned_kind(render_chart) -> None:
    """Each row of `reconcile.OWNED_OBJECTS` (an object an Endpoint owns while a setting
    wants it) is read, created, replaced and deleted by the operator: a new row needs its
    kind in the operator's role."""
    rules = rules_of(by_kind(render_chart(), "ClusterRole")["lockgate-lockgate-operator"])
    for row in OWNED_OBJECTS:
        plural = re.sub("y$", "ie", row.kind.lower()) + "s"
        assert {"get", "create", "update", "delete"} <= rules.get(plural, set()), row.kind


BUILDS = {"builds": {"registry": "registry.example.test/builds", "namespace": "lockgate-builds",
                    "pushSecret": "push-creds"}}  # fmt: skip


def test_builds_grant_jobs_and_reach_the_operator_and_the_management_api(render_chart) -> None:
    """builds.registry set: the operator may create, watch and delete Jobs (one per build:
    kube/builds.py) and create and delete Endpoints and Templates (a build's canary and its
    Template: kube/canary.py); both processes read the builds settings. Unset: no Job
    rights, no Endpoint or Template writes (the default role above) and no builds
    settings."""
    docs = render_chart(BUILDS)
    rules = rules_of(by_kind(docs, "ClusterRole")["lockgate-lockgate-operator"])
    assert rules.pop("jobs") == {"get", "list", "watch", "create", "delete"}
    # a build's canary Endpoint (kube/canary.py), created and deleted by the operator
    assert rules["endpoints"] == {"get", "list", "watch", "patch", "create", "delete"}
    # with tests.json's config.env, the canary's own Template (kube/canary.py)
    assert rules["templates"] == {"get", "list", "watch", "patch", "create", "delete"}
    assert "jobs" not in rules_of(
        by_kind(render_chart(), "ClusterRole")["lockgate-lockgate-operator"]
    )
    for name in ("lockgate-operator", "lockgate-manage"):
        pod = by_kind(docs, "Deployment")[name]["spec"]["template"]["spec"]
        env = env_of(next(c for c in pod["containers"] if c["name"] in ("operator", "manage")))
        assert env["LOCKGATE_BUILDS_REGISTRY"] == "registry.example.test/builds"
        assert env["LOCKGATE_BUILDS_NAMESPACE"] == "lockgate-builds"
        assert env["LOCKGATE_BUILDS_PUSH_SECRET"] == "push-creds"
        assert env["LOCKGATE_BUILDER_IMAGE"].startswith("registry.example.com/lockgate/builder:")
    plain = by_kind(render_chart(), "Deployment")["lockgate-operator"]["spec"]["template"]["spec"]
    assert "LOCKGATE_BUILDS_REGISTRY" not in env_of(plain["containers"][0])


def test_a_namespaced_operator_must_watch_the_builds_namespace(render_chart) -> None:
    values = {**BUILDS, "operator": {"namespaces": ["team-a"]}}
    with pytest.raises(RenderError, match=r"builds\.namespace"):
        render_chart(values)
    values["operator"]["namespaces"] = ["team-a", "lockgate-builds"]
    roles = [d for d in render_chart(values) if d["kind"] == "Role"]
    assert all("jobs" in rules_of(r) for r in roles if r["metadata"]["name"] == "lockgate-operator")


def test_namespaced_operator_gets_a_role_per_namespace(render_chart) -> None:
    values = {"operator": {"namespaces": ["team-a", "team-b"], "endpointNamespace": "team-b"}}
    docs = render_chart(values)
    roles = [
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "lockgate-operator"
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {b["subjects"][0]["namespace"] for b in bindings} == {"lockgate"}
    cluster = rules_of(by_kind(docs, "ClusterRole")["lockgate-lockgate-operator"])
    assert cluster == {
        "customresourcedefinitions": {"list", "watch"},
        "namespaces": {"list", "watch"},  # kopf lists them in namespaced mode too
    }
    operator = by_kind(docs, "Deployment")["lockgate-operator"]["spec"]["template"]["spec"]
    assert env_of(operator["containers"][0])["LOCKGATE_NAMESPACES"] == "team-a,team-b"


@pytest.mark.parametrize("values", [{}, {"operator": {"namespaces": ["team-a"]}}])
def test_the_operator_may_keep_only_its_scaler_lease_in_its_own_namespace(
    render_chart, values: dict
) -> None:
    docs = render_chart(values)
    role = by_kind(docs, "Role")["lockgate-operator-leader-election"]
    assert role["metadata"]["namespace"] == "lockgate"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["lockgate-operator-scaler"],
            "verbs": ["get", "update"],
        },
    ]
    binding = by_kind(docs, "RoleBinding")["lockgate-operator-leader-election"]
    assert binding["roleRef"]["name"] == "lockgate-operator-leader-election"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "lockgate-operator", "namespace": "lockgate"}
    ]
    operator = by_kind(docs, "Deployment")["lockgate-operator"]["spec"]["template"]["spec"]
    env = env_of(operator["containers"][0])
    assert env["LOCKGATE_LEASE_NAME"] == "lockgate-operator-scaler"
    assert env["LOCKGATE_LEASE_NAMESPACE"] == "lockgate"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


# -- access: the management API apart, least privilege, several releases (issue 12) --------


def test_the_operator_serves_no_management_api_and_mounts_no_admin_keys(render_chart) -> None:
    docs = render_chart()
    pod = by_kind(docs, "Deployment")["lockgate-operator"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"][container["args"].index("--manage-port") + 1] == "0"
    assert [p["name"] for p in container["ports"]] == ["healthz"]
    assert "LOCKGATE_KEYS_FILE" not in env_of(container)
    assert not any(v["name"] == "api-keys" for v in pod["volumes"])
    service = by_kind(docs, "Service")["lockgate-manage"]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "manage"
    assert "lockgate-operator" not in by_kind(docs, "Service")


def test_the_management_api_runs_apart_with_its_own_service_account(render_chart) -> None:
    docs = render_chart({"operator": {"namespaces": ["team-a", "team-b"]}})
    deployment = by_kind(docs, "Deployment")["lockgate-manage"]["spec"]["template"]
    pod = deployment["spec"]
    assert pod["serviceAccountName"] == "lockgate-manage"
    assert "lockgate-manage" in by_kind(docs, "ServiceAccount")
    [container] = pod["containers"]
    assert container["args"] == ["manage"]
    env = env_of(container)
    assert env["LOCKGATE_ENDPOINT_NAMESPACE"] == "team-a"
    assert env["LOCKGATE_MANAGE_PORT"] == "8081"
    assert env["LOCKGATE_VOLUME_ACCESS_MODE"] == "ReadWriteMany"  # the chart's default
    assert env["LOCKGATE_VOLUME_STORAGE_CLASS"] == ""  # the cluster's default class
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "manage"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_network_volumes_take_the_charts_storage_class_and_access_mode(render_chart) -> None:
    volumes = {"storageClassName": "nfs-client", "accessMode": "ReadWriteOnce"}
    docs = render_chart({"operator": {"manage": {"networkVolumes": volumes}}})
    pod = by_kind(docs, "Deployment")["lockgate-manage"]["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    assert env["LOCKGATE_VOLUME_STORAGE_CLASS"] == "nfs-client"
    assert env["LOCKGATE_VOLUME_ACCESS_MODE"] == "ReadWriteOnce"


def test_the_management_api_may_only_write_endpoints_in_one_namespace(render_chart) -> None:
    docs = render_chart({"operator": {"namespaces": ["team-a"]}})
    [role] = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "lockgate-manage"]
    assert role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == [
        {
            "apiGroups": ["lockgate.dev"],
            "resources": ["endpoints"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        },
        {  # /v1/templates (issue 34)
            "apiGroups": ["lockgate.dev"],
            "resources": ["templates"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},  # worker logs (issue 14)
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        # the v2 worker logs' system source: the worker pods' Events (issue 46)
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
        # /v1/containerregistryauth (issue 34), /v2/account/secrets (issue 46): Secrets
        # written (replaced whole, never patched: a patch answers the Secret), never read
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update", "delete"]},
        {  # /v1/networkvolumes (issue 34)
            "apiGroups": [""],
            "resources": ["persistentvolumeclaims"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        },
    ]
    [binding] = [
        d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "lockgate-manage"
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "lockgate-manage", "namespace": "lockgate"}
    ]
    manage_bound = [
        d for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["name"] == "lockgate-manage" for s in d["subjects"])
    ]  # fmt: skip
    cluster_binding = by_kind(docs, "ClusterRoleBinding")["lockgate-lockgate-manage"]
    assert sorted(manage_bound, key=lambda d: d["kind"]) == [cluster_binding, binding]
    # Its one cluster-wide rule reads: the catalog lists nodes and the pods bound to them.
    cluster_role = by_kind(docs, "ClusterRole")[cluster_binding["roleRef"]["name"]]
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}
    ]


@pytest.mark.parametrize("values", [{}, {"operator": {"namespaces": ["team-a"]}}])
def test_the_operator_lists_no_secret_and_deletes_or_replaces_no_endpoint(
    render_chart, values
) -> None:
    """Without builds, the one Endpoint the operator creates is a batch pool (owned by its
    endpoint, deleted by the garbage collector); it never deletes nor replaces one."""
    docs = render_chart(values)
    operator_roles = [
        d for d in docs
        if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"].endswith("operator")
    ]  # fmt: skip
    assert operator_roles
    for role in operator_roles:
        rules = rules_of(role)
        assert rules.get("secrets", {"create"}) <= {"get", "create", "update"}  # no list, watch
        assert not {"delete", "update"} & rules.get("endpoints", set())
    assert any("create" in rules_of(role).get("endpoints", set()) for role in operator_roles)


@pytest.mark.parametrize("values", [{}, {"operator": {"namespaces": ["team-a"]}}])
def test_the_operator_may_set_owner_references_that_block_deletion(render_chart, values) -> None:
    docs = render_chart(values)
    granted = [
        d for d in docs
        if d["kind"] in ("ClusterRole", "Role")
        and "update" in rules_of(d).get("endpoints/finalizers", set())
    ]  # fmt: skip
    assert granted
    assert not any("templates/finalizers" in rules_of(d) for d in docs if "rules" in d)


CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering")


def test_cluster_scoped_names_carry_the_release_namespace(render_chart) -> None:
    docs = render_chart({"operator": {"peering": True}}, namespace="team-x")
    cluster_scoped = [d for d in docs if d["kind"] in CLUSTER_SCOPED]
    assert {d["kind"] for d in cluster_scoped} == set(CLUSTER_SCOPED)
    for doc in cluster_scoped:
        hook = (doc["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"
        component = doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        want = "team-x-lockgate-uninstall-cleanup" if hook else f"team-x-lockgate-{component}"
        assert doc["metadata"]["name"] == want
    operator = by_kind(docs, "Deployment")["lockgate-operator"]["spec"]["template"]["spec"]
    assert env_of(operator["containers"][0])["LOCKGATE_PEERING_NAME"] == "team-x-lockgate-operator"
    namespaced = by_kind(
        render_chart({"operator": {"peering": True, "namespaces": ["a"]}}), "KopfPeering"
    )
    assert list(namespaced) == ["lockgate-lockgate-operator"]
    binding = by_kind(docs, "ClusterRoleBinding")["team-x-lockgate-operator"]
    assert binding["roleRef"]["name"] == "team-x-lockgate-operator"


def test_long_cluster_scoped_names_stay_valid_and_distinct(render_chart) -> None:
    long = "n" * 60
    names = {
        ns: by_kind(render_chart(namespace=ns), "ClusterRole") for ns in (long + "a", long + "b")
    }
    # the operator's, the management API's (the catalog) and the hook's
    a, b = (sorted(roles) for roles in names.values())
    assert len(a) == len(b) == 3 and not set(a) & set(b)
    assert all(len(name) <= 63 for name in a + b)


@pytest.mark.parametrize(
    ("values", "annotation"),
    [({}, "*"), ({"operator": {"namespaces": ["team-b", "team-a"]}}, "team-a,team-b")],
)
def test_the_cluster_role_says_which_namespaces_the_operator_watches(
    render_chart, values: dict, annotation: str
) -> None:
    role = by_kind(render_chart(values), "ClusterRole")["lockgate-lockgate-operator"]
    assert role["metadata"]["annotations"]["lockgate.dev/watched-namespaces"] == annotation


def test_an_endpoint_namespace_the_operator_does_not_watch_is_refused(render_chart) -> None:
    values = {"operator": {"namespaces": ["team-a"], "endpointNamespace": "intake"}}
    with pytest.raises(RenderError, match=r'endpointNamespace "intake" is not among'):
        render_chart(values)


def test_rbac_create_off_renders_no_lease_role(render_chart) -> None:
    docs = render_chart({"rbac": {"create": False}})
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")


def test_one_operator_is_recreated_and_two_roll_spread_over_nodes(render_chart) -> None:
    one = by_kind(render_chart(), "Deployment")["lockgate-operator"]["spec"]
    assert one["replicas"] == 1 and one["strategy"] == {"type": "Recreate"}
    assert "affinity" not in one["template"]["spec"]
    two = by_kind(render_chart({"operator": {"replicaCount": 2}}), "Deployment")
    spec = two["lockgate-operator"]["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    spread = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"


def test_several_operators_with_kopf_peering_fail_with_a_message(render_chart) -> None:
    # kopf pauses every operator when peers of equal priority run: nothing would reconcile.
    with pytest.raises(RenderError, match="peering=false"):
        render_chart({"operator": {"replicaCount": 2, "peering": True}})


def test_crds_install_off_renders_no_crd(render_chart) -> None:
    docs = render_chart({"crds": {"install": False}})
    assert not by_kind(docs, "CustomResourceDefinition")


def test_rendered_crds_are_the_generated_ones(render_chart) -> None:
    rendered = by_kind(render_chart(), "CustomResourceDefinition")
    for kind in crds.KINDS:
        crd = rendered[kind.crd_name]
        assert crd["metadata"].pop("annotations") == CRD_ANNOTATIONS
        assert crd == crds.crd(kind)


def test_ingress_routes_only_the_client_apis_and_sets_the_base_url(render_chart) -> None:
    values = {
        "gateway": {"ingress": {"enabled": True, "tls": [{"secretName": "t", "hosts": ["h"]}]}}
    }
    docs = render_chart(values)
    [ingress] = by_kind(docs, "Ingress").values()
    paths = [p["path"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert paths == ["/v2", "/lb"]  # the job API and load-balancing endpoints
    operator = by_kind(docs, "Deployment")["lockgate-operator"]["spec"]["template"]["spec"]
    assert env_of(operator["containers"][0])["LOCKGATE_BASE_URL"] == "https://lockgate.example.com"
    gateway = by_kind(docs, "Deployment")["lockgate-gateway"]["spec"]["template"]["spec"]
    assert "LOCKGATE_LB_DOMAIN" not in env_of(gateway["containers"][0])


def test_the_lb_domain_reaches_the_gateway_and_a_wildcard_ingress_host(render_chart) -> None:
    values = {"gateway": {"lbDomain": "lb.example.com", "ingress": {"enabled": True}}}
    docs = render_chart(values)
    gateway = by_kind(docs, "Deployment")["lockgate-gateway"]["spec"]["template"]["spec"]
    assert env_of(gateway["containers"][0])["LOCKGATE_LB_DOMAIN"] == "lb.example.com"
    [ingress] = by_kind(docs, "Ingress").values()
    rule = ingress["spec"]["rules"][-1]
    assert rule["host"] == "*.lb.example.com"
    assert [(p["path"], p["pathType"]) for p in rule["http"]["paths"]] == [("/", "Prefix")]
    with pytest.raises(RenderError):
        render_chart({"gateway": {"lbDomain": "https://lb.example.com"}})


def test_keda_scaled_object_targets_the_endpoints_worker_deployment(render_chart) -> None:
    values = {
        "keda": {
            "enabled": True,
            "scaledObjects": [{"endpoint": "sdxl", "namespace": "gpu", "jobsPerWorker": 2}],
        }
    }
    [scaled] = by_kind(render_chart(values, api_versions=SERVED), "ScaledObject").values()
    assert scaled["metadata"]["namespace"] == "gpu"
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "sdxl-workers",
    }
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "2"
    assert trigger["metadata"]["query"] == (
        '(max(lockgate_jobs_queued{endpoint="sdxl",priority="normal"}) or vector(0))'
        ' + (max(lockgate_jobs_in_progress{endpoint="sdxl"}) or vector(0))'
    )


def test_service_monitor_keeps_the_metrics_own_endpoint_label(render_chart) -> None:
    docs = render_chart({"gateway": {"serviceMonitor": {"enabled": True}}}, api_versions=SERVED)
    [monitor] = by_kind(docs, "ServiceMonitor").values()
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


MONITOR = {"gateway": {"serviceMonitor": {"enabled": True}}}
SCRAPERS = ("lockgate-gateway", "lockgate-operator", "ServiceMonitor")


def metrics_token_refs(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Where each reader of the metrics token takes it from (None: it has none)."""
    deployments = by_kind(docs, "Deployment")
    refs: dict[str, Any] = {}
    for name in SCRAPERS[:2]:
        env = env_of(deployments[name]["spec"]["template"]["spec"]["containers"][0])
        token = env.get("LOCKGATE_METRICS_TOKEN")
        refs[name] = token and token["secretKeyRef"]
    [monitor] = by_kind(docs, "ServiceMonitor").values()
    endpoint = monitor["spec"]["endpoints"][0]
    assert "bearerTokenSecret" not in endpoint  # deprecated: `authorization` replaces it
    authorization = endpoint.get("authorization")
    assert authorization is None or authorization["type"] == "Bearer"
    refs["ServiceMonitor"] = authorization and authorization["credentials"]
    return refs


def test_metrics_stay_open_without_a_token(render_chart) -> None:
    docs = render_chart(MONITOR, api_versions=SERVED)
    assert metrics_token_refs(docs) == dict.fromkeys(SCRAPERS)
    assert "LOCKGATE_METRICS_TOKEN" not in by_kind(docs, "Secret")["lockgate-settings"]["data"]


@pytest.mark.parametrize(
    ("token", "given"),
    [({"enabled": True}, None), ({"value": "s3cret-token"}, "s3cret-token")],
    ids=["generated", "given"],
)
def test_a_metrics_token_is_kept_in_the_settings_secret_and_sent_by_every_scraper(
    render_chart, token: dict, given: str | None
) -> None:
    docs = render_chart(merged(MONITOR, {"metrics": {"token": token}}), api_versions=SERVED)
    data = by_kind(docs, "Secret")["lockgate-settings"]["data"]
    value = base64.b64decode(data["LOCKGATE_METRICS_TOKEN"]).decode()
    assert value == given or (given is None and re.fullmatch(r"[A-Za-z0-9]{32}", value))
    ref = {"name": "lockgate-settings", "key": "LOCKGATE_METRICS_TOKEN"}
    assert metrics_token_refs(docs) == dict.fromkeys(SCRAPERS, ref)


@pytest.mark.parametrize(
    ("values", "ref"),
    [
        (
            {"metrics": {"token": {"existingSecret": "prom", "secretKey": "bearer"}}},
            ("prom", "bearer"),
        ),
        (
            {"settings": {"existingSecret": "mine"}, "metrics": {"token": {"enabled": True}}},
            ("mine", "LOCKGATE_METRICS_TOKEN"),
        ),
    ],
    ids=["metrics-secret", "settings-secret"],
)
def test_a_metrics_token_can_come_from_an_existing_secret(
    render_chart, values: dict, ref: tuple[str, str]
) -> None:
    docs = render_chart(merged(MONITOR, values), api_versions=SERVED)
    expected = {"name": ref[0], "key": ref[1]}
    assert metrics_token_refs(docs) == dict.fromkeys(SCRAPERS, expected)
    settings = by_kind(docs, "Secret").get("lockgate-settings", {"data": {}})
    assert "LOCKGATE_METRICS_TOKEN" not in settings["data"]


def test_a_metrics_token_value_with_an_existing_settings_secret_fails_with_a_message(
    render_chart,
) -> None:
    values = {"settings": {"existingSecret": "mine"}, "metrics": {"token": {"value": "t"}}}
    with pytest.raises(RenderError, match=r"metrics\.token\.existingSecret"):
        render_chart(values)


def test_keda_metric_names_are_the_gateways() -> None:
    metrics = (REPO / "operator" / "lockgate" / "gateway" / "metrics.py").read_text()
    for name in DEFAULTS["keda"]["metrics"].values():
        assert f'"{name}"' in metrics, name


def test_notes_with_keda_tell_how_to_hand_each_endpoint_to_it(render_chart) -> None:
    values = {
        "keda": {"enabled": True, "scaledObjects": [{"endpoint": "sdxl", "namespace": "gpu"}]}
    }
    notes = render_chart(values, notes=True, api_versions=SERVED)
    assert (
        "kubectl -n gpu annotate endpoints.lockgate.dev/sdxl lockgate.dev/scaler=external" in notes
    )


def test_notes_tell_how_to_reach_the_api_read_the_key_and_create_an_endpoint(render_chart) -> None:
    notes = render_chart(notes=True)
    assert "port-forward svc/lockgate-gateway 8080:8080" in notes
    assert "port-forward svc/lockgate-manage 8081:8081" in notes
    assert "exec deploy/lockgate-operator -- lockgate keys create admin --scope admin" in notes
    assert "get secret lockgate-client-key -o jsonpath='{.data.key}'" in notes
    assert "kubectl apply -f examples/echo/" in notes
    assert "/v2/echo/runsync" in notes


def test_notes_with_an_ingress_show_the_public_url(render_chart) -> None:
    notes = render_chart({"baseUrl": "https://gpu.example.com"}, notes=True)
    assert "The job API ({base_url}) is https://gpu.example.com" in notes
    assert "port-forward svc/lockgate-gateway" not in notes


# -- values that reach pods as written ----------------------------------------------------

ENV_AS_WRITTEN = {
    "LOCKGATE_MAX_RESULT_BYTES": (50000000, "50000000"),
    "LOCKGATE_BIG": (123456789012, "123456789012"),
    "LOCKGATE_RATIO": (0.5, "0.5"),
    "LOCKGATE_FLAG": (True, "true"),
    "LOCKGATE_TEXT": ("0755", "0755"),  # a string stays as it is, numeric or not
}


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_env_numbers_and_booleans_reach_pods_as_the_text_written_in_values(
    render_chart, component: str
) -> None:
    env = {name: value for name, (value, _) in ENV_AS_WRITTEN.items()}
    docs = render_chart({component: {"env": env}})
    pod = by_kind(docs, "Deployment")[f"lockgate-{component}"]["spec"]["template"]["spec"]
    rendered = env_of(pod["containers"][0])
    assert {name: rendered[name] for name in env} == {
        name: text for name, (_, text) in ENV_AS_WRITTEN.items()
    }


def test_a_large_number_in_a_values_file_renders_as_its_digits(helm: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("gateway:\n  env:\n    LOCKGATE_MAX_RESULT_BYTES: 50000000\n")
    args = [helm, "template", *RELEASE, str(CHART), "--values", str(values)]
    args += ["--show-only", "templates/gateway/deployment.yaml"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    assert '- name: LOCKGATE_MAX_RESULT_BYTES\n              value: "50000000"\n' in out


def test_numeric_chart_settings_reach_pods_as_digits(render_chart) -> None:
    values = {"operator": {"scheduling": {"terminationGraceCapSeconds": 86400000}}}
    operator = by_kind(render_chart(values), "Deployment")["lockgate-operator"]
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert env_of(container)["LOCKGATE_TERMINATION_GRACE_CAP_S"] == "86400000"
    assert env_of(container)["LOCKGATE_LIVENESS_PORT"] == "8082"


def test_cpu_workers_request_ratio_reaches_the_operator(render_chart) -> None:
    values = {"operator": {"scheduling": {"cpuRequestRatio": 0.25}}}
    operator = by_kind(render_chart(values), "Deployment")["lockgate-operator"]
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert env_of(container)["LOCKGATE_CPU_REQUEST_RATIO"] == "0.25"
    assert errors({"operator": {"scheduling": {"cpuRequestRatio": 0}}}), "0 would request nothing"


# -- GPU placement (operator.scheduling) --------------------------------------------------


def operator_settings_from(
    docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> OperatorSettings:
    """The operator's settings as its process reads them from the rendered env."""
    operator = by_kind(docs, "Deployment")["lockgate-operator"]
    env = env_of(operator["spec"]["template"]["spec"]["containers"][0])
    for name, value in env.items():
        if name.startswith("LOCKGATE_") and isinstance(value, str):
            monkeypatch.setenv(name, value)
    return OperatorSettings()


@pytest.mark.parametrize(
    ("preset", "label", "value"),
    [
        ("nvidia-gfd", "nvidia.com/gpu.product", "NVIDIA-L4"),
        ("gke", "cloud.google.com/gke-accelerator", "nvidia-l4"),
        ("karpenter", "karpenter.k8s.aws/instance-gpu-name", "l4"),
    ],
)
def test_gpu_label_preset_reaches_the_operator(
    render_chart, monkeypatch, preset, label, value
) -> None:
    values = {"operator": {"scheduling": {"gpuLabels": preset, "gpuFallbackSeconds": 90}}}
    settings = operator_settings_from(render_chart(values), monkeypatch)
    gpus = settings.gpu_labelling()
    assert (gpus.type_label, gpus.label_values(["NVIDIA L4"])) == (label, [value])
    assert settings.gpu_fallback_s == 90


def test_gpu_type_values_override_reaches_the_operator(render_chart, monkeypatch) -> None:
    scheduling = {"gpuLabels": "custom", "gpuTypeLabel": "example.com/gpu"}
    scheduling["gpuTypeValues"] = {"NVIDIA L4": ["l4-small", "l4-large"]}
    docs = render_chart({"operator": {"scheduling": scheduling}})
    settings = operator_settings_from(docs, monkeypatch)
    gpus = settings.gpu_labelling()
    assert gpus.type_label == "example.com/gpu"
    assert gpus.label_values(["NVIDIA L4"]) == ["l4-small", "l4-large"]


def test_custom_gpu_labels_without_a_label_fail_with_a_message(render_chart) -> None:
    with pytest.raises(RenderError, match=r"set operator\.scheduling\.gpuTypeLabel"):
        render_chart({"operator": {"scheduling": {"gpuLabels": "custom"}}})
    found = errors({"operator": {"scheduling": {"gpuLabels": "aks"}}})
    assert any("is not one of" in e for e in found), found


# -- Kubernetes versions and the APIs a cluster serves -----------------------------------

OLDEST = "1.20.2"  # the envtest and test-cluster servers


def api_versions_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {d["kind"]: d["apiVersion"] for d in docs}


def test_the_chart_installs_on_kubernetes_1_20(render_chart) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.20.0-0"
    assert render_chart(kube_version=OLDEST)


@pytest.mark.parametrize(
    ("kube_version", "expected"),
    [(OLDEST, "policy/v1beta1"), ("1.21.0", "policy/v1"), (None, "policy/v1")],
    ids=["1.20", "1.21", "helm-default"],
)
def test_the_disruption_budget_is_policy_v1_from_kubernetes_1_21(
    render_chart, kube_version: str | None, expected: str
) -> None:
    # helm template reports policy/v1 even for 1.20; a 1.20 server does not serve it.
    docs = render_chart(kube_version=kube_version)
    assert api_versions_of(docs)["PodDisruptionBudget"] == expected


OTHER_OPERATORS = {
    "gateway": {"serviceMonitor": {"enabled": True}},
    "keda": {"enabled": True, "scaledObjects": [{"endpoint": "sdxl", "namespace": "gpu"}]},
}


@pytest.mark.parametrize(
    ("api_versions", "force", "expected"),
    [
        ((), False, set()),
        (("monitoring.coreos.com/v1",), False, {"ServiceMonitor"}),
        (("keda.sh/v1alpha1",), False, {"ScaledObject"}),
        (SERVED, False, {"ServiceMonitor", "ScaledObject"}),
        ((), True, {"ServiceMonitor", "ScaledObject"}),
    ],
    ids=["none-served", "prometheus-operator", "keda", "both", "forced"],
)
def test_service_monitor_and_scaled_objects_are_written_where_their_api_is_served_or_forced(
    render_chart, api_versions: tuple[str, ...], force: bool, expected: set[str]
) -> None:
    forced = {"gateway": {"serviceMonitor": {"force": force}}, "keda": {"force": force}}
    docs = render_chart(merged(OTHER_OPERATORS, forced), api_versions=api_versions)
    assert {"ServiceMonitor", "ScaledObject"} & set(api_versions_of(docs)) == expected


def test_forcing_writes_nothing_that_is_not_enabled(render_chart) -> None:
    forced = {"gateway": {"serviceMonitor": {"force": True}}, "keda": {"force": True}}
    kinds = set(api_versions_of(render_chart(forced, api_versions=SERVED)))
    assert not {"ServiceMonitor", "ScaledObject"} & kinds


def test_notes_say_when_a_service_monitor_or_scaled_objects_were_left_out(render_chart) -> None:
    notes = render_chart(OTHER_OPERATORS, notes=True)
    assert "does not serve\nmonitoring.coreos.com/v1" in notes
    assert "gateway.serviceMonitor.force=true" in notes
    assert "does not serve keda.sh/v1alpha1" in notes and "keda.force=true" in notes
    assert "annotate endpoints.lockgate.dev/sdxl" not in notes
    served = render_chart(OTHER_OPERATORS, notes=True, api_versions=SERVED)
    assert "does not serve" not in served and "annotate endpoints.lockgate.dev/sdxl" in served


# -- helm lint, and the objects against the Kubernetes API schemas -----------------------

VALUES_FILES = [
    CHART / "values.yaml",
    *sorted((CHART / "ci").glob("*-values.yaml")),
    *EXAMPLE_VALUES,
]
KUBE_VERSIONS = ("1.27", "1.28", "1.29", "1.30", "1.31")
# Custom resources of other projects' CRDs: kubernetes-validate has the Kubernetes API's
# schemas only. Every other kind must have one.
NO_SCHEMA = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("kopf.dev/v1", "ClusterKopfPeering"),
    ("kopf.dev/v1", "KopfPeering"),
}


def helm_lint(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "lint", "--strict", str(CHART), *args], capture_output=True, text=True
    )


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_helm_lint_strict_passes(helm: str, values: Path) -> None:
    done = helm_lint(helm, "--values", str(values))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_helm_lint_strict_passes_for_kubernetes_1_20(helm: str, values: Path) -> None:
    done = helm_lint(helm, "--values", str(values), "--kube-version", OLDEST)
    assert done.returncode == 0, done.stdout + done.stderr


def schema_problems(doc: dict[str, Any], version: str) -> list[str]:
    """What kubernetes-validate, strict (no unknown fields), finds wrong with one object."""
    where = f"{doc['kind']} {doc['metadata']['name']}"
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as err:
        return [f"{where}: {err.message}"]
    except kubernetes_validate.ValidationError as err:
        return [f"{where}: {'.'.join(map(str, err.path))}: {err.message}"]
    return []


def test_kubernetes_validate_has_the_schemas_of_every_version_checked() -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    used = [kubernetes_validate.validate(config_map, v, strict=True) for v in KUBE_VERSIONS]
    assert used == list(KUBE_VERSIONS)  # not an older version's schemas in their place


@pytest.mark.parametrize(("api_version", "kind"), sorted(NO_SCHEMA))
def test_kinds_left_unvalidated_are_those_without_a_schema(api_version: str, kind: str) -> None:
    doc = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_rendered_objects_are_valid_for_kubernetes(
    render_chart, values: Path, version: str
) -> None:
    docs = render_chart(values, kube_version=f"{version}.0", api_versions=SERVED)
    checked = [d for d in docs if (d["apiVersion"], d["kind"]) not in NO_SCHEMA]
    assert len(checked) > 10
    assert [problem for doc in checked for problem in schema_problems(doc, version)] == []


# -- helm test ------------------------------------------------------------------------------


def hook_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Pod `helm test` runs."""
    [pod] = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    return pod


def test_helm_test_asks_the_gateway_and_the_management_api_from_the_control_plane_image(
    render_chart,
) -> None:
    docs = render_chart()
    pod = hook_pod(docs)
    assert pod["kind"] == "Pod" and pod["spec"]["restartPolicy"] == "Never"
    policy = pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert policy == "before-hook-creation,hook-succeeded"  # no pod left after success
    [container] = pod["spec"]["containers"]
    gateway = by_kind(docs, "Deployment")["lockgate-gateway"]["spec"]["template"]["spec"]
    assert container["image"] == gateway["containers"][0]["image"]
    assert container["command"] == ["python", "-c"]
    services = {name: s["spec"]["ports"][0]["port"] for name, s in by_kind(docs, "Service").items()}
    env = env_of(container)
    assert env["GATEWAY_URL"] == (
        f"http://lockgate-gateway.lockgate.svc.cluster.local:{services['lockgate-gateway']}"
    )
    assert env["MANAGE_URL"] == (
        f"http://lockgate-manage.lockgate.svc.cluster.local:{services['lockgate-manage']}"
    )


def test_helm_test_pod_meets_pod_security_restricted(render_chart) -> None:
    pod = hook_pod(render_chart())["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    [container] = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert pod["automountServiceAccountToken"] is False


class Answers(http.server.BaseHTTPRequestHandler):
    """Answers GET with the status `statuses` gives its path (404 for others)."""

    statuses: dict[str, int] = {}

    def do_GET(self) -> None:
        self.send_response(self.statuses.get(self.path, 404))
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@contextlib.contextmanager
def answering(statuses: dict[str, int]) -> Iterator[str]:
    """The URL of a local server answering with `statuses`."""
    handler = type("Handler", (Answers,), {"statuses": statuses})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("statuses", "passes"),
    [
        ({"/readyz": 200, "/v1/endpoints": 401}, True),
        ({"/readyz": 503, "/v1/endpoints": 401}, False),
        ({"/readyz": 200, "/v1/endpoints": 200}, False),
        ({"/readyz": 200}, False),
    ],
    ids=["both-answer", "gateway-not-ready", "api-open-to-anyone", "no-api"],
)
def test_helm_test_passes_only_when_the_gateway_is_ready_and_the_api_refuses_strangers(
    render_chart, statuses: dict[str, int], passes: bool
) -> None:
    [container] = hook_pod(render_chart())["spec"]["containers"]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    with answering(statuses) as url:
        env |= {"GATEWAY_URL": url, "MANAGE_URL": url, "TIMEOUT_S": "0"}
        args = [sys.executable, "-c", container["args"][0]]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode == 0) is passes, done.stdout + done.stderr


# -- worker pods: helper images and the grace cap (podspec) ---------------------------------


def operator_env(render_chart, values: dict[str, Any] | None = None) -> dict[str, Any]:
    operator = by_kind(render_chart(values), "Deployment")["lockgate-operator"]
    return env_of(operator["spec"]["template"]["spec"]["containers"][0])


def test_worker_grace_cap_defaults_to_the_cluster_autoscalers_600_s(render_chart) -> None:
    assert operator_env(render_chart)["LOCKGATE_TERMINATION_GRACE_CAP_S"] == "600"


def test_helper_images_are_pinned_by_digest_by_default(render_chart) -> None:
    env = operator_env(render_chart)
    for name in ("LOCKGATE_FLASHBOOT_HELPER_IMAGE", "LOCKGATE_PAUSE_IMAGE"):
        assert "@sha256:" in env[name], env[name]
    assert env["LOCKGATE_MODEL_FETCH_IMAGE"].startswith("curlimages/curl:8.8.0@sha256:")
    assert env["LOCKGATE_HELPER_IMAGE_PULL_SECRETS"] == ""


def test_helper_images_and_their_pull_secrets_reach_the_operator(render_chart) -> None:
    digest = "sha256:" + "a" * 64
    values = {
        "operator": {
            "helperImages": {
                "busybox": {
                    "repository": "mirror.example/busybox",
                    "tag": "1.37",
                    "digest": digest,
                },
                "pause": {"repository": "mirror.example/pause", "tag": "3.10", "digest": ""},
                "curl": {"repository": "mirror.example/curl", "tag": "8.9.1", "digest": ""},
                "pullSecrets": ["mirror-cred", "other"],
            }
        }
    }
    env = operator_env(render_chart, values)
    assert env["LOCKGATE_FLASHBOOT_HELPER_IMAGE"] == f"mirror.example/busybox:1.37@{digest}"
    assert env["LOCKGATE_PAUSE_IMAGE"] == "mirror.example/pause:3.10"
    assert env["LOCKGATE_MODEL_FETCH_IMAGE"] == "mirror.example/curl:8.9.1"
    assert env["LOCKGATE_HELPER_IMAGE_PULL_SECRETS"] == "mirror-cred,other"


@pytest.mark.parametrize(
    "image",
    [
        {"repository": "busybox", "tag": "1", "digest": "latest"},
        {"repository": "busybox", "tag": ""},
    ],
)
def test_schema_refuses_a_helper_image_without_a_tag_or_with_a_bad_digest(image: dict) -> None:
    assert errors({"operator": {"helperImages": {"busybox": image}}})


def test_prices_reach_the_management_api_as_its_settings(render_chart, monkeypatch) -> None:
    """`operator.manage.prices` become LOCKGATE_GPU_PRICES and LOCKGATE_VCPU_PRICE on
    `lockgate manage`, read back as the `Prices` `/v2/billing` charges; a negative price is
    refused by the schema."""
    prices = {"gpu": {"NVIDIA L4": 0.44, "NVIDIA H100 80GB HBM3": 2.5}, "vcpu": 0.02}
    docs = render_chart({"operator": {"manage": {"prices": prices}}})
    pod = by_kind(docs, "Deployment")["lockgate-manage"]["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    for name in ("LOCKGATE_GPU_PRICES", "LOCKGATE_VCPU_PRICE"):
        monkeypatch.setenv(name, env[name])
    assert Prices().model_dump() == {"gpu_prices": prices["gpu"], "vcpu_price": prices["vcpu"]}
    manage = by_kind(render_chart(), "Deployment")["lockgate-manage"]["spec"]["template"]
    default = env_of(manage["spec"]["containers"][0])
    assert (default["LOCKGATE_GPU_PRICES"], default["LOCKGATE_VCPU_PRICE"]) == ("{}", "0")
    with pytest.raises(RenderError, match="prices"):
        render_chart({"operator": {"manage": {"prices": {"vcpu": -1}}}})
