"""The workloads: the worker Deployment (its pod template, container and the settings
shown on it) and the flashboot DaemonSet that pre-pulls the worker image (and the model) on
every node a worker may land on."""

from __future__ import annotations

from lockgate.kube.manifests.env import MODEL_DIR, container_env
from lockgate.kube.manifests.lb import (
    LB_ANNOTATION,
    container_ports,
    lb_container_ports,
    lb_ports,
    lb_readiness_probe,
)
from lockgate.kube.manifests.models import (
    model_fetches,
    models_mount,
    network_volume,
    network_volume_mount,
)
from lockgate.kube.manifests.names import (
    KEY_ANNOTATION,
    KEY_DIGEST_ANNOTATION,
    POD_ANNOTATIONS_ANNOTATION,
    SERVING_CONDITION,
    TEMPLATE_ANNOTATION,
    VERSION_LABEL,
    WORKER_CONTAINER,
    Obj,
    Owner,
    daemonset_name,
    deployment_name,
    labels,
    metadata,
    selector,
)
from lockgate.kube.manifests.resources import mebibytes, resources, shm_gib, termination_grace_s
from lockgate.kube.manifests.rollout import GENTLY
from lockgate.kube.manifests.scheduling import affinity, tolerations, worker_gpu_types
from lockgate.kube.manifests.security import (
    SECCOMP,
    container_security_context,
    helper_security_context,
    pod_security_context,
)
from lockgate.kube.placement import GPU_TYPE_ANNOTATION
from lockgate.kube.settings import OperatorSettings
from lockgate.models import ComputeType, EndpointSpec, EndpointType, TemplateSpec

SHM_DIR = "/dev/shm"


def pull_secrets(template: TemplateSpec, settings: OperatorSettings, *, helpers: bool) -> Obj:
    """`imagePullSecrets`: the Template's (`imagePullSecret` then `imagePullSecrets`), and
    the helper images' from the settings when the pod runs a helper image."""
    names = [template.imagePullSecret, *template.imagePullSecrets]
    if helpers:
        names += settings.helper_image_pull_secrets
    unique = [n for n in dict.fromkeys(names) if n]
    return {"imagePullSecrets": [{"name": n} for n in unique]} if unique else {}


def _placement(
    spec: EndpointSpec,
    template: TemplateSpec,
    settings: OperatorSettings,
    gpu_types: list[str],
    *,
    gpu_node: bool = False,
) -> Obj:
    """Pod spec fields shared by workers and the flashboot DaemonSet: where they may run."""
    pod: Obj = {}
    node_affinity = affinity(spec, settings, gpu_types, gpu_node=gpu_node)
    if node_affinity:
        pod["affinity"] = node_affinity
    tol = tolerations(spec, settings)
    tol += [t.manifest() for t in template.tolerations if t.manifest() not in tol]
    if tol:
        pod["tolerations"] = tol
    if template.nodeSelector:
        pod["nodeSelector"] = dict(template.nodeSelector)
    return pod


def worker_container(
    endpoint_id: str, spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> Obj:
    # A crash's last log lines in its status (`lastState.terminated.message`): the
    # `WorkersHealthy` and `CrashLoop` conditions quote them (no termination-message file
    # of the image's own is overridden: it still wins when written).
    container: Obj = {
        "name": WORKER_CONTAINER,
        "image": template.image,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if template.command:
        container["command"] = list(template.command)
    if template.args:
        container["args"] = list(template.args)
    container["env"] = container_env(endpoint_id, spec, template, settings)
    if spec.type == EndpointType.LB:
        container["ports"] = lb_container_ports(template)
        container["readinessProbe"] = lb_readiness_probe(template)
    elif template.ports:
        container["ports"] = container_ports(template.ports)
    container["resources"] = resources(spec, template, settings)
    if template.envFromSecrets:
        container["envFrom"] = [{"secretRef": {"name": n}} for n in template.envFromSecrets]
    mounts = [{"name": "shm", "mountPath": SHM_DIR}]
    if template.modelUrl:
        mounts.append({"name": "model-cache", "mountPath": MODEL_DIR, "readOnly": True})
    if spec.networkVolumeId:
        mounts.append(network_volume_mount())
    mounts += models_mount(spec, read_only=True)
    container["volumeMounts"] = mounts
    container["securityContext"] = container_security_context(template)
    if spec.flashboot:
        container["imagePullPolicy"] = "IfNotPresent"  # use the pre-pulled image, even :latest
    return container


def worker_pod_template(
    owner: Owner,
    spec: EndpointSpec,
    template: TemplateSpec,
    template_name: str,
    settings: OperatorSettings,
    *,
    key_revision: str = "",
    gpu_type: str | None = None,
    version: int = 1,
) -> Obj:
    gpu_types = worker_gpu_types(spec, gpu_type) if spec.computeType == ComputeType.GPU else []
    init, fetch_volumes = model_fetches(spec, template, settings)
    pod: Obj = {
        "containers": [worker_container(owner.name, spec, template, settings)],
        **_placement(spec, template, settings, gpu_types),
        **pull_secrets(template, settings, helpers=bool(init)),  # init: helper images
        "securityContext": pod_security_context(template),
        "terminationGracePeriodSeconds": termination_grace_s(spec, settings),
        "automountServiceAccountToken": False,  # workers talk to the gateway, not to the API
        "enableServiceLinks": False,
    }
    if template.runtimeClassName:
        pod["runtimeClassName"] = template.runtimeClassName
    if template.priorityClassName:
        pod["priorityClassName"] = template.priorityClassName
    if settings.scale_interval_s:
        # Ready only while the scaler keeps the pod in service: it takes a pod out (False)
        # before shrinking, and a ReplicaSet removes pods that are not Ready first, so the
        # pod removed is an idle one on every Kubernetes (pod-deletion-cost needs >= 1.22).
        pod["readinessGates"] = [{"conditionType": SERVING_CONDITION}]
    if init:
        pod["initContainers"] = init
    # /dev/shm in memory, sized (a container runtime's default is 64 MiB, too small for
    # PyTorch data loaders and NCCL); it counts against the memory limit.
    pod["volumes"] = [shm_volume(spec, template), *fetch_volumes]
    if spec.networkVolumeId:
        pod["volumes"].append(network_volume(spec))
    # A new worker key (its Secret was deleted) must reach running workers: roll them.
    ours = {TEMPLATE_ANNOTATION: template_name, KEY_ANNOTATION: key_revision[:12]}
    if gpu_types:  # which type the pod requires: kube.placement reads it back
        ours[GPU_TYPE_ANNOTATION] = gpu_types[0]
    if template.podAnnotations:
        ours[POD_ANNOTATIONS_ANNOTATION] = ",".join(sorted(template.podAnnotations))
    if spec.type == EndpointType.LB:  # where it listens, for kube.lb_pods
        ours[LB_ANNOTATION] = lb_ports(template).annotation()
    return {
        "metadata": {
            "labels": {
                **template.podLabels,
                **labels(owner.name, "worker"),
                VERSION_LABEL: str(version),
            },
            "annotations": {**template.podAnnotations, **ours},
        },
        "spec": pod,
    }


def shm_volume(spec: EndpointSpec, template: TemplateSpec) -> Obj:
    """A memory-backed emptyDir for /dev/shm, limited to `shm_gib`."""
    size = mebibytes(shm_gib(spec, template))
    return {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def scaling_annotations(spec: EndpointSpec) -> dict[str, str]:
    """Endpoint settings that act through the scaler, shown on the Deployment (they do not
    touch the pod template, so changing them restarts no worker)."""
    return {
        "lockgate.dev/display-name": spec.name,
        "lockgate.dev/endpoint-type": str(spec.type),
        "lockgate.dev/request-timeout-s": str(spec.requestTimeoutS),
        "lockgate.dev/workers-min": str(spec.workersMin),
        "lockgate.dev/workers-max": str(spec.workersMax),
        "lockgate.dev/scaler-type": str(spec.scalerType),
        "lockgate.dev/scaler-value": str(spec.scalerValue),
        "lockgate.dev/idle-timeout-s": str(spec.idleTimeout),
        "lockgate.dev/execution-timeout-ms": str(spec.executionTimeoutMs),
        "lockgate.dev/flashboot": str(spec.flashboot).lower(),
        **({"lockgate.dev/lb-hold-s": str(spec.lbHoldS)} if spec.lbHoldS is not None else {}),
        "lockgate.dev/lb-websocket-max-s": str(spec.lbWebSocketMaxS),
        "lockgate.dev/on-worker-lost": str(spec.onWorkerLost),
        "lockgate.dev/requeue-max-run-s": str(spec.requeueMaxRunS),
        "lockgate.dev/startup-timeout-s": str(spec.startupTimeout),
        "lockgate.dev/crash-loop-threshold": str(spec.crashLoopThreshold),
        "lockgate.dev/lb-resume-window-s": str(spec.lbResumeWindowS),
        **({"lockgate.dev/warmup": warmup_summary(spec)} if spec.warmup is not None else {}),
    }


def warmup_summary(spec: EndpointSpec) -> str:
    """The endpoint's warm-up in a few words, for its Deployment's annotations (the
    inputs themselves stay in the Endpoint: they may be large)."""
    assert spec.warmup is not None
    if spec.warmup.request is not None:
        return f"request {spec.warmup.request.method} {spec.warmup.request.path}"
    count = len(spec.warmup.inputs or [])
    return f"{count} input{'s' if count != 1 else ''}"


def worker_deployment(
    owner: Owner,
    spec: EndpointSpec,
    template: TemplateSpec,
    template_name: str,
    settings: OperatorSettings,
    *,
    replicas: int,
    key_revision: str = "",
    gpu_type: str | None = None,
    version: int = 1,
    strategy: Obj | None = None,
) -> Obj:
    """The workers. `replicas` is used at creation only: later the scaler owns it;
    `key_revision` is the worker key's digest: kept whole on the Deployment, and short on
    the pod template, so a new key rolls the workers; `gpu_type` is the one of `gpuTypeIds`
    they require (default: the first); `version` the endpoint's, on each pod; `strategy`
    how they roll (`rollout_strategy`; default `GENTLY`)."""
    annotations = {TEMPLATE_ANNOTATION: template_name, **scaling_annotations(spec)}
    if key_revision:
        annotations[KEY_DIGEST_ANNOTATION] = key_revision
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, deployment_name(owner.name), "worker", annotations),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "strategy": strategy or GENTLY,
            "selector": {"matchLabels": selector(owner.name, "worker")},
            "template": worker_pod_template(
                owner,
                spec,
                template,
                template_name,
                settings,
                key_revision=key_revision,
                gpu_type=gpu_type,
                version=version,
            ),
        },
    }


def flashboot_daemonset(
    owner: Owner, spec: EndpointSpec, template: TemplateSpec, settings: OperatorSettings
) -> Obj:
    """Pre-pulls the worker image (and fetches the model) on each node a worker may use:
    nodes of any listed GPU type, whichever the fallback requires now (or, without
    `gpuTypeIds`, any node the GPU label preset marks as a GPU node), never on every node.

    A static busybox is copied into a shared folder, then run as `true` inside the worker
    image: that pulls the image whatever it contains (even distroless); a pause container
    keeps the pod, and so the image, on the node at almost no cost.
    """
    helper = {"name": "lockgate-bin", "mountPath": "/lockgate-bin"}
    init = [
        {
            "name": "copy-helper",
            "image": settings.flashboot_helper_image,
            # busybox calls its applets itself: the image needs no `cp` link (a scratch
            # image holding only /bin/busybox works as well as Docker Hub's).
            "command": ["/bin/busybox", "cp", "/bin/busybox", "/lockgate-bin/busybox"],
            "volumeMounts": [helper],
            "securityContext": helper_security_context(),
        },
        {
            "name": "pull-worker-image",
            "image": template.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/lockgate-bin/busybox", "true"],
            "volumeMounts": [helper],
            "securityContext": helper_security_context(),
        },
    ]
    # the node's model cache filled ahead of the first worker
    fetches, fetch_volumes = model_fetches(spec, template, settings, node_only=True)
    init += fetches
    volumes: list[Obj] = [{"name": "lockgate-bin", "emptyDir": {}}, *fetch_volumes]
    pause = {
        "name": "pause",
        "image": settings.pause_image,
        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": helper_security_context(),
    }
    pod = {
        "initContainers": init,
        "containers": [pause],
        "volumes": volumes,
        **_placement(spec, template, settings, list(spec.gpuTypeIds), gpu_node=True),
        **pull_secrets(template, settings, helpers=True),
        # restricted, but for the model fetches (root, hostPath): a modelUrl, modelReferences
        "securityContext": {"runAsNonRoot": True, **SECCOMP},
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(owner, daemonset_name(owner.name), "flashboot"),
        "spec": {
            "selector": {"matchLabels": selector(owner.name, "flashboot")},
            "template": {"metadata": {"labels": labels(owner.name, "flashboot")}, "spec": pod},
        },
    }
