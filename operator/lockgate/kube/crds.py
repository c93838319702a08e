"""CustomResourceDefinitions of `lockgate.dev`, generated from the pydantic models.

`lockgate crds --out crds --chart charts/lockgate` writes one file per CRD, and the same
CRDs as Helm templates under the chart's `templates/crds/` (behind `crds.install`);
`tests/test_crds.py` and `tests/test_chart.py` fail when the checked-in files differ from
what this module renders. The schemas are structural
(apiextensions.k8s.io/v1): every node has a type, `$ref`s are inlined, optional fields
lose their `null` branch, pydantic-only keywords are dropped. Kubernetes 1.20 has no CEL
rules, but a structural schema may carry value validation (`anyOf` of `properties` that
restate no type): a model's `json_schema_extra` `anyOf` becomes one (GPU endpoints need
`gpuCount >= 1`). A comparison of two fields (`workersMin <= workersMax`) cannot be said
that way: the operator (`SpecValid`) and the management API refuse it. The Endpoint's
`metadata.name` is restricted to an endpoint id (a DNS label: also a valid label value).
See docs/crd-versioning.md for how `v1alpha1` will evolve.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from lockgate.models import ENDPOINT_ID_PATTERN, EndpointSpec, EndpointStatus, TemplateSpec

GROUP = "lockgate.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "lockgate"

# JSON-schema keywords a structural CRD schema may carry; everything else is dropped.
_KEPT = {
    "type",
    "description",
    "properties",
    "items",
    "required",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "additionalProperties",
    "format",
    "anyOf",  # value validation only: `_optional` removes pydantic's `T | None` ones first
    "x-kubernetes-preserve-unknown-fields",  # a free-form JSON value (a warm-up's inputs)
}

_ORDER = {"type": 0, "description": 1, "required": 3, "properties": 4, "items": 4}


@dataclass(frozen=True)
class Kind:
    """One custom resource kind and how `kubectl` shows it."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type[BaseModel]
    status: type[BaseModel] | None = None
    columns: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    name_pattern: str | None = None  # what `metadata.name` must match (at most 63 chars)
    # The scale subresource's paths (`kubectl scale`, HPA, KEDA); None: no scale subresource.
    scale: dict[str, str] | None = None

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


def _column(name: str, path: str, type_: str = "string", priority: int = 0, **extra: Any) -> dict:
    column = {"name": name, "type": type_, "jsonPath": path, **extra}
    if priority:
        column["priority"] = priority
    return column


AGE = _column("Age", ".metadata.creationTimestamp", "date")

# `endpoints` is also the core API's kind, so users type `lgep` or `endpoints.lockgate.dev`.
ENDPOINT = Kind(
    kind="Endpoint",
    plural="endpoints",
    short_names=("lgep", "lgendpoint"),
    spec=EndpointSpec,
    status=EndpointStatus,
    name_pattern=ENDPOINT_ID_PATTERN,
    scale={
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    },
    columns=(
        _column("Type", ".spec.type"),
        _column("Phase", ".status.phase"),
        _column("Ready", ".status.workers.ready", "integer", description="ready workers"),
        _column("Desired", ".status.workers.desired", "integer", description="wanted workers"),
        _column("Queue", ".status.jobs.inQueue", "integer", description="queued jobs"),
        _column("Template", ".spec.templateId"),
        _column("Compute", ".spec.computeType", priority=1),
        _column("URL", ".status.jobApiUrl", priority=1),
        AGE,
    ),
)

TEMPLATE = Kind(
    kind="Template",
    plural="templates",
    short_names=("lgtemplate", "lgt"),
    spec=TemplateSpec,
    columns=(
        _column("Image", ".spec.image"),
        _column("Disk", ".spec.containerDiskInGb", "integer", priority=1, description="GiB"),
        AGE,
    ),
)

KINDS = (ENDPOINT, TEMPLATE)


def structural_schema(model: type[BaseModel], *, defaults: bool = True) -> dict[str, Any]:
    """The model's JSON schema as a structural OpenAPI v3 schema (no `$ref`, no titles)."""
    schema = model.model_json_schema(mode="validation")
    return _clean(schema, schema.get("$defs", {}), defaults)


def _clean(node: Any, defs: dict[str, Any], defaults: bool) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs, defaults) for item in node]
    if not isinstance(node, dict):
        return node
    node = _inline(_optional(_inline(node, defs)), defs)  # `T | None` of a model: T inlined
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEPT or (key == "default" and (not defaults or value in ("", None))):
            continue  # an empty-string or null default says nothing (some clients drop it)
        if key == "properties":
            out[key] = {name: _clean(sub, defs, defaults) for name, sub in value.items()}
        elif key == "additionalProperties" and value is False:
            continue  # closed objects are the default: unknown fields are pruned
        elif key == "additionalProperties" and value is True:  # any JSON object: kept whole
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out[key] = _clean(value, defs, defaults)
    return dict(sorted(out.items(), key=lambda kv: _ORDER.get(kv[0], 2)))


def _inline(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Replace `$ref` (and pydantic's single-item `allOf` wrapper) with the definition."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **rest}  # the field's own description and default win
    return node


def _optional(node: dict[str, Any]) -> dict[str, Any]:
    """pydantic's `T | None` (`anyOf: [T, {type: null}]`) as plain `T`: a CRD field that
    is not set is absent, never null (`omit_empty_strings` drops the nulls)."""
    branches = node.get("anyOf") or []
    kept = [b for b in branches if b.get("type") != "null"]
    if len(branches) != 2 or len(kept) != 1:
        return node
    return {**{k: v for k, v in node.items() if k != "anyOf"}, **kept[0]}


def _metadata_schema(pattern: str) -> dict[str, Any]:
    """The only restriction a structural schema may put on `metadata`: its name."""
    name = {"type": "string", "maxLength": 63, "pattern": pattern}
    return {"type": "object", "properties": {"name": name}}


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    properties: dict[str, Any] = {}
    if kind.name_pattern is not None:
        properties["metadata"] = _metadata_schema(kind.name_pattern)
    properties["spec"] = structural_schema(kind.spec)
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True}
    if kind.status is not None:
        # Only declared status fields survive pruning: kopf keeps its own state in
        # annotations (see kube.handlers), never under status.
        properties["status"] = structural_schema(kind.status, defaults=False)
        version["subresources"] = {"status": {}}
        if kind.scale is not None:
            version["subresources"]["scale"] = dict(kind.scale)
    version["additionalPrinterColumns"] = list(kind.columns)
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "description": (kind.spec.__doc__ or kind.kind).strip().splitlines()[0],
            "required": ["spec"],
            "properties": properties,
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {
                "app.kubernetes.io/name": "lockgate",
                "app.kubernetes.io/part-of": "lockgate",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "versions": [version],
        },
    }


def omit_empty_strings(value: Any) -> Any:
    """JSON for a custom resource with empty-string and null fields left out: they read
    back as the models' "" and None defaults, the envtest kube-apiserver build rejects ""
    as null, and the CRD schemas declare no field nullable."""
    if isinstance(value, dict):
        return {k: omit_empty_strings(v) for k, v in value.items() if v not in ("", None)}
    if isinstance(value, list):
        return [omit_empty_strings(v) for v in value]
    return value


HEADER = "# Generated by `lockgate crds` (make crds) from lockgate.models; do not edit.\n"


def render(kind: Kind) -> str:
    """The YAML text of one CRD file, as checked in under `crds/`."""
    return HEADER + yaml.safe_dump(crd(kind), sort_keys=False, width=100)


def file_name(kind: Kind) -> str:
    return f"{kind.crd_name}.yaml"


# Helm never upgrades a chart's `crds/` folder, so the chart ships its CRDs as templates
# (as KEDA and cert-manager do); `keep` leaves them, and so every Endpoint, on uninstall.
# The CRDs are shared by every release in the cluster: a release writes a CRD only while
# it is absent or already this release's (`lockgate.crd.owned` in _helpers.tpl, a helm
# `lookup`), so a second release, or CRDs first applied by `kubectl apply -f crds/`, never
# make `helm install` fail on an object it "cannot import" (docs/install.md, "CRDs").
CHART_CRD_DIR = Path("templates") / "crds"
CHART_OPEN = (
    '{{- if and .Values.crds.install (include "lockgate.crd.owned" (dict "ctx" . "name" "%s")) }}\n'
)
CHART_CLOSE = "{{- end }}\n"
# Argo CD must never prune a CRD: that would delete every Endpoint and Template with it.
CHART_ANNOTATIONS = (
    "metadata:\n"
    "  annotations:\n"
    "    argocd.argoproj.io/sync-options: Prune=false\n"
    "    {{- if .Values.crds.keep }}\n"
    "    helm.sh/resource-policy: keep\n"
    "    {{- end }}\n"
)


def render_chart(kind: Kind) -> str:
    """The CRD as a Helm template: `render(kind)` written when `crds.install` is on and no
    other owner holds the CRD, kept from Argo CD's pruning, and annotated to survive
    `helm uninstall` while `crds.keep` is on."""
    body = render(kind).replace("metadata:\n", CHART_ANNOTATIONS, 1)
    return CHART_OPEN % kind.crd_name + body + CHART_CLOSE


def main(args: argparse.Namespace) -> int:
    """`lockgate crds [--out DIR] [--chart CHART]`: write one file per CRD into DIR and into
    the chart's `templates/crds/`, or print them all."""
    chart = getattr(args, "chart", None)
    if not args.out and not chart:
        sys.stdout.write("---\n".join(render(kind) for kind in KINDS))
        return 0
    if args.out:
        _write(Path(args.out), render)
    if chart:
        _write(Path(chart) / CHART_CRD_DIR, render_chart)
    return 0


def _write(folder: Path, renderer: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        (folder / file_name(kind)).write_text(renderer(kind))
        print(f"wrote {folder / file_name(kind)}")
