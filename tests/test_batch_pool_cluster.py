"""A cluster's batch pool (issue 49, item 2): each queue Endpoint gets a hidden child
Endpoint `batch-<id>` (kube/batch_pool.py) that the real operator reconciles as any
Endpoint, against a real kube-apiserver (envtest), once the endpoint has a batch: its own
worker Deployment from zero workers up to `batchWorkersMax`, its registry entry; the
management API never shows it.
The pure part: which Endpoints get one, and what it carries."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from redis.asyncio import Redis

from lockgate.kube.batch_pool import batch_pool_endpoint
from lockgate.kube.controlplane import BATCH_OF_LABEL, BUILD_ANNOTATION, CANARY_OF_LABEL
from lockgate.models.batch import BatchLimits
from lockgate.store import Registry
from lockgate.store.batches import BatchStore
from tests.test_manage_api import Api, kubernetes_api  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]

URL = "https://git.example.test/org/worker.git"


def _parent(**spec: Any) -> dict:
    return {
        "apiVersion": "lockgate.dev/v1alpha1",
        "kind": "Endpoint",
        "metadata": {
            "name": "ep", "namespace": "team-a", "uid": "u-1",
            "annotations": {BUILD_ANNOTATION: '{"buildId": "b1"}'},
        },
        "spec": {"templateId": "tpl", "workersMin": 1, "workersMax": 5, **spec},
    }  # fmt: skip


def test_the_pool_runs_what_the_endpoint_runs_from_zero_to_batch_workers_max() -> None:
    pool = batch_pool_endpoint(
        _parent(
            batchWorkersMax=2, warmup={"inputs": [{"p": 1}]},
            source={"git": {"url": URL, "ref": "main", "trigger": "PUSH"}},
        )
    )  # fmt: skip
    assert pool is not None
    meta, spec = pool["metadata"], pool["spec"]
    assert meta["name"] == "batch-ep" and meta["labels"] == {BATCH_OF_LABEL: "ep"}
    assert meta["annotations"] == {BUILD_ANNOTATION: '{"buildId": "b1"}'}
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert (spec["workersMin"], spec["workersMax"], spec["templateId"]) == (0, 2, "tpl")
    assert "warmup" not in spec and "batchWorkersMax" not in spec
    assert spec["source"]["git"]["trigger"] == "MANUAL"  # never built on its own
    assert batch_pool_endpoint(_parent())["spec"]["workersMax"] == 5  # default: workersMax


def test_no_pool_for_a_load_balancing_endpoint_nor_for_the_operators_own() -> None:
    assert batch_pool_endpoint(_parent(type="LB", scalerType="REQUEST_COUNT")) is None
    for label in (CANARY_OF_LABEL, BATCH_OF_LABEL):
        child = _parent()
        child["metadata"]["labels"] = {label: "other"}
        assert batch_pool_endpoint(child) is None


@pytest.mark.envtest
@pytest.mark.usefixtures("operator")
async def test_the_operator_makes_the_hidden_batch_pool_and_follows_edits(
    resources: Resources,
    redis: Redis,
    kubernetes_api: Api,  # noqa: F811
) -> None:
    resources.template("bp-tpl")
    resources.endpoint("bp-ep", templateId="bp-tpl", workersMin=1, workersMax=3, batchWorkersMax=2)
    resources.created.append(("endpoints", "batch-bp-ep"))  # envtest runs no garbage collector
    registry = Registry(redis)
    await resources.eventually(lambda: registry.get_endpoint("bp-ep"), "the endpoint registered")
    await asyncio.sleep(2)  # resyncs (<= 1 s apart): an endpoint with no batch has no pool
    assert resources.get("endpoints", "batch-bp-ep") is None

    # its first batch: the pool is made at the next resync
    await BatchStore(redis).create("bp-ep", "batch_x", 1, [], None, BatchLimits())
    pool = resources.wait_until(lambda: resources.get("endpoints", "batch-bp-ep"), "the pool")
    assert pool["metadata"]["labels"] == {BATCH_OF_LABEL: "bp-ep"}
    assert (pool["spec"]["workersMin"], pool["spec"]["workersMax"]) == (0, 2)
    deployment = resources.wait_until(
        lambda: resources.deployment("batch-bp-ep-workers"), "the pool's Deployment"
    )
    assert deployment.spec.replicas == 0
    entry = await resources.eventually(
        lambda: registry.get_endpoint("batch-bp-ep"), "the pool's registry entry"
    )
    assert entry.workersMax == 2

    resources.patch("endpoints", "bp-ep", {"spec": {"batchWorkersMax": 4}})
    resources.wait_until(
        lambda: (resources.get("endpoints", "batch-bp-ep") or {}).get("spec", {}).get(
            "workersMax"
        ) == 4,
        "the pool following the edit",
    )  # fmt: skip

    # the management API: never listed, never read by id
    status, listed = await kubernetes_api.call("GET")
    assert status == 200 and "bp-ep" in [r["id"] for r in listed]
    assert "batch-bp-ep" not in [r["id"] for r in listed]
    assert (await kubernetes_api.call("GET", "/batch-bp-ep"))[0] == 404
