"""Every pattern-checked field of every model refuses a value ending in a newline (issue 45).

Python's `re.match` with `$` accepts `"FOO\\n"`; Kubernetes then refuses the Deployment and
the endpoint is stuck. The fields are found by walking the models, so a new field or model
is covered without touching this file: a string field whose JSON schema has a `pattern`
(alone, in a list or as a map's values), and a map whose keys a validator checks (env
names, label and annotation keys).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from hypothesis import Phase, find, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, ValidationError

import lockgate.models

MODULES = [
    importlib.import_module(f"lockgate.models.{m.name}")
    for m in pkgutil.iter_modules(lockgate.models.__path__)
]
MODELS = sorted(
    {
        obj
        for module in MODULES
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == module.__name__
    },
    key=lambda m: m.__qualname__,
)


def _field_schema(model: type[BaseModel], name: str) -> dict[str, Any]:
    return model.model_json_schema()["properties"][name]


def _patterns(schema: dict[str, Any]) -> bool:
    """Whether the schema checks a string with a pattern (nested models not followed:
    each is walked as a model of its own)."""
    if "pattern" in schema:
        return True
    parts = [schema.get("items"), schema.get("additionalProperties")]
    parts += schema.get("anyOf", [])
    return any(isinstance(p, dict) and _patterns(p) for p in parts)


def _checks_keys(model: type[BaseModel], name: str) -> bool:
    info = model.model_fields[name]
    return any(isinstance(m, AfterValidator) for m in info.metadata) and (
        "additionalProperties" in _field_schema(model, name)
    )


CASES = [
    pytest.param(model, name, id=f"{model.__name__}.{name}")
    for model in MODELS
    for name in model.model_fields
    if _patterns(_field_schema(model, name)) or _checks_keys(model, name)
]


@functools.cache
def _matching(pattern: str, low: int, high: int) -> str:
    """A string the pattern matches whole, `low`..`high` long."""
    strings = st.from_regex(pattern, fullmatch=True)
    quick = settings(database=None, phases=[Phase.generate])  # any match; no shrinking
    return find(strings, lambda s: low <= len(s) <= high, settings=quick)


def sample(schema: dict[str, Any], defs: dict[str, Any], suffix: str = "") -> Any:
    """A small value the schema accepts; each patterned string gets `suffix`."""
    if "$ref" in schema:
        return sample(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, suffix)
    if schema.get("type") == "object" and "properties" in schema:
        required = schema.get("required", [])
        return {k: sample(schema["properties"][k], defs) for k in required}
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return sample(options[0], defs, suffix)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "string":
        return _string(schema, suffix)
    if kind == "array":
        return [sample(schema.get("items", {"type": "string"}), defs, suffix)]
    if kind == "object":
        values = schema.get("additionalProperties", {"type": "string"})
        return {"a": sample(values if isinstance(values, dict) else {}, defs, suffix)}
    return {"integer": schema.get("minimum", 1), "number": 1, "boolean": False}.get(kind, "x")


def _string(schema: dict[str, Any], suffix: str) -> str:
    if "pattern" not in schema:
        return "x" * max(1, schema.get("minLength", 1))
    low, high = max(schema.get("minLength", 0), 1), schema.get("maxLength", 64)
    return _matching(schema["pattern"], low, high) + suffix


# Payloads for models whose cross-field rules the sampled required fields do not meet.
BASES: dict[str, dict[str, Any]] = {
    "Toleration": {"key": "k"},
    "GitSource": {"url": "https://git.example.test/org/worker.git"},
    "HubConfig": {"runsOn": "GPU", "gpuCount": 1},
    "HubEnv": {"value": "v"},
}


def _valued(model: type[BaseModel], name: str, suffix: str, key_suffix: str) -> dict[str, Any]:
    """A payload of `model` with its required fields and `name` sampled."""
    full = model.model_json_schema()
    defs = full.get("$defs", {})
    payload = {**sample(full, defs), **BASES.get(model.__name__, {})}
    value = sample(full["properties"][name], defs, suffix)
    if key_suffix:
        value = {f"{k}{key_suffix}": v for k, v in value.items()}
    return {**payload, name: value}


@pytest.mark.parametrize(("model", "name"), CASES)
def test_a_trailing_newline_is_refused_by_every_pattern_checked_field(
    model: type[BaseModel], name: str
) -> None:
    model.model_validate(_valued(model, name, "", ""))  # the sample itself is accepted
    if _patterns(_field_schema(model, name)):
        with pytest.raises(ValidationError):
            model.model_validate(_valued(model, name, "\n", ""))
    if _checks_keys(model, name):
        with pytest.raises(ValidationError):
            model.model_validate(_valued(model, name, "", "\n"))


def test_the_walk_finds_the_fields_the_issue_names() -> None:
    found = {c.id for c in CASES}
    wanted = {
        "TemplateSpec.env",
        "TemplateSpec.podLabels",
        "TemplateSpec.podAnnotations",
        "TemplateSpec.nodeSelector",
        "TemplateSpec.secretEnv",
        "EndpointSpec.modelReferences",
        "SecretKeyRef.key",
    }
    assert wanted <= found
