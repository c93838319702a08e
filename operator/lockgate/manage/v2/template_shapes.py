"""RunPod v2's Template and its request bodies over `TemplateSpec` (pure).

The mapping is data (`V2_FIELD_OF`, `NOT_IN_V2`, `V2_ONLY`): every `TemplateSpec` field is
either shown by a v2 field or listed as lockgate's own, and a test fails when a new one is
neither. A v2 body becomes the payload `/v1/templates` takes (RunPod's v1 names), so both
versions go through the same operations and write the same Template.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from lockgate.gateway.errors import BadRequest
from lockgate.manage.v2.bodies import ClosedBody
from lockgate.models import TemplateSpec
from lockgate.models.endpoint import TemplateCategory
from lockgate.models.templates import runpod_name, spec_fields

CUDA_VERSION = r"^\d+\.\d+$"
MIN_PERSISTENT_GB = 10  # RunPod's floor for a template's persistent mount

# The v2 Template field that shows each `TemplateSpec` field (`mounts` shows two).
V2_FIELD_OF = {
    "name": "name",
    "image": "image",
    "args": "args",  # one string, split like a shell into the list
    "containerDiskInGb": "disk",
    "ports": "ports",
    "env": "env",
    "imagePullSecret": "registry",  # "" is null
    "isServerless": "serverless",
    "category": "category",
    "volumeInGb": "mounts",  # mounts.persistent.size; 0: no persistent mount
    "volumeMountPath": "mounts",  # mounts.persistent.path
}
# `TemplateSpec` fields v2 has no field for: lockgate's own. A v2 PATCH keeps them;
# `/v1/templates`, the console and kubectl show and change them.
NOT_IN_V2 = {
    "command": "the entrypoint: v2's container config has only args",
    "modelUrl": "lockgate's model download",
    "readme": "RunPod v1's notes",
    "imagePullSecrets": "more pull Secrets beside registry",
    "memoryInGb": "pod settings",
    "shmSizeInGb": "pod settings",
    "podSecurity": "pod settings",
    "runAsUser": "pod settings",
    "secretEnv": "pod settings",
    "envFromSecrets": "pod settings",
    "tolerations": "pod settings",
    "nodeSelector": "pod settings",
    "runtimeClassName": "pod settings",
    "priorityClassName": "pod settings",
    "podLabels": "pod settings",
    "podAnnotations": "pod settings",
}
# v2 Template fields with no `TemplateSpec` field, and what lockgate always shows:
# no public catalog, no ssh or Jupyter start (accepted, not acted on, as RunPod ignores
# them for serverless), no CUDA constraint on a template (an endpoint's `gpu` has one).
V2_ONLY: dict[str, Any] = {
    "public": False,
    "startSsh": False,
    "startJupyter": False,
    "allowedCudaVersions": [],
}
MOUNT_FIELDS = {"size": "volumeInGb", "path": "volumeMountPath"}
# An operation's refusal names v1's fields; a v2 client reads its own.
V2_WORDS = {
    **{
        runpod_name(spec): v2
        for spec, v2 in V2_FIELD_OF.items()
        if v2 != "mounts" and runpod_name(spec) != v2
    },
    **{spec: f"mounts.persistent.{v2}" for v2, spec in MOUNT_FIELDS.items()},
    "POST /v1/containerregistryauth": "POST /v2/registries",
}


class PersistentMount(ClosedBody):
    """A template's persistent volume: GB and where it is mounted."""

    size: int = Field(..., ge=MIN_PERSISTENT_GB, description="GB")
    path: str = Field(..., description="mount path inside the container")


class TemplateMounts(ClosedBody):
    """A template's mounts: at most a persistent one (a `network` mount is refused)."""

    persistent: PersistentMount | None = None


class TemplateChanges(ClosedBody):
    """UpdateTemplateRequest: every field optional; only those sent change."""

    NULLABLE = frozenset({"registry"})

    name: str | None = Field(None, min_length=1)
    image: str | None = None
    args: str | None = Field(None, description="arguments of the entrypoint, one string")
    disk: int | None = Field(None, ge=1, description="container disk, GB")
    ports: list[str] | None = Field(None, description="'8000/http', '22/tcp'")
    env: dict[str, str] | None = None
    registry: str | None = Field(None, description="registry credential id; null: none")
    mounts: TemplateMounts | None = None
    serverless: bool | None = None
    public: bool | None = Field(None, description="lockgate: false only")
    category: TemplateCategory | None = None
    startSsh: bool | None = Field(None, description="accepted; lockgate starts no sshd")
    startJupyter: bool | None = Field(None, description="accepted; lockgate starts no Jupyter")
    allowedCudaVersions: list[Annotated[str, Field(pattern=CUDA_VERSION)]] | None = Field(
        None, description="lockgate: [] only (set CUDA on the endpoint's gpu)"
    )


class NewTemplate(TemplateChanges):
    """CreateTemplateRequest: `name` and `image` required."""

    name: str = Field(..., min_length=1)
    image: str = Field(...)


class Template(BaseModel):
    """RunPod v2's Template: every field always present."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    image: str
    args: str
    disk: int
    mounts: TemplateMounts
    ports: list[str]
    env: dict[str, str]
    registry: str | None
    serverless: bool
    public: bool
    category: TemplateCategory
    startSsh: bool
    startJupyter: bool
    allowedCudaVersions: list[str]


def template_view(template_id: str, spec: TemplateSpec) -> dict[str, Any]:
    """The v2 Template of a stored template."""
    shown = {v2: getattr(spec, f) for f, v2 in V2_FIELD_OF.items() if v2 != "mounts"}
    fields = {
        **shown,
        **V2_ONLY,
        "id": template_id,
        "args": shlex.join(spec.args),
        "registry": spec.imagePullSecret or None,
        "mounts": mounts_view(spec),
    }
    return Template(**fields).model_dump(mode="json", exclude_unset=True)


def mounts_view(spec: TemplateSpec) -> TemplateMounts:
    """`{}`, or the persistent mount as kept (even below RunPod's 10 GB floor: `/v1`
    allows any size, so it is shown, not validated)."""
    if not spec.volumeInGb:
        return TemplateMounts()
    mount = PersistentMount.model_construct(size=spec.volumeInGb, path=spec.volumeMountPath)
    return TemplateMounts.model_construct(persistent=mount, _fields_set={"persistent"})


def spec_of_record(record: dict[str, Any]) -> TemplateSpec:
    """The `TemplateSpec` of a `/v1/templates` record (what the operations answer)."""
    return TemplateSpec.model_validate(spec_fields({k: v for k, v in record.items() if k != "id"}))


def refuse_what_lockgate_lacks(given: dict[str, Any]) -> None:
    """400 naming `public` or `allowedCudaVersions` when asked for what lockgate has not."""
    if given.get("public"):
        raise BadRequest(
            "public: lockgate has no public template catalog; a template is seen by the "
            "cluster's admin keys only (send false or leave it out)"
        )
    if given.get("allowedCudaVersions"):
        raise BadRequest(
            "allowedCudaVersions: a lockgate template carries no CUDA constraint; set "
            "gpu.allowedCudaVersions on the endpoint (send [] or leave it out)"
        )


def shell_words(args: str) -> list[str]:
    """`args` split like a shell (as GraphQL's `dockerArgs`); 400 naming `args`."""
    try:
        return shlex.split(args)
    except ValueError as err:
        raise BadRequest(f"args: cannot split {args!r} into words: {err}") from err


def spec_changes(body: TemplateChanges) -> dict[str, Any]:
    """The `TemplateSpec` fields a v2 body sets."""
    given = body.model_dump(mode="json", exclude_unset=True)
    refuse_what_lockgate_lacks(given)
    spec_field = {v2: f for f, v2 in V2_FIELD_OF.items() if v2 != "mounts"}
    changes: dict[str, Any] = {}
    for name, value in given.items():
        if name == "args":
            changes["args"] = shell_words(value)
        elif name == "registry":
            changes["imagePullSecret"] = value or ""
        elif name == "mounts":  # {} or no persistent: unchanged
            persistent = value.get("persistent") or {}
            changes.update({MOUNT_FIELDS[k]: v for k, v in persistent.items()})
        elif name in spec_field:
            changes[spec_field[name]] = value
    return changes


def v1_payload(body: TemplateChanges) -> dict[str, Any]:
    """A v2 create or update body as the payload `/v1/templates` takes (RunPod v1 names)."""
    return {runpod_name(field): value for field, value in spec_changes(body).items()}
