"""`/v2/catalog/gpus`, `/cpus`, `/datacenters` (and `/{id}` of each): RunPod's catalog of
the machines workers may run on, from the process's `Catalog` (`manage.catalog`).

The query parameters are RunPod's, comma-separated (`explode: false`): a value outside its
enum or pattern is a 422 listing each; a combination RunPod refuses is a 400 naming it
(availability filters without `include=AVAILABILITY`, `include` without `product`, both CUDA
filters, a `vcpuCount` that is no power of two, a parameter given twice). Parameters RunPod
does not define are ignored, as RunPod ignores them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiohttp import web
from multidict import MultiMapping

from lockgate.gateway.errors import BadRequest, NotFound, Unavailable, Unprocessable
from lockgate.manage import catalog as cat
from lockgate.manage.catalog import Catalog, CpuQuery, DataCenterQuery, GpuQuery, Machine, shown
from lockgate.manage.v2.documented import Operation, documented

if TYPE_CHECKING:
    from lockgate.manage.v2 import Backends

CATALOG: web.AppKey[Catalog | None] = web.AppKey("catalog", object)  # type: ignore[arg-type]
GPU_PRODUCTS = ("POD", "CLUSTER", "SERVERLESS")
CPU_PRODUCTS = ("POD", "SERVERLESS")
CLOUDS = ("SECURE", "COMMUNITY")
DC_INCLUDES = ("GPU_AVAILABILITY", "CPU_AVAILABILITY")
GPU_AVAILABILITY_ONLY = ("count", "cloud", "countryCodes", "cudaVersions", "minCudaVersion")


class _Params:
    """One request's query, read parameter by parameter; violations gathered for one 422."""

    def __init__(self, query: MultiMapping[str]) -> None:
        self.query = query
        self.errors: list[str] = []

    def raw(self, name: str) -> str | None:
        values = self.query.getall(name, [])
        if len(values) > 1:
            raise BadRequest(
                f"{name}: given {len(values)} times; send one comma-separated value ({name}=A,B)"
            )
        return values[0] if values else None

    def given(self, names: Sequence[str]) -> list[str]:
        return [n for n in names if n in self.query]

    def items(
        self, name: str, *, enum: Sequence[str] = (), pattern: str = "", max_items: int = 0
    ) -> list[str]:
        raw = self.raw(name)
        if raw is None:
            return []
        values = [v.strip() for v in raw.split(",")]
        for v in values:
            if enum and v not in enum:
                self.errors.append(f"{name}: {v!r} is not one of {', '.join(enum)}")
            elif pattern and not re.fullmatch(pattern, v):
                self.errors.append(f"{name}: {v!r} does not match {pattern}")
        if max_items and len(values) > max_items:
            self.errors.append(f"{name}: at most {max_items} item(s), got {len(values)}")
        return list(dict.fromkeys(values))

    def integer(self, name: str, default: int, minimum: int) -> int:
        raw = self.raw(name)
        if raw is None:
            return default
        if not re.fullmatch(r"[+-]?\d{1,9}", raw.strip()):
            self.errors.append(f"{name}: {raw!r} is not an integer")
            return default
        if int(raw) < minimum:
            self.errors.append(f"{name}: must be at least {minimum}, got {int(raw)}")
            return default
        return int(raw)

    def boolean(self, name: str) -> bool | None:
        raw = self.raw(name)
        if raw is None:
            return None
        if raw.strip().lower() not in ("true", "false"):
            self.errors.append(f"{name}: {raw!r} is not a boolean (true or false)")
            return None
        return raw.strip().lower() == "true"

    def checked(self) -> None:
        """422 listing every violation found so far."""
        if self.errors:
            raise Unprocessable(
                "Request validation failed: " + "; ".join(self.errors[:5]), errors=self.errors
            )


def _availability(p: _Params, products: Sequence[str], only_with: Sequence[str]) -> bool:
    """`include=AVAILABILITY` and `product` (checked as RunPod does: 400 either way alone),
    and the parameters valid only with them."""
    include = p.items("include", enum=("AVAILABILITY",), max_items=1)
    product = p.items("product", enum=products)
    p.checked()
    if include and not product:
        raise BadRequest(
            "product is required with include=AVAILABILITY "
            f"(one or more of {', '.join(products)}: availability is per product)"
        )
    if product and not include:
        raise BadRequest("product is valid only with include=AVAILABILITY")
    if not include and (stray := p.given(only_with)):
        raise BadRequest(f"{', '.join(stray)}: valid only with include=AVAILABILITY")
    return bool(include)


def gpu_query(query: MultiMapping[str]) -> GpuQuery:
    """`/v2/catalog/gpus`' query as a `GpuQuery`; 422 for malformed values, 400 for the
    combinations RunPod refuses."""
    p = _Params(query)
    count = p.integer("count", 1, 1)
    p.items("cloud", enum=CLOUDS, max_items=1)  # one cloud here: both give the same answer
    countries = p.items("countryCodes", pattern=r"[A-Z]{2}")
    versions = p.items("cudaVersions", pattern=r"\d+\.\d+")
    floor = p.items("minCudaVersion", pattern=r"\d+(\.\d+)?", max_items=1)
    availability = _availability(p, GPU_PRODUCTS, GPU_AVAILABILITY_ONLY)
    if versions and floor:
        raise BadRequest("cudaVersions and minCudaVersion are mutually exclusive: send one")
    return GpuQuery(
        availability=availability,
        count=count,
        countries=frozenset(countries),
        cuda_versions=tuple(v for v in map(cat.parse_cuda, versions) if v),
        min_cuda=cat.parse_cuda(floor[0]) if floor else None,
    )


def cpu_query(query: MultiMapping[str]) -> CpuQuery:
    """`/v2/catalog/cpus`' query as a `CpuQuery` (422 malformed, 400 refused combinations)."""
    p = _Params(query)
    vcpus = p.integer("vcpuCount", 2, 2)
    availability = _availability(p, CPU_PRODUCTS, ("vcpuCount",))
    if vcpus & (vcpus - 1):
        raise BadRequest(f"vcpuCount must be a power of two, got {vcpus}")
    return CpuQuery(availability=availability, vcpu_count=vcpus)


def data_center_query(query: MultiMapping[str], *, single: bool = False) -> DataCenterQuery:
    """`/v2/catalog/datacenters`' query (the `{id}` form reads only `include`)."""
    p = _Params(query)
    include = p.items("include", enum=DC_INCLUDES)
    if single:
        p.checked()
        return DataCenterQuery("GPU_AVAILABILITY" in include, "CPU_AVAILABILITY" in include)
    regions = p.items("regions", enum=cat.REGIONS)
    volumes = p.items("networkVolumeTypes", enum=cat.VOLUME_TYPES)
    compliance = p.items("compliance", enum=cat.COMPLIANCE)
    global_network = p.boolean("globalNetwork")
    p.checked()
    return DataCenterQuery(
        gpu_availability="GPU_AVAILABILITY" in include,
        cpu_availability="CPU_AVAILABILITY" in include,
        regions=frozenset(regions),
        volume_types=frozenset(volumes),
        compliance=frozenset(compliance),
        global_network=global_network,
    )


async def _machines(request: web.Request) -> list[Machine]:
    catalog = request.app[CATALOG]
    if catalog is None:
        raise Unavailable("this process has no catalog of machines")
    return list(await catalog.machines())


@documented(
    Operation(
        "listGpuTypes",
        "The GPU types of this cluster's nodes",
        answer=cat.GpuType,
        listed_as="gpus",
        errors=(400, 422),
    )
)
async def list_gpus(request: web.Request) -> web.Response:
    query = gpu_query(request.query)
    entries = cat.gpu_types(await _machines(request), query)
    return web.json_response({"gpus": [shown(e) for e in entries]})


@documented(Operation("getGpuType", "One GPU type", answer=cat.GpuType, errors=(400, 404, 422)))
async def get_gpu(request: web.Request) -> web.Response:
    query, type_id = gpu_query(request.query), request.match_info["id"]
    entry = cat.gpu_type_entry(await _machines(request), type_id, query)
    if entry is None:
        raise NotFound(f"no GPU type {type_id!r} in this catalog (GET /v2/catalog/gpus lists them)")
    return web.json_response(shown(entry))


@documented(
    Operation(
        "listCpuTypes",
        "The CPU flavors of this cluster's nodes",
        answer=cat.CpuType,
        listed_as="cpus",
        errors=(400, 422),
    )
)
async def list_cpus(request: web.Request) -> web.Response:
    query = cpu_query(request.query)
    entries = cat.cpu_types(await _machines(request), query)
    return web.json_response({"cpus": [shown(e) for e in entries]})


@documented(Operation("getCpuType", "One CPU flavor", answer=cat.CpuType, errors=(400, 404, 422)))
async def get_cpu(request: web.Request) -> web.Response:
    query, flavor = cpu_query(request.query), request.match_info["id"]
    entry = cat.cpu_type_entry(await _machines(request), flavor, query)
    if entry is None:
        raise NotFound(
            f"no CPU flavor {flavor!r} in this catalog (GET /v2/catalog/cpus lists them)"
        )
    return web.json_response(shown(entry))


@documented(
    Operation(
        "listDataCenters",
        "The data centers (zones) of this cluster's nodes",
        answer=cat.DataCenter,
        listed_as="dataCenters",
        errors=(400, 422),
    )
)
async def list_data_centers(request: web.Request) -> web.Response:
    query = data_center_query(request.query)
    entries = cat.data_centers(await _machines(request), query)
    return web.json_response({"dataCenters": [shown(e) for e in entries]})


@documented(
    Operation("getDataCenter", "One data center", answer=cat.DataCenter, errors=(400, 404, 422))
)
async def get_data_center(request: web.Request) -> web.Response:
    query, dc = data_center_query(request.query, single=True), request.match_info["id"]
    entry = cat.data_center_entry(await _machines(request), dc, query)
    if entry is None:
        raise NotFound(
            f"no data center {dc!r} in this catalog (GET /v2/catalog/datacenters lists them)"
        )
    return web.json_response(shown(entry))


def create_app(backends: Backends) -> web.Application:
    """The catalog's sub-application, mounted at `/v2/catalog`, reading `backends.catalog`."""
    from lockgate.manage.v2 import v2_app  # the package imports this module

    app = v2_app(backends)
    app[CATALOG] = backends.catalog
    app.router.add_get("/gpus", list_gpus)
    app.router.add_get("/gpus/{id}", get_gpu)
    app.router.add_get("/cpus", list_cpus)
    app.router.add_get("/cpus/{id}", get_cpu)
    app.router.add_get("/datacenters", list_data_centers)
    app.router.add_get("/datacenters/{id}", get_data_center)
    return app
