"""Releases and rolling updates (issue 46 item 4) through `/v2/serverless/{id}/releases`
and `…/releases/{releaseId}/rollback`: dev mode's workers (real processes: an env change
while a long job runs, the job finishing uncut on the old worker, the rollout reaching
100 %, a rollback bringing the old env back), and on envtest's Kubernetes the releases the
management API and the operator record (a `kubectl` edit of a Template too, exactly once),
with the worker pods' version label.
"""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import eventually
from tests.test_manage_api import (  # noqa: F401 - fixtures
    Api,
    admin_key,
    api,
    dev_app,
    job_call,
    jobs_key,
    kubernetes_api,
    local_api,
)
from tests.test_templates_api import (  # noqa: F401 - fixtures
    ENV_ECHO,
    call,
    forget_template,
    new_endpoint,
    new_template,
)

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]


async def v2(api: Api, method: str, path: str, body: Any = None) -> tuple[int, str, Any]:
    """`{url}/v2/serverless{path}` with the admin key: status, content type and body."""
    headers = {"authorization": f"Bearer {api.key}"}
    url = f"{api.url}/v2/serverless{path}"
    async with api.http.request(method, url, json=body, headers=headers) as resp:
        return resp.status, resp.content_type, await resp.json()


async def releases(api: Api, endpoint_id: str, query: str = "") -> dict:
    status, _, body = await v2(api, "GET", f"/{endpoint_id}/releases{query}")
    assert status == 200, body
    return body


def env_diff(release: dict) -> dict:
    [entry] = [d for d in release["diff"] if d["field"] == "template.env"]
    return entry


# -- both planes ---------------------------------------------------------------------------


async def test_a_template_env_change_is_one_new_release_with_its_diff(
    api: Api, forget_template
) -> None:
    template = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO, env={"V": "1"})
    endpoint = (await new_endpoint(api, template["id"]))["id"]
    first = await eventually(lambda: releases(api, endpoint), "the first release")
    assert first["endpointVersion"] == 1 and [r["version"] for r in first["releases"]] == [1]
    [created] = first["releases"]
    assert created["source"] == "MANUAL" and created["buildId"] is None
    assert env_diff(created) == {"field": "template.env", "old": None, "new": {"V": "1"}}

    await call(api, "PATCH", f"/endpoints/{endpoint}", {"workersMax": 2})  # no release
    await call(api, "PATCH", f"/templates/{template['id']}", {"readme": "# notes"})  # nor this
    await call(api, "PATCH", f"/templates/{template['id']}", {"env": {"V": "2"}})
    got = await releases(api, endpoint)
    assert got["endpointVersion"] == 2 and [r["version"] for r in got["releases"]] == [2, 1]
    assert got["releases"][0]["diff"] == [
        {"field": "template.env", "old": {"V": "1"}, "new": {"V": "2"}}
    ]
    assert got["pagination"] == {"nextCursor": None, "hasNextPage": False}
    assert set(got["rollout"]) == {
        "inProgress",
        "workersOnLatest",
        "workersTotal",
        "percentOnLatest",
    }
    assert (await call(api, "GET", f"/endpoints/{endpoint}"))[1]["version"] == 2


async def test_pages_follow_the_cursor_and_a_bad_or_foreign_cursor_is_a_422(
    api: Api, forget_template
) -> None:
    template = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO, env={"V": "0"})
    endpoint = (await new_endpoint(api, template["id"]))["id"]
    other = (await new_endpoint(api, template["id"]))["id"]
    for n in (1, 2, 3):
        await call(api, "PATCH", f"/templates/{template['id']}", {"env": {"V": str(n)}})
    got = await releases(api, endpoint, "?limit=3")
    assert [r["version"] for r in got["releases"]] == [4, 3, 2]
    assert got["pagination"]["hasNextPage"] and got["endpointVersion"] == 4
    cursor = got["pagination"]["nextCursor"]
    rest = await releases(api, endpoint, f"?limit=3&cursor={cursor}")
    assert [r["version"] for r in rest["releases"]] == [1]
    assert rest["pagination"] == {"nextCursor": None, "hasNextPage": False}
    assert rest["rollout"] == got["rollout"]  # the current state, whatever the page

    for query in (f"?cursor={cursor}x", "?cursor=garbage!", "?limit=0", "?limit=1001", "?limit=a"):
        status, kind, problem = await v2(api, "GET", f"/{endpoint}/releases{query}")
        assert (status, kind) == (422, "application/problem+json"), (query, problem)
        assert problem["status"] == 422 and problem["detail"] and problem["errors"]
    status, _, problem = await v2(api, "GET", f"/{other}/releases?cursor={cursor}")
    assert status == 422 and "another endpoint" in problem["detail"]


async def test_unknown_endpoints_and_releases_are_404_problems(api: Api, forget_template) -> None:
    status, kind, problem = await v2(api, "GET", "/no-such-endpoint/releases")
    assert (status, kind, problem["status"]) == (404, "application/problem+json", 404)
    template = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO)
    endpoint = (await new_endpoint(api, template["id"]))["id"]
    status, _, problem = await v2(api, "POST", f"/{endpoint}/releases/nosuchid/rollback")
    assert status == 404 and "nosuchid" in problem["detail"]


async def test_a_rollback_of_a_shared_template_is_refused_naming_the_other_endpoints(
    api: Api, forget_template
) -> None:
    template = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO, env={"V": "1"})
    endpoint = (await new_endpoint(api, template["id"]))["id"]
    other = (await new_endpoint(api, template["id"]))["id"]
    first = (await eventually(lambda: releases(api, endpoint), "the first release"))["releases"]
    await call(api, "PATCH", f"/templates/{template['id']}", {"env": {"V": "2"}})
    status, _, problem = await v2(api, "POST", f"/{endpoint}/releases/{first[0]['id']}/rollback")
    assert status == 409 and other in problem["detail"], problem


async def test_a_v2_env_patch_is_one_release_and_a_copied_template_one_too(
    api: Api, forget_template
) -> None:
    body = {
        "name": "v2 rel", "type": "QUEUE", "image": "python:3.12-slim",
        "args": " ".join(ENV_ECHO), "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
        "env": {"V": "1"}, "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
    }  # fmt: skip
    status, _, made = await v2(api, "POST", "", body)
    assert status == 201, made
    api.forget(made["id"])
    forget_template(made["id"])  # its bound template
    status, _, _ = await v2(api, "PATCH", f"/{made['id']}", {"env": {"V": "2"}})
    assert status == 200
    got = await eventually(lambda: _versions(api, made["id"], 2), "release 2")
    assert got["releases"][0]["diff"] == [
        {"field": "template.env", "old": {"V": "1"}, "new": {"V": "2"}}
    ]

    shared = await new_template(api, forget_template, dockerStartCmd=ENV_ECHO, env={"S": "1"})
    v1_made = await new_endpoint(api, shared["id"], computeType="CPU")
    forget_template(v1_made["id"])  # the template the v2 PATCH copies for it
    status, _, _ = await v2(api, "PATCH", f"/{v1_made['id']}", {"env": {"S": "mine"}})
    assert status == 200
    got = await eventually(lambda: _versions(api, v1_made["id"], 2), "one release for the copy")
    fields = {d["field"] for d in got["releases"][0]["diff"]}
    assert {"templateId", "template.env"} <= fields


async def _versions(api: Api, endpoint: str, newest: int) -> dict | None:
    got = await releases(api, endpoint)
    return got if [r["version"] for r in got["releases"]][:1] == [newest] else None


# -- dev mode: the rolling rule with real worker processes ---------------------------------


async def status_of(api: Api, key: str, endpoint: str, job_id: str) -> dict:
    return (await job_call(api.http, api.url, key, "GET", f"{endpoint}/status/{job_id}"))[1]


async def env_of(api: Api, key: str, endpoint: str) -> str:
    body = {"input": {"names": ["V"]}}
    _, done = await job_call(api.http, api.url, key, "POST", f"{endpoint}/runsync", body)
    assert done["status"] == "COMPLETED", done
    return done["output"]["env"]["V"]


async def test_local_an_env_change_lets_the_running_job_finish_and_rollback_restores_the_env(
    local_api: Api, jobs_key: str
) -> None:
    api = local_api
    template = await new_template(api, lambda _: None, dockerStartCmd=ENV_ECHO, env={"V": "1"})
    endpoint = (await new_endpoint(api, template["id"], workersMin=1, workersMax=2))["id"]
    [first] = (await releases(api, endpoint))["releases"]
    await eventually(
        lambda: _on_latest(api, endpoint, 1), "the first worker on version 1", timeout=30
    )

    body = {"input": {"names": ["V"], "sleep": 8}}
    _, job = await job_call(api.http, api.url, jobs_key, "POST", f"{endpoint}/run", body)

    async def in_progress() -> bool:
        return (await status_of(api, jobs_key, endpoint, job["id"]))["status"] == "IN_PROGRESS"

    await eventually(in_progress, "the long job to start")
    await call(api, "PATCH", f"/templates/{template['id']}", {"env": {"V": "2"}})
    during = await releases(api, endpoint)
    still = await in_progress()  # the job ran through the whole read: its worker is the old one
    assert still and during["endpointVersion"] == 2
    assert during["rollout"]["inProgress"] and during["rollout"]["percentOnLatest"] < 100
    assert during["releases"][1]["workerCount"] == 1  # the busy old worker, finishing its job

    async def done() -> dict | None:
        got = await status_of(api, jobs_key, endpoint, job["id"])
        return got if got["status"] not in ("IN_QUEUE", "IN_PROGRESS") else None

    finished = await eventually(done, "the long job to end", timeout=60)
    assert finished["status"] == "COMPLETED" and finished["output"]["env"] == {"V": "1"}
    after = await eventually(
        lambda: _on_latest(api, endpoint, 2), "the rollout to reach 100 %", timeout=60
    )
    assert after["rollout"]["inProgress"] is False and after["releases"][1]["workerCount"] == 0
    assert await env_of(api, jobs_key, endpoint) == "2"

    status, _, rolled = await v2(api, "POST", f"/{endpoint}/releases/{first['id']}/rollback")
    assert status == 201 and rolled["version"] == 3, rolled
    assert rolled["diff"] == [{"field": "template.env", "old": {"V": "2"}, "new": {"V": "1"}}]
    assert await env_of(api, jobs_key, endpoint) == "1"
    again = await v2(api, "POST", f"/{endpoint}/releases/{first['id']}/rollback")
    assert again[0] == 200 and again[2]["version"] == 3  # it is the configuration already
    assert (await call(api, "GET", f"/templates/{template['id']}"))[1]["env"] == {"V": "1"}


async def _on_latest(api: Api, endpoint: str, version: int) -> dict | None:
    """The releases answer once every worker (at least one) runs `version`."""
    got = await releases(api, endpoint)
    rollout = got["rollout"]
    ok = got["endpointVersion"] == version and rollout["percentOnLatest"] == 100
    return got if ok and rollout["workersTotal"] >= 1 else None


# -- Kubernetes: the operator records a kubectl edit, once; pods carry the version ------------


@pytest.mark.envtest
async def test_kubernetes_a_kubectl_edit_is_recorded_once_and_rolls_the_pod_template(
    kubernetes_api: Api, request: pytest.FixtureRequest
) -> None:
    api = kubernetes_api
    resources: Resources = request.getfixturevalue("resources")
    resources.template("rel-tpl", image="example.test/worker:1", env={"V": "1"})
    endpoint = (await new_endpoint(api, "rel-tpl"))["id"]

    def pod_version() -> str | None:
        deployment = resources.deployment(f"{endpoint}-workers")
        labels = deployment.spec.template.metadata.labels if deployment else {}
        return (labels or {}).get("lockgate.dev/version")

    async def labelled(version: str) -> bool:
        return pod_version() == version

    await eventually(lambda: labelled("1"), "the Deployment's pods labelled version 1")
    resources.patch("templates", "rel-tpl", {"spec": {"env": {"V": "2"}}})  # kubectl's way

    async def recorded() -> dict | None:
        got = await releases(api, endpoint)
        return got if got["endpointVersion"] == 2 else None

    got = await eventually(recorded, "the operator to record the kubectl edit")
    assert [r["version"] for r in got["releases"]] == [2, 1]
    assert env_diff(got["releases"][0]) == {
        "field": "template.env",
        "old": {"V": "1"},
        "new": {"V": "2"},
    }
    await eventually(lambda: labelled("2"), "the pod template labelled version 2")

    await call(api, "PATCH", "/templates/rel-tpl", {"env": {"V": "3"}})  # the API's way
    await eventually(lambda: labelled("3"), "the pod template labelled version 3")
    got = await releases(api, endpoint)  # the API and the operator both saw it: one release
    assert [r["version"] for r in got["releases"]] == [3, 2, 1]
