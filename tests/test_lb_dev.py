"""Load-balancing endpoints through dev mode's management API: created with `"type": "LB"`,
validated, and drained when their workers are replaced."""

from __future__ import annotations

import threading
from pathlib import Path

import requests

from tests.devproc import REPO, DevProcess
from tests.lb_dev import WORKER

ECHO = str(REPO / "examples" / "echo" / "handler.py")
ADMIN = {"authorization": "Bearer k-admin"}


def test_an_lb_endpoint_needs_request_count_scaling(tmp_path: Path) -> None:
    with DevProcess(ECHO, "--api-key", "k-admin", data_dir=tmp_path) as dev:
        manage = f"{dev.url}/v1/endpoints"
        bad = {"id": "lb1", "type": "LB", "templateId": WORKER}
        answer = requests.post(manage, json=bad, headers=ADMIN, timeout=30)
        assert answer.status_code == 400
        assert "scalerType" in answer.json()["error"]


def test_replaced_workers_finish_their_requests_and_get_no_new_one(tmp_path: Path) -> None:
    """A new templateId replaces the workers: the old one is out of routing at once (a
    request asking for it goes to the new one), and its request in flight completes."""
    env = {"LOAD_SECONDS": "0.5"}
    with DevProcess(ECHO, "--api-key", "k-admin", data_dir=tmp_path, env=env) as dev:
        manage = f"{dev.url}/v1/endpoints"
        spec = {
            "id": "lbm", "type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1,
            "templateId": WORKER, "workersMax": 1, "idleTimeout": 60,
        }  # fmt: skip
        created = requests.post(manage, json=spec, headers=ADMIN, timeout=30)
        assert created.status_code == 200, created.text
        assert created.json()["type"] == "LB"
        url = f"{dev.url}/lb/lbm"
        first = requests.get(f"{url}/echo/x", headers=dev.headers(), timeout=60)
        assert first.status_code == 200, first.text
        old = first.headers["X-Runpod-Worker-Id"]
        result: dict = {}

        def slow() -> None:
            headers = {**dev.headers(), "X-Runpod-Worker-Id": f"strict {old}"}
            result["answer"] = requests.get(f"{url}/slow?s=4", headers=headers, timeout=60)

        t = threading.Thread(target=slow)
        t.start()
        for _ in range(400):
            health = requests.get(f"{dev.url}/v2/lbm/health", headers=dev.headers()).json()
            if health["requests"]["inFlight"] >= 1:
                break
            threading.Event().wait(0.05)
        patched = requests.patch(
            f"{manage}/lbm", json={"templateId": WORKER + " v2"}, headers=ADMIN, timeout=30
        )
        assert patched.status_code == 200, patched.text
        # The old worker leaves routing when the gateway reads the worker list again (an
        # `l:` event after the pool withdrew it), a moment after the PATCH's answer: a
        # request asking for it goes to the new worker from then on, and never back.
        soft = {**dev.headers(), "X-Runpod-Worker-Id": old}

        def during() -> str:
            answer = requests.get(f"{url}/echo/during", headers=soft, timeout=60)
            assert answer.status_code == 200, answer.text
            return answer.headers["X-Runpod-Worker-Id"]

        for _ in range(200):
            if during() != old:
                break
            threading.Event().wait(0.05)
        else:
            raise AssertionError(f"requests still go to the replaced worker {old} after 10 s")
        assert old not in {during() for _ in range(5)}
        t.join(60)
        assert result["answer"].status_code == 200, result["answer"].text
        assert result["answer"].json()["worker"] == old


def test_the_example_manifests_are_a_valid_lb_endpoint_and_template() -> None:
    import yaml

    from lockgate.models import EndpointSpec, EndpointType, TemplateSpec

    folder = REPO / "examples" / "loadbalancer"
    endpoint = yaml.safe_load((folder / "endpoint.yaml").read_text())
    template = yaml.safe_load((folder / "template.yaml").read_text())
    assert EndpointSpec(**endpoint["spec"]).type == EndpointType.LB
    assert TemplateSpec(**template["spec"]).ports == ["8000/http"]
