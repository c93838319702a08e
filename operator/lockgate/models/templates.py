"""RunPod's template fields over `TemplateSpec`: one model for the CRD and the API.

The management API (`/v1/templates`, GraphQL's `saveTemplate`) speaks RunPod's names; a
Template resource keeps `TemplateSpec`'s. Four fields are renamed, the others are the same
in both (`name`, `env`, `ports`, `containerDiskInGb`, `volumeInGb`, `volumeMountPath`,
`readme`, `isServerless`, `category`, and lockgate's own pod settings such as
`memoryInGb` or `secretEnv`):

| RunPod | TemplateSpec |
|---|---|
| `imageName` | `image` |
| `dockerEntrypoint` | `command` |
| `dockerStartCmd` | `args` |
| `containerRegistryAuthId` | `imagePullSecret` |

A template created through the API without `containerDiskInGb` gets RunPod's 50 GiB (a
Template applied with kubectl keeps the CRD's default, 20).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from lockgate.models.endpoint import TemplateSpec
from lockgate.models.errors import error_message

RUNPOD_TO_SPEC = {
    "imageName": "image",
    "dockerEntrypoint": "command",
    "dockerStartCmd": "args",
    "containerRegistryAuthId": "imagePullSecret",
}
SPEC_TO_RUNPOD = {spec: runpod for runpod, spec in RUNPOD_TO_SPEC.items()}
RUNPOD_CREATE_DEFAULTS: dict[str, Any] = {"containerDiskInGb": 50}
REQUIRED_ON_CREATE = ("name", "imageName")


class TemplateFieldError(ValueError):
    """A template payload that cannot be used; the message names the field as the API
    spells it."""


def spec_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A RunPod-named payload as `TemplateSpec` field names. A spec name that has a RunPod
    name (`image`…) is refused, so one value never arrives under two names."""
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if key in SPEC_TO_RUNPOD:
            raise TemplateFieldError(f"{key}: use RunPod's name {SPEC_TO_RUNPOD[key]!r}")
        out[RUNPOD_TO_SPEC.get(key, key)] = value
    return out


def runpod_name(field: str) -> str:
    """A `TemplateSpec` field as the API names it."""
    return SPEC_TO_RUNPOD.get(field, field)


def describe(err: ValidationError) -> str:
    """A validation error with each field as the API names it (without pydantic's
    "Value error, " prefix: `models.errors.error_message`)."""
    parts = []
    for e in err.errors(include_url=False):
        loc = [str(p) for p in e["loc"]]
        if loc:
            loc[0] = runpod_name(loc[0])
        parts.append(f"{'.'.join(loc) or 'body'}: {error_message(e)}")
    return "; ".join(parts)


def validate(fields: Mapping[str, Any]) -> TemplateSpec:
    """`TemplateSpec` from spec-named fields; raises `TemplateFieldError` naming the field."""
    try:
        return TemplateSpec.model_validate(dict(fields))
    except ValidationError as err:
        raise TemplateFieldError(describe(err)) from err


def new_template(payload: Mapping[str, Any]) -> TemplateSpec:
    """A template from a RunPod create payload (`name` and `imageName` required)."""
    for name in REQUIRED_ON_CREATE:
        value = payload.get(name)
        if not isinstance(value, str) or not value.strip():
            raise TemplateFieldError(f"{name}: required (a non-empty string)")
    return validate({**RUNPOD_CREATE_DEFAULTS, **spec_fields(payload)})


def changed_template(current: TemplateSpec, changes: Mapping[str, Any]) -> TemplateSpec:
    """`current` with the RunPod-named `changes` applied (the others keep their values)."""
    fields = spec_fields(changes)
    for name in REQUIRED_ON_CREATE:
        if name in changes and not (isinstance(changes[name], str) and changes[name].strip()):
            raise TemplateFieldError(f"{name}: cannot be emptied")
    return validate({**current.model_dump(mode="json"), **fields})


def runpod_template(template_id: str, spec: TemplateSpec) -> dict[str, Any]:
    """The template record the API answers with: `id`, then RunPod's names, then
    lockgate's own fields."""
    body = spec.model_dump(mode="json")
    return {"id": template_id, **{runpod_name(k): v for k, v in body.items()}}
