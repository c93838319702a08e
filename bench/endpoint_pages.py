"""`GET /v1/endpoints` at N Endpoints, unpaged against one page (issue 32, item 4).

A real kube-apiserver and etcd (envtest: `make envtest`), N Endpoints with a status as the
operator writes it (phase, counts, four conditions), and the management API as the chart
runs it (`lockgate.apps.manage.create_app`, the admin key in an embedded Redis). Prints
the p50 and size of each form of the list; nothing is asserted.

    python -m bench.endpoint_pages [--endpoints 1000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web
from kubernetes import client as k8s

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.report import Row, machine, table
from envtest import EnvTest, binaries_dir
from lockgate.apps.manage import control_plane_for, create_app, storage_for
from lockgate.dev.redis_server import EmbeddedRedis, free_port
from lockgate.kube.cluster import Cluster
from lockgate.kube.crds import API_VERSION, GROUP, VERSION
from lockgate.kube.settings import OperatorSettings
from lockgate.store import Registry, connect

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "bench-pages"
TARGET_S = 0.050  # issue 32: GET /v1/endpoints?limit=50 p50 at N = 1000
NOW = "2026-11-27T10:00:00Z"


def status(name: str) -> dict:
    """A Ready endpoint's status, as the operator writes it."""
    conditions = [
        ("WorkloadsApplied", "Applied", "Deployment and Secret applied"),
        ("MetricsAvailable", "MetricsRead", "the scaler reads the gateway's /metrics"),
        ("WorkersHealthy", "WorkersStart", "Worker pods schedule and start"),
        ("Ready", "Ready", "accepts jobs; no worker is wanted while the queue is empty"),
    ]
    return {
        "phase": "Ready",
        "endpointId": name,
        "jobApiUrl": f"https://jobs.example.test/v2/{name}/",
        "workers": {"desired": 0, "ready": 0, "idle": 0, "running": 0},
        "jobs": {"inQueue": 0, "inProgress": 0},
        "conditions": [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": NOW}
            for t, r, m in conditions
        ],
        "observedGeneration": 1,
        "replicas": 0,
        "selector": f"lockgate.dev/endpoint={name}",
    }


def populate(api: k8s.ApiClient, count: int) -> None:
    """The CRDs, the namespace and `count` Endpoints with their status."""
    ext = k8s.ApiextensionsV1Api(api)
    for path in sorted((REPO / "crds").glob("*.yaml")):
        ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    custom = k8s.CustomObjectsApi(api)
    args = (GROUP, VERSION, NAMESPACE, "endpoints")
    deadline = time.monotonic() + 60
    while True:  # until the API serves the new kind
        try:
            custom.list_namespaced_custom_object(*args)
            break
        except k8s.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

    def make(i: int) -> None:
        name = f"ep-{i:04d}"
        spec = {"templateId": "shared", "name": f"model {i}", "gpuTypeIds": ["NVIDIA L4"]}
        body = {"apiVersion": API_VERSION, "kind": "Endpoint", "metadata": {"name": name}}
        custom.create_namespaced_custom_object(*args, {**body, "spec": spec})
        custom.patch_namespaced_custom_object_status(*args, name, {"status": status(name)})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(count)))


async def timed(http: aiohttp.ClientSession, url: str, key: str, rounds: int) -> tuple[float, int]:
    """p50 seconds and body bytes of `rounds` GETs of `url` (after one warm-up)."""
    headers = {"authorization": f"Bearer {key}"}
    times, size = [], 0
    for _ in range(rounds + 1):
        t0 = time.perf_counter()
        async with http.get(url, headers=headers) as resp:
            body = await resp.read()
            assert resp.status == 200, body[:200]
        times.append(time.perf_counter() - t0)
        size = len(body)
    return statistics.median(times[1:]), size


async def measure(api: k8s.ApiClient, redis_url: str, count: int, rounds: int) -> list[Row]:
    port = free_port()
    settings = OperatorSettings(
        redis_url=redis_url,
        namespaces=[NAMESPACE],
        base_url="https://jobs.example.test",
        manage_host="127.0.0.1",
        manage_port=port,
    )
    redis = connect(redis_url)
    key = f"lga_{secrets.token_hex(8)}"
    await Registry(redis).put_key(key, {"name": "bench", "scopes": ["admin"]})
    cluster, registry = Cluster(api), Registry(redis)
    runner = web.AppRunner(
        create_app(
            settings,
            control_plane_for(settings, cluster),
            storage_for(settings, cluster, registry),
            registry,
        ),
        access_log=None,
    )
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}/v1/endpoints"
    rows = []
    try:
        async with aiohttp.ClientSession() as http:
            headers = {"authorization": f"Bearer {key}"}
            half = count // 2
            async with http.get(f"{base}?limit={half}", headers=headers) as resp:
                middle = f"?limit=50&continue={resp.headers['X-Continue']}"
            few = sum("model 99" in f"model {i}" for i in range(count))
            forms = [
                ("", "every record, unpaged", None),
                ("?limit=50", "", TARGET_S),
                (middle, f"?limit=50, the page after {half}", None),
                ("?limit=50&view=summary", "", None),
                ("?limit=50&phase=Ready", "", None),
                ("?limit=50&name=model%2099", f"?limit=50&name=model 99 ({few} match)", None),
            ]
            for query, label, target in forms:
                p50, size = await timed(http, base + query, key, rounds)
                rows.append(
                    Row(
                        f"GET /v1/endpoints {label or query}: p50 / size",
                        f"{p50 * 1000:.0f} ms / {size / 1000:.0f} kB",
                        target=f"<= {target * 1000:.0f} ms" if target else "",
                        passed=None if target is None else p50 <= target,
                    )
                )
    finally:
        await runner.cleanup()
        await redis.aclose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    opts = parser.parse_args()
    if binaries_dir() is None:
        sys.exit("envtest binaries missing: make envtest")
    with EnvTest() as env, tempfile.TemporaryDirectory() as data:
        redis = EmbeddedRedis(Path(data), appendonly=False)
        redis.start()
        try:
            api = env.api_client()
            t0 = time.monotonic()
            populate(api, opts.endpoints)
            print(f"{opts.endpoints} Endpoints created in {time.monotonic() - t0:.0f} s")
            rows = asyncio.run(measure(api, redis.url, opts.endpoints, opts.rounds))
        finally:
            redis.stop()
    print(f"GET /v1/endpoints at N = {opts.endpoints} ({opts.rounds} rounds each)")
    print(table(rows))
    print(machine())


if __name__ == "__main__":
    main()
