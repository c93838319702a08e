"""Template fields that reach the worker pod as Kubernetes writes them, each checked here
with the apiserver's own rules so a bad value is refused at admission (CRD schema) or by
the management API (400), not by a Deployment the operator cannot apply."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

# Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(DNS_SUBDOMAIN)

# Keys a Template may not set on worker pods: the operator's own (it reads them back).
RESERVED_PREFIX = "lockgate.dev/"


def qualified_name(key: str) -> str:
    """A label or annotation key: `[prefix/]name`, name ≤ 63, prefix a DNS subdomain ≤ 253;
    `lockgate.dev/` keys belong to the operator."""
    prefix, _, name = key.rpartition("/")
    if not (0 < len(name) <= 63 and _NAME_PART.fullmatch(name)):
        raise ValueError(f"{key!r} is not a valid key: its name must be 1-63 of [A-Za-z0-9_.-]")
    if "/" in key and not (0 < len(prefix) <= 253 and _PREFIX.fullmatch(prefix)):
        raise ValueError(f"{key!r} is not a valid key: its prefix must be a DNS subdomain")
    if key.startswith(RESERVED_PREFIX):
        raise ValueError(f"{key!r}: keys under {RESERVED_PREFIX} are set by the operator only")
    return key


def _closed_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        qualified_name(key)
    return value


# Annotations that loosen a pod's confinement, which Pod Security's baseline forbids
# (kubernetes.io/docs/concepts/security/pod-security-standards, "Baseline"): AppArmor
# other than the runtime's default or a node's own profile; the seccomp annotations
# (deprecated, ignored since Kubernetes 1.27; lockgate's pods set RuntimeDefault in the
# pod spec) and the sysctl ones (pre-1.11) whatever their value.
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_ALLOWED = ("runtime/default", "localhost/")
REFUSED_PREFIXES = (
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
    "security.alpha.kubernetes.io/",  # sysctls, unsafe-sysctls
)


def confinement_problem(key: str, value: str) -> str | None:
    """Why Pod Security's baseline forbids the annotation `key: value`, or None."""
    if key.startswith(REFUSED_PREFIXES):
        return f"{key!r}: seccomp and sysctl annotations are refused (Pod Security baseline)"
    if key.startswith(APPARMOR_PREFIX) and not value.startswith(APPARMOR_ALLOWED):
        return (
            f"{key!r}: AppArmor must stay confined: runtime/default or localhost/<profile>, "
            f"not {value!r} (Pod Security baseline)"
        )
    return None


def _pod_annotations(value: dict[str, str]) -> dict[str, str]:
    for key, text in _closed_keys(value).items():
        if problem := confinement_problem(key, text):
            raise ValueError(problem)
    return value


def _env_names(value: dict[str, object]) -> dict[str, object]:
    for name in value:
        if not (len(name) <= 256 and re.fullmatch(ENV_NAME, name)):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    return value


Name = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
# Map keys are checked by validators, not patterns: a pattern on a key becomes
# `patternProperties`, which a structural CRD schema cannot carry (its values would be pruned).
Labels = Annotated[dict[str, LabelValue], AfterValidator(_closed_keys)]
Annotations = Annotated[dict[str, str], AfterValidator(_pod_annotations)]


class PodSecurity(StrEnum):
    """The Pod Security Standard the worker pod is built to pass."""

    RESTRICTED = "restricted"
    BASELINE = "baseline"


class TaintEffect(StrEnum):
    ANY = ""  # every effect
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class Toleration(BaseModel):
    """A pod toleration, as Kubernetes spells it (an empty `key` with `Exists`: any taint)."""

    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, Field(max_length=316)] = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: LabelValue = ""
    effect: TaintEffect = Field(TaintEffect.ANY, description="empty: every effect")

    @model_validator(mode="after")
    def _as_kubernetes_checks(self) -> Toleration:
        if self.operator == TolerationOperator.EXISTS and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != TolerationOperator.EXISTS:
            raise ValueError("a toleration without a key must use operator Exists")
        return self

    def manifest(self) -> dict[str, object]:
        """The toleration as the pod spec takes it, empty fields left out."""
        out = self.model_dump(mode="json")
        return {k: v for k, v in out.items() if v != ""}


# Secrets a Template may hand workers (`secretEnv`, `envFromSecrets`): those their owner
# labelled for workers, never lockgate's own (docs/security.md). The operator reads each
# one's labels (a metadata-only GET) before it builds the pods.
WORKER_SECRET_LABEL = "lockgate.dev/worker-secret"
WORKER_KEY_SUFFIX = "-worker-key"  # the operator's Secret `<endpoint id>-worker-key`
PART_OF_LABEL = "app.kubernetes.io/part-of"  # "lockgate" on every Secret lockgate writes


def lockgate_secret_problem(name: str, reserved: Collection[str] = ()) -> str | None:
    """Why the Secret `name` is lockgate's own (an endpoint's worker key, or one of
    `reserved`: the chart's settings, keys and client-key Secrets), or None."""
    if name.endswith(WORKER_KEY_SUFFIX) or name in reserved:
        return f"Secret {name!r} is lockgate's own: workers may not read it"
    return None


def worker_secret_problem(name: str, labels: Mapping[str, str] | None) -> str | None:
    """Why workers may not read the Secret `name` whose labels are `labels` (None: there
    is no such Secret), or None when its owner labelled it for workers."""
    if labels is None:
        return f"Secret {name!r} not found"
    if labels.get(PART_OF_LABEL) == "lockgate":
        return f"Secret {name!r} is lockgate's own: workers may not read it"
    if labels.get(WORKER_SECRET_LABEL) != "true":
        return (
            f"Secret {name!r} is not marked for workers: label it "
            f"{WORKER_SECRET_LABEL}=true (kubectl label secret {name} {WORKER_SECRET_LABEL}=true)"
        )
    return None


def _not_lockgates(name: str) -> str:
    if problem := lockgate_secret_problem(name):
        raise ValueError(problem)
    return name


WorkerSecretName = Annotated[Name, AfterValidator(_not_lockgates)]


class SecretKeyRef(BaseModel):
    """One key of a Secret in the Endpoint's namespace."""

    model_config = ConfigDict(extra="forbid")

    name: WorkerSecretName = Field(..., description="the Secret's name")
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY)] = Field(
        ..., description="the key in the Secret's data"
    )


EnvVars = Annotated[dict[str, str], AfterValidator(_env_names)]
SecretEnv = Annotated[dict[str, SecretKeyRef], AfterValidator(_env_names)]
