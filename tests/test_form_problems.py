"""What a form gets back from the API (issue 50, item 8): every problem of a creation at
once, the id's among the settings', each naming its field; never pydantic's prefixes
("Value error, …") in a message a person reads, under /v1 or in a v2 problem."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from pydantic import BaseModel, ValidationError, model_validator

from devproc import DevProcess
from lockgate.manage.v2.problems import violations
from lockgate.models import EndpointSpec, describe_validation_error


@pytest.fixture(scope="module")
def dev(tmp_path_factory) -> Iterator[DevProcess]:
    with DevProcess("examples/echo/handler.py", data_dir=tmp_path_factory.mktemp("dev")) as running:
        yield running


def create(dev: DevProcess, body: dict) -> requests.Response:
    return requests.post(f"{dev.url}/v1/endpoints", json=body, headers=dev.headers(), timeout=10)


def test_a_creation_names_every_bad_field_at_once_with_the_id(dev):
    r = create(dev, {"id": "Not An Id", "templateId": "examples/echo/handler.py",
                     "workersMax": -1, "idleTimeout": -5, "scalerValue": 0})  # fmt: skip
    assert r.status_code == 400, r.text
    parts = r.json()["error"].split("; ")
    assert [p.split(":")[0] for p in parts] == ["id", "idleTimeout", "scalerValue", "workersMax"]


def test_a_check_across_fields_reads_without_pydantics_prefix(dev):
    r = create(dev, {"templateId": "examples/echo/handler.py", "workersMin": 5, "workersMax": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "body: workersMin (5) must not exceed workersMax (2)"


class Checked(BaseModel):
    low: int
    high: int

    @model_validator(mode="after")
    def ordered(self) -> Checked:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


def test_validator_messages_reach_people_as_written():
    said = "body: low must not exceed high"
    with pytest.raises(ValidationError) as err:
        Checked.model_validate({"low": 3, "high": 1})
    assert describe_validation_error(err.value) == said
    assert violations(err.value) == [said]
    with pytest.raises(ValidationError) as spec_err:
        EndpointSpec.model_validate({"templateId": "x", "workersMin": 3, "workersMax": 1})
    assert "Value error" not in describe_validation_error(spec_err.value)


def test_a_check_across_fields_comes_with_the_fields_own_problems(dev):
    """Issue 50, item 8: pydantic runs a check across fields only once every field is
    valid; EndpointSpec runs it over the valid fields too, so one answer has them all."""
    r = create(dev, {"id": "Not An Id", "templateId": "examples/echo/handler.py",
                     "workersMin": 3, "workersMax": 1, "idleTimeout": -5})  # fmt: skip
    assert r.status_code == 400, r.text
    parts = r.json()["error"].split("; ")
    assert parts[0].startswith("id: ") and parts[1].startswith("idleTimeout: "), parts
    assert parts[2:] == ["body: workersMin (3) must not exceed workersMax (1)"]


@pytest.mark.parametrize(
    ("fields", "across"),
    [
        # a field in a check that is itself invalid: that check is not made
        ({"workersMin": 3, "workersMax": -1}, []),
        ({"workersMin": 3, "workersMax": 1}, ["workersMin (3) must not exceed workersMax (1)"]),
        # an absent field counts with its default (workersMax 3)
        ({"workersMin": 4}, ["workersMin (4) must not exceed workersMax (3)"]),
        ({"type": "LB", "gpuCount": 0}, [
            "scalerType must be REQUEST_COUNT for a load-balancing endpoint (type LB), "
            "not QUEUE_DELAY",
            "gpuCount must be at least 1 for a GPU endpoint (computeType GPU)",
        ]),
        ({"type": "LB", "scalerType": "REQUEST_COUNT", "computeType": "CPU", "gpuCount": 0}, []),
    ],
)  # fmt: skip
def test_every_check_across_fields_is_one_problem_beside_any_field_error(fields, across):
    with pytest.raises(ValidationError) as err:
        EndpointSpec.model_validate({"templateId": "x", "idleTimeout": -1, **fields})
    problems = err.value.errors(include_url=False)
    assert [".".join(map(str, e["loc"])) for e in problems if e["loc"]][:1] == ["idleTimeout"]
    assert [e["msg"] for e in problems if not e["loc"]] == across


def test_a_templates_problem_reads_without_pydantics_prefix(dev):
    """The /v1/templates path names fields as RunPod does (`models/templates.describe`); it
    kept pydantic's "Value error, " until the console's template edit showed it."""
    body = {"name": "bad-env", "imageName": "example.test/x:1", "env": {"BAD NAME": "1"}}
    r = requests.post(f"{dev.url}/v1/templates", json=body, headers=dev.headers(), timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "env: 'BAD NAME' is not a valid environment variable name"
