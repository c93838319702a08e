"""Account secrets (issue 46 item 7, docs/secrets.md): `/v2/account/secrets` and the
`{{ RUNPOD_SECRET_<name> }}` env reference.

- The rules, as pure functions: names, references, the Secret a name maps to, the worker
  container's `secretKeyRef`.
- `lockgate dev` as a user starts it (real HTTP, real worker processes): a worker gets the
  value in its environment and a rotated value at its next start; an endpoint whose secret
  is missing waits and says why; the value is in no API answer, no line dev mode prints,
  not in Redis; closed bodies and name rules are 422 problems; a secret in use is a 409.
- envtest's kube-apiserver with the operator: the Secret lockgate writes (labels, opt-in,
  the value), the worker Deployment's `secretKeyRef`, the Endpoint's condition while the
  secret is missing.
"""

# ruff: noqa: F811 - the fixtures of tests/test_manage_api.py, imported, are test arguments here
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
from redis.asyncio import Redis

from lockgate.kube.manifests.names import deployment_name
from lockgate.models import TemplateSpec, secrets
from lockgate.models.podfields import DNS_SUBDOMAIN, WORKER_KEY_SUFFIX
from lockgate.store import Registry, keys
from tests.conftest import wait_until
from tests.devproc import DevProcess
from tests.test_kube_manifests import env as container_env
from tests.test_kube_manifests import pod
from tests.test_manage_api import Api, kubernetes_api  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from kube_fixtures import Resources

pytest_plugins = ["kube_fixtures"]

# Answers with the SHA-256 of the variables a job names: the value reaches no output.
ENV_DIGEST = ["python", "tests/handlers/env_digest.py"]  # relative to the repository
SECRET_FIELDS = {"id", "name", "description", "createdAt", "valueLastUpdatedAt"}
PROBLEM = "application/problem+json"


# -- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("hf-token", None),
        ("_private", None),
        ("team/a.b-c_d", None),
        ("HF_TOKEN", None),
        ("x" * 191, None),
        ("", "1 to 191"),
        ("x" * 192, "1 to 191"),
        ("1password", "must start with a letter"),
        ("-dash", "must start with a letter"),
        ("a b", "only letters"),
        ("ключ", "must start with a letter"),
        ("RUNPOD_KEY", "reserved"),
        ("runpodish", "reserved"),
        ("RunPod/x", "reserved"),
    ],
)  # fmt: skip
def test_a_name_follows_runpods_rules(name: str, problem: str | None) -> None:
    found = secrets.name_problem(name)
    assert found is None if problem is None else problem in (found or ""), found


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("{{ RUNPOD_SECRET_hf-token }}", "hf-token"),
        ("{{RUNPOD_SECRET_openai_key}}", "openai_key"),
        ("  {{   RUNPOD_SECRET_team/a.b   }} ", "team/a.b"),
        ("{{ RUNPOD_SECRET_HF_TOKEN }}", "HF_TOKEN"),
        ("Bearer {{ RUNPOD_SECRET_x }}", None),  # a whole value only: docs/secrets.md
        ("{{ RUNPOD_SECRET_ }}", None),
        ("{{ runpod_secret_x }}", None),
        ("{ RUNPOD_SECRET_x }", None),
        ("RUNPOD_SECRET_x", None),
        ("{{ RUNPOD_SECRET_a b }}", None),
    ],
)  # fmt: skip
def test_an_env_value_is_a_reference_only_when_it_is_one_whole(
    value: str, name: str | None
) -> None:
    assert secrets.referenced_name(value) == name


@pytest.mark.parametrize(
    "name", ["hf-token", "HF_TOKEN", "hf_token", "team/a.b", "_", "__x__", "a" * 191, "Z9"]
)
def test_a_name_maps_to_one_valid_secret_name_that_workers_may_read(name: str) -> None:
    made = secrets.object_name(name)
    assert re.fullmatch(DNS_SUBDOMAIN, made) and len(made) <= 253, made
    assert made.startswith(secrets.SECRET_PREFIX) and made.endswith(secrets.secret_id(name))
    assert not made.endswith(WORKER_KEY_SUFFIX)
    assert secrets.object_name(name) == made  # a function of the name: the operator's map
    assert re.fullmatch(r"[a-z2-7]{12}", secrets.secret_id(name))


def test_names_that_differ_only_in_case_or_punctuation_get_their_own_secret() -> None:
    names = ["hf-token", "HF_TOKEN", "hf_token", "hf.token", "hf/token"]
    assert len({secrets.object_name(n) for n in names}) == len(names)
    assert len({secrets.secret_id(n) for n in names}) == len(names)


def test_a_reference_in_a_templates_env_is_a_secret_key_ref_and_never_the_value() -> None:
    template = {"env": {"TOKEN": "{{ RUNPOD_SECRET_hf_token }}", "PLAIN": "x"}}
    seen = container_env(template=template)
    ref = {"name": secrets.object_name("hf_token"), "key": "value"}
    assert seen["TOKEN"] == {"secretKeyRef": ref}
    assert seen["PLAIN"] == "x"


def test_a_gated_models_token_may_be_an_account_secret() -> None:
    template = {"env": {"HF_TOKEN": "{{ RUNPOD_SECRET_hf }}"}}
    spec = pod({"modelReferences": ["org/model"]}, template)
    [fetch] = spec["initContainers"]
    [token] = [e for e in fetch["env"] if e["name"] == "HF_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"]["name"] == secrets.object_name("hf")


def test_a_template_names_where_it_refers_to_an_account_secret() -> None:
    template = TemplateSpec(
        image="i", env={"A": "{{ RUNPOD_SECRET_s }}", "B": "{{RUNPOD_SECRET_s}}", "C": "c"}
    )
    assert template.account_secrets() == {"A": "s", "B": "s"}
    made = secrets.object_name("s")
    assert template.worker_secrets() == [made]
    assert template.secret_uses(made) == ["env.A", "env.B"]


# -- lockgate dev ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev")
    with DevProcess("tests/handlers/sync_echo.py", data_dir=data) as proc:
        yield proc


class Client:
    """Calls to one `lockgate dev`, each answer kept (to show no value is in any)."""

    def __init__(self, dev: DevProcess) -> None:
        self.dev = dev
        self.answers: list[str] = []

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        answer = requests.request(
            method, f"{self.dev.url}{path}", json=body, headers=self.dev.headers(), timeout=60
        )
        self.answers.append(answer.text)
        if answer.status_code >= 400 and path.startswith("/v2/account"):
            assert answer.headers["content-type"].startswith(PROBLEM), answer.text
        return answer.status_code, (answer.json() if answer.text else None)

    def secret(self, name: str, value: str, **fields: Any) -> dict:
        status, made = self("POST", "/v2/account/secrets", {"name": name, "value": value, **fields})
        assert status == 201, made
        return made

    def endpoint(self, env: dict[str, str], **fields: Any) -> tuple[str, str]:
        """A template running tests/handlers/env_digest.py with `env`, and an endpoint on it."""
        body = {"name": "secret-echo", "imageName": "x.test/echo:1", "dockerStartCmd": ENV_DIGEST}
        status, template = self("POST", "/v1/templates", {**body, "env": env})
        assert status == 200, template
        status, endpoint = self("POST", "/v1/endpoints", {"templateId": template["id"], **fields})
        assert status == 200, endpoint
        return endpoint["id"], template["id"]

    def env_of_a_job(self, endpoint_id: str, *names: str) -> dict:
        status, job = self("POST", f"/v2/{endpoint_id}/runsync", {"input": {"names": names}})
        assert status == 200 and job["status"] == "COMPLETED", job
        return job["output"]

    def remove(self, endpoint_id: str, template_id: str) -> None:
        assert self("DELETE", f"/v1/endpoints/{endpoint_id}")[0] == 204
        wait_until(
            lambda: self("DELETE", f"/v1/templates/{template_id}")[0] == 204, "template deleted"
        )


@pytest.fixture
def client(dev: DevProcess) -> Client:
    return Client(dev)


def assert_nowhere(client: Client, *values: str) -> None:
    """No API answer, no line `lockgate dev` printed and no file of its embedded Redis
    holds any of `values`."""
    redis_files = [
        p for p in client.dev.data_dir.rglob("*")
        if p.is_file() and p.parent.name != secrets_folder(client.dev).name
    ]  # fmt: skip
    assert [p for p in redis_files if p.name.startswith("appendonly")]  # Redis's own files
    for value in values:
        assert not [a for a in client.answers if value in a]
        assert not [line for line in client.dev.lines if value in line]
        assert not [p for p in redis_files if value.encode() in p.read_bytes()]


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def secrets_folder(dev: DevProcess) -> Path:
    return dev.data_dir / "secrets"


def worker_pids(dev: DevProcess) -> set[int]:
    return {p.pid for p in dev.workers() if "env_digest.py" in " ".join(p.cmdline())}


def test_dev_a_secret_reaches_the_worker_rotates_at_its_next_start_and_is_shown_nowhere(
    client: Client,
) -> None:
    first, second = "hf_first_" + os.urandom(8).hex(), "hf_second_" + os.urandom(8).hex()
    made = client.secret("hf_token", first, description="Hugging Face read token")
    assert set(made) == SECRET_FIELDS and made["name"] == "hf_token", made
    assert made["id"] == secrets.secret_id("hf_token")
    assert made["description"] == "Hugging Face read token"
    assert made["valueLastUpdatedAt"] == made["createdAt"]
    stored = secrets_folder(client.dev) / made["id"]
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700

    env = {"TOKEN": "{{ RUNPOD_SECRET_hf_token }}", "SPACED": "{{RUNPOD_SECRET_hf_token}}"}
    endpoint_id, template_id = client.endpoint({**env, "PLAIN": "p"}, idleTimeout=1)
    output = client.env_of_a_job(endpoint_id, "TOKEN", "SPACED", "PLAIN")
    assert output["env"] == {"TOKEN": sha(first), "SPACED": sha(first), "PLAIN": sha("p")}
    status, template = client("GET", f"/v1/templates/{template_id}")
    assert status == 200 and template["env"]["TOKEN"] == env["TOKEN"]  # as written

    status, rotated = client("PATCH", f"/v2/account/secrets/{made['id']}", {"value": second})
    assert status == 200 and rotated["description"] == made["description"], rotated
    assert rotated["valueLastUpdatedAt"] >= made["valueLastUpdatedAt"]
    # the worker that runs keeps the value it started with; the next one gets the new one
    wait_until(lambda: not worker_pids(client.dev), "the idle worker to stop", timeout=60)
    assert client.env_of_a_job(endpoint_id, "TOKEN")["env"] == {"TOKEN": sha(second)}

    status, refused = client("DELETE", f"/v2/account/secrets/{made['id']}")
    assert status == 409 and endpoint_id in refused["detail"] and template_id in refused["detail"]
    client.remove(endpoint_id, template_id)
    assert client("DELETE", f"/v2/account/secrets/{made['id']}")[0] == 204
    assert client("GET", f"/v2/account/secrets/{made['id']}")[0] == 404
    assert not stored.exists()
    for path in ("/v2/account/secrets", f"/v1/endpoints/{endpoint_id}", "/v1/templates"):
        client("GET", path)
    assert_nowhere(client, first, second)


def test_dev_an_endpoint_waits_for_a_missing_secret_and_says_why(client: Client) -> None:
    endpoint_id, template_id = client.endpoint({"KEY": "{{ RUNPOD_SECRET_late_one }}"})
    status, run = client("POST", f"/v2/{endpoint_id}/run", {"input": {"names": ["KEY"]}})
    assert status == 200, run

    def waiting() -> dict | None:
        record = client("GET", f"/v1/endpoints/{endpoint_id}")[1]
        return record if record["status"]["phase"] == "Pending" else None

    record = wait_until(waiting, "phase Pending")
    [ready] = [c for c in record["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["reason"] == "SecretNotFound", ready
    assert "'late_one' not found" in ready["message"]
    assert not worker_pids(client.dev)  # no worker started, none crash-looping

    value = "late_" + os.urandom(8).hex()
    client.secret("late_one", value)

    def done() -> dict | None:
        job = client("GET", f"/v2/{endpoint_id}/status/{run['id']}")[1]
        return job if job["status"] == "COMPLETED" else None

    assert wait_until(done, "the queued job", timeout=60)["output"]["env"] == {"KEY": sha(value)}
    client.remove(endpoint_id, template_id)
    made = secrets.secret_id("late_one")
    assert client("DELETE", f"/v2/account/secrets/{made}")[0] == 204
    assert_nowhere(client, value)


def test_dev_a_v2_endpoints_env_refers_to_a_secret_through_its_bound_template(
    client: Client,
) -> None:
    value = "v2_" + os.urandom(8).hex()
    made = client.secret("v2_key", value)
    body = {
        "name": "v2 secret", "type": "QUEUE", "image": "python:3.12-slim",
        "args": " ".join(ENV_DIGEST), "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
        "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
        "env": {"KEY": "{{ RUNPOD_SECRET_v2_key }}"},
    }  # fmt: skip
    status, endpoint = client("POST", "/v2/serverless", body)
    assert status == 201 and endpoint["env"] == body["env"], endpoint  # kept as written
    assert client.env_of_a_job(endpoint["id"], "KEY")["env"] == {"KEY": sha(value)}

    status, refused = client("DELETE", f"/v2/account/secrets/{made['id']}")
    assert status == 409 and endpoint["id"] in refused["detail"], refused
    assert client("DELETE", f"/v2/serverless/{endpoint['id']}")[0] == 204
    assert client("DELETE", f"/v2/account/secrets/{made['id']}")[0] == 204
    assert_nowhere(client, value)


def test_dev_a_name_is_taken_once_and_the_list_filters_by_name_in_any_case(
    client: Client,
) -> None:
    made = client.secret("Filter_Me", "v1-" + os.urandom(4).hex())
    status, taken = client("POST", "/v2/account/secrets", {"name": "Filter_Me", "value": "x"})
    assert status == 409 and "Filter_Me" in taken["detail"], taken
    other = client.secret("filter_me_too", "v2")

    status, listed = client("GET", "/v2/account/secrets?name=FILTER_ME")
    assert status == 200 and listed == {"secrets": [made]}
    assert client("GET", "/v2/account/secrets?name=nobody")[1] == {"secrets": []}
    names = [s["name"] for s in client("GET", "/v2/account/secrets")[1]["secrets"]]
    assert {"Filter_Me", "filter_me_too"} <= set(names)
    assert client("GET", f"/v2/account/secrets/{made['id']}")[1] == made

    path = f"/v2/account/secrets/{other['id']}"
    status, described = client("PATCH", path, {"description": "kept"})
    assert status == 200 and described["description"] == "kept"
    assert described["valueLastUpdatedAt"] == other["valueLastUpdatedAt"]  # no new value
    status, cleared = client("PATCH", path, {"description": ""})
    assert status == 200 and cleared["description"] is None
    for secret in (made, other):
        assert client("DELETE", f"/v2/account/secrets/{secret['id']}")[0] == 204


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"name": "ok_name", "value": "v", "scope": "team"}, "scope: not a field"),
        ({"name": "ok_name", "value": "v", "secretName": "x"}, "secretName: not a field"),
        ({"value": "v"}, "name: Field required"),
        ({"name": "ok_name"}, "value: Field required"),
        ({"name": "ok_name", "value": ""}, "value: String should have at least 1 character"),
        ({"name": "", "value": "v"}, "name: String should have at least 1 character"),
        ({"name": "1abc", "value": "v"}, "name: String should match pattern"),
        ({"name": "has space", "value": "v"}, "name: String should match pattern"),
        ({"name": "x" * 192, "value": "v"}, "name: String should have at most 191"),
        ({"name": "RUNPOD_X", "value": "v"}, "name: names starting with RUNPOD"),
        ({"name": "runPodKey", "value": "v"}, "name: names starting with RUNPOD"),
        ({"name": "ok_name", "value": 5}, "value: Input should be a valid string"),
        ({"name": "ok_name", "value": "v", "description": "é" * 32768}, "at most 65535 bytes"),
        (
            {"name": "ok_name", "value": "v" * (secrets.VALUE_MAX + 1)},
            "value: String should have at most 16777216",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_dev_a_create_body_is_closed_and_checked_422_naming_the_field(
    client: Client, body: dict, named: str
) -> None:
    status, problem = client("POST", "/v2/account/secrets", body)
    assert status == 422, problem
    assert problem["title"] == "Unprocessable Entity" and problem["status"] == 422
    assert any(named in e for e in problem["errors"]), problem
    assert client("GET", f"/v2/account/secrets/{secrets.secret_id('ok_name')}")[0] == 404


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "give value, description or both"),
        ({"name": "renamed"}, "name: not a field"),
        ({"value": ""}, "value: String should have at least 1 character"),
        ({"value": None}, "value: may not be null"),
        ({"description": "é" * 32768}, "at most 65535 bytes"),
    ],
)
def test_dev_an_update_body_is_closed_and_asks_for_one_field(
    client: Client, body: dict, named: str
) -> None:
    made = client.secret("patched_" + os.urandom(3).hex(), "v")
    path = f"/v2/account/secrets/{made['id']}"
    status, problem = client("PATCH", path, body)
    assert status == 422 and any(named in e for e in problem["errors"]), problem
    assert client("GET", path)[1] == made
    assert client("DELETE", path)[0] == 204


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_dev_an_unknown_secret_is_a_404_problem(client: Client, method: str) -> None:
    body = {"value": "v"} if method == "PATCH" else None
    status, problem = client(method, "/v2/account/secrets/nosuchsecret", body)
    assert status == 404 and "nosuchsecret" in problem["detail"], problem


def test_dev_only_admin_keys_reach_the_secrets(dev: DevProcess) -> None:
    answer = requests.get(f"{dev.url}/v2/account/secrets", timeout=10)
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith(PROBLEM)


def test_dev_a_body_that_is_no_json_object_is_a_400_problem(dev: DevProcess) -> None:
    answer = requests.post(
        f"{dev.url}/v2/account/secrets", data=b"[1]", headers=dev.headers(), timeout=10
    )
    assert answer.status_code == 400 and answer.json()["status"] == 400


# -- a cluster (envtest) -------------------------------------------------------------------------


def v2(api: Api, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """`{manage}/v2/account/secrets{path}` with the admin key."""
    answer = requests.request(
        method, f"{api.url}/v2/account/secrets{path}", json=body,
        headers={"authorization": f"Bearer {api.key}"}, timeout=30,
    )  # fmt: skip
    return answer.status_code, (answer.json() if answer.text else None)


def v1(api: Api, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    answer = requests.request(
        method, f"{api.url}/v1{path}", json=body,
        headers={"authorization": f"Bearer {api.key}"}, timeout=30,
    )  # fmt: skip
    return answer.status_code, (answer.json() if answer.text else None)


@pytest.fixture
def cluster_secrets(resources: Resources) -> Iterator[list[str]]:
    """Names of the account secrets a test made; their Secrets are deleted after it."""
    made: list[str] = []
    yield made
    for name in made:
        resources.core.delete_collection_namespaced_secret(
            resources.namespace, label_selector=f"{secrets.ID_LABEL}={secrets.secret_id(name)}"
        )


@pytest.mark.envtest
async def test_kubernetes_a_secret_is_a_labelled_secret_workers_read_by_reference(
    kubernetes_api: Api, resources: Resources, cluster_secrets: list[str]
) -> None:
    api, value = kubernetes_api, "sk-" + os.urandom(8).hex()
    cluster_secrets.append("team/OpenAI_key")
    status, made = v2(api, "POST", "", {"name": "team/OpenAI_key", "value": value})
    assert status == 201 and set(made) == SECRET_FIELDS and value not in json.dumps(made), made

    name = secrets.object_name("team/OpenAI_key")
    secret = resources.core.read_namespaced_secret(name, resources.namespace)
    assert base64.b64decode(secret.data["value"]).decode() == value
    labels = secret.metadata.labels
    assert labels["lockgate.dev/worker-secret"] == "true"  # issue 45's opt-in
    assert labels["lockgate.dev/account-secret"] == made["id"]
    assert labels["app.kubernetes.io/managed-by"] == "lockgate-manage"
    assert "app.kubernetes.io/part-of" not in labels  # that would make it lockgate's own
    assert secret.metadata.annotations[secrets.NAME_ANNOTATION] == "team/OpenAI_key"

    env = {"OPENAI_API_KEY": "{{ RUNPOD_SECRET_team/OpenAI_key }}", "PLAIN": "p"}
    body = {"name": "t", "imageName": "x.test/w:1", "env": env}
    status, template = v1(api, "POST", "/templates", body)
    assert status == 200, template
    resources.created.append(("templates", template["id"]))
    status, endpoint = v1(api, "POST", "/endpoints", {"templateId": template["id"]})
    assert status == 200, endpoint
    api.forget(endpoint["id"])

    deployment = wait_until(
        lambda: resources.apps.read_namespaced_deployment(
            deployment_name(endpoint["id"]), resources.namespace, _preload_content=False
        ).data if resources.deployment(deployment_name(endpoint["id"])) else None,
        "the worker Deployment",
    )  # fmt: skip
    assert value.encode() not in deployment
    [container] = json.loads(deployment)["spec"]["template"]["spec"]["containers"]
    [var] = [e for e in container["env"] if e["name"] == "OPENAI_API_KEY"]
    assert var == {
        "name": "OPENAI_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": name, "key": "value"}},
    }
    assert value not in json.dumps(resources.get("endpoints", endpoint["id"]))

    status, refused = v2(api, "DELETE", f"/{made['id']}")
    assert status == 409 and endpoint["id"] in refused["detail"], refused
    rotated = "sk-" + os.urandom(8).hex()
    status, patched = v2(api, "PATCH", f"/{made['id']}", {"value": rotated})
    assert status == 200 and set(patched) == SECRET_FIELDS, patched
    secret = resources.core.read_namespaced_secret(name, resources.namespace)
    assert base64.b64decode(secret.data["value"]).decode() == rotated

    assert v1(api, "DELETE", f"/endpoints/{endpoint['id']}")[0] == 204
    wait_until(
        lambda: v1(api, "DELETE", f"/templates/{template['id']}")[0] == 204, "template deleted"
    )
    assert v2(api, "DELETE", f"/{made['id']}")[0] == 204
    assert v2(api, "GET", f"/{made['id']}")[0] == 404
    assert not resources.core.list_namespaced_secret(
        resources.namespace, label_selector=f"{secrets.ID_LABEL}={made['id']}"
    ).items


@pytest.mark.envtest
async def test_kubernetes_a_value_over_the_managers_body_limit_is_a_413_problem(
    kubernetes_api: Api,
) -> None:
    """A Secret holds at most 1 MiB and `lockgate manage` takes bodies up to aiohttp's
    1 MiB: a 2 MiB value is refused before it is read whole (docs/secrets.md)."""
    body = {"name": "too_big", "value": "v" * (2 * 2**20)}
    answer = requests.post(
        f"{kubernetes_api.url}/v2/account/secrets", json=body,
        headers={"authorization": f"Bearer {kubernetes_api.key}"}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 413, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM)
    assert v2(kubernetes_api, "GET", f"/{secrets.secret_id('too_big')}")[0] == 404


@pytest.mark.envtest
async def test_kubernetes_an_endpoint_waits_for_a_missing_secret_and_says_why(
    kubernetes_api: Api, resources: Resources, cluster_secrets: list[str]
) -> None:
    api = kubernetes_api
    env = {"KEY": "{{ RUNPOD_SECRET_not_yet }}"}
    status, template = v1(
        api, "POST", "/templates", {"name": "t", "imageName": "x/w:1", "env": env}
    )
    assert status == 200, template
    resources.created.append(("templates", template["id"]))
    status, endpoint = v1(api, "POST", "/endpoints", {"templateId": template["id"]})
    assert status == 200, endpoint
    api.forget(endpoint["id"])

    def refused() -> dict | None:
        status = resources.status(endpoint["id"])
        found = [c for c in status.get("conditions", []) if c["type"] == "SecretsAllowed"]
        return found[0] if found and found[0]["status"] == "False" else None

    condition = wait_until(refused, "SecretsAllowed=False")
    assert "account secret 'not_yet' not found" in condition["message"], condition
    assert "env.KEY" in condition["message"]
    assert resources.status(endpoint["id"])["phase"] == "Pending"
    assert resources.deployment(deployment_name(endpoint["id"])) is None

    cluster_secrets.append("not_yet")
    assert v2(api, "POST", "", {"name": "not_yet", "value": "now"})[0] == 201
    wait_until(
        lambda: resources.deployment(deployment_name(endpoint["id"])), "the worker Deployment"
    )
    assert v1(api, "DELETE", f"/endpoints/{endpoint['id']}")[0] == 204


@pytest.mark.envtest
async def test_kubernetes_a_secret_whose_record_redis_lost_is_taken_over_by_a_new_create(
    kubernetes_api: Api, resources: Resources, redis: Redis, cluster_secrets: list[str]
) -> None:
    """The Secret outlives its record (a Redis restored from an old backup, an uninstall
    that kept it): creating the name again replaces the Secret's value."""
    cluster_secrets.append("kept_over")
    status, made = v2(kubernetes_api, "POST", "", {"name": "kept_over", "value": "old"})
    assert status == 201, made
    await Registry(redis).delete_record(keys.SECRETS, made["id"])
    assert v2(kubernetes_api, "GET", f"/{made['id']}")[0] == 404

    status, again = v2(kubernetes_api, "POST", "", {"name": "kept_over", "value": "new"})
    assert status == 201 and again["id"] == made["id"], again
    secret = resources.core.read_namespaced_secret(
        secrets.object_name("kept_over"), resources.namespace
    )
    assert base64.b64decode(secret.data["value"]).decode() == "new"
    assert v2(kubernetes_api, "DELETE", f"/{made['id']}")[0] == 204
