"""The catalog (`/v2/catalog/gpus`, `/cpus`, `/datacenters`): what the machines that run
workers offer, in RunPod's shapes, and what it can and cannot satisfy (pure).

The machines come from a `Catalog` (the cluster's nodes, or dev mode's own machine); every
decision here is a function of that list and a query:
- a GPU type is listed once per type id found on some machine; `maxCount` is the most GPUs
  of it on one machine (a worker never spans machines); `secure` is true and `community`
  false (a self-hosted cluster is one's own hardware); prices are 0: none configured;
- availability counts the workers that could start now: free GPUs (allocatable minus what
  pods request) divided by `count` per machine (vCPUs by `vcpuCount` for a CPU flavor),
  summed: 0 NONE, 1-2 LOW, 3-7 MEDIUM, 8 or more HIGH (`level`);
- a data center is a machine's zone; its continental region is read off its region (or
  zone) name (`region_group`); a CPU flavor is a machine's flavor label.
`placement_problem` (`gpu_types_problem` for type ids) and `cpu_placement_problem` tell
the serverless create view why no worker could start on the machines there are (the
endpoint is accepted and says why); whether a `gpu.pools` selection names anything at all
(else its 400) is `models.gpupools.pool_problem`'s.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel

from lockgate.models.gpupools import types_of
from lockgate.models.gputypes import gpu_type, manufacturer_of, pool_of

Availability = Literal["NONE", "LOW", "MEDIUM", "HIGH"]
# Workers that could start now -> availability: below LOW_FROM none, below MEDIUM_FROM low…
LOW_FROM, MEDIUM_FROM, HIGH_FROM = 1, 3, 8
REGIONS = (
    "NORTH_AMERICA", "SOUTH_AMERICA", "EUROPE", "ASIA", "MIDDLE_EAST", "AFRICA", "OCEANIA",
    "ANTARCTICA", "UNKNOWN",
)  # fmt: skip
VOLUME_TYPES = ("STANDARD", "HIGH_PERFORMANCE")
COMPLIANCE = (
    "GDPR", "ISO_IEC_27001", "ISO_14001", "PCI_DSS", "HITRUST", "SOC_1_TYPE_2", "SOC_2_TYPE_2",
    "SOC_3_TYPE_2", "ITAR", "FISMA_HIGH", "HIPAA", "RENEWABLE",
)  # fmt: skip
# Network volumes are PersistentVolumeClaims of one storage class: one tier, everywhere.
DATA_CENTER_VOLUME_TYPES = ["STANDARD"]


@dataclass(frozen=True, slots=True)
class Machine:
    """One machine workers may run on (a node, or dev mode's own), as the catalog needs it.
    Empty strings are unknown; counts are what is allocatable and what is free now."""

    name: str
    data_center: str = ""
    region: str = ""  # the region's own name (`us-east1`), read into a `region_group`
    country: str = ""  # ISO 3166-1 alpha-2
    gpu_type: str = ""  # RunPod's type id (or the node's label value, when no table knows it)
    gpu_memory: int = 0  # GB of one GPU, as the machine reports it (0: unknown)
    gpus: int = 0
    gpus_free: int = 0
    cuda: str = ""  # newest CUDA the driver runs, `major.minor`
    cpu_flavor: str = ""
    vcpus: float = 0
    vcpus_free: float = 0
    memory_gb: float = 0


class Catalog(Protocol):
    """Where the catalog's machines come from (the cluster's nodes; dev mode's machine)."""

    async def machines(self) -> Sequence[Machine]:
        """Every machine workers may run on, as it is now."""
        ...


# -- RunPod's shapes (openapi.json: GpuType, CpuType, DataCenter) ------------------------------


class GpuPrice(BaseModel):
    secure: float
    community: float


class GpuMaxCount(BaseModel):
    secure: int
    community: int


class PlaceAvailability(BaseModel):
    id: str
    name: str
    availability: Availability


class CudaVersion(BaseModel):
    version: str
    available: bool


class GpuStock(BaseModel):
    """lockgate's own (RunPod has no such field): GPUs of the type in the cluster, and
    how many no pod holds now."""

    total: int
    free: int


class GpuType(BaseModel):
    id: str
    name: str
    pool: str | None
    manufacturer: Literal["NVIDIA", "AMD", "UNKNOWN"]
    memory: int
    secure: bool
    community: bool
    price: GpuPrice
    maxCount: GpuMaxCount
    availability: Availability | None = None
    dataCenters: list[PlaceAvailability] | None = None
    cudaVersions: list[CudaVersion] | None = None
    stock: GpuStock | None = None


class VcpuRange(BaseModel):
    min: int
    max: int


class CpuPrice(BaseModel):
    securePerVcpu: float
    serverlessPerVcpu: float


class CpuType(BaseModel):
    id: str
    name: str
    group: str
    vcpu: VcpuRange
    ramGbPerVcpu: float
    price: CpuPrice
    availability: Availability | None = None
    dataCenters: list[PlaceAvailability] | None = None


class DataCenter(BaseModel):
    id: str
    name: str
    region: str
    globalNetwork: bool
    networkVolumeTypes: list[str]
    compliance: list[str]
    gpuAvailability: list[PlaceAvailability] | None = None
    cpuAvailability: list[PlaceAvailability] | None = None


def shown(model: BaseModel) -> dict[str, object]:
    """A catalog entry as JSON: the availability members only when they were asked for."""
    return model.model_dump(mode="json", exclude_unset=True)


# -- queries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuQuery:
    """`/v2/catalog/gpus`' filters, once validated (`manage.v2.catalog`)."""

    availability: bool = False
    count: int = 1
    countries: frozenset[str] = frozenset()
    cuda_versions: tuple[tuple[int, int], ...] = ()
    min_cuda: tuple[int, int] | None = None


@dataclass(frozen=True)
class CpuQuery:
    availability: bool = False
    vcpu_count: int = 2


@dataclass(frozen=True)
class DataCenterQuery:
    gpu_availability: bool = False
    cpu_availability: bool = False
    regions: frozenset[str] = frozenset()
    volume_types: frozenset[str] = frozenset()
    compliance: frozenset[str] = frozenset()
    global_network: bool | None = None


@dataclass
class _Tally:
    """Machines of one kind, and how many workers could start on them now."""

    machines: list[Machine] = field(default_factory=list)
    placements: int = 0


def level(placements: int) -> Availability:
    """How many workers could start now, as RunPod's availability level."""
    if placements >= HIGH_FROM:
        return "HIGH"
    if placements >= MEDIUM_FROM:
        return "MEDIUM"
    return "LOW" if placements >= LOW_FROM else "NONE"


def parse_cuda(version: str) -> tuple[int, int] | None:
    """`12.4` → (12, 4); `12` → (12, 0); anything else → None."""
    match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*", version)
    return (int(match[1]), int(match[2] or 0)) if match else None


def _cuda_ok(machine: Machine, query: GpuQuery) -> bool:
    """A machine whose CUDA is unknown meets every CUDA filter, as it meets every
    `allowedCudaVersions` on such clusters (`kube.gpus`: no label, no constraint)."""
    version = parse_cuda(machine.cuda)
    if version is None:
        return True
    if query.cuda_versions and version not in query.cuda_versions:
        return False
    return query.min_cuda is None or version >= query.min_cuda


def _country_ok(machine: Machine, query: GpuQuery) -> bool:
    return not query.countries or machine.country in query.countries


def _places(machines: Iterable[Machine], free: dict[str, int]) -> list[PlaceAvailability]:
    """Per data center (machines without one are in none): the level of its workers."""
    by_dc: dict[str, int] = defaultdict(int)
    for m in machines:
        if m.data_center:
            by_dc[m.data_center] += free.get(m.name, 0)
    return [
        PlaceAvailability(id=dc, name=dc, availability=level(n)) for dc, n in sorted(by_dc.items())
    ]


def _gpu_name(type_id: str) -> str:
    info = gpu_type(type_id)
    return info.name if info else type_id


def _gpu_entry(type_id: str, machines: Sequence[Machine], query: GpuQuery) -> GpuType:
    """One GPU type as the catalog shows it (`machines`: those having it)."""
    info = gpu_type(type_id)
    memory = info.memory if info else max((m.gpu_memory for m in machines), default=0)
    entry = GpuType(
        id=type_id,
        name=_gpu_name(type_id),
        pool=pool_of(type_id),
        manufacturer=manufacturer_of(type_id),  # type: ignore[arg-type]
        memory=memory,
        secure=True,
        community=False,
        price=GpuPrice(secure=0, community=0),
        maxCount=GpuMaxCount(secure=max((m.gpus for m in machines), default=0), community=0),
    )
    if not query.availability:
        return entry
    in_countries = [m for m in machines if _country_ok(m, query)]
    scoped = [m for m in in_countries if _cuda_ok(m, query)]
    free = {m.name: m.gpus_free // max(1, query.count) for m in scoped}
    entry.availability = level(sum(free.values()))
    entry.stock = GpuStock(total=sum(m.gpus for m in scoped), free=_free_gpus(scoped))
    if scoped or not query.countries:
        entry.dataCenters = _places(scoped, free)
    cuda = _cuda_versions(in_countries, query)
    if cuda:
        entry.cudaVersions = cuda
    return entry


def _cuda_versions(machines: Sequence[Machine], query: GpuQuery) -> list[CudaVersion]:
    """The CUDA versions the type's machines run (narrowed by the CUDA filters), each
    available when one of them could start a worker now."""
    found: dict[tuple[int, int], bool] = {}
    for m in machines:
        version = parse_cuda(m.cuda)
        if version is not None and _cuda_ok(m, query):
            found[version] = found.get(version, False) or m.gpus_free >= query.count
    return [CudaVersion(version=f"{v[0]}.{v[1]}", available=a) for v, a in sorted(found.items())]


def _by_gpu_type(machines: Iterable[Machine]) -> dict[str, list[Machine]]:
    out: dict[str, list[Machine]] = defaultdict(list)
    for m in machines:
        if m.gpu_type and m.gpus > 0:
            out[m.gpu_type].append(m)
    return out


def gpu_types(machines: Iterable[Machine], query: GpuQuery) -> list[GpuType]:
    """Every GPU type on the machines, by memory then id; with `countryCodes`, only the
    types some machine in those countries has."""
    entries = []
    for type_id, having in _by_gpu_type(machines).items():
        if (
            query.availability
            and query.countries
            and not any(_country_ok(m, query) for m in having)
        ):
            continue
        entries.append(_gpu_entry(type_id, having, query))
    return sorted(entries, key=lambda e: (e.memory, e.id))


def gpu_type_entry(machines: Iterable[Machine], type_id: str, query: GpuQuery) -> GpuType | None:
    """One GPU type (availability NONE and no `dataCenters` when none is in the countries
    asked); None when no machine has it."""
    having = _by_gpu_type(machines).get(type_id)
    return _gpu_entry(type_id, having, query) if having else None


# -- CPU flavors --------------------------------------------------------------------------------

_FLAVOR = re.compile(r"cpu(\d+)([cgm])", re.IGNORECASE)
_FLAVOR_NAMES = {"c": "Compute-Optimized", "g": "General Purpose", "m": "Memory-Optimized"}


def _power_of_two_at_most(n: float) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def _cpu_entry(flavor: str, machines: Sequence[Machine], query: CpuQuery) -> CpuType:
    match = _FLAVOR.fullmatch(flavor)
    most = _power_of_two_at_most(max(m.vcpus for m in machines))
    per_vcpu = min(m.memory_gb / m.vcpus for m in machines if m.vcpus > 0) if most else 0
    entry = CpuType(
        id=flavor,
        name=_FLAVOR_NAMES[match[2].lower()] if match else flavor,
        group=f"cpu{match[1]}" if match else flavor,
        vcpu=VcpuRange(min=min(2, most), max=most),
        ramGbPerVcpu=round(per_vcpu, 1),
        price=CpuPrice(securePerVcpu=0, serverlessPerVcpu=0),
    )
    if query.availability:
        free = {m.name: int(m.vcpus_free // query.vcpu_count) for m in machines}
        entry.availability = level(sum(free.values()))
        entry.dataCenters = _places(machines, free)
    return entry


def _by_flavor(machines: Iterable[Machine]) -> dict[str, list[Machine]]:
    out: dict[str, list[Machine]] = defaultdict(list)
    for m in machines:
        if m.cpu_flavor and m.vcpus > 0:
            out[m.cpu_flavor].append(m)
    return out


def cpu_types(machines: Iterable[Machine], query: CpuQuery) -> list[CpuType]:
    """Every CPU flavor of the machines, by id."""
    return [_cpu_entry(f, ms, query) for f, ms in sorted(_by_flavor(machines).items())]


def cpu_type_entry(machines: Iterable[Machine], flavor: str, query: CpuQuery) -> CpuType | None:
    having = _by_flavor(machines).get(flavor)
    return _cpu_entry(flavor, having, query) if having else None


# -- data centers -------------------------------------------------------------------------------

# Cloud region names (AWS, GCP, Azure, RunPod's `EU-RO-1`) -> continental region; first match.
_REGION_PATTERNS = [
    (r"(australia|ap-southeast-[24]|oc-|nz|newzealand)", "OCEANIA"),
    (r"((us|ca|mx|na)(-|\d|$)|northamerica|canada|mexico|[a-z]*us\d*$)", "NORTH_AMERICA"),
    (r"(sa-|southamerica|brazil|chile)", "SOUTH_AMERICA"),
    (r"(eu|uk|europe|france|germany|switzerland|norway|sweden|poland|italy|spain|"
     r"westeurope|northeurope)", "EUROPE"),
    (r"(me-|il-|uae|qatar|israel)", "MIDDLE_EAST"),
    (r"(af-|africa|southafrica)", "AFRICA"),
    (r"(ap-|as-|asia|japan|korea|india|eastasia|southeastasia)", "ASIA"),
    (r"antarctica", "ANTARCTICA"),
]  # fmt: skip


def region_group(*names: str) -> str:
    """The continental region (RunPod's DataCenterRegion) of the first of `names` (a region,
    then a zone) that reads as one; UNKNOWN when none does."""
    for name in names:
        lowered = name.strip().lower()
        for pattern, group in _REGION_PATTERNS:
            if lowered and re.match(pattern, lowered):
                return group
    return "UNKNOWN"


def _data_center(dc: str, machines: Sequence[Machine], query: DataCenterQuery) -> DataCenter:
    region = next((m.region for m in machines if m.region), "")
    entry = DataCenter(
        id=dc,
        name=dc,
        region=region_group(region, dc),
        globalNetwork=False,
        networkVolumeTypes=DATA_CENTER_VOLUME_TYPES,
        compliance=[],
    )
    if query.gpu_availability:
        gpus = sorted(_by_gpu_type(machines).items())
        entry.gpuAvailability = [
            PlaceAvailability(id=t, name=_gpu_name(t), availability=level(_free_gpus(ms)))
            for t, ms in gpus
        ]
    if query.cpu_availability:  # workers of the smallest vcpuCount RunPod takes, 2
        flavors = sorted(_by_flavor(machines).items())
        entry.cpuAvailability = [
            PlaceAvailability(id=f, name=f, availability=level(_free_vcpus(ms, 2)))
            for f, ms in flavors
        ]
    return entry


def _free_gpus(machines: Iterable[Machine]) -> int:
    return sum(m.gpus_free for m in machines)


def _free_vcpus(machines: Iterable[Machine], per_worker: int) -> int:
    return sum(int(m.vcpus_free // per_worker) for m in machines)


def _matches(entry: DataCenter, query: DataCenterQuery) -> bool:
    """Filter families combine with AND; regions OR, volume types and compliance AND."""
    return (
        (not query.regions or entry.region in query.regions)
        and query.volume_types <= set(entry.networkVolumeTypes)
        and query.compliance <= set(entry.compliance)
        and (query.global_network is None or entry.globalNetwork == query.global_network)
    )


def _by_data_center(machines: Iterable[Machine]) -> dict[str, list[Machine]]:
    out: dict[str, list[Machine]] = defaultdict(list)
    for m in machines:
        if m.data_center:
            out[m.data_center].append(m)
    return out


def data_centers(machines: Iterable[Machine], query: DataCenterQuery) -> list[DataCenter]:
    """Every data center (zone) of the machines that meets the filters, by id."""
    entries = [_data_center(dc, ms, query) for dc, ms in sorted(_by_data_center(machines).items())]
    return [e for e in entries if _matches(e, query)]


def data_center_entry(
    machines: Iterable[Machine], dc: str, query: DataCenterQuery
) -> DataCenter | None:
    having = _by_data_center(machines).get(dc)
    return _data_center(dc, having, query) if having else None


# -- what the serverless create view asks -------------------------------------------------------


def placement_problem(
    machines: Iterable[Machine],
    pools: Sequence[str],
    excluded_types: Collection[str] = (),
    data_center_ids: Collection[str] = (),
    gpu_count: int = 1,
) -> str | None:
    """Why no worker of a v2 GPU selection (`gpu.pools` minus `gpu.excludedTypes`, valid:
    `models.gpupools.pool_problem` says when it names nothing at all, the create view's
    400) could ever start on these machines (`gpu_types_problem`); None when some machine
    could host one. The create view accepts the endpoint either way and shows this."""
    if not pools:
        return None
    types = types_of(pools, excluded_types)
    named = f"the pools {', '.join(pools)}"
    return gpu_types_problem(machines, types, data_center_ids, gpu_count, named=named)


def gpu_types_problem(
    machines: Iterable[Machine],
    gpu_type_ids: Sequence[str],
    data_center_ids: Collection[str] = (),
    gpu_count: int = 1,
    *,
    named: str = "",
) -> str | None:
    """Why no worker needing `gpu_count` GPUs of any of `gpu_type_ids` (an Endpoint's
    `gpuTypeIds`, as every view stores a selection) could ever start on these machines:
    no machine has one of the types, none of those is in `dataCenterIds`, or none has
    `gpu_count` of them; None when some machine could host one, or no type is asked.
    Whether one is free right now is the catalog's availability, not a problem: a busy
    cluster frees GPUs. `named`: how messages name the selection (default: the types)."""
    if not gpu_type_ids:
        return None
    named = named or f"the types {', '.join(gpu_type_ids)}"
    wanted_types = {t.strip() for t in gpu_type_ids}
    having = [m for m in machines if m.gpu_type in wanted_types and m.gpus > 0]
    if not having:
        return f"no node of this cluster has a GPU of {named}"
    if data_center_ids:
        wanted = {d.strip() for d in data_center_ids}
        found = sorted({m.data_center or "(none)" for m in having})
        having = [m for m in having if m.data_center in wanted]
        if not having:
            return (
                f"no node with a GPU of {named} is in the data centers "
                f"{', '.join(sorted(wanted))} (they are in: {', '.join(found)})"
            )
    most = max(m.gpus for m in having)
    if most < gpu_count:
        return (
            f"gpu.count {gpu_count}: no node has that many GPUs of {named} "
            f"(the most on one node: {most})"
        )
    return None


def cpu_placement_problem(
    machines: Iterable[Machine],
    cpu: Sequence[tuple[str, int]],
    data_center_ids: Collection[str] = (),
) -> str | None:
    """Why no worker of a CPU selection (`cpu[]` as (flavor id, vcpuCount) pairs, any of
    which will do) could ever start on these machines: no machine has any of the flavors,
    none of those is in `dataCenterIds`, or none has the vCPUs asked; None when some
    machine could host one (busy or not, as `placement_problem`). An empty `cpu` is the
    schema's to refuse: None."""
    if not cpu:
        return None
    wanted = {d.strip() for d in data_center_ids}
    flavors = {f for f, _ in cpu}
    having = [m for m in machines if m.cpu_flavor in flavors and m.vcpus > 0]
    named = ", ".join(sorted(flavors))
    if not having:
        known = sorted({m.cpu_flavor for m in machines if m.cpu_flavor}) or ["none"]
        return (
            f"no node of this cluster has the CPU flavor {named} (its flavors: {', '.join(known)})"
        )
    if wanted:
        found = sorted({m.data_center or "(none)" for m in having})
        having = [m for m in having if m.data_center in wanted]
        if not having:
            return (
                f"no node of the CPU flavor {named} is in the data centers "
                f"{', '.join(sorted(wanted))} (they are in: {', '.join(found)})"
            )
    if any(m.cpu_flavor == f and m.vcpus >= n for f, n in cpu for m in having):
        return None
    most = max(m.vcpus for m in having)
    return (
        f"cpu[].vcpuCount: no node of the CPU flavor {named} has that many vCPUs "
        f"(the most: {most:g})"
    )
