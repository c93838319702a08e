"""A build's canary: the hidden endpoint its tests run on before it takes traffic (pure;
dev mode's `dev.canary` and the operator's `kube.canary`: docs/builds.md, "Tested before
it takes traffic")."""

from __future__ import annotations

from collections.abc import Mapping

from lockgate.models.build import BUILD_ID_PREFIX
from lockgate.models.endpoint import EndpointSpec, TemplateSpec

CANARY_PREFIX = "canary-"


def canary_id(build_id: str) -> str:
    """The hidden endpoint id of a build's canary: `canary-<the build id's random part>`
    (an endpoint id as any: lowercase letters, digits and dashes)."""
    return CANARY_PREFIX + build_id.removeprefix(BUILD_ID_PREFIX)


def canary_spec(spec: EndpointSpec) -> EndpointSpec:
    """The endpoint's settings for its canary: one worker exactly, no warm-up job, and
    its first failed start a crash loop (the build is broken: no test waits its time)."""
    update = {
        "workersMin": 1, "workersMax": 1, "replicas": None, "warmup": None,
        "crashLoopThreshold": 1,
    }  # fmt: skip
    return spec.model_copy(update=update)


def canary_template(template: TemplateSpec, env: Mapping[str, str]) -> TemplateSpec:
    """The endpoint's template for its canary: tests.json's `config.env` over its `env`
    (a variable it names is no longer read from a Secret through `secretEnv`)."""
    secret_env = {k: v for k, v in template.secretEnv.items() if k not in env}
    return template.model_copy(update={"env": {**template.env, **env}, "secretEnv": secret_env})
