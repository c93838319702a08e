"""Which failed-job error texts are a worker's own OpenAI error (openai_wire.reported_error):
the forms lockgate's runtime and the runpod SDK give a handler's `{"error": {...}}`."""

from __future__ import annotations

import pytest

from lockgate.gateway.openai_wire import REPORT_MAX, reported_error

NOT_FOUND = {"message": "no model m", "type": "invalid_request_error", "code": 404}
WORKER = {"message": "vLLM is down", "type": "worker_error", "code": None}


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        # lockgate's runtime (and the runpod SDK for a returned dict): the object as JSON
        ('{"message": "no model m", "type": "invalid_request_error", "code": 404}', 404),
        # the runpod SDK for a yielded dict: str() of it, as RunPod's vLLM worker makes it
        ("{'message': 'vLLM is down', 'type': 'worker_error', 'code': None}", 500),
        ('{"message": "m", "code": 200}', 500),  # a code that is no error status: 500
        # not an OpenAI error: the handler_error answer stays
        ("ValueError: the prompt is empty", None),
        ('{"error_type": "<class \'ValueError\'>", "error_message": "bad"}', None),
        ('{"message": 3}', None),
        ("{'message': __import__('os')}", None),
        ("{not a literal", None),
        ("", None),
        (None, None),
        ("{'message': '" + "x" * REPORT_MAX + "'}", None),
    ],
)
def test_reported_error(error, expected):
    found = reported_error(error)
    assert (found and found[0]) == expected


def test_reported_error_keeps_the_workers_object():
    assert reported_error(str(WORKER)) == (500, {"error": WORKER})
    assert reported_error(str(NOT_FOUND).replace("'", '"')) == (404, {"error": NOT_FOUND})
