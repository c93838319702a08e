"""`/v2/serverless` (issue 46, item 1) over both control planes: `local` (dev mode's app, real
worker processes) and `kubernetes` (the operator's management API writing Template and
Endpoint resources in envtest). RunPod's v2 endpoint object, closed bodies (422 naming each
field), cross-field rules (400), RFC 9457 problems, and one model behind every view: what v2
creates, v1 reads, and the reverse.
"""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from lockgate.models.gpupools import POOLS, pool_problem, pools_of, types_of
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    api,
    jobs_key,
    kubernetes_api,
    local_api,
)

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]

ECHO_ARGS = "python tests/handlers/sync_echo.py"  # dev mode runs args (relative to the repo)
ENDPOINT_KEYS = {
    "id", "name", "type", "requestUrls", "image", "args", "disk", "ports", "env", "registry",
    "gpu", "workers", "scaling", "dataCenterIds", "networkVolumes", "timeout", "flashboot",
    "createdAt",
}  # fmt: skip
QUEUE_URLS = {"run", "runSync", "status", "stream", "cancel", "retry", "purgeQueue", "health"}
PROBLEM = "application/problem+json"


async def v2(api: Api, method: str, path: str = "", body: Any = None, key: str | None = None):
    """`{url}/v2/serverless{path}` with the admin key: status, content type and JSON body."""
    headers = {"authorization": f"Bearer {key or api.key}"}
    url = f"{api.url}/v2/serverless{path}"
    async with api.http.request(method, url, json=body, headers=headers) as resp:
        text = await resp.text()
        payload = await resp.json(content_type=None) if text else None
        return resp.status, resp.content_type, payload


async def v1(api: Api, method: str, path: str, body: Any = None):
    headers = {"authorization": f"Bearer {api.key}"}
    async with api.http.request(method, f"{api.url}/v1{path}", json=body, headers=headers) as r:
        return r.status, (await r.json() if r.content_type == "application/json" else None)


def plane(request: pytest.FixtureRequest) -> str:
    return request.node.callspec.params["api"]


@pytest.fixture
def forget(api: Api, request: pytest.FixtureRequest):
    """Deletes what a test made through v2 afterwards (the Kubernetes plane's resources
    outlive a test otherwise): the endpoint and its bound template."""
    if plane(request) != "kubernetes":
        return lambda _endpoint_id: None
    resources: Resources = request.getfixturevalue("resources")

    def forget(endpoint_id: str) -> None:
        resources.created.append(("endpoints", endpoint_id))
        resources.created.append(("templates", endpoint_id))

    return forget


def cpu_body(**fields: Any) -> dict[str, Any]:
    """A v2 create body for a CPU queue endpoint running the echo handler."""
    return {
        "name": "v2 echo",
        "type": "QUEUE",
        "image": "python:3.12-slim",
        "args": ECHO_ARGS,
        "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
        "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
        **fields,
    }


async def created(api: Api, forget, **fields: Any) -> dict[str, Any]:
    status, _, body = await v2(api, "POST", body=cpu_body(**fields))
    assert status == 201, body
    forget(body["id"])
    return body


# -- the object ------------------------------------------------------------------------------


async def test_create_answers_runpods_v2_object_and_v1_reads_the_same_endpoint(
    api: Api, forget
) -> None:
    body = await created(api, forget, env={"GREETING": "hi"}, workers={"min": 0, "max": 2})
    assert ENDPOINT_KEYS | {"cpu"} == set(body), body
    assert body["type"] == "QUEUE" and body["gpu"] is None
    assert set(body["requestUrls"]) == QUEUE_URLS
    assert body["requestUrls"]["runSync"] == f"{api.job_api_base}/v2/{body['id']}/runsync"
    assert body["cpu"] == [{"id": "cpu3c", "vcpuCount": 2, "memory": 4}]
    assert body["workers"] == {"min": 0, "max": 2, "idleTimeout": 10}  # RunPod's default 10
    assert body["scaling"] == {"type": "QUEUE_DELAY", "queueDelay": 4}
    assert body["timeout"] == 300_000 and body["flashboot"] == "OFF"
    assert body["args"] == ECHO_ARGS and body["env"] == {"GREETING": "hi"}
    assert body["networkVolumes"] == [] and body["dataCenterIds"] == []
    assert body["createdAt"]

    status, _, same = await v2(api, "GET", f"/{body['id']}")
    assert (status, same) == (200, body)
    status, _, listed = await v2(api, "GET")
    assert status == 200 and body in listed["endpoints"]
    status, record = await v1(api, "GET", f"/endpoints/{body['id']}?includeTemplate=true")
    assert status == 200, record
    assert record["templateId"] == body["id"]  # its bound template
    assert record["workersMax"] == 2 and record["computeType"] == "CPU"
    assert record["executionTimeoutMs"] == 300_000
    assert record["template"]["env"] == {"GREETING": "hi"}
    assert record["template"]["dockerStartCmd"] == ECHO_ARGS.split()


async def test_a_template_is_resolved_once_with_the_body_winning_and_env_merged(
    api: Api, forget, request: pytest.FixtureRequest
) -> None:
    template = {
        "name": "base", "imageName": "python:3.12-slim", "dockerStartCmd": ECHO_ARGS.split(),
        "env": {"A": "template", "B": "template"}, "containerDiskInGb": 30,
    }  # fmt: skip
    status, made = await v1(api, "POST", "/templates", template)
    assert status == 200, made
    if plane(request) == "kubernetes":
        request.getfixturevalue("resources").created.append(("templates", made["id"]))
    body = cpu_body(templateId=made["id"], env={"B": "body"}, disk=40)
    del body["image"], body["args"]
    status, _, ep = await v2(api, "POST", body=body)
    assert status == 201, ep
    forget(ep["id"])
    assert ep["env"] == {"A": "template", "B": "body"} and ep["disk"] == 40
    assert ep["image"] == "python:3.12-slim" and ep["args"] == ECHO_ARGS
    # a later edit of the template does not reach the endpoint (RunPod's rule)
    status, _ = await v1(api, "PATCH", f"/templates/{made['id']}", {"env": {"A": "edited"}})
    assert status == 200
    status, _, again = await v2(api, "GET", f"/{ep['id']}")
    assert again["env"] == {"A": "template", "B": "body"}


async def test_a_load_balancer_from_an_image_gets_lb_urls_and_its_timeout(api: Api, forget) -> None:
    body = await created(
        api, forget, type="LOAD_BALANCER", scaling={"type": "REQUEST_COUNT", "requestCount": 2},
        timeout=60_000,
    )  # fmt: skip
    base = f"{api.job_api_base}/lb/{body['id']}"
    assert body["type"] == "LOAD_BALANCER"
    assert body["requestUrls"] == {"base": base, "health": f"{base}/ping"}
    assert body["scaling"] == {"type": "REQUEST_COUNT", "requestCount": 2}
    assert body["timeout"] == 60_000
    _, record = await v1(api, "GET", f"/endpoints/{body['id']}")
    assert record["type"] == "LB" and record["requestTimeoutS"] == 60


async def test_a_gpu_endpoint_stores_the_types_its_pools_leave(api: Api, forget) -> None:
    gpu = {"pools": ["ADA_48_PRO", "ADA_24"], "excludedTypes": [" NVIDIA L40"], "count": 2}
    body = cpu_body(gpu=gpu)
    del body["cpu"]
    status, _, ep = await v2(api, "POST", body=body)
    assert status == 201, ep
    forget(ep["id"])
    assert ep["gpu"] == {
        "pools": ["ADA_48_PRO", "ADA_24"], "excludedTypes": ["NVIDIA L40"], "count": 2,
        "allowedCudaVersions": [], "minCudaVersion": None,
    }  # fmt: skip
    assert "cpu" not in ep
    status, record = await v1(api, "GET", f"/endpoints/{ep['id']}")
    assert record["gpuTypeIds"] == [
        "NVIDIA RTX 6000 Ada Generation", "NVIDIA L40S", "NVIDIA GeForce RTX 4090"
    ]  # fmt: skip
    assert record["gpuCount"] == 2


# -- PATCH and DELETE ------------------------------------------------------------------------


async def test_patch_changes_what_it_names_and_answers_the_whole_object(api: Api, forget) -> None:
    ep = await created(api, forget, env={"A": "1", "B": "2"})
    changes = {
        "workers": {"min": 0, "max": 5, "idleTimeout": 30},
        "scaling": {"type": "QUEUE_DELAY", "queueDelay": 8},
        "env": {"A": "changed"},
    }
    status, _, after = await v2(api, "PATCH", f"/{ep['id']}", changes)
    assert status == 200, after
    assert after["workers"] == {"min": 0, "max": 5, "idleTimeout": 30}
    assert after["scaling"] == {"type": "QUEUE_DELAY", "queueDelay": 8}
    assert after["env"] == {"A": "changed"}  # env is replaced, not merged
    assert {k: v for k, v in after.items() if k not in changes} == {
        k: v for k, v in ep.items() if k not in changes
    }
    status, record = await v1(api, "GET", f"/endpoints/{ep['id']}")
    assert record["version"] == 2  # a container change: a new version, its workers roll


async def test_a_container_patch_of_a_v1_endpoint_copies_its_shared_template_first(
    api: Api, forget, request: pytest.FixtureRequest
) -> None:
    template = {"name": "shared", "imageName": "python:3.12-slim", "env": {"SHARED": "1"},
                "dockerStartCmd": ECHO_ARGS.split()}  # fmt: skip
    status, shared = await v1(api, "POST", "/templates", template)
    assert status == 200, shared
    if plane(request) == "kubernetes":
        request.getfixturevalue("resources").created.append(("templates", shared["id"]))
    payload = {"templateId": shared["id"], "computeType": "CPU"}
    status, one = await v1(api, "POST", "/endpoints", payload)
    assert status == 200, one
    api.forget(one["id"])
    forget(one["id"])  # and the template the PATCH makes
    status, _, after = await v2(api, "PATCH", f"/{one['id']}", {"env": {"ONLY": "mine"}})
    assert status == 200, after
    assert after["env"] == {"ONLY": "mine"} and after["image"] == "python:3.12-slim"
    status, record = await v1(api, "GET", f"/endpoints/{one['id']}")
    assert record["templateId"] == one["id"]
    status, kept = await v1(api, "GET", f"/templates/{shared['id']}")
    assert kept["env"] == {"SHARED": "1"}  # the other endpoints' template is untouched


async def test_delete_removes_the_endpoint_and_its_bound_template(api: Api, forget) -> None:
    ep = await created(api, forget)
    status, _, body = await v2(api, "DELETE", f"/{ep['id']}")
    assert (status, body) == (204, None)
    status, kind, problem = await v2(api, "GET", f"/{ep['id']}")
    # On a cluster the Endpoint goes once the operator has let it (its finalizer): until
    # then v2 still finds it, so only a local plane's 404 is immediate.
    if status == 404:
        assert kind == PROBLEM and problem["status"] == 404
    status, _ = await v1(api, "GET", f"/templates/{ep['id']}")
    assert status == 404


# -- closed bodies, cross-field rules, problems ------------------------------------------------

V1_FIELDS = {
    "imageName": "x", "dockerStartCmd": ["x"], "containerDiskInGb": 10, "workersMin": 0,
    "workersMax": 1, "idleTimeout": 5, "scalerType": "QUEUE_DELAY", "scalerValue": 4,
    "gpuTypeIds": ["NVIDIA L4"], "gpuCount": 1, "computeType": "CPU", "vcpuCount": 2,
    "executionTimeoutMs": 60_000, "networkVolumeId": "v", "cpuFlavorIds": ["cpu3c"],
    "allowedCudaVersions": ["12.4"], "locations": "US", "flashBoot": True, "id": "mine",
}  # fmt: skip


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_every_v1_field_sent_to_v2_is_a_422_naming_it(api: Api) -> None:
    status, kind, problem = await v2(api, "POST", body={**cpu_body(), **V1_FIELDS})
    assert (status, kind) == (422, PROBLEM), problem
    assert problem["title"] == "Unprocessable Entity" and problem["status"] == 422
    named = {e.split(":")[0] for e in problem["errors"]}
    assert named == set(V1_FIELDS), problem["errors"]
    for field in V1_FIELDS:
        status, _, problem = await v2(api, "PATCH", "/anything", {field: V1_FIELDS[field]})
        assert status == 422 and problem["errors"] == [f"{field}: not a field of this request"]


# fmt: off
CROSS_FIELD = [
    ({"gpu": {"pools": ["ADA_24"]}}, "gpu, cpu"),  # both
    ({"cpu": None}, "gpu, cpu"),  # neither
    (
        {
            "cpu": None,
            "gpu": {"pools": ["ADA_24"], "allowedCudaVersions": ["12.4"], "minCudaVersion": "12.2"},
        },
        "allowedCudaVersions and minCudaVersion",
    ),
    (
        {"cpu": None, "gpu": {"pools": ["ADA_24"], "excludedTypes": ["NVIDIA GeForce RTX 4090"]}},
        "leave no GPU type",
    ),
    (
        {"cpu": None, "gpu": {"pools": ["ADA_24"], "excludedTypes": ["NVIDIA L4"]}},
        "no GPU type of the pools",
    ),
    ({"cpu": None, "gpu": {"pools": ["NO_SUCH_POOL"]}}, "unknown pool id"),
    ({"workers": {"min": 3, "max": 1}}, "workers.min"),
    (
        {
            "scaling": {"type": "REQUEST_COUNT", "requestCount": 1},
            "workers": {"min": 0, "max": 1, "idleTimeout": 5},
        },
        "workers.idleTimeout",
    ),
    ({"networkVolumes": ["a", "b"]}, "one network volume"),
    ({"cpu": [{"id": "cpu9z", "vcpuCount": 2}]}, "cpu.id: cpu9z is no CPU flavor here"),
]
# fmt: on


@pytest.mark.parametrize("api", ["local"], indirect=True)
@pytest.mark.parametrize(("fields", "named"), CROSS_FIELD)
async def test_a_cross_field_rule_broken_on_create_is_a_400_naming_it(
    api: Api, fields: dict, named: str
) -> None:
    body = {k: v for k, v in {**cpu_body(), **fields}.items() if v is not None}
    status, kind, problem = await v2(api, "POST", body=body)
    assert (status, kind) == (400, PROBLEM), problem
    assert named in problem["detail"] and problem["title"] == "Bad Request"


@pytest.mark.parametrize("api", ["local"], indirect=True)
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"type": "LOAD_BALANCER"}, "type: an endpoint's type cannot change"),
        ({"gpu": {"pools": ["ADA_24"]}}, "this is a CPU endpoint"),
        (
            {
                "scaling": {"type": "QUEUE_DELAY", "queueDelay": 2},
                "gpu": {"count": 1},
                "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
            },
            "gpu, cpu",
        ),
    ],
)
async def test_a_cross_field_rule_broken_on_patch_is_a_400_and_changes_nothing(
    api: Api, change: dict, named: str
) -> None:
    ep = await created(api, lambda _id: None)
    status, kind, problem = await v2(api, "PATCH", f"/{ep['id']}", change)
    assert (status, kind) == (400, PROBLEM), problem
    assert named in problem["detail"]
    assert (await v2(api, "GET", f"/{ep['id']}"))[2] == ep


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_errors_under_v2_are_problems(api: Api) -> None:
    status, kind, problem = await v2(api, "GET", "/nosuchendpoint")
    assert (status, kind) == (404, PROBLEM)
    assert problem == {
        "title": "Not Found", "status": 404, "detail": "endpoint 'nosuchendpoint' not found"
    }  # fmt: skip
    status, kind, problem = await v2(api, "GET", key="lga_not_a_key")
    assert (status, kind, problem["title"]) == (401, PROBLEM, "Unauthorized")
    status, kind, problem = await v2(api, "POST", body=[1])
    assert (status, kind, problem["status"]) == (400, PROBLEM, 400)
    status, kind, problem = await v2(api, "PUT", "/x", {})
    assert (status, kind, problem["status"]) == (405, PROBLEM, 405)


@pytest.mark.parametrize("api", ["local"], indirect=True)
@pytest.mark.parametrize("reserved", ["serverless", "templates", "catalog", "network-volumes"])
async def test_an_endpoint_id_that_would_shadow_a_v2_collection_is_refused(
    api: Api, reserved: str
) -> None:
    status, error = await v1(
        api, "POST", "/endpoints", {"id": reserved, "templateId": api.template}
    )
    assert status == 400 and f"/v2/{reserved}" in error["error"], error


@pytest.mark.parametrize("api", ["local"], indirect=True)
@pytest.mark.parametrize(
    ("taken", "names"), [("batch-mine", "batch pool"), ("canary-x1", "canary")]
)
async def test_an_endpoint_id_of_lockgates_own_endpoints_is_refused(
    api: Api, taken: str, names: str
) -> None:
    """`batch-…` and `canary-…` name an endpoint's batch pool and a build's canary: a user's
    endpoint of such an id would share their queues, registry entry and usage."""
    status, error = await v1(api, "POST", "/endpoints", {"id": taken, "templateId": api.template})
    assert status == 400 and "is reserved" in error["error"] and names in error["error"], error


# -- a job through the URLs it gives (dev mode's real workers) ---------------------------------


@pytest.mark.parametrize("api", ["local"], indirect=True)
async def test_a_job_runs_through_the_run_sync_url_the_v2_object_gives(
    api: Api, jobs_key: str
) -> None:
    ep = await created(api, lambda _id: None, workers={"min": 1, "max": 1})
    headers = {"authorization": jobs_key}
    url = ep["requestUrls"]["runSync"] + "?wait=60000"
    async with api.http.post(url, json={"input": {"hello": "v2"}}, headers=headers) as resp:
        job = await resp.json()
    assert job["status"] == "COMPLETED", job
    assert job["output"] == {"echo": {"hello": "v2"}}


# -- pure: pools round-trip ------------------------------------------------------------------


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_a_pool_minus_exclusions_round_trips_through_its_types(pool: str) -> None:
    types = POOLS[pool].types
    excluded = list(types[1:])
    assert pools_of(types_of([pool], excluded)) == ([pool], excluded)
    assert pools_of(types_of([pool])) == ([pool], [])
    assert pool_problem([pool], types) is not None  # nothing left


def test_a_type_in_no_pool_shows_as_its_own_pool() -> None:
    assert pools_of(["nvidia-l4"]) == (["nvidia-l4"], [])
