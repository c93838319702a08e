"""What fetches a worker's model before it starts, and where the worker sees it: a
Template's `modelUrl` (a node folder per URL), an Endpoint's `modelReferences` (the node's
Hugging Face cache, or its network volume), and the network volume itself."""

from __future__ import annotations

import hashlib
from pathlib import Path

from lockgate.hfcache import CACHE_DIR, cache_env, fetch_command
from lockgate.kube.manifests.env import model_file, template_variable
from lockgate.kube.manifests.names import Obj
from lockgate.kube.manifests.security import LOCKED, SECCOMP, container_security_context
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec, TemplateSpec
from lockgate.models.volumes import VOLUME_MOUNT_PATH

NETWORK_VOLUME = "runpod-volume"  # the pod volume of an endpoint's networkVolumeId

# Runs in an init container: the first pod on a node downloads, the others wait on the lock
# and find the file. URL and file name come in as variables, never spliced into the script.
FETCH_SCRIPT = """set -eu
cd /cache
exec 9>.lock
flock 9
if [ ! -f .complete ]; then
  curl -fsSL --retry 5 -o .partial "$MODEL_URL"
  mv .partial "$MODEL_FILE"
  touch .complete
fi
"""


def network_volume_mount() -> Obj:
    """Where a container sees the endpoint's network volume: /runpod-volume, whole."""
    return {"name": NETWORK_VOLUME, "mountPath": VOLUME_MOUNT_PATH}


def network_volume(spec: EndpointSpec) -> Obj:
    """The endpoint's network volume: the PersistentVolumeClaim named by its id."""
    claim = {"claimName": spec.networkVolumeId}
    return {"name": NETWORK_VOLUME, "persistentVolumeClaim": claim}


def model_cache_volume(template: TemplateSpec, settings: OperatorSettings) -> Obj:
    """A node folder per model URL, shared by every pod on the node that needs it."""
    key = hashlib.sha256(template.modelUrl.encode()).hexdigest()[:16]
    path = f"{settings.model_cache_path.rstrip('/')}/{key}"
    return {"name": "model-cache", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def model_fetch_container(template: TemplateSpec, settings: OperatorSettings) -> Obj:
    return {
        "name": "fetch-model",
        "image": settings.model_fetch_image,
        "command": ["sh", "-c", FETCH_SCRIPT],
        "env": [
            {"name": "MODEL_URL", "value": template.modelUrl},
            {"name": "MODEL_FILE", "value": model_file(template.modelUrl)},
        ],
        "volumeMounts": [{"name": "model-cache", "mountPath": "/cache"}],
        # The kubelet creates the node folder as root; the download must be able to write,
        # and root needs no capability to write what root owns. The hostPath volume is what
        # makes a modelUrl pod `privileged` under Pod Security (docs/security.md).
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, **LOCKED, **SECCOMP},
    }


MODELS_CONTAINER = "fetch-models"
MODELS_CACHE = "models-cache"  # the node's Hugging Face cache (no network volume)
MODELS_CACHE_PATH = f"{VOLUME_MOUNT_PATH}/{CACHE_DIR}"  # where pods see it


def models_on_node(spec: EndpointSpec) -> bool:
    """Whether the endpoint's models go into the node's cache (else its network volume)."""
    return bool(spec.modelReferences) and not spec.networkVolumeId


def models_cache_volume(settings: OperatorSettings) -> Obj:
    """The node folder of the Hugging Face cache, shared by every endpoint on the node."""
    path = f"{settings.model_cache_path.rstrip('/')}/{CACHE_DIR}"
    return {"name": MODELS_CACHE, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def models_mount(spec: EndpointSpec, *, read_only: bool) -> list[Obj]:
    """Where a container sees the cache: the node's at /runpod-volume/huggingface-cache, or
    the network volume (mounted whole at /runpod-volume by the worker's own mount)."""
    if not models_on_node(spec):
        return []
    return [{"name": MODELS_CACHE, "mountPath": MODELS_CACHE_PATH, "readOnly": read_only}]


def _token_env(template: TemplateSpec) -> list[Obj]:
    """A gated model's token: the Template's `HF_TOKEN`, as a value or a Secret's key
    (one in `envFromSecrets` reaches the init container through `envFrom`)."""
    if "HF_TOKEN" in template.secretEnv:
        ref = template.secretEnv["HF_TOKEN"].model_dump()
        return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    if "HF_TOKEN" in template.env:
        return [template_variable("HF_TOKEN", template.env["HF_TOKEN"])]
    return []


def models_fetch_container(
    spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> Obj:
    """The init container that downloads the endpoint's `modelReferences` (lockgate's own
    image, `lockgate fetch-models`) before the worker starts: the pod waits initializing;
    a failure names the reference and the hub's answer in its termination message."""
    fetch_env = {**settings.models_env, **cache_env(Path(VOLUME_MOUNT_PATH), offline=False)}
    container: Obj = {
        "name": MODELS_CONTAINER,
        "image": settings.models_image,
        "command": ["lockgate", *fetch_command(spec.modelReferences, VOLUME_MOUNT_PATH)],
        "env": [{"name": k, "value": v} for k, v in fetch_env.items()] + _token_env(template),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if template.envFromSecrets:
        container["envFrom"] = [{"secretRef": {"name": n}} for n in template.envFromSecrets]
    if models_on_node(spec):
        container["volumeMounts"] = models_mount(spec, read_only=False)
        # The kubelet creates the node folder as root: as for a modelUrl, the download runs
        # as root without capabilities (hostPath makes the pod `privileged` for Pod Security).
        container["securityContext"] = {"runAsUser": 0, "runAsNonRoot": False, **LOCKED, **SECCOMP}
    else:  # the network volume, as the worker's own user (fsGroup owns the claim)
        container["volumeMounts"] = [network_volume_mount()]
        container["securityContext"] = container_security_context(template)
    return container


def model_fetches(
    spec: EndpointSpec,
    template: TemplateSpec,
    settings: OperatorSettings,
    *,
    node_only: bool = False,
) -> tuple[list[Obj], list[Obj]]:
    """The init containers and volumes that fetch a Template's `modelUrl` and an Endpoint's
    `modelReferences`; `node_only`: only what fills the node's caches (flashboot)."""
    init: list[Obj] = []
    volumes: list[Obj] = []
    if template.modelUrl:
        init.append(model_fetch_container(template, settings))
        volumes.append(model_cache_volume(template, settings))
    if models_on_node(spec) or (spec.modelReferences and not node_only):
        init.append(models_fetch_container(spec, template, settings))
    if models_on_node(spec):
        volumes.append(models_cache_volume(settings))
    return init, volumes
