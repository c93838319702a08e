"""The real operator (kopf, in a thread) against a real kube-apiserver and etcd (envtest).

Objects are created as `kubectl apply` would, through the API; the assertions read what
the operator wrote: Deployments, Secrets, status, and the registry in Redis.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from redis.asyncio import Redis

from lockgate.models import JobRequest
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import JobStore, NewJob, Registry, key_digest, keys

if TYPE_CHECKING:
    from kube_fixtures import Resources

REPO = Path(__file__).resolve().parent.parent
pytest_plugins = ["kube_fixtures"]
pytestmark = [pytest.mark.envtest, pytest.mark.usefixtures("operator")]


def env_of(deployment) -> dict:
    container = deployment.spec.template.spec.containers[0]
    return {e.name: e for e in container.env}


def phase_is(resources: Resources, name: str, phase: str):
    return lambda: resources.status(name).get("phase") == phase and resources.status(name)


# -- creation ------------------------------------------------------------------------------


async def test_endpoint_becomes_a_deployment_secret_and_registry_entry(
    resources: Resources, redis: Redis
) -> None:
    resources.template("echo-tpl", env={"GREETING": "hi"}, ports=["8000/http"])
    resources.endpoint("ep-create", templateId="echo-tpl", workersMin=0, executionTimeoutMs=60_000)

    deployment = resources.wait_until(
        lambda: resources.deployment("ep-create-workers"), "the Deployment"
    )
    container = deployment.spec.template.spec.containers[0]
    assert container.image == "example.test/echo:1"
    env = env_of(deployment)
    assert env["GREETING"].value == "hi"
    assert env["RUNPOD_ENDPOINT_ID"].value == "ep-create"
    assert env["RUNPOD_POD_ID"].value_from.field_ref.field_path == "metadata.name"
    assert env["RUNPOD_AI_API_KEY"].value_from.secret_key_ref.name == "ep-create-worker-key"
    assert deployment.spec.replicas == 0
    owner = deployment.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Endpoint", "ep-create", True)

    secret = resources.core.read_namespaced_secret("ep-create-worker-key", resources.namespace)
    key = base64.b64decode(secret.data["RUNPOD_AI_API_KEY"]).decode()
    registry = Registry(redis)
    entry = await resources.eventually(
        lambda: registry.get_endpoint("ep-create"), "the registry entry"
    )
    assert entry.executionTimeoutMs == 60_000
    assert entry.namespace == resources.namespace
    worker_key = await registry.get_key(key_digest(key))
    assert worker_key["scopes"] == ["workers"] and worker_key["endpoints"] == ["ep-create"]


@pytest.mark.usefixtures("metrics_served")  # Ready needs readable metrics
async def test_endpoint_with_no_workers_wanted_is_ready_with_its_job_api_url(
    resources: Resources,
) -> None:
    resources.template("ready-tpl")
    resources.endpoint("ep-ready", templateId="ready-tpl", workersMin=0)

    status = resources.wait_until(phase_is(resources, "ep-ready", "Ready"), "phase Ready")
    assert status["endpointId"] == "ep-ready"
    assert status["jobApiUrl"] == "https://jobs.example.test/v2/ep-ready/"
    assert (
        status["observedGeneration"]
        == resources.get("endpoints", "ep-ready")["metadata"]["generation"]
    )
    for type_ in ("SpecValid", "TemplateFound", "Registered", "WorkloadsApplied", "Ready"):
        assert resources.condition(status, type_)["status"] == "True", type_


async def test_endpoint_waiting_for_workers_is_initializing(resources: Resources) -> None:
    resources.template("init-tpl")
    resources.endpoint("ep-init", templateId="init-tpl", workersMin=1)

    # envtest has no nodes: the pod stays Pending, so the worker never becomes ready.
    status = resources.wait_until(
        phase_is(resources, "ep-init", "Initializing"), "phase Initializing"
    )
    assert status["workers"]["desired"] == 1
    assert status["workers"]["ready"] == 0
    assert resources.condition(status, "Ready")["status"] == "False"


# -- problems a person can act on ----------------------------------------------------------


@pytest.mark.usefixtures("metrics_served")  # Ready needs readable metrics
async def test_missing_template_shows_as_a_condition_and_recovers_when_created(
    resources: Resources,
) -> None:
    resources.endpoint("ep-late", templateId="late-tpl")

    status = resources.wait_until(phase_is(resources, "ep-late", "Pending"), "phase Pending")
    found = resources.condition(status, "TemplateFound")
    assert found["status"] == "False" and found["reason"] == "TemplateNotFound"
    assert "late-tpl" in found["message"] and resources.namespace in found["message"]
    assert resources.deployment("ep-late-workers") is None

    resources.template("late-tpl")
    resources.wait_until(lambda: resources.deployment("ep-late-workers"), "the Deployment")
    resources.wait_until(phase_is(resources, "ep-late", "Ready"), "phase Ready")


async def test_workers_min_above_workers_max_fails_with_a_message(resources: Resources) -> None:
    resources.template("minmax-tpl")
    resources.endpoint("ep-minmax", templateId="minmax-tpl", workersMin=5, workersMax=2)

    status = resources.wait_until(phase_is(resources, "ep-minmax", "Failed"), "phase Failed")
    valid = resources.condition(status, "SpecValid")
    assert valid["reason"] == "InvalidSpec"
    assert "workersMin (5) must not exceed workersMax (2)" in valid["message"]
    assert resources.deployment("ep-minmax-workers") is None


async def test_workers_the_api_server_refuses_fail_the_endpoint_with_its_reason(
    resources: Resources,
) -> None:
    # A toleration key that is no qualified name passes the Template's schema but not the
    # API server's pod validation.
    bad = [{"key": "not a key!", "operator": "Exists"}]
    resources.template("badtol-tpl", tolerations=bad)
    resources.endpoint("ep-badtol", templateId="badtol-tpl")

    status = resources.wait_until(phase_is(resources, "ep-badtol", "Failed"), "phase Failed")
    applied = resources.condition(status, "WorkloadsApplied")
    assert applied["reason"] == "Rejected" and "tolerations" in applied["message"], applied


@pytest.mark.usefixtures("metrics_served")  # Ready needs readable metrics
async def test_a_secret_not_labelled_for_workers_is_refused_until_its_owner_labels_it(
    resources: Resources,
) -> None:
    """The CRD door (issue 45 item 8): a Template applied with kubectl that hands workers a
    Secret nobody marked for them gets no Deployment; labelling the Secret is enough."""
    resources.secret("ep-unlab-s3", AWS_KEY="k")
    resources.template("unlab-tpl", envFromSecrets=["ep-unlab-s3"])
    resources.endpoint("ep-unlab", templateId="unlab-tpl")

    status = resources.wait_until(phase_is(resources, "ep-unlab", "Pending"), "phase Pending")
    refused = resources.condition(status, "SecretsAllowed")
    assert refused["reason"] == "SecretRefused", refused
    assert "'ep-unlab-s3' is not marked for workers" in refused["message"]
    assert (
        "envFromSecrets" in refused["message"]
        and "lockgate.dev/worker-secret=true" in (refused["message"])
    )
    assert resources.deployment("ep-unlab-workers") is None

    labels = {"metadata": {"labels": {"lockgate.dev/worker-secret": "true"}}}
    resources.core.patch_namespaced_secret("ep-unlab-s3", resources.namespace, labels)
    deployment = resources.wait_until(
        lambda: resources.deployment("ep-unlab-workers"), "the Deployment"
    )
    [source] = deployment.spec.template.spec.containers[0].env_from
    assert source.secret_ref.name == "ep-unlab-s3"


FOR_WORKERS = {"lockgate.dev/worker-secret": "true"}


@pytest.mark.parametrize(
    ("secret", "labels"),
    [
        ("lockgate-settings", FOR_WORKERS),  # by name (the chart's)
        ("ep-own-made", {**FOR_WORKERS, "app.kubernetes.io/part-of": "lockgate"}),  # by label
        ("ep-own-key", None),  # an endpoint's worker key: -worker-key
    ],
)  # fmt: skip
async def test_lockgates_own_secrets_never_reach_workers_even_labelled(
    resources: Resources, secret: str, labels: dict | None
) -> None:
    name = f"{secret}-worker-key" if secret == "ep-own-key" else secret
    resources.secret(name, labels, REDIS_PASSWORD="p")
    # The CRD cannot check a name against the worker-key rule: the operator's validation can.
    resources.template(f"{secret}-tpl", secretEnv={"LEAK": {"name": name, "key": "REDIS_PASSWORD"}})
    resources.endpoint(f"{secret}-ep", templateId=f"{secret}-tpl")

    status = resources.wait_until(
        lambda: (
            resources.status(f"{secret}-ep").get("phase") in ("Pending", "Failed")
            and resources.status(f"{secret}-ep")
        ),
        "a refusal",
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    refused = conditions.get("SecretsAllowed") or conditions["TemplateFound"]
    assert refused["status"] == "False" and "lockgate's own" in refused["message"], refused
    assert "secretEnv.LEAK" in refused["message"] and name in refused["message"]
    assert resources.deployment(f"{secret}-ep-workers") is None


async def test_a_template_env_name_kubernetes_would_refuse_is_invalid_before_any_write(
    resources: Resources,
) -> None:
    resources.template("badenv-tpl", env={"NOT=VALID": "x"})
    resources.endpoint("ep-badenv", templateId="badenv-tpl")

    status = resources.wait_until(phase_is(resources, "ep-badenv", "Failed"), "phase Failed")
    found = resources.condition(status, "TemplateFound")
    assert found["reason"] == "TemplateInvalid" and "NOT=VALID" in found["message"], found
    assert resources.deployment("ep-badenv-workers") is None


def test_api_server_rejects_values_outside_the_schema_bounds(resources: Resources) -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as err:
        resources.endpoint("ep-bounds", computeType="TPU", executionTimeoutMs=1)
    assert err.value.status == 422
    assert "computeType" in err.value.body and "executionTimeoutMs" in err.value.body
    with pytest.raises(ApiException) as err:
        resources.endpoint("ep-bounds", onWorkerLost="retry", requeueMaxRunS=-1)
    assert err.value.status == 422
    assert "onWorkerLost" in err.value.body and "requeueMaxRunS" in err.value.body


# -- changes -------------------------------------------------------------------------------


async def test_template_change_rolls_the_deployment_of_every_endpoint_using_it(
    resources: Resources,
) -> None:
    resources.template("roll-tpl", image="example.test/echo:1")
    resources.endpoint("ep-roll-a", templateId="roll-tpl")
    resources.endpoint("ep-roll-b", templateId="roll-tpl")
    for name in ("ep-roll-a", "ep-roll-b"):
        resources.wait_until(lambda n=name: resources.deployment(f"{n}-workers"), "the Deployments")

    resources.patch("templates", "roll-tpl", {"spec": {"image": "example.test/echo:2"}})

    def image(name: str) -> str:
        return resources.deployment(f"{name}-workers").spec.template.spec.containers[0].image

    for name in ("ep-roll-a", "ep-roll-b"):
        resources.wait_until(lambda n=name: image(n) == "example.test/echo:2", f"{name} rolled")


async def test_replica_count_set_by_the_scaler_is_never_reset(resources: Resources) -> None:
    resources.template("scale-tpl")
    resources.endpoint("ep-scale", templateId="scale-tpl", workersMin=0, workersMax=5)
    resources.wait_until(lambda: resources.deployment("ep-scale-workers"), "the Deployment")

    resources.apps.patch_namespaced_deployment_scale(
        "ep-scale-workers", resources.namespace, {"spec": {"replicas": 3}}
    )
    resources.patch("endpoints", "ep-scale", {"spec": {"idleTimeout": 30, "workersMin": 1}})

    def annotated() -> bool:
        meta = resources.deployment("ep-scale-workers").metadata
        return meta.annotations.get("lockgate.dev/idle-timeout-s") == "30"

    resources.wait_until(annotated, "the edit applied")
    resources.wait_until(
        lambda: resources.status("ep-scale").get("observedGeneration") == 2, "generation 2"
    )
    assert resources.deployment("ep-scale-workers").spec.replicas == 3


# -- deletion ------------------------------------------------------------------------------


async def test_deleting_an_endpoint_removes_its_registry_entry_key_and_jobs(
    resources: Resources, redis: Redis
) -> None:
    resources.template("del-tpl")
    resources.endpoint("ep-delete", templateId="del-tpl")
    registry, jobs = Registry(redis), JobStore(redis)
    entry = await resources.eventually(
        lambda: registry.get_endpoint("ep-delete"), "the registry entry"
    )
    request = JobRequest(input={"x": 1})
    await jobs.submit("ep-delete", NewJob(id="job-1", input=b'{"x": 1}', ttl_ms=request.policy.ttl))

    resources.delete("endpoints", "ep-delete")

    resources.wait_until(
        lambda: resources.get("endpoints", "ep-delete") is None, "the Endpoint gone"
    )
    assert await registry.get_endpoint("ep-delete") is None
    assert await registry.get_key(entry.workerKeyDigest) is None
    assert (await jobs.snapshot("ep-delete")).in_queue == 0
    # The garbage collector removes what the Endpoint owned.
    resources.wait_until(
        lambda: resources.deployment("ep-delete-workers") is None, "the Deployment gone"
    )


# -- repairs and extras --------------------------------------------------------------------


async def test_flashboot_adds_a_pre_pull_daemonset_and_removes_it_when_turned_off(
    resources: Resources,
) -> None:
    resources.template("flash-tpl", image="example.test/big:1")
    resources.endpoint("ep-flash", templateId="flash-tpl", flashboot=True)

    def daemonset():
        items = resources.apps.list_namespaced_daemon_set(resources.namespace).items
        return next((d for d in items if d.metadata.name == "ep-flash-flashboot"), None)

    ds = resources.wait_until(daemonset, "the flashboot DaemonSet")
    images = [c.image for c in ds.spec.template.spec.init_containers]
    assert "example.test/big:1" in images

    resources.patch("endpoints", "ep-flash", {"spec": {"flashboot": False}})
    resources.wait_until(lambda: daemonset() is None, "the DaemonSet removed")


async def test_resync_with_nothing_changed_writes_nothing(resources: Resources) -> None:
    resources.template("idle-tpl")
    resources.endpoint("ep-idle", templateId="idle-tpl")

    def settled() -> bool:  # the Deployment controller and the scaler have reported
        status = resources.status("ep-idle")
        available = resources.condition(status, "DeploymentAvailable")
        return available.get("status") == "True" and bool(
            resources.condition(status, "MetricsAvailable")
        )

    resources.wait_until(settled, "DeploymentAvailable")
    before = resources.get("endpoints", "ep-idle")["metadata"]["resourceVersion"]
    deployment = resources.deployment("ep-idle-workers").metadata.resource_version

    time.sleep(2.5)  # at least two resyncs (resync_s=1)

    assert resources.get("endpoints", "ep-idle")["metadata"]["resourceVersion"] == before
    assert resources.deployment("ep-idle-workers").metadata.resource_version == deployment


async def test_registry_entry_lost_by_redis_is_written_again(
    resources: Resources, redis: Redis
) -> None:
    resources.template("lost-tpl")
    resources.endpoint("ep-lost", templateId="lost-tpl")
    registry = Registry(redis)
    await resources.eventually(lambda: registry.get_endpoint("ep-lost"), "the registry entry")

    await redis.flushall()

    entry = await resources.eventually(lambda: registry.get_endpoint("ep-lost"), "re-registered")
    assert await registry.get_key(entry.workerKeyDigest) is not None


async def test_deleted_worker_key_secret_gets_a_new_key_that_rolls_the_workers(
    resources: Resources, redis: Redis
) -> None:
    resources.template("key-tpl")
    resources.endpoint("ep-key", templateId="key-tpl")
    registry = Registry(redis)
    old = await resources.eventually(lambda: registry.get_endpoint("ep-key"), "the entry")
    # The operator registers the endpoint before it writes the Deployment: wait for both.
    deployment = resources.wait_until(lambda: resources.deployment("ep-key-workers"), "workers")
    old_pods = deployment.spec.template.metadata.annotations

    resources.core.delete_namespaced_secret("ep-key-worker-key", resources.namespace)
    # Nothing checks the Secret until a worker needs it (no Secret call when a worker count
    # changes, issue 51): a worker pod the kubelet cannot configure, as it reports one.
    labels = {
        "lockgate.dev/endpoint": "ep-key",
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "lockgate-operator",
    }
    pod = {
        "metadata": {"name": "ep-key-unconfigured", "labels": labels},
        "spec": {"containers": [{"name": "worker", "image": "example.test/echo:1"}]},
    }
    resources.core.create_namespaced_pod(resources.namespace, pod)
    waiting = {
        "reason": "CreateContainerConfigError",
        "message": 'secret "ep-key-worker-key" not found',
    }
    container = {"name": "worker", "image": "example.test/echo:1", "imageID": "", "ready": False,
                 "restartCount": 0, "state": {"waiting": waiting}}  # fmt: skip
    status = {"status": {"phase": "Pending", "containerStatuses": [container]}}
    resources.core.patch_namespaced_pod_status("ep-key-unconfigured", resources.namespace, status)

    async def rotated() -> RegistryEntry | None:
        entry = await registry.get_endpoint("ep-key")
        return entry if entry and entry.workerKeyDigest != old.workerKeyDigest else None

    try:
        new = await resources.eventually(rotated, "a new worker key")
    finally:
        resources.core.delete_namespaced_pod(
            "ep-key-unconfigured", resources.namespace, grace_period_seconds=0
        )
    assert await registry.get_key(old.workerKeyDigest) is None
    assert await registry.get_key(new.workerKeyDigest) is not None

    def pods_rolled() -> bool:
        pods = resources.deployment("ep-key-workers").spec.template.metadata.annotations
        return pods["lockgate.dev/worker-key"] == new.workerKeyDigest[:12]

    resources.wait_until(pods_rolled, "the workers rolled onto the new key")
    assert old_pods["lockgate.dev/worker-key"] == old.workerKeyDigest[:12]


@pytest.mark.usefixtures("metrics_served")  # Ready needs readable metrics
async def test_echo_example_manifest_becomes_a_ready_endpoint(resources: Resources) -> None:
    docs = [
        doc
        for name in ("template.yaml", "endpoint.yaml")  # `kubectl apply -f examples/echo/`
        for doc in yaml.safe_load_all((REPO / "examples/echo" / name).read_text())
    ]
    for doc in docs:
        plural = doc["kind"].lower() + "s"
        resources.created.append((plural, doc["metadata"]["name"]))
        resources.custom.create_namespaced_custom_object(
            "lockgate.dev", "v1alpha1", resources.namespace, plural, doc
        )

    resources.wait_until(phase_is(resources, "echo", "Ready"), "the echo endpoint Ready")
    container = resources.deployment("echo-workers").spec.template.spec.containers[0]
    assert container.command == ["python", "-u", "/app/handler.py"]
    # memoryInGb unset: 2 GiB per vCPU, request = limit
    limits = {"cpu": "1", "ephemeral-storage": "5Gi", "memory": "2Gi"}
    assert container.resources.limits == limits


async def test_on_worker_lost_reaches_the_stores_scripts_and_follows_edits(
    resources: Resources, redis: Redis
) -> None:
    """The Endpoint's onWorkerLost and requeueMaxRunS are written with its registry entry
    where the store's scripts read them (`lg:{ep}:lost`, docs/lost-workers.md); an edit
    follows, and the default leaves no key."""
    resources.template("lostp-tpl")
    resources.endpoint("ep-lostp", templateId="lostp-tpl", onWorkerLost="fail")
    key = keys.lost_policy("ep-lostp")

    def policy_is(expected: dict):
        async def check() -> bool:
            return await redis.hgetall(key) == expected

        return check

    await resources.eventually(policy_is({b"p": b"fail", b"n": b"0"}), "the fail policy")
    edit = {"spec": {"onWorkerLost": "requeue", "requeueMaxRunS": 60}}
    resources.patch("endpoints", "ep-lostp", edit)
    await resources.eventually(policy_is({b"p": b"requeue", b"n": b"60000"}), "the edit")
    resources.patch("endpoints", "ep-lostp", {"spec": {"requeueMaxRunS": 0}})
    await resources.eventually(policy_is({}), "no key for the default")
