"""The environment of a worker's containers: the worker contract, the Template's variables
(account secrets by reference, never by value), and what the endpoint's models, volume and
type add."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from lockgate.hfcache import cache_env
from lockgate.kube.manifests.keys import SECRET_KEY
from lockgate.kube.manifests.lb import lb_env
from lockgate.kube.manifests.names import Obj, secret_name
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, EndpointType, TemplateSpec, secrets
from lockgate.models.volumes import VOLUME_MOUNT_PATH, VOLUME_PATH_ENV
from lockgate.workerenv import WORKER_DEFAULTS, resource_env, worker_env, worker_id_env

KEY_VARIABLES = ("RUNPOD_AI_API_KEY", "LOCKGATE_WORKER_KEY")
MODEL_DIR = "/lockgate/model"  # where workers see the model cache (read-only)


def model_file(url: str) -> str:
    """The file a `modelUrl` is fetched into (`LOCKGATE_MODEL_PATH`): its last path part,
    made safe."""
    name = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "model"


def template_variable(name: str, value: str) -> Obj:
    """A Template's `env` variable: its value, or, when the value is an account secret's
    reference (`{{ RUNPOD_SECRET_<name> }}`), a `secretKeyRef` to that secret's Secret: the
    value itself is read by the kubelet as the container starts, never written here."""
    secret = secrets.referenced_name(value)
    if secret is None:
        return {"name": name, "value": value}
    ref = {"name": secrets.object_name(secret), "key": secrets.VALUE_KEY}
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _model_env(template: TemplateSpec) -> dict[str, str]:
    if not template.modelUrl:
        return {}
    return {
        "LOCKGATE_MODEL_URL": template.modelUrl,
        "LOCKGATE_MODEL_DIR": MODEL_DIR,
        "LOCKGATE_MODEL_PATH": f"{MODEL_DIR}/{model_file(template.modelUrl)}",
    }


def _volume_env(spec: EndpointSpec) -> dict[str, str]:
    return {VOLUME_PATH_ENV: VOLUME_MOUNT_PATH} if spec.networkVolumeId else {}


def _models_env(spec: EndpointSpec) -> dict[str, str]:
    return cache_env(Path(VOLUME_MOUNT_PATH)) if spec.modelReferences else {}


def container_env(
    endpoint_id: str, spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> list[Obj]:
    """The worker contract first (so the Template may refer to it as `$(VAR)`), then the
    Template's variables (`env`, then `secretEnv` as `secretKeyRef`s), then
    `WORKER_DEFAULTS` the Template did not set. The contract wins: a Template cannot
    redefine its names (nor can `envFromSecrets`: Kubernetes lets `env` win over `envFrom`)."""
    env: list[Obj] = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        for name in worker_id_env("")
    ]
    for name, value in worker_env(settings.gateway_url, endpoint_id, "").items():
        if name in KEY_VARIABLES:
            ref = {"name": secret_name(endpoint_id), "key": SECRET_KEY}
            env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
        else:
            env.append({"name": name, "value": value})
    extra = {
        **resource_env(spec),
        **_model_env(template),
        **_volume_env(spec),
        **_models_env(spec),
    }
    env += [{"name": k, "value": v} for k, v in extra.items()]
    reserved = {e["name"] for e in env}
    env += [template_variable(k, v) for k, v in template.env.items() if k not in reserved]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": ref.model_dump()}}
        for k, ref in template.secretEnv.items()
        if k not in reserved
    ]
    given = reserved | set(template.env) | set(template.secretEnv)
    defaults = {**WORKER_DEFAULTS, **(lb_env(template) if spec.type == EndpointType.LB else {})}
    env += [{"name": k, "value": v} for k, v in defaults.items() if k not in given]
    return env
