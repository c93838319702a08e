"""A failed job's `error` read for people (`models.joberror`): each form the runpod SDK and
lockgate write, and anything else without an exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.models.joberror import JobError, read_error

TRACE = 'Traceback (most recent call last):\n  File "h.py", line 3\nValueError: bad'


@pytest.mark.parametrize(
    ("error", "read"),
    [
        (None, None),
        ("", None),
        (json.dumps({"error_type": "<class 'ValueError'>", "error_message": "bad",
                     "error_traceback": TRACE + "\n", "hostname": "h"}),
         JobError("ValueError", "bad", TRACE)),
        (json.dumps({"error_type": "<class 'torch.cuda.OutOfMemoryError'>",
                     "error_message": "CUDA out of memory"}),
         JobError("OutOfMemoryError", "CUDA out of memory")),
        (f"handler: boom \ntraceback: {TRACE}\n", JobError("", "boom", TRACE)),
        ("WORKER_LOST: the worker running this job was lost after 3 s (onWorkerLost: fail)",
         JobError("", "WORKER_LOST: the worker running this job was lost after 3 s "
                  "(onWorkerLost: fail)")),
        ("job timed out", JobError("", "job timed out")),
        ({"error_message": "as an object", "error_type": "KeyError"},
         JobError("KeyError", "as an object")),
        ('{"not": "sdk"}', JobError("", '{"not":"sdk"}')),
        ("{not json", JobError("", "{not json")),
        (f"it broke\n{TRACE}", JobError("", "it broke", TRACE)),
    ],
)  # fmt: skip
def test_each_form_of_error_is_read(error: object, read: JobError | None) -> None:
    assert read_error(error) == read


def test_the_line_is_one_line() -> None:
    assert JobError("ValueError", "bad\n  input").line() == "ValueError: bad input"
    assert JobError("", "plain").line() == "plain"


@given(st.one_of(st.text(), st.dictionaries(st.text(), st.text()), st.integers(), st.none()))
def test_any_error_is_read_without_an_exception(error: object) -> None:
    read = read_error(error)
    assert read is None or "\n" not in read.line()
