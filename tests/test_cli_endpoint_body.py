"""The v2 body `lockgate endpoints create` and `edit` send, from their flags (pure): v2's
grouped objects completed from the endpoint as it is, and malformed input refused in one
line (the commands against a real `lockgate dev`: tests/test_cli_daily.py)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from lockgate.client import ClientError, error_of
from lockgate.commands.endpoints import endpoint_row, v2_body

CURRENT = {
    "workers": {"min": 1, "max": 4, "idleTimeout": 30},
    "scaling": {"type": "REQUEST_COUNT", "requestCount": 2},
}


NAMES = [
    "file", "set", "name", "template_id", "image", "args", "gpu", "cpu", "workers_min",
    "workers_max", "idle_timeout", "execution_timeout_ms", "type", "scaler_type",
    "scaler_value", "request_timeout_s", "lb_hold_s",
]  # fmt: skip


def flags(**given: Any) -> argparse.Namespace:
    """The parsed command line of `create`/`edit` with only `given` set."""
    return argparse.Namespace(**{**dict.fromkeys(NAMES), "vcpu_count": 2, **given})


@pytest.mark.parametrize(
    ("given", "current", "expected"),
    [
        ({}, None, {"scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}}),
        ({"type": "LB"}, None, {"type": "LOAD_BALANCER"}),
        ({"workers_max": 2}, CURRENT, {"workers": {"min": 1, "max": 2}}),
        ({"workers_max": 2}, None,
         {"workers": {"min": 0, "max": 2}, "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}}),
        ({"scaler_value": 5}, CURRENT, {"scaling": {"type": "REQUEST_COUNT", "requestCount": 5}}),
        ({"request_timeout_s": 90}, CURRENT, {"timeout": 90_000}),
        ({"cpu": ["any"], "args": "python h.py"}, CURRENT,
         {"cpu": [{"id": "any", "vcpuCount": 2}], "args": "python h.py"}),
        ({"gpu": ["ADA_24"], "set": ['gpu={"count": 2}']}, CURRENT,
         {"gpu": {"count": 2, "pools": ["ADA_24"]}}),
        ({"set": ["name=x", "workersMax=2"]}, {}, {"name": "x", "workersMax": 2}),
    ],
)  # fmt: skip
def test_flags_become_v2_fields(given: dict, current: dict | None, expected: dict) -> None:
    assert v2_body(flags(**given), current) == expected


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"scaler_type": "QUEUE_DELAY"}, "give --scaler-value with it"),
        ({"set": ["workers=3"], "workers_max": 2}, "--set workers: give a JSON object"),
        ({"execution_timeout_ms": 1000, "request_timeout_s": 1}, "give one"),
        ({"set": ["=1"]}, "write FIELD=VALUE"),
    ],
)
def test_what_cannot_become_a_v2_body_is_refused_in_one_line(given: dict, words: str) -> None:
    with pytest.raises(ClientError, match=words):
        v2_body(flags(**given), CURRENT)


def test_a_problem_reads_as_its_violations_or_its_detail() -> None:
    unprocessable = b'{"title": "Unprocessable Entity", "status": 422, "detail": "Request '
    unprocessable += b'validation failed: a; b", "errors": ["a: not a field", "b: required"]}'
    assert error_of(unprocessable) == "a: not a field; b: required"
    assert error_of(b'{"title": "Not Found", "status": 404, "detail": "endpoint \'x\'\\n'
                    b' not found"}') == "endpoint 'x' not found"  # fmt: skip
    assert error_of(b'{"error": "v1 words"}') == "v1 words"


def test_a_row_shows_v2_fields_in_the_columns_users_know() -> None:
    endpoint = {
        "id": "e1", "name": "n", "type": "LOAD_BALANCER", "workers": {"min": 0, "max": 3},
        "requestUrls": {"base": "http://h/lb/e1", "health": "http://h/lb/e1/ping"},
    }  # fmt: skip
    status = {"phase": "Ready", "workers": {"ready": 1}, "jobs": {"inQueue": 0}}
    assert endpoint_row({**endpoint, "status": status}) == [
        "e1", "n", "LOAD_BALANCER", "Ready", "0-3", 1, 0, "http://h/lb/e1", "",
    ]  # fmt: skip
    looping = {**status, "conditions": [
        {"type": "CrashLoop", "status": "True", "message": "workers crash at start (exit code 1)"},
    ]}  # fmt: skip
    row = endpoint_row({**endpoint, "status": looping})
    assert (row[3], row[-1]) == ("Crash loop", "workers crash at start (exit code 1)")
    health = {"workers": {"idle": 0, "running": 0}, "waiting": "max workers is 0: no worker"}
    assert endpoint_row({**endpoint, "status": status}, health)[-1] == health["waiting"]
