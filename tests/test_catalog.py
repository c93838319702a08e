"""The catalog, pure: RunPod's GPU types and pools (models.gputypes), machines → catalog
entries and their filters (manage.catalog), nodes and pods → machines with the labels
lockgate places workers by (kube.catalog), dev mode's machine (dev.catalog), and what the
serverless create view asks (`pool_problem`, `placement_problem`)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from multidict import MultiDict

from lockgate.dev.catalog import DEV_CPU_FLAVOR, LocalCatalog, parse_cuda, parse_gpus
from lockgate.kube.catalog import gpu_type_of, label_types, machines_from, pod_requests
from lockgate.kube.settings import OperatorSettings
from lockgate.manage import catalog as cat
from lockgate.manage.catalog import CpuQuery, DataCenterQuery, GpuQuery, Machine, shown
from lockgate.manage.v2.catalog import cpu_query, data_center_query, gpu_query
from lockgate.models.gpupools import POOLS
from lockgate.models.gputypes import GPU_TYPES, pool_of

RTX, L40S, L4 = "NVIDIA GeForce RTX 4090", "NVIDIA L40S", "NVIDIA L4"


def settings(**kw: Any) -> OperatorSettings:
    return OperatorSettings(gateway_url="http://gw:8080", **kw)


# -- RunPod's types ------------------------------------------------------------------------


def test_every_type_of_a_pool_and_of_a_label_table_has_a_name_and_memory() -> None:
    from lockgate.kube.gpus import GFD_VALUES, GKE_VALUES, KARPENTER_VALUES

    pooled = {t for pool in POOLS.values() for t in pool.types}
    assert pooled | {*GKE_VALUES, *KARPENTER_VALUES, *GFD_VALUES} <= set(GPU_TYPES)
    assert (GPU_TYPES[RTX].name, GPU_TYPES[RTX].memory, pool_of(RTX)) == ("RTX 4090", 24, "ADA_24")
    assert pool_of("NVIDIA A30") is None and pool_of("no such card") is None
    assert GPU_TYPES["AMD Instinct MI300X OAM"].manufacturer == "AMD"


# -- availability levels, regions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "level"),
    [(0, "NONE"), (1, "LOW"), (2, "LOW"), (3, "MEDIUM"), (7, "MEDIUM"), (8, "HIGH"), (100, "HIGH")],
)
def test_availability_levels_count_the_workers_that_could_start_now(workers, level) -> None:
    assert cat.level(workers) == level


@pytest.mark.parametrize(
    ("names", "region"),
    [
        (("us-east1",), "NORTH_AMERICA"), (("eastus2",), "NORTH_AMERICA"),
        (("ca-central-1",), "NORTH_AMERICA"), (("", "US-TX-3"), "NORTH_AMERICA"),
        (("europe-west4",), "EUROPE"), (("eu-central-1",), "EUROPE"), (("", "EU-RO-1"), "EUROPE"),
        (("uksouth",), "EUROPE"), (("ap-southeast-2",), "OCEANIA"),
        (("australia-southeast1",), "OCEANIA"), (("ap-northeast-1",), "ASIA"),
        (("asia-east1",), "ASIA"), (("me-central-1",), "MIDDLE_EAST"),
        (("af-south-1",), "AFRICA"), (("southamerica-east1",), "SOUTH_AMERICA"),
        (("sa-east-1",), "SOUTH_AMERICA"), (("zone-7",), "UNKNOWN"), (("", ""), "UNKNOWN"),
    ],
)  # fmt: skip
def test_a_region_or_zone_name_reads_as_a_continental_region(names, region) -> None:
    assert cat.region_group(*names) == region


# -- machines → catalog entries --------------------------------------------------------------

A = Machine("a", "EU-RO-1", "eu-central", "RO", RTX, 24, 4, 1, "12.4", "", 32, 20, 128)
B = Machine("b", "US-TX-3", "us-south", "US", L40S, 48, 8, 8, "12.8", "", 64, 64, 256)
C = Machine("c", "US-TX-3", "us-south", "US", RTX, 24, 2, 0, "12.2", "", 16, 0, 64)
D = Machine("d", "EU-RO-1", "eu-central", "RO", cpu_flavor="cpu3c", vcpus=16, vcpus_free=10,
            memory_gb=64)  # fmt: skip
E = Machine("e", "", "", "", "nvidia-custom-x", 40, 1, 1)  # a label value no table knows
MACHINES = [A, B, C, D, E]
AVAILABLE = GpuQuery(availability=True)


def by_id(entries: list) -> dict[str, dict]:
    return {e["id"]: e for e in map(shown, entries)}


def test_gpu_types_are_the_types_the_machines_have_in_runpods_shape() -> None:
    gpus = by_id(cat.gpu_types(MACHINES, GpuQuery()))
    assert list(gpus) == [RTX, "nvidia-custom-x", L40S]  # by memory
    assert gpus[RTX] == {
        "id": RTX, "name": "RTX 4090", "pool": "ADA_24", "manufacturer": "NVIDIA",
        "memory": 24, "secure": True, "community": False,
        "price": {"secure": 0.0, "community": 0.0},
        "maxCount": {"secure": 4, "community": 0},  # the most on one machine
    }  # fmt: skip
    custom = gpus["nvidia-custom-x"]
    assert custom["pool"] is None and custom["name"] == "nvidia-custom-x"
    assert custom["memory"] == 40 and custom["manufacturer"] == "NVIDIA"


def test_availability_counts_free_gpus_per_worker_by_data_center_and_cuda() -> None:
    gpus = by_id(cat.gpu_types(MACHINES, AVAILABLE))
    assert gpus[RTX]["availability"] == "LOW"  # a: 1 free; c: none
    assert gpus[RTX]["dataCenters"] == [
        {"id": "EU-RO-1", "name": "EU-RO-1", "availability": "LOW"},
        {"id": "US-TX-3", "name": "US-TX-3", "availability": "NONE"},
    ]
    assert gpus[RTX]["cudaVersions"] == [
        {"version": "12.2", "available": False}, {"version": "12.4", "available": True},
    ]  # fmt: skip
    assert gpus[L40S]["availability"] == "HIGH"
    assert (gpus[RTX]["stock"], gpus[L40S]["stock"]) == (
        {"total": 6, "free": 1},
        {"total": 8, "free": 8},
    )
    assert "cudaVersions" not in gpus["nvidia-custom-x"]  # no CUDA label: none shown
    two = by_id(cat.gpu_types(MACHINES, GpuQuery(availability=True, count=2)))
    assert two[RTX]["availability"] == "NONE" and two[L40S]["availability"] == "MEDIUM"


def test_country_codes_drop_types_from_the_list_but_not_the_single_type() -> None:
    query = GpuQuery(availability=True, countries=frozenset({"RO"}))
    assert list(by_id(cat.gpu_types(MACHINES, query))) == [RTX]
    single = shown(cat.gpu_type_entry(MACHINES, L40S, query))
    assert single["availability"] == "NONE" and "dataCenters" not in single


def test_cuda_filters_scope_availability_and_the_versions_shown() -> None:
    floor = GpuQuery(availability=True, min_cuda=(12, 5))
    gpus = by_id(cat.gpu_types(MACHINES, floor))
    assert gpus[RTX]["availability"] == "NONE" and "cudaVersions" not in gpus[RTX]
    assert gpus[L40S]["cudaVersions"] == [{"version": "12.8", "available": True}]
    exact = by_id(cat.gpu_types(MACHINES, GpuQuery(availability=True, cuda_versions=((12, 4),))))
    assert exact[RTX]["availability"] == "LOW" and exact[L40S]["availability"] == "NONE"
    # a machine whose CUDA is unknown meets every CUDA filter, as placement ignores it there
    assert exact["nvidia-custom-x"]["availability"] == "LOW"


def test_without_include_no_availability_member_is_present() -> None:
    for entry in map(shown, cat.gpu_types(MACHINES, GpuQuery())):
        assert not {"availability", "dataCenters", "cudaVersions", "stock"} & entry.keys()
    assert cat.gpu_type_entry(MACHINES, "NVIDIA H200", AVAILABLE) is None


def test_cpu_flavors_come_from_the_flavor_label_with_vcpus_and_memory_per_vcpu() -> None:
    [cpu] = map(shown, cat.cpu_types(MACHINES, CpuQuery()))
    assert cpu == {
        "id": "cpu3c", "name": "Compute-Optimized", "group": "cpu3",
        "vcpu": {"min": 2, "max": 16}, "ramGbPerVcpu": 4.0,
        "price": {"securePerVcpu": 0.0, "serverlessPerVcpu": 0.0},
    }  # fmt: skip
    [four] = map(shown, cat.cpu_types(MACHINES, CpuQuery(availability=True, vcpu_count=4)))
    assert four["availability"] == "LOW"  # 10 free vCPUs: 2 workers of 4
    assert four["dataCenters"] == [{"id": "EU-RO-1", "name": "EU-RO-1", "availability": "LOW"}]
    assert cat.cpu_type_entry(MACHINES, "cpu5g", CpuQuery()) is None


def test_data_centers_are_the_zones_with_region_and_filters() -> None:
    dcs = by_id(cat.data_centers(MACHINES, DataCenterQuery()))
    assert dcs == {
        "EU-RO-1": {
            "id": "EU-RO-1", "name": "EU-RO-1", "region": "EUROPE", "globalNetwork": False,
            "networkVolumeTypes": ["STANDARD"], "compliance": [],
        },
        "US-TX-3": {
            "id": "US-TX-3", "name": "US-TX-3", "region": "NORTH_AMERICA",
            "globalNetwork": False, "networkVolumeTypes": ["STANDARD"], "compliance": [],
        },
    }  # fmt: skip

    def ids(**kw: Any) -> list[str]:
        return [d.id for d in cat.data_centers(MACHINES, DataCenterQuery(**kw))]

    assert ids(regions=frozenset({"EUROPE", "ASIA"})) == ["EU-RO-1"]  # OR
    assert ids(volume_types=frozenset({"STANDARD"})) == ["EU-RO-1", "US-TX-3"]
    assert ids(volume_types=frozenset({"STANDARD", "HIGH_PERFORMANCE"})) == []  # AND
    assert ids(compliance=frozenset({"GDPR"})) == []
    assert ids(global_network=False) == ["EU-RO-1", "US-TX-3"] and ids(global_network=True) == []
    assert ids(regions=frozenset({"EUROPE"}), global_network=True) == []  # families AND


def test_data_center_availability_lists_its_gpu_types_and_cpu_flavors() -> None:
    query = DataCenterQuery(gpu_availability=True, cpu_availability=True)
    eu = shown(cat.data_center_entry(MACHINES, "EU-RO-1", query))
    assert eu["gpuAvailability"] == [{"id": RTX, "name": "RTX 4090", "availability": "LOW"}]
    assert eu["cpuAvailability"] == [{"id": "cpu3c", "name": "cpu3c", "availability": "MEDIUM"}]
    us = shown(cat.data_center_entry(MACHINES, "US-TX-3", DataCenterQuery(gpu_availability=True)))
    assert "cpuAvailability" not in us
    assert cat.data_center_entry(MACHINES, "AP-JP-1", query) is None


# -- what the serverless create view asks ------------------------------------------------------


def test_placement_problem_says_why_no_worker_could_start_on_these_machines() -> None:
    assert cat.placement_problem(MACHINES, ["ADA_24"]) is None
    assert cat.placement_problem(MACHINES, ["ADA_24"], data_center_ids=["US-TX-3"]) is None
    assert "no node of this cluster has a GPU of the pools HOPPER_141" in str(
        cat.placement_problem(MACHINES, ["HOPPER_141"])
    )
    assert "(they are in: EU-RO-1, US-TX-3)" in str(
        cat.placement_problem(MACHINES, ["ADA_24"], data_center_ids=["AP-JP-1"])
    )
    too_many = cat.placement_problem(MACHINES, ["ADA_24"], gpu_count=5)
    assert "the most on one node: 4" in str(too_many)
    assert cat.placement_problem(MACHINES, ["ADA_48_PRO", "ADA_24"], [RTX], gpu_count=8) is None
    # an Endpoint's gpuTypeIds (what every view stores), v1's or kubectl's too
    assert cat.gpu_types_problem(MACHINES, [L40S], ["US-TX-3"], 8) is None
    assert cat.gpu_types_problem(MACHINES, ["NVIDIA H200"]) == (
        "no node of this cluster has a GPU of the types NVIDIA H200"
    )
    assert cat.gpu_types_problem(MACHINES, []) is None
    # busy is not a problem: a cluster frees GPUs (the catalog's availability says "now")
    assert cat.placement_problem([C], ["ADA_24"]) is None


def test_cpu_placement_problem_says_why_no_cpu_worker_could_start() -> None:
    assert cat.cpu_placement_problem(MACHINES, [("cpu3c", 16)]) is None
    assert cat.cpu_placement_problem(MACHINES, [("cpu5g", 2), ("cpu3c", 2)], ["EU-RO-1"]) is None
    assert cat.cpu_placement_problem(MACHINES, []) is None
    assert cat.placement_problem(MACHINES, []) is None
    missing = cat.cpu_placement_problem(MACHINES, [("cpu5g", 2)])
    assert missing == "no node of this cluster has the CPU flavor cpu5g (its flavors: cpu3c)"
    elsewhere = cat.cpu_placement_problem(MACHINES, [("cpu3c", 2)], ["US-TX-3"])
    assert str(elsewhere).endswith("is in the data centers US-TX-3 (they are in: EU-RO-1)")
    too_big = cat.cpu_placement_problem(MACHINES, [("cpu3c", 32)])
    assert str(too_big).endswith("has that many vCPUs (the most: 16)")


# -- query parsing (the routes' 400 and 422 are tested over HTTP in test_catalog_api) ---------


def test_queries_become_the_filters_they_name() -> None:
    q = gpu_query(MultiDict(include="AVAILABILITY", product="SERVERLESS,POD", count="2",
                            countryCodes="FR,DE", minCudaVersion="12"))  # fmt: skip
    assert q == GpuQuery(True, 2, frozenset({"FR", "DE"}), (), (12, 0))
    q = gpu_query(MultiDict(include="AVAILABILITY", product="POD", cudaVersions="12.4,12.8"))
    assert q.cuda_versions == ((12, 4), (12, 8))
    assert gpu_query(MultiDict(includeAvailability="true")) == GpuQuery()  # not RunPod's: ignored
    assert cpu_query(MultiDict(include="AVAILABILITY", product="SERVERLESS", vcpuCount="8")) == (
        CpuQuery(True, 8)
    )
    dq = data_center_query(MultiDict(include="CPU_AVAILABILITY", regions="EUROPE,ASIA",
                                     globalNetwork="false"))  # fmt: skip
    assert dq == DataCenterQuery(False, True, frozenset({"EUROPE", "ASIA"}), global_network=False)
    single = data_center_query(MultiDict(include="GPU_AVAILABILITY", regions="MARS"), single=True)
    assert single == DataCenterQuery(gpu_availability=True)  # the {id} form reads only include


# -- nodes and pods → machines ---------------------------------------------------------------


def node(name: str, labels: dict[str, str], allocatable: dict[str, str], **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(node_name: str, phase: str = "Running", **resources: Any) -> dict:
    return {
        "spec": {"nodeName": node_name, "containers": [{"resources": resources}]},
        "status": {"phase": phase},
    }


GFD = {
    "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4",
    "topology.kubernetes.io/zone": "EU-RO-1",
    "topology.kubernetes.io/region": "eu-central",
}
ALLOC = {"nvidia.com/gpu": "4", "cpu": "31500m", "memory": "128Gi"}


def test_a_gfd_node_is_a_machine_of_runpods_type_with_free_gpus_and_cpus() -> None:
    pods = [
        pod("g1", requests={"nvidia.com/gpu": "1", "cpu": "2"}, limits={"nvidia.com/gpu": "1"}),
        pod("g1", limits={"nvidia.com/gpu": "2", "cpu": "500m"}),  # a limit alone is the request
        pod("g1", "Succeeded", requests={"nvidia.com/gpu": "1"}),  # finished: holds nothing
        pod("other", requests={"nvidia.com/gpu": "1"}),
    ]
    [m] = machines_from([node("g1", GFD, ALLOC)], pods, settings())
    assert m == Machine(
        "g1", "EU-RO-1", "eu-central", "RO", RTX, 0, 4, 1, "12.4", "", 31.5, 29.0, 128.0
    )


def test_a_cordoned_or_not_ready_node_has_nothing_free() -> None:
    cordoned = node("c", GFD, ALLOC, unschedulable=True)
    not_ready = node("n", GFD, ALLOC)
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    for m in machines_from([cordoned, not_ready], [], settings()):
        assert (m.gpus, m.gpus_free, m.vcpus_free) == (4, 0, 0)


def test_node_labels_read_back_into_runpod_ids_for_each_preset() -> None:
    def type_of(preset: str, labels: dict[str, str], **kw: Any) -> str:
        labelling = settings(gpu_labels=preset, **kw).gpu_labelling()
        return gpu_type_of(labels, labelling, label_types(labelling))

    assert type_of("nvidia-gfd", {"nvidia.com/gpu.product": "NVIDIA-L40S"}) == L40S
    assert type_of("nvidia-gfd", {"nvidia.com/gpu.product": "Tesla-T4"}) == "NVIDIA T4"
    assert type_of("gke", {"cloud.google.com/gke-accelerator": "nvidia-l4"}) == L4
    assert type_of("gke", {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}) == (
        "NVIDIA H100 80GB HBM3"
    )
    # `a100` names three types on Karpenter: the node's GPU memory tells them apart
    a100 = {"karpenter.k8s.aws/instance-gpu-name": "a100"}
    memory = "karpenter.k8s.aws/instance-gpu-memory"
    assert type_of("karpenter", {**a100, memory: "40960"}) == "NVIDIA A100-SXM4-40GB"
    eighty = type_of("karpenter", {**a100, memory: "81920"})
    assert eighty in ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")
    # a value no table maps is the id as written; the admin's map wins over the preset's
    assert type_of("gke", {"cloud.google.com/gke-accelerator": "tpu-x"}) == "tpu-x"
    custom = {"gpu_type_label": "example.com/gpu", "gpu_type_values": {L4: ["l4-box"]}}
    assert type_of("custom", {"example.com/gpu": "l4-box"}, **custom) == L4
    assert type_of("nvidia-gfd", {}) == ""


def test_zone_region_country_and_flavor_come_from_the_configured_labels() -> None:
    s = settings(datacenter_label="example.com/dc", cpu_flavor_label="example.com/flavor")
    labels = {"example.com/dc": "rack-7", "lockgate.dev/country": "DE",
              "example.com/flavor": "cpu5g"}  # fmt: skip
    [m] = machines_from([node("n", labels, {"cpu": "8", "memory": "32Gi"})], [], s)
    found = (m.data_center, m.country, m.cpu_flavor, m.gpu_type, m.gpus)
    assert found == ("rack-7", "DE", "cpu5g", "", 0)


def test_pod_requests_take_the_larger_of_containers_and_init_containers_plus_overhead() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1"}}},
                       {"resources": {"requests": {"cpu": "500m"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}],
        "overhead": {"cpu": "100m"},
    }  # fmt: skip
    assert pod_requests({"spec": spec}) == {"cpu": 2.1, "nvidia.com/gpu": 1.0}


# -- dev mode's machine ------------------------------------------------------------------------


def test_nvidia_smi_output_is_read_as_gpu_models_and_cuda() -> None:
    listing = f"{RTX}, 24564\n{RTX}, 24564\nNVIDIA L4, 23034\n\n"
    assert parse_gpus(listing) == {(RTX, 24): 2, (L4, 22): 1}
    banner = "| NVIDIA-SMI 550.54   Driver Version: 550.54   CUDA Version: 12.4 |"
    assert parse_cuda(banner) == "12.4"
    assert parse_cuda("") == ""


def test_dev_mode_without_nvidia_smi_is_one_cpu_machine_in_the_local_data_center() -> None:
    [m] = asyncio.run(LocalCatalog(nvidia_smi="").machines())
    assert (m.data_center, m.cpu_flavor, m.gpus) == ("local", DEV_CPU_FLAVOR, 0)
    assert m.vcpus == os.cpu_count() and m.vcpus_free == m.vcpus and m.memory_gb > 0


def test_dev_mode_lists_the_gpus_nvidia_smi_reports(tmp_path: Path) -> None:
    """`nvidia-smi` (absent here) stood in for by a script printing what it prints."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "" ]; then echo "| Driver Version: 550.54  CUDA Version: 12.4 |"; exit 0; fi\n'
        f'printf "{RTX}, 24564\\n{RTX}, 24564\\n"\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    [m] = asyncio.run(LocalCatalog(nvidia_smi=str(tool)).machines())
    assert (m.gpu_type, m.gpus, m.gpus_free, m.gpu_memory, m.cuda) == (RTX, 2, 2, 24, "12.4")
    assert m.cpu_flavor == DEV_CPU_FLAVOR
