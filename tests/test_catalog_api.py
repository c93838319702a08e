"""`/v2/catalog/*` over real HTTP: against `lockgate dev` (this machine), and against the
management API on envtest's kube-apiserver, with Node objects carrying GPU, CUDA, zone and
flavor labels and capacity, and pods bound to them holding GPUs.

Every query RunPod refuses has a row here: 400 for the combinations it refuses, 422 for
malformed values (problems naming the parameter)."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
import pytest
import requests
from kubernetes import client as k8s
from redis.asyncio import Redis

from lockgate.store import Registry
from tests.devproc import REPO, DevProcess

if TYPE_CHECKING:
    from kube_fixtures import RunningOperator

pytest_plugins = ["kube_fixtures"]

ECHO = str(REPO / "examples/echo/handler.py")
ADMIN = "k-catalog-admin"
PROBLEM = "application/problem+json"
RTX, L40S = "NVIDIA GeForce RTX 4090", "NVIDIA L40S"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` as a user starts it, no worker running."""
    data_dir = tmp_path_factory.mktemp("dev-catalog")
    with DevProcess(ECHO, "--api-key", ADMIN, "--workers-max", "0", data_dir=data_dir) as proc:
        yield proc


def get(dev: DevProcess, path: str, key: str | None = ADMIN) -> requests.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return requests.get(f"{dev.url}/v2/catalog{path}", headers=headers, timeout=30)


# -- dev mode: this machine --------------------------------------------------------------------


def test_dev_catalog_is_this_machine(dev: DevProcess) -> None:
    cpus = get(dev, "/cpus").json()["cpus"]
    most = 1 << ((os.cpu_count() or 1).bit_length() - 1)
    assert [(c["id"], c["vcpu"]["max"]) for c in cpus] == [("cpu3c", most)]
    assert cpus[0]["price"] == {"securePerVcpu": 0.0, "serverlessPerVcpu": 0.0}
    assert "availability" not in cpus[0]
    [local] = get(dev, "/datacenters").json()["dataCenters"]
    assert local == {
        "id": "local", "name": "local", "region": "UNKNOWN", "globalNetwork": False,
        "networkVolumeTypes": ["STANDARD"], "compliance": [],
    }  # fmt: skip
    if shutil.which("nvidia-smi") is None:  # this machine has no NVIDIA GPU
        assert get(dev, "/gpus").json() == {"gpus": []}


def test_dev_cpu_availability_and_one_flavor(dev: DevProcess) -> None:
    cpu = get(dev, "/cpus/cpu3c?include=AVAILABILITY&product=SERVERLESS").json()
    assert cpu["id"] == "cpu3c" and cpu["availability"] in ("LOW", "MEDIUM", "HIGH")
    assert [d["id"] for d in cpu["dataCenters"]] == ["local"]
    dc = get(dev, "/datacenters/local?include=CPU_AVAILABILITY,GPU_AVAILABILITY").json()
    assert [c["id"] for c in dc["cpuAvailability"]] == ["cpu3c"]
    assert dc["gpuAvailability"] == [] or shutil.which("nvidia-smi")


@pytest.mark.parametrize(
    ("query", "ids"),
    [
        ("", ["local"]),
        ("?regions=UNKNOWN,EUROPE", ["local"]),
        ("?regions=EUROPE", []),
        ("?networkVolumeTypes=STANDARD", ["local"]),
        ("?networkVolumeTypes=STANDARD,HIGH_PERFORMANCE", []),
        ("?compliance=GDPR", []),
        ("?globalNetwork=false", ["local"]),
        ("?globalNetwork=true", []),
        ("?regions=UNKNOWN&globalNetwork=true", []),
        ("?unknownParameter=1", ["local"]),  # parameters RunPod does not define are ignored
    ],
)
def test_dev_data_center_filters(dev: DevProcess, query: str, ids: list[str]) -> None:
    r = get(dev, f"/datacenters{query}")
    assert r.status_code == 200, r.text
    assert [d["id"] for d in r.json()["dataCenters"]] == ids


@pytest.mark.parametrize("path", ["/gpus/NVIDIA%20H200", "/cpus/cpu9x", "/datacenters/EU-RO-1"])
def test_an_id_not_in_the_catalog_is_a_404_problem(dev: DevProcess, path: str) -> None:
    r = get(dev, path)
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["title"] == "Not Found" and body["status"] == 404
    assert "in this catalog" in body["detail"]


def test_the_catalog_is_for_admin_keys_only(dev: DevProcess) -> None:
    for key in (None, "not-a-key"):
        r = get(dev, "/gpus", key=key)
        assert r.status_code == 401 and r.headers["content-type"].startswith(PROBLEM)


BAD_REQUESTS = [
    # include=AVAILABILITY needs product, and product needs include
    ("/gpus?include=AVAILABILITY", "product is required with include=AVAILABILITY"),
    ("/gpus?product=SERVERLESS", "product is valid only with include=AVAILABILITY"),
    ("/gpus/x?include=AVAILABILITY", "product is required"),
    ("/cpus?include=AVAILABILITY", "product is required with include=AVAILABILITY"),
    ("/cpus?product=POD", "product is valid only with include=AVAILABILITY"),
    ("/cpus/cpu3c?product=POD", "product is valid only"),
    # the availability filters are valid only with include=AVAILABILITY
    ("/gpus?count=2", "count: valid only with include=AVAILABILITY"),
    ("/gpus?cloud=SECURE", "cloud: valid only with include=AVAILABILITY"),
    ("/gpus?countryCodes=FR,DE", "countryCodes: valid only with include=AVAILABILITY"),
    ("/gpus?cudaVersions=12.4", "cudaVersions: valid only with include=AVAILABILITY"),
    ("/gpus?minCudaVersion=12", "minCudaVersion: valid only with include=AVAILABILITY"),
    ("/gpus/x?count=1", "count: valid only"),
    ("/cpus?vcpuCount=4", "vcpuCount: valid only with include=AVAILABILITY"),
    # mutually exclusive, and a power of two
    (
        "/gpus?include=AVAILABILITY&product=POD&cudaVersions=12.4&minCudaVersion=12",
        "cudaVersions and minCudaVersion are mutually exclusive",
    ),
    ("/cpus?include=AVAILABILITY&product=POD&vcpuCount=6", "vcpuCount must be a power of two"),
    # a comma-separated (explode: false) parameter given twice
    ("/gpus?include=AVAILABILITY&include=AVAILABILITY&product=POD", "include: given 2 times"),
    ("/datacenters?regions=EUROPE&regions=ASIA", "regions: given 2 times"),
]


@pytest.mark.parametrize(("path", "detail"), BAD_REQUESTS)
def test_combinations_runpod_refuses_are_400_problems(dev, path: str, detail: str) -> None:
    r = get(dev, path)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["title"] == "Bad Request" and body["status"] == 400
    assert detail in body["detail"]


MALFORMED = [
    ("/gpus?include=PRICES", "include: 'PRICES' is not one of AVAILABILITY"),
    ("/gpus?include=AVAILABILITY,AVAILABILITY&product=POD", "include: at most 1 item"),
    ("/gpus?include=AVAILABILITY&product=DESKTOP", "product: 'DESKTOP' is not one of"),
    ("/gpus?include=AVAILABILITY&product=POD&count=0", "count: must be at least 1"),
    ("/gpus?include=AVAILABILITY&product=POD&count=two", "count: 'two' is not an integer"),
    ("/gpus?include=AVAILABILITY&product=POD&cloud=PUBLIC", "cloud: 'PUBLIC' is not one of"),
    ("/gpus?include=AVAILABILITY&product=POD&countryCodes=fr", "countryCodes: 'fr' does not"),
    ("/gpus?include=AVAILABILITY&product=POD&countryCodes=FR,USA", "countryCodes: 'USA'"),
    ("/gpus?include=AVAILABILITY&product=POD&cudaVersions=12", "cudaVersions: '12' does not"),
    ("/gpus?include=AVAILABILITY&product=POD&minCudaVersion=12.x", "minCudaVersion: '12.x'"),
    ("/gpus/x?include=AVAILABILITY&product=POD&countryCodes=F1", "countryCodes: 'F1'"),
    ("/cpus?include=SPECS", "include: 'SPECS' is not one of AVAILABILITY"),
    ("/cpus?include=AVAILABILITY&product=CLUSTER", "product: 'CLUSTER' is not one of POD"),
    ("/cpus?include=AVAILABILITY&product=POD&vcpuCount=1", "vcpuCount: must be at least 2"),
    ("/cpus?include=AVAILABILITY&product=POD&vcpuCount=x", "vcpuCount: 'x' is not an integer"),
    ("/datacenters?include=AVAILABILITY", "include: 'AVAILABILITY' is not one of"),
    ("/datacenters?regions=MARS", "regions: 'MARS' is not one of"),
    ("/datacenters?networkVolumeTypes=FAST", "networkVolumeTypes: 'FAST' is not one of"),
    ("/datacenters?compliance=SOC2", "compliance: 'SOC2' is not one of"),
    ("/datacenters?globalNetwork=yes", "globalNetwork: 'yes' is not a boolean"),
    ("/datacenters/local?include=GPU", "include: 'GPU' is not one of"),
]


@pytest.mark.parametrize(("path", "error"), MALFORMED)
def test_malformed_values_are_422_problems_listing_each(dev, path: str, error: str) -> None:
    r = get(dev, path)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["title"] == "Unprocessable Entity" and body["status"] == 422
    assert any(e.startswith(error) for e in body["errors"]), body["errors"]


def test_every_malformed_value_of_one_request_is_listed(dev: DevProcess) -> None:
    r = get(dev, "/gpus?include=X&product=Y&count=0&countryCodes=us")
    assert r.status_code == 422
    named = [e.split(":")[0] for e in r.json()["errors"]]
    assert named == ["count", "countryCodes", "include", "product"]


# -- a cluster: envtest's kube-apiserver with nodes and pods -----------------------------------

GFD_PRODUCT = "nvidia.com/gpu.product"
CUDA_MAJOR, CUDA_MINOR = (
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
)
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"


def make_node(
    core: k8s.CoreV1Api, name: str, labels: dict[str, str], allocatable: dict[str, str], **spec: Any
) -> None:
    """A Node as a kubelet registers it (status with capacity, allocatable, Ready)."""
    status = {
        "capacity": allocatable,
        "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": spec, "status": status}  # fmt: skip
    core.create_node(body)


def bind_pod(core: k8s.CoreV1Api, namespace: str, name: str, node: str, gpus: int) -> None:
    """A pod bound to `node` (as the scheduler binds one) holding `gpus` GPUs."""
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "1"}}
    container = {"name": "w", "image": "example.test/w:1", "resources": resources}
    body = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [container],
                 "automountServiceAccountToken": False},
    }  # fmt: skip
    core.create_namespaced_pod(namespace, body)


@pytest.fixture
def cluster_nodes(kube: k8s.ApiClient) -> Iterator[str]:
    """Four nodes (names with a random suffix, deleted after): a = 4 RTX 4090 in EU-RO-1
    (3 held by a pod), b = 8 L40S in US-TX-3, c = 2 RTX 4090 in US-TX-3 (cordoned), d = a
    CPU node of flavor cpu3c in EU-RO-1. Yields the suffix."""
    from kube_fixtures import NAMESPACE

    core = k8s.CoreV1Api(kube)
    suffix = secrets.token_hex(3)
    eu = {ZONE: "EU-RO-1", REGION: "eu-central"}
    us = {ZONE: "US-TX-3", REGION: "us-south"}
    gpu = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    nodes = {
        f"cat-a-{suffix}": ({**eu, GFD_PRODUCT: "NVIDIA-GeForce-RTX-4090", CUDA_MAJOR: "12",
                             CUDA_MINOR: "4"}, {**gpu, "nvidia.com/gpu": "4"}, {}),
        f"cat-b-{suffix}": ({**us, GFD_PRODUCT: "NVIDIA-L40S", CUDA_MAJOR: "12", CUDA_MINOR: "8"},
                            {**gpu, "nvidia.com/gpu": "8"}, {}),
        f"cat-c-{suffix}": ({**us, GFD_PRODUCT: "NVIDIA-GeForce-RTX-4090", CUDA_MAJOR: "12",
                             CUDA_MINOR: "2"}, {**gpu, "nvidia.com/gpu": "2"},
                            {"unschedulable": True}),
        f"cat-d-{suffix}": ({**eu, "lockgate.dev/cpu-flavor": "cpu3c"},
                            {"cpu": "16", "memory": "64Gi", "pods": "110"}, {}),
    }  # fmt: skip
    pod = f"cat-holder-{suffix}"
    try:
        for name, (labels, allocatable, spec) in nodes.items():
            make_node(core, name, labels, allocatable, **spec)
        bind_pod(core, NAMESPACE, pod, f"cat-a-{suffix}", gpus=3)
        yield suffix
    finally:
        core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0, _preload_content=False)
        for name in nodes:
            core.delete_node(name, _preload_content=False)


@pytest.fixture
async def manage(operator: RunningOperator, redis: Redis) -> tuple[str, dict[str, str]]:
    """The management API the operator serves (a `KubernetesCatalog` over envtest), and an
    admin key's header."""
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "admin", "scopes": ["admin"]})
    return f"{operator.manage_url}/v2/catalog", {"authorization": f"Bearer {key}"}


async def fetch(http: aiohttp.ClientSession, manage: tuple, path: str) -> tuple[int, Any]:
    url, headers = manage
    async with http.get(f"{url}{path}", headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def mine(entries: list[dict], suffix: str) -> dict[str, dict]:
    """Entries by id: envtest has no node but those of `cluster_nodes` (`suffix`)."""
    return {e["id"]: e for e in entries}


@pytest.mark.envtest
async def test_cluster_gpus_come_from_the_nodes_labels_with_free_counts(
    cluster_nodes: str, manage: tuple, http: aiohttp.ClientSession
) -> None:
    status, body = await fetch(http, manage, "/gpus")
    assert status == 200
    gpus = mine(body["gpus"], cluster_nodes)
    assert gpus[RTX] == {
        "id": RTX, "name": "RTX 4090", "pool": "ADA_24", "manufacturer": "NVIDIA", "memory": 24,
        "secure": True, "community": False, "price": {"secure": 0.0, "community": 0.0},
        "maxCount": {"secure": 4, "community": 0},
    }  # fmt: skip
    assert gpus[L40S]["pool"] == "ADA_48_PRO" and gpus[L40S]["maxCount"]["secure"] == 8

    query = "?include=AVAILABILITY&product=SERVERLESS"
    status, body = await fetch(http, manage, f"/gpus{query}")
    gpus = mine(body["gpus"], cluster_nodes)
    # a: 4 - 3 held = 1 free; c: cordoned, none free
    assert gpus[RTX]["availability"] == "LOW"
    assert gpus[RTX]["dataCenters"] == [
        {"id": "EU-RO-1", "name": "EU-RO-1", "availability": "LOW"},
        {"id": "US-TX-3", "name": "US-TX-3", "availability": "NONE"},
    ]
    assert gpus[RTX]["cudaVersions"] == [
        {"version": "12.2", "available": False}, {"version": "12.4", "available": True},
    ]  # fmt: skip
    assert gpus[L40S]["availability"] == "HIGH"
    # lockgate's own: the GPUs of the type in the cluster, and how many no pod holds
    assert (gpus[RTX]["stock"], gpus[L40S]["stock"]) == (
        {"total": 6, "free": 1},
        {"total": 8, "free": 8},
    )

    _, body = await fetch(http, manage, f"/gpus{query}&count=2")
    two = mine(body["gpus"], cluster_nodes)
    assert (two[RTX]["availability"], two[L40S]["availability"]) == ("NONE", "MEDIUM")
    _, body = await fetch(http, manage, f"/gpus{query}&countryCodes=RO")
    assert list(mine(body["gpus"], cluster_nodes)) == [RTX]  # EU-RO-1 is in Romania
    _, single = await fetch(http, manage, f"/gpus/{quote(L40S)}{query}&countryCodes=RO")
    assert single["availability"] == "NONE" and "dataCenters" not in single
    _, floor = await fetch(http, manage, f"/gpus/{quote(RTX)}{query}&minCudaVersion=12.3")
    assert floor["cudaVersions"] == [{"version": "12.4", "available": True}]


@pytest.mark.envtest
async def test_cluster_data_centers_and_cpu_flavors_come_from_the_nodes(
    cluster_nodes: str, manage: tuple, http: aiohttp.ClientSession
) -> None:
    _, body = await fetch(http, manage, "/datacenters?include=GPU_AVAILABILITY,CPU_AVAILABILITY")
    dcs = mine(body["dataCenters"], cluster_nodes)
    assert (dcs["EU-RO-1"]["region"], dcs["US-TX-3"]["region"]) == ("EUROPE", "NORTH_AMERICA")
    assert dcs["EU-RO-1"]["gpuAvailability"] == [
        {"id": RTX, "name": "RTX 4090", "availability": "LOW"}
    ]
    assert dcs["EU-RO-1"]["cpuAvailability"] == [
        {"id": "cpu3c", "name": "cpu3c", "availability": "HIGH"}  # 16 free vCPUs: 8 workers
    ]
    _, body = await fetch(http, manage, "/datacenters?regions=EUROPE")
    assert [d["id"] for d in body["dataCenters"]] == ["EU-RO-1"]
    status, dc = await fetch(http, manage, "/datacenters/US-TX-3")
    assert status == 200 and dc["region"] == "NORTH_AMERICA" and "gpuAvailability" not in dc

    status, cpu = await fetch(http, manage, "/cpus/cpu3c?include=AVAILABILITY&product=POD")
    assert status == 200
    assert (cpu["vcpu"], cpu["ramGbPerVcpu"]) == ({"min": 2, "max": 16}, 4.0)
    assert cpu["dataCenters"] == [{"id": "EU-RO-1", "name": "EU-RO-1", "availability": "HIGH"}]


@pytest.mark.envtest
async def test_cluster_queries_are_refused_as_in_dev_mode(
    manage: tuple, http: aiohttp.ClientSession
) -> None:
    for path, detail in BAD_REQUESTS[:3]:
        status, body = await fetch(http, manage, path)
        assert (status, body["title"]) == (400, "Bad Request") and detail in body["detail"]
    for path, error in MALFORMED[:3]:
        status, body = await fetch(http, manage, path)
        assert status == 422 and any(e.startswith(error) for e in body["errors"])
